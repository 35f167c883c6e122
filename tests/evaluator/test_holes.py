"""Known holes of KernelBench's harness, each closed and tested (pure-PyTorch candidates: no compile needed)."""

from __future__ import annotations

from eval_helpers import py_candidate, reference

from evaluator import EvalSettings, Evaluator

TINY = reference("torch.sigmoid(args[0]) * 1e-5", "[torch.randn(32, 64)]")


def test_all_zero_output_fails_on_tiny_outputs(ev):
    v = ev.evaluate(TINY, py_candidate("return torch.zeros_like(args[0])"), time=False)
    assert v.status == "incorrect", v.message
    assert "all zero" in v.correctness.message
    # while the honest computation passes
    assert ev.evaluate(TINY, py_candidate("return torch.sigmoid(args[0]) * 1e-5"), time=False).status == "correct"


# A bounded loss over a big batch: with random inputs, the mean over half the rows is close to the mean over all.
LOSS = reference("torch.clamp(1 - args[0] * args[1], min=0).mean()", "[torch.rand(4096, 256), torch.rand(4096, 256)]")


def test_partial_computation_of_bounded_loss_fails(cache_dir):
    from eval_helpers import fast_settings

    half = py_candidate("n = args[0].shape[0] // 2\nreturn torch.clamp(1 - args[0][:n] * args[1][:n], min=0).mean()")
    # KernelBench's loose tolerance: the plain trials pass it; the ramped trials do not
    with Evaluator(fast_settings(cache_dir, atol=1e-2, rtol=1e-2, warm_workers=0)) as e:
        v = e.evaluate(LOSS, half, time=False)
    assert v.status == "incorrect", v.message
    assert v.correctness.failed_trial == 1 and "ramp" in v.correctness.message


def test_candidate_mutating_its_inputs_fails(ev):
    ref = reference("args[0] * 2", "[torch.rand(16, 16)]")
    v = ev.evaluate(ref, py_candidate("return args[0].mul_(2)"), time=False)
    assert v.status == "incorrect"
    assert "modified its input 0 in place" in v.correctness.message


def test_reference_and_candidate_get_their_own_copies(ev):
    # the reference modifies its input; a candidate that does the same is fine, and it must not see the
    # reference's modification (it gets a pristine clone)
    ref = reference("args[0].add_(1).sum(dim=0)", "[torch.rand(8, 8)]")
    assert ev.evaluate(ref, py_candidate("return (args[0] + 1).sum(dim=0)"), time=False).status == "correct"


def test_results_cached_by_identity_fail(ev):
    # a candidate that computes once and then returns its cached result (keyed by what KernelBench keeps fixed:
    # the input's shape/identity) fails, because every trial brings fresh tensors with fresh seeded values
    caching = py_candidate(
        "key = (tuple(args[0].shape), args[0].dtype)\n"
        "if key not in self.cache:\n"
        "    self.cache[key] = args[0] + 2 * args[1]\n"
        "return self.cache[key]",
        init="self.cache = {}")
    ref = reference("args[0] + 2 * args[1]", "[torch.rand(64, 128), torch.rand(64, 128)]")
    v = ev.evaluate(ref, caching, time=False)
    assert v.status == "incorrect", v.message
    assert v.correctness.failed_trial == 1


def test_results_cached_by_data_pointer_fail(ev):
    # keyed by the tensor's address: inputs sit at one of two addresses, written in place with fresh values for
    # every call, so a pointer-keyed cache returns stale results within a few trials
    caching = py_candidate(
        "key = (args[0].data_ptr(), args[1].data_ptr())\n"
        "if key not in self.cache:\n"
        "    self.cache[key] = args[0] + 2 * args[1]\n"
        "return self.cache[key]",
        init="self.cache = {}")
    ref = reference("args[0] + 2 * args[1]", "[torch.rand(64, 128), torch.rand(64, 128)]")
    v = ev.evaluate(ref, caching, time=False)
    assert v.status == "incorrect", v.message
    assert v.correctness.failed_trial in (1, 2, 3, 4)


def test_out_of_distribution_inputs_catch_a_kernel_right_only_on_the_tasks_inputs(ev):
    elu = reference("torch.nn.functional.elu(args[0])", "[torch.rand(64, 128)]")
    v = ev.evaluate(elu, py_candidate("return torch.relu(args[0])"), time=False)
    assert v.status == "incorrect", v.message
    assert "signed normal values" in v.correctness.message
    assert ev.evaluate(elu, py_candidate("return torch.nn.functional.elu(args[0])"), time=False).status == "correct"


