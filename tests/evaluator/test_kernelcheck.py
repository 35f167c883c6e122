"""What counts as the candidate's own code, and the kernel finding (own code / library only) by what that code
replaced, class by class. Pure functions over captured profiler events (shared/profile_capture.py format)."""

from __future__ import annotations

from evaluator.kernelcheck import judge
from evaluator.profiles import Own, check_against_clock, summarise
from evaluator.verdict import LIBRARY_ONLY, OWN_CODE, KernelCheck, Verdict

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
    finding, msg, fig = judge(cand, ref)
    assert finding == OWN_CODE, msg
    assert fig["replaced"] == ["elementwise"] and "mish" in msg and "GEMM" in msg


def test_library_doing_every_class_is_library_only_whatever_the_decoy_costs():
    ref = ref_summary(gemm=1000.0, elementwise=30.0)
    own = Own(label_prefix=P, extensions={"ext"})
    cand = summarise({"on_device": False, "ops": [op("aten::addmm", cpu=1000.0), op("aten::mish", cpu=30.0),
                                                  op(P + "ext.copy", ann=True, cpu=500.0)]}, own)
    finding, msg, _ = judge(cand, ref)
    assert finding == LIBRARY_ONLY and "every class" in msg


def test_an_algebraic_rewrite_is_own_code_however_little_time_it_takes():
    # Gemm -> divide -> sum -> scale computed as x . (W^T 1) . s/2: one library GEMV-sized product (or none) and a
    # tiny custom kernel, against a reference that spends most of its time on the GEMM and the rest on the
    # elementwise and reduction work. The library does the GEMM class (at least half the reference's GEMM time
    # is not needed: an addmm of its own would be), not the elementwise and reduction: its own code did those.
    ref = ref_summary(gemm=5000.0, elementwise=300.0, reduction=120.0)
    own = Own(label_prefix=P, extensions={"ext"})
    rewrite = summarise({"on_device": False, "ops": [op("aten::addmm", cpu=2600.0),
                                                     op(P + "ext.fused_dot_scale", ann=True, cpu=2.0)]}, own)
    finding, msg, fig = judge(rewrite, ref)
    assert finding == OWN_CODE, msg
    assert set(fig["replaced"]) == {"elementwise", "reduction"} and fig["custom_ms"] < 0.01
    assert "too little" not in msg
    # no library call at all: the whole rewrite is its own
    alone = summarise({"on_device": False, "ops": [op(P + "ext.fused_dot_scale", ann=True, cpu=2.0)]}, own)
    finding, msg, fig = judge(alone, ref)
    assert finding == OWN_CODE and set(fig["replaced"]) == {"gemm", "elementwise", "reduction"}, msg


def test_a_pure_library_profile_is_library_only():
    ref = ref_summary(gemm=1000.0, elementwise=300.0)
    cand = summarise({"on_device": False, "ops": [op("aten::addmm", cpu=1000.0), op("aten::mish", cpu=300.0)]},
                     Own(label_prefix=P, extensions={"ext"}))
    finding, msg, fig = judge(cand, ref)
    assert finding == LIBRARY_ONLY and "none of its own code ran" in msg and fig["custom_ms"] == 0.0


def test_old_records_with_is_kernel_still_load():
    old = {"status": "correct", "kernel": {"is_kernel": False, "message": "m", "custom_ms": 0.1}}
    v = Verdict.from_dict(old)
    assert v.kernel.finding == LIBRARY_ONLY and not v.kernel.is_kernel and v.library_only
    v = Verdict.from_dict({"status": "correct", "kernel": {"is_kernel": True}})
    assert v.kernel_finding == OWN_CODE and not v.library_only
    v = Verdict.from_json(Verdict(status="correct", kernel=KernelCheck(finding=LIBRARY_ONLY)).to_json())
    assert v.kernel.finding == LIBRARY_ONLY
    assert Verdict.from_dict({"status": "not_a_kernel"}).kernel_finding is None  # a status of its own


def test_attention_is_the_librarys_when_its_gemms_and_softmax_do_it():
    ref = ref_summary(attention=100.0)
    own = Own(label_prefix=P, extensions={"ext"})
    decoy = summarise({"on_device": False, "ops": [op("aten::bmm", cpu=60.0), op("aten::_softmax", cpu=30.0),
                                                   op("aten::bmm", cpu=60.0), op(P + "ext.spin", ann=True, cpu=50.0)]},
                      own)
    assert judge(decoy, ref)[0] == LIBRARY_ONLY
    custom_softmax = summarise({"on_device": False, "ops": [op("aten::bmm", cpu=60.0),
                                                            op(P + "ext.softmax", ann=True, cpu=30.0),
                                                            op("aten::bmm", cpu=60.0)]}, own)
    # the GEMMs alone take more than the fused attention did, yet the softmax is its own work
    finding, msg, _ = judge(custom_softmax, ref)
    assert finding == OWN_CODE, msg


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


def test_a_decoy_over_the_references_own_operators_whatever_their_times():
    # the library runs the reference's very operators (F.linear, torch.relu): its relu took a tenth of the
    # reference's this time (caches, a busy machine): still the library's work
    ref = summarise({"on_device": False, "ops": [op("aten::linear", cpu=3000.0), op("aten::relu", cpu=300.0)]})
    cand = summarise({"on_device": False, "ops": [op("aten::linear", cpu=3000.0), op("aten::relu", cpu=30.0),
                                                  op(P + "ext.copy", ann=True, cpu=140.0)]},
                     Own(label_prefix=P, extensions={"ext"}))
    finding, msg, _ = judge(cand, ref)
    assert finding == LIBRARY_ONLY and "every class" in msg


