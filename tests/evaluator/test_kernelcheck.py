"""Issue 15 (item 4) and 16 (item 1): what counts as the candidate's own code, and "is it a kernel" by what that
code replaced, class by class. Pure functions over captured profiler events (shared/profile_capture.py format)."""

from __future__ import annotations

from evaluator.kernelcheck import judge
from evaluator.profiles import Own, check_against_clock, summarise

P = "klsp_ext_abc123::"


def op(name, parent=-1, cpu=0.0, dev=0.0, ann=False, kernels=()):
    return {"name": name, "parent": parent, "cpu_us": cpu, "dev_us": dev, "ann": ann, "kernels": [list(k) for k in kernels]}


def ref_summary(**by_class_us):
    ops = []
    names = {"gemm": "aten::addmm", "elementwise": "aten::mish", "reduction": "aten::_softmax",
             "attention": "aten::scaled_dot_product_attention", "conv": "aten::convolution"}
    for cls, us in by_class_us.items():
        ops.append(op(names[cls], cpu=us))
    return summarise({"on_device": False, "ops": ops})


def test_gemm_plus_fused_epilogue_is_a_kernel_and_says_what_it_replaced():
    ref = summarise({"on_device": False, "ops": [op("aten::addmm", cpu=9970.0), op("aten::mish", cpu=15.0),
                                                 op("aten::mish", cpu=15.0)]})
    cand = summarise({"on_device": False, "ops": [
        op("aten::mm", cpu=9950.0),
        op(P + "ext.bias_mish_mish_", ann=True, cpu=14.0)]}, Own(label_prefix=P, extensions={"ext"}))
    ok, msg, fig = judge(cand, ref)
    assert ok, msg
    assert fig["replaced"] == ["elementwise"] and "mish" in msg and "GEMM" in msg


def test_library_doing_every_class_is_not_a_kernel_whatever_the_decoy_costs():
    ref = ref_summary(gemm=1000.0, elementwise=30.0)
    own = Own(label_prefix=P, extensions={"ext"})
    cand = summarise({"on_device": False, "ops": [op("aten::addmm", cpu=1000.0), op("aten::mish", cpu=30.0),
                                                  op(P + "ext.copy", ann=True, cpu=500.0)]}, own)
    ok, msg, _ = judge(cand, ref)
    assert not ok and "every class" in msg


def test_a_decoy_beside_work_the_reference_did_not_need_is_too_little():
    ref = ref_summary(gemm=1000.0, elementwise=300.0)
    cand = summarise({"on_device": False, "ops": [op("aten::mm", cpu=1000.0), op(P + "ext.noop", ann=True, cpu=2.0)]},
                     Own(label_prefix=P, extensions={"ext"}))
    ok, msg, _ = judge(cand, ref)
    assert not ok and "too little" in msg


def test_attention_is_the_librarys_when_its_gemms_and_softmax_do_it():
    ref = ref_summary(attention=100.0)
    own = Own(label_prefix=P, extensions={"ext"})
    decoy = summarise({"on_device": False, "ops": [op("aten::bmm", cpu=60.0), op("aten::_softmax", cpu=30.0),
                                                   op("aten::bmm", cpu=60.0), op(P + "ext.spin", ann=True, cpu=50.0)]},
                      own)
    assert not judge(decoy, ref)[0]
    custom_softmax = summarise({"on_device": False, "ops": [op("aten::bmm", cpu=60.0),
                                                            op(P + "ext.softmax", ann=True, cpu=30.0),
                                                            op("aten::bmm", cpu=60.0)]}, own)
    # the GEMMs alone take more than the fused attention did, yet the softmax is its own work
    ok, msg, _ = judge(custom_softmax, ref)
    assert ok, msg


def test_cpu_own_code_is_only_its_extensions_and_its_binaries_operators():
    raw = {"on_device": False, "ops": [
        op("ns::name", ann=True, cpu=500.0),  # the candidate's own profiler annotation: nobody's code
        op("aten::relu", parent=0, cpu=100.0),
        op("myns::np_relu", cpu=400.0),  # a Python torch.library op (not in its binaries)
        op(P + "other.fn", ann=True, cpu=300.0),  # a label of an extension the evaluator did not build
        op("klsp_ext::fake.fn", ann=True, cpu=300.0),  # a label without the run's nonce
        op(P + "ext.fn", ann=True, cpu=50.0),
        op("aten::mm", parent=5, cpu=20.0),
        op("cppns::fused", cpu=70.0),  # registered by its binary
    ]}
    s = summarise(raw, Own(label_prefix=P, extensions={"ext"}, ops={"cppns::fused"}))
    assert abs(s["custom_ms"] - (30.0 + 70.0) / 1e3) < 1e-9  # ext.fn less its aten::mm, plus the registered op
    assert s["library_ms"]["elementwise"] > 0 and s["library_ms"]["gemm"] > 0


def test_gpu_own_kernels_are_its_sources_and_never_a_librarys():
    raw = {"on_device": True, "ops": [
        op("aten::mm", dev=900.0, kernels=[("sm90_xmma_gemm_f32", 900.0)]),
        op(P + "ext.fwd", ann=True, dev=0.0),
    ], "device": [["sm90_xmma_gemm_f32", 900.0], ["bias_relu_kernel(float*, float const*, int)", 12.0],
                  ["sm90_xmma_gemm_f32", 5.0], ["ampere_sgemm_128x64_nn", 300.0]]}
    own = Own(label_prefix=P, extensions={"ext"},
              kernels={"bias_relu_kernel", "sm90_xmma_gemm_f32", "ampere_sgemm_128x64_nn"},
              not_own={"ampere_sgemm_128x64_nn"})
    s = summarise(raw, own)
    # its own: bias_relu only: the gemm name is launched by aten::mm, the sgemm name is the reference's library's
    assert abs(s["custom_ms"] - 0.012) < 1e-9
    assert s["library_ms"]["gemm"] > 0.9


def test_a_profile_larger_than_the_call_is_refused():
    s = {"custom_ms": 5.0, "library_ms": {"gemm": 1.0}, "data_ms": 0.0, "on_device": False}
    assert "own code" in check_against_clock(s, 2.0)
    assert check_against_clock(s, 6.5) == ""
    assert "add up" in check_against_clock({"custom_ms": 1.0, "library_ms": {"gemm": 9.0}, "on_device": False}, 5.0)
