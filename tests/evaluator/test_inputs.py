"""The referee's input variants (no candidate, no worker)."""

import torch

from evaluator.trusted import inputs


def test_ramp_scales_by_position_in_chunks_and_leaves_the_tasks_tensor_alone(monkeypatch):
    t = torch.randn(7, 13).t()  # non-contiguous, as get_inputs() may return
    before = t.clone()
    want = t.contiguous() * torch.linspace(0.5, 2.0, t.numel(), dtype=torch.float64).reshape(t.shape).float()
    monkeypatch.setattr(inputs, "RAMP_CHUNK", 10)  # several chunks, the last one short
    got = inputs._ramp(t)
    assert torch.allclose(got, want, rtol=1e-6, atol=1e-7)
    assert torch.equal(t, before)  # a module-level tensor handed out by get_inputs() stays as it was
    assert got.is_contiguous() and got.dtype == t.dtype
    i = torch.arange(5)
    assert inputs._ramp(i) is i  # integers (indices) are never scaled


def test_variants_are_a_pure_function_of_seed_and_variant():
    def get_inputs():
        return [torch.rand(64, 33), torch.randint(0, 5, (8,))]

    for variant in inputs.VARIANTS:
        a = inputs.make(get_inputs, 1234, variant, torch.device("cpu"))
        b = inputs.make(get_inputs, 1234, variant, torch.device("cpu"))
        assert all(torch.equal(x, y) for x, y in zip(a, b)), variant
        task = inputs.make(get_inputs, 1234, "task", torch.device("cpu"))
        assert torch.equal(a[1], task[1]), variant  # integer inputs (indices) always come from get_inputs()
    signed = inputs.make(get_inputs, 1234, "signed", torch.device("cpu"))[0]
    assert bool((signed < 0).any())  # the task draws rand (all >= 0); signed trials flip signs