def test_cpu_library_work_called_past_the_dispatcher_is_never_its_own():
    """A C++ function that only calls at::cpu::clamp_min / mul_ / add_ records no operator event: its whole time
    sits in its own range. Its binary imports those entry points, so none of that time is its own."""
    raw = {"on_device": False, "ops": [op(P + "ext.fwd", ann=True, cpu=800.0)]}
    own = Own(label_prefix=P, extensions={"ext"}, direct=["at::cpu::add_", "at::cpu::clamp_min", "at::cpu::mul_"])
    s = summarise(raw, own)
    assert s["custom_ms"] > 0.7 and s["direct_calls"] == own.direct
    finding, msg, figures = judge(s, ref_summary(elementwise=900.0))
    assert finding == LIBRARY_ONLY and "at::cpu::clamp_min" in msg and "past the dispatcher" in msg, msg
    assert figures["custom_ms"] == 0.0
    # the same function without such imports is its own code
    assert judge(summarise(raw, Own(label_prefix=P, extensions={"ext"})), ref_summary(elementwise=900.0))[0] == OWN_CODE
    # ... and one that looks code up by name at run time (dlsym) may reach the same work with no import
    s = summarise(raw, Own(label_prefix=P, extensions={"ext"}, direct=["dlopen", "dlsym"]))
    finding, msg, figures = judge(s, ref_summary(elementwise=900.0))
    assert finding == LIBRARY_ONLY and "look code up by name at run time (dlopen, dlsym)" in msg, msg
    assert "past the dispatcher" not in msg and figures["custom_ms"] == 0.0
    # ... or that switches the profiler's recording off around the operators it calls
    s = summarise(raw, Own(label_prefix=P, extensions={"ext"}, direct=["at::enableRecordFunction"]))
    finding, msg, _ = judge(s, ref_summary(elementwise=900.0))
    assert finding == LIBRARY_ONLY and "switch the profiler's recording (at::enableRecordFunction)" in msg, msg


def test_gpu_kernels_in_atens_namespaces_are_never_its_own():
    """ATen's ELU launched through at::cuda::elu_out beside a __global__ of the same name as ATen's kernel."""
    aten = "void at::native::vectorized_elementwise_kernel<4, at::native::elu_kernel_functor, std::array<char*, 2> >"
    raw = {"on_device": True, "ops": [op(P + "ext.fwd", ann=True)],
           "device": [[aten, 100.0], ["tiny_kernel(float*)", 1.0]]}
    own = Own(label_prefix=P, extensions={"ext"}, kernels={"vectorized_elementwise_kernel", "tiny_kernel"},
              exact={aten[5:]})
    s = summarise(raw, own)
    assert abs(s["custom_ms"] - 0.001) < 1e-9 and s["library_ms"]["elementwise"] > 0.09


def test_a_row_sum_done_by_a_matrix_vector_product_is_the_librarys():
    """94 % of a row sum by torch.mv (x @ ones), a custom piece for the rest: the reduction is the library's."""
    ref = summarise({"on_device": False, "ops": [op("aten::sum", cpu=100.0)]})
    raw = {"on_device": False, "ops": [op("aten::mv", cpu=94.0), op(P + "ext.tail", ann=True, cpu=5.0),
                                       op("aten::add", cpu=1.0)]}
    finding, msg, _ = judge(summarise(raw, Own(label_prefix=P, extensions={"ext"})), ref)
    assert finding == LIBRARY_ONLY and "reduction" in msg, msg
    # a GEMM beside the reference's own GEMM is no stand-in: linear + a custom row sum is own code
    ref2 = summarise({"on_device": False, "ops": [op("aten::addmm", cpu=500.0), op("aten::sum", cpu=100.0)]})
    raw2 = {"on_device": False, "ops": [op("aten::addmm", cpu=500.0), op(P + "ext.rowsum", ann=True, cpu=60.0)]}
    assert judge(summarise(raw2, Own(label_prefix=P, extensions={"ext"})), ref2)[0] == OWN_CODE


def test_one_fused_library_call_for_the_references_two_is_the_librarys_whatever_its_speed():
    """a + 2 * b (aten::mul, aten::add) as at::add(a, b, 2.0) behind a C++ entry point: the library's add may take
    under half the reference's time, but its own code takes next to nothing beside it."""
    ref = summarise({"on_device": False, "ops": [op("aten::mul", cpu=60.0), op("aten::add", cpu=60.0)]})
    raw = {"on_device": False, "ops": [op(P + "ext.add", ann=True, cpu=52.0), op("aten::add", parent=0, cpu=50.0)]}
    finding, msg, _ = judge(summarise(raw, Own(label_prefix=P, extensions={"ext"})), ref)
    assert finding == LIBRARY_ONLY, msg
    # its own loop beside a small library op of the same class is its own code
    raw2 = {"on_device": False, "ops": [op(P + "ext.add", ann=True, cpu=90.0), op("aten::add", parent=0, cpu=5.0)]}
    assert judge(summarise(raw2, Own(label_prefix=P, extensions={"ext"})), ref)[0] == OWN_CODE
