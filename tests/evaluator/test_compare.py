"""The comparison's tolerance, in the referee's own terms (no candidate, no worker): a valid reduction in another
summation order passes at fp32 tolerance; a precision downgrade, a perturbed element and zeros do not."""

import pytest
import torch

from evaluator.trusted.compare import Mismatch, against_exact, compare_tensor


def _sequential_row_sums(x: torch.Tensor, parts: int) -> torch.Tensor:
    """fp32 sums the way a per-thread OpenMP reduction does them: `parts` sequential partial sums, then added."""
    chunks = torch.tensor_split(x, parts, dim=1)
    total = torch.zeros(x.shape[0], dtype=torch.float32)
    for c in chunks:
        acc = torch.zeros(x.shape[0], dtype=torch.float32)
        for j in range(c.shape[1]):
            acc += c[:, j]
        total += acc
    return total


def test_reduction_in_another_order_passes_everywhere():
    # rows whose sum lands near zero carry the rounding of terms of size ~64: an absolute 1e-4 alone refuses them
    for seed in range(4):
        g = torch.Generator().manual_seed(seed)
        x = torch.randn(96, 4099, generator=g)
        ref = x.sum(dim=-1)
        compare_tensor("output", ref, _sequential_row_sums(x, 2), 1e-4, 1e-4)
        compare_tensor("output", ref * 8, _sequential_row_sums(x * 8, 3), 1e-4, 1e-4, ood=True)


def test_precision_downgrade_and_perturbation_fail():
    g = torch.Generator().manual_seed(0)
    a, b = torch.randn(128, 512, generator=g), torch.randn(512, 128, generator=g)
    ref = a @ b
    with pytest.raises(Mismatch):
        compare_tensor("output", ref, (a.bfloat16() @ b.bfloat16()).float(), 1e-4, 1e-4)
    bad = ref.clone()
    bad[3, 7] += 1e-2 * float(ref.pow(2).mean().sqrt())  # 1 % of the output's RMS, one element
    with pytest.raises(Mismatch, match=r"1 of 16384 elements"):
        compare_tensor("output", ref, bad, 1e-4, 1e-4)


def test_zeros_never_pass_small_outputs():
    ref = torch.full((64,), 1e-6)
    with pytest.raises(Mismatch, match="all zero"):
        compare_tensor("output", ref, torch.zeros(64), 1e-4, 1e-4)


# -- the typical magnitude, not the RMS: a heavy-tailed elementwise output cannot be mostly wrong (issue: exp(4x)
#    with every element below 7.39 written as 0 was judged correct, its RMS of ~1e5 lending atol 10) -----------------
def _exp4(seed: int = 0) -> tuple[torch.Tensor, torch.Tensor]:
    x = torch.randn(256, 1024, generator=torch.Generator().manual_seed(seed))
    return x, torch.exp(4 * x)


def test_heavy_tailed_elementwise_output_with_its_small_values_zeroed_fails():
    x, ref = _exp4()
    bad = ref.clone()
    bad[ref < 7.39] = 0.0  # 69 % of the output
    with pytest.raises(Mismatch, match=r"elements outside the tolerance 9\.\de-05 \+ 0\.0001 x \|expected\| "
                                       r"\(the absolute part is atol 0\.0001 times 0\.9\d+, the output's typical "
                                       r"magnitude: the median of \|expected\| over its finite nonzero elements\)"):
        compare_tensor("output", ref, bad, 1e-4, 1e-4)
    # and the float64 second opinion does not let it through: exp's floor is a few ulps of each element
    with pytest.raises(Mismatch, match=r"against the exact float64 answer: \d+ of 262144 elements outside"):
        against_exact("output", ref, bad, torch.exp(4 * x.double()), 1e-4, 1e-4, 8.0)


def test_a_mismatch_says_the_tolerance_it_applied_and_why():
    """The setting is 1e-4, the figure applied is 1e-4 times the output's median magnitude: the message gives both
    and says where the factor comes from (and when the output's dtype raised atol)."""
    ref = torch.full((4, 8), 2.0)
    ref[0, 0] = 1000.0  # a large element does not move the median
    bad = ref.clone()
    bad[1, 2] += 0.01
    with pytest.raises(Mismatch) as e:
        compare_tensor("output", ref, bad, 1e-4, 1e-4)
    assert ("1 of 32 elements outside the tolerance 0.0002 + 0.0001 x |expected| (the absolute part is atol 0.0001 "
            "times 2, the output's typical magnitude: the median of |expected| over its finite nonzero elements); "
            "max abs error 1.000e-02, worst at output[1, 2]") in str(e.value)
    half = ref.half()
    bad = half.clone()
    bad[1, 2] += 0.25
    with pytest.raises(Mismatch, match=r"atol 0\.01, raised from 0\.0001 for float16 times 2,"):
        compare_tensor("output", half, bad, 1e-4, 1e-4)


