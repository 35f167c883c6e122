"""Strategies: the paper's regimes as composable plans.

A strategy name is one regime or several joined with "+" (e.g. "profile-guided+best-of-n+refine"). Each regime
sets one aspect of the plan:

=================  ===========================================================================================
zero-shot          first prompt: task + contract                                     (1 round, 1 sample)
one-shot           first prompt: + a worked example pair (prompts/examples/, in the  (1 round, 1 sample)
                   form the reference's profile calls for: generation/forms.py)
profile-guided     first prompt: + the reference's profile and roofline              (settings.rounds x samples)
refine             K rounds, each refining one earlier candidate on its feedback     (settings.rounds)
best-of-n          n samples per round (a seed each), ranked by the oracle           (settings.samples)
agent              analysis -> retrieval -> generation -> oracle -> model triage     (settings.rounds x samples)
=================  ===========================================================================================

"refine" on a file that already has a `ModelNew` starts from it: the oracle checks it first (round 0) and round 1
refines it on that feedback. So "profile-guided" alone is the default strong regime (profile prompt, best-of-n sampling, refine rounds), and
"zero-shot" alone is one sample of one round. Explicit `samples` / `rounds` passed to Engine.run override.
"""

from __future__ import annotations

from dataclasses import dataclass

from kernel_lsp.config import STRATEGIES

from .errors import GenerationError


@dataclass(frozen=True)
class Plan:
    name: str
    first_prompt: str  # template of round 1: zero_shot | one_shot | profile_guided | agent_generate
    samples: int
    rounds: int
    profile: bool  # profile the reference first (and show it in prompts)
    agent: bool  # analysis + retrieval before round 1, model triage between rounds
    example: bool  # show the worked example pair
    seed_from_file: bool = False  # refine: start from the file's own ModelNew when it has one

    def describe(self) -> str:
        return f"{self.name}: {self.rounds} round(s) x {self.samples} sample(s)"


def make_plan(strategy: str, *, settings_samples: int, settings_rounds: int, samples: int | None = None,
              rounds: int | None = None) -> Plan:
    parts = [p.strip() for p in strategy.replace(",", "+").split("+") if p.strip()]
    bad = [p for p in parts if p not in STRATEGIES]
    if not parts or bad:
        raise GenerationError(f"unknown strategy {strategy!r}: use one of {', '.join(STRATEGIES)} "
                              "or several joined with '+'")
    has = set(parts).__contains__
    agent = has("agent")
    profile = has("profile-guided") or agent
    example = has("one-shot")
    first = "agent_generate" if agent else "profile_guided" if profile else "one_shot" if example else "zero_shot"
    full = profile or agent  # the strong regimes sample and refine by default
    n = samples if samples is not None else (settings_samples if full or has("best-of-n") else 1)
    k = rounds if rounds is not None else (settings_rounds if full or has("refine") else 1)
    if n < 1 or k < 1:
        raise GenerationError(f"samples and rounds must be at least 1 (got samples={n}, rounds={k})")
    return Plan("+".join(parts), first, n, k, profile, agent, example or agent, seed_from_file=has("refine"))