def test_reference_not_finite_out_of_distribution_skips_those_trials(ev):
    log = reference("torch.log(args[0] + 1e-3)", "[torch.rand(32, 32)]")
    v = ev.evaluate(log, py_candidate("return torch.log(args[0] + 1e-3)"), time=False)
    assert v.status == "correct", v.message
    # signed inputs make log NaN in places: compared only where the reference is finite, not skipped
    assert v.correctness.trials >= 6


def test_outputs_of_every_structure(ev):
    ref = reference("{'y': args[0] * 2, 'n': 3, 'pair': (args[0].sum(), args[0].shape[0])}", "[torch.rand(8, 8)]")
    good = py_candidate("return {'pair': (args[0].sum(), 8), 'n': 3, 'y': args[0] * 2}")
    assert ev.evaluate(ref, good, time=False).status == "correct"
    bad = py_candidate("return {'pair': (args[0].sum(), 8), 'n': 4, 'y': args[0] * 2}")
    v = ev.evaluate(ref, bad, time=False)
    assert v.status == "incorrect" and "['n']" in v.correctness.message
    cplx = reference("torch.fft.fft(args[0])", "[torch.rand(16, 32)]")
    assert ev.evaluate(cplx, py_candidate("return torch.fft.fft(args[0])"), time=False).status == "correct"
    v = ev.evaluate(cplx, py_candidate("return torch.complex(torch.fft.fft(args[0]).real, "
                                       "torch.zeros(16, 32))"), time=False)
    assert v.status == "incorrect", v.message


def test_integer_outputs_with_ties_accept_either_index(ev):
    ties = reference("torch.argmax(args[0], dim=1)", "[torch.randint(0, 4, (64, 32)).float()]")
    last = py_candidate("x = args[0].flip(1)\nreturn (x.shape[1] - 1) - torch.argmax(x, dim=1)")
    v = ev.evaluate(ties, last, time=False)
    assert v.status == "correct", v.message
    assert any("tie" in w for w in v.warnings)
    wrong = py_candidate("return torch.argmin(args[0], dim=1)")
    assert ev.evaluate(ties, wrong, time=False).status == "incorrect"


def test_unwritten_output_elements_are_caught_by_poison(ev):
    ref = reference("args[0] * 3", "[torch.rand(64, 128)]")
    partial = py_candidate("out = torch.empty_like(args[0])\nout[:32] = args[0][:32] * 3\nreturn out")
    v = ev.evaluate(ref, partial, time=False)
    assert v.status == "incorrect"


def test_nan_never_passes_unless_the_reference_has_it(ev):
    ref = reference("args[0] * 1.0", "[torch.rand(16, 16)]")
    v = ev.evaluate(ref, py_candidate("out = args[0].clone()\nout[0, 0] = float('nan')\nreturn out"), time=False)
    assert v.status == "incorrect" and "NaN" in v.correctness.message
    ref_nan = reference("torch.log(args[0] - 0.5)", "[torch.rand(16, 16)]")
    v = ev.evaluate(ref_nan, py_candidate("return torch.log(args[0] - 0.5)"), time=False)
    assert v.status == "correct", v.message


def test_wrong_shape_and_dtype(ev):
    ref = reference("args[0] * 2", "[torch.rand(16, 16)]")
    v = ev.evaluate(ref, py_candidate("return (args[0] * 2).reshape(256)"), time=False)
    assert v.status == "incorrect" and "shape" in v.correctness.message
    v = ev.evaluate(ref, py_candidate("return (args[0] * 2).double()"), time=False)
    assert v.status == "incorrect" and "dtype" in v.correctness.message


MATMUL = reference("args[0] @ args[1]", "[torch.randn(128, 256), torch.randn(256, 64)]")
HALF = py_candidate("return (args[0].half().float() @ args[1].half().float())")


def test_precision_downgrade_fails_at_fp32_tolerance(ev):
    v = ev.evaluate(MATMUL, HALF, time=False)
    assert v.status == "incorrect"


def test_precision_downgrade_flagged_within_loose_tolerance(cache_dir):
    from eval_helpers import fast_settings

    with Evaluator(fast_settings(cache_dir, atol=5e-2, rtol=5e-2, warm_workers=0)) as e:
        v = e.evaluate(MATMUL, HALF, time=False)
        honest = e.evaluate(MATMUL, py_candidate("return args[0] @ args[1]"), time=False)
    assert v.status == "correct"
    assert any(w.startswith("precision") for w in v.warnings), v.warnings
    assert "WARNING: precision" in v.message
    assert honest.status == "correct" and not any(w.startswith("precision") for w in honest.warnings)


def test_settings_default_tolerance():
    assert EvalSettings().atol == 1e-4 and EvalSettings().rtol == 1e-4