def test_heavy_tailed_elementwise_output_computed_otherwise_passes():
    x, ref = _exp4(1)
    half = torch.exp(2 * x)
    compare_tensor("output", ref, half * half, 1e-4, 1e-4)  # a few ulps off everywhere
    compare_tensor("output", ref * 8, torch.exp(4 * x.double()).float() * 8, 1e-4, 1e-4, ood=True)


def test_gemm_with_relu_zeros_in_another_order_passes():
    # half the output is exactly zero: the typical magnitude is that of the rest, so the elements just above zero
    # (the rounding of 1024 products) pass when the K loop is blocked
    g = torch.Generator().manual_seed(3)
    x, w = torch.randn(128, 1024, generator=g), torch.randn(1024, 256, generator=g)
    ref = torch.relu(x @ w)
    blocked = sum(x[:, k:k + 64] @ w[k:k + 64] for k in range(0, 1024, 64))
    compare_tensor("output", ref, torch.relu(blocked), 1e-4, 1e-4)


def test_exact_answer_decides_where_the_fp32_reference_is_not_finite():
    e = torch.ones(64, dtype=torch.float64)
    r = torch.full((64,), float("nan"))  # a floor of NaN (or Inf) lets nothing pass
    against_exact("output", r, torch.ones(64), e, 1e-4, 1e-4, 8.0)
    with pytest.raises(Mismatch, match="the fp32 reference is not finite there"):
        against_exact("output", r, torch.full((64,), 1.01), e, 1e-4, 1e-4, 8.0)


def _element_path(r: torch.Tensor, c: torch.Tensor, monkeypatch: pytest.MonkeyPatch):
    """compare_tensor with its one-read path turned off: the element-by-element judgement."""
    from evaluator.trusted import compare

    with monkeypatch.context() as m:
        m.setattr(compare, "_passes", lambda *a, **k: None)
        return compare_tensor("output", r, c, 1e-4, 1e-4)


@pytest.mark.parametrize("chunk", [1 << 24, 1000])
def test_the_one_read_path_gives_the_element_paths_figures_and_defers_every_failure(monkeypatch, chunk):
    """The path that reads the device once per check decides only passes, with exactly the figures (the worst
    element's place included) the element-by-element path gives; every kind of failure goes to that path."""
    from evaluator.trusted import compare

    monkeypatch.setattr(compare, "CHUNK", chunk)
    g = torch.Generator().manual_seed(7)
    r = torch.randn(37, 211, generator=g)
    r[0, :5] = float("nan")
    r[1, 3] = float("inf")
    r[2, :4] = 0.0
    c = r + 1e-6 * torch.randn(37, 211, generator=g)
    c[2, 1] = 3e-9
    for ref, cand in ((r, c), (r.double(), c.double()), (r.half(), c.half()), (r, r.clone())):
        want = _element_path(ref, cand, monkeypatch)
        mag = compare.typical(ref)
        got = compare._passes(ref, cand, compare.tolerance(ref.dtype, 1e-4, 1e-4)[0] * mag,
                              compare.tolerance(ref.dtype, 1e-4, 1e-4)[1], "output")
        assert got is not None
        assert (got.max_abs, got.max_rel, got.where) == (want.max_abs, want.max_rel, want.where)
        assert compare_tensor("output", ref, cand, 1e-4, 1e-4) == want
    mag = compare.typical(r)
    failing = {
        "NaN where the reference has a number": lambda t: t.__setitem__((5, 5), float("nan")),
        "a number where the reference has NaN": lambda t: t.__setitem__((0, 1), 1.0),
        "the other infinity": lambda t: t.__setitem__((1, 3), float("-inf")),
        "an infinity where the reference is finite": lambda t: t.__setitem__((9, 9), float("inf")),
        "one element outside the tolerance": lambda t: t.__setitem__((30, 200), t[30, 200] + 0.5),
        "all zero": lambda t: t.zero_(),
    }
    for what, spoil in failing.items():
        bad = c.clone()
        spoil(bad)
        assert compare._passes(r, bad, 1e-4 * mag, 1e-4, "output") is None, what
        with pytest.raises(Mismatch):
            compare_tensor("output", r, bad, 1e-4, 1e-4)
    huge = torch.full((4, 4), 3e38)
    assert compare._passes(huge, -huge, 1.0, 1e-4, "output") is None  # |c - r| overflows: not a pass
