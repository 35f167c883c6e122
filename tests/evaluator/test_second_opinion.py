"""Issue 16, item 2: a mismatch gets a second opinion against the exact (float64) answer before it is final.

Attention with large logits (the out-of-distribution trial "normal values times 8") is beyond fp32's reach: two
valid fp32 orderings differ there by more than the tolerance, and each is ~1e-3 from the exact answer. The
candidate passes when its error against the exact answer is within the tolerance or within a few times the fp32
reference's own; a wrong kernel (logits clamped: right on small logits only) still fails, and says so.

The referee is driven in-process (it is the trusted worker's code): the inputs of a "wide" trial whose fp32
orderings disagree are searched for by seed, so the test always reaches the second opinion."""

from __future__ import annotations

import pytest
import torch
from eval_helpers import py_candidate, reference

from evaluator import messages as M
from evaluator.trusted import inputs
from evaluator.trusted.compare import Mismatch, compare_tensor
from evaluator.trusted.referee import Referee

REF = reference("torch.softmax(args[0] @ args[1].transpose(-1, -2), -1) @ args[2]",
                "[torch.randn(2, 64, 64), torch.randn(2, 64, 64), torch.randn(2, 64, 64)]")


def other_order(q, k, v):  # the logits summed in another order (sequentially, from the last term), softmax by hand
    s = (q.unsqueeze(2) * k.unsqueeze(1)).flip(-1).cumsum(-1)[..., -1]
    e = torch.exp(s - s.amax(-1, keepdim=True))
    return torch.bmm(e / e.sum(-1, keepdim=True), v)


def clamped(q, k, v):  # right while the logits stay small, wrong once they reach hundreds
    return torch.softmax((q @ k.transpose(-1, -2)).clamp(-60.0, 60.0), -1) @ v


@pytest.fixture()
def referee():
    r = Referee(torch.device("cpu"))
    r.load(M.LoadReference(reference_src=REF, settings={"atol": 1e-4, "rtol": 1e-4}, init_seed=1))
    yield r
    r.release(M.Empty())


def _check(r: Referee, fn, seed: int) -> M.CheckResult:
    r.fill(M.Fill(items=[M.FillItem(slot=0, seed=seed, variant="wide")], poison=[0]))
    q, k, v = inputs.make(r.mod.get_inputs, seed, "wide", r.device)
    r.calls.collect(fn(q, k, v), 0)
    return r.check(M.Check(items=[M.CheckItem(slot=0, out=0, seed=seed, variant="wide")])).results[0]


def _disagreeing_seed(r: Referee, fn) -> int:
    """A seed whose wide inputs put `fn` outside the tolerance against the fp32 reference."""
    for seed in range(1, 200):
        q, k, v = inputs.make(r.mod.get_inputs, seed, "wide", r.device)
        try:
            compare_tensor("output", r.model(q, k, v), fn(q, k, v), 1e-4, 1e-4, ood=True)
        except Mismatch:
            return seed
    raise AssertionError("no seed put the other ordering outside the tolerance")


def test_a_valid_reordering_passes_on_the_exact_answer(referee):
    seed = _disagreeing_seed(referee, other_order)
    res = _check(referee, other_order, seed)
    assert res.match and res.decided_by == "float64", res.message
    assert any("exact float64 answer" in w for w in res.warnings), res.warnings


def test_a_wrong_kernel_still_fails_and_the_message_gives_the_floor(referee):
    res = _check(referee, clamped, _disagreeing_seed(referee, clamped))
    assert not res.match
    assert "against the exact float64 answer" in res.message and "allowed 8x" in res.message, res.message


def test_relu_for_elu_beyond_the_floor_by_orders_of_magnitude(referee):
    res = _check(referee, lambda q, k, v: torch.relu(other_order(q, k, v)), 3)
    assert not res.match


CLAMPED = py_candidate("""
q, k, v = args
return torch.softmax((q @ k.transpose(-1, -2)).clamp(-60.0, 60.0), -1) @ v
""")


def test_through_the_evaluator_a_wrong_kernel_fails_with_the_floor_named(ev):
    v = ev.evaluate(REF, CLAMPED, time=False)
    assert v.status == "incorrect", v.message
    assert "against the exact float64 answer" in v.message and "allowed 8x" in v.message
