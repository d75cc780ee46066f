"""Round profiles: how a speculative program spends a round and counts them (:class:`RoundProfile`).

Each engine defines its programs' profiles in its own package and registers them here
(``llamaspec.llamacpp.profiles``, ``llamaspec.hf.profiles``); :func:`round_profile` finds one by the name
a measurement records (``Measurement.program``), importing the engines' profile modules
(``llamaspec.measure.engines.ROUND_PROFILE_MODULES``) the first time it is asked, as the engine registry opens engines.
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass

from llamaspec.base.errors import LlamaspecError
from llamaspec.measure.settings import program_binary

_REGISTERED: dict[str, RoundProfile] = {}


@dataclass(frozen=True)
class RoundProfile:
    """How a speculative program spends a round and counts them (read from its source).

    - ``extra_draft_steps``: single-token draft decodes per round beyond the ``k`` drafted tokens.
    - ``first_token_from_prompt``: the first generated token is sampled from the prompt's logits,
      outside any round, so rounds = n_predict - n_accept - 1 (else n_predict - n_accept).
    - ``draft_processes_batch``: the draft also decodes the verified batch (k + 1 tokens) each round.
    - ``draft_policy``: of ``llamaspec.measure.contract.DRAFT_POLICIES``.
    - ``loop_overhead``: where the engine's own loop spends time beyond the timed forward passes
      and sampling: ``"none"`` (nothing worth modelling: the costs are timed as the program spends
      them), or charged once per ``"round"`` or per emitted ``"token"``; it is then the step the
      run's baselines measured less the timed step (:attr:`CostModel.loop_overhead_ms`).
    - ``unmodelled``: what the model cannot see for this program, said next to its fit.
    """

    name: str
    extra_draft_steps: int
    first_token_from_prompt: bool
    draft_processes_batch: bool = False
    draft_policy: str = "fixed"
    loop_overhead: str = "none"
    unmodelled: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        if self.loop_overhead not in ("none", "round", "token"):
            raise LlamaspecError(f"loop_overhead must be 'none', 'round' or 'token', got {self.loop_overhead!r}")

    def draft_steps_per_round(self, k: float) -> float:
        """Single-token draft decodes per round at draft length k."""
        return k + self.extra_draft_steps

    def rounds(self, n_predict: int, n_accept: int) -> int:
        """Verification rounds (target calls after the prompt) from the printed counters, by this
        program's own loop."""
        return n_predict - n_accept - (1 if self.first_token_from_prompt else 0)


# examples/speculative/speculative.cpp at 0c1e570: the first token is sampled from the prompt's
# logits before the loop; each round decodes the target's token on the draft, then drafts k


def register(profile: RoundProfile) -> RoundProfile:
    """Make ``profile`` known by its name (an engine's profile module calls this when imported)."""
    known = _REGISTERED.get(profile.name)
    if known is not None and known != profile:
        raise LlamaspecError(f"two round profiles are named {profile.name!r}", hint="give each program its own name")
    _REGISTERED[profile.name] = profile
    return profile


def registered() -> dict[str, RoundProfile]:
    """Every engine's round profiles by program name (the engines' profile modules imported first)."""
    from llamaspec.measure import engines

    for module in engines.ROUND_PROFILE_MODULES:
        importlib.import_module(module)
    return dict(_REGISTERED)


def round_profile(name: str) -> RoundProfile:
    """The profile of a speculative program by the name a measurement records (its binary's); a
    ``Settings.program`` (``speculative``) is read as its binary (``settings.program_binary``)."""
    key = program_binary(name)
    found = _REGISTERED.get(key) or registered().get(key)
    if found is None:
        raise LlamaspecError(f"no round profile for program {name!r}",
                             hint=f"known programs: {', '.join(registered())}")
    return found


def knows(name: str | None) -> bool:
    """Whether a program by this name (either spelling) has a round profile."""
    return name is not None and program_binary(name) in registered()


def default_round_profile() -> RoundProfile:
    """The profile a model built without naming one assumes: the pinned ``llama-speculative``."""
    return round_profile("llama-speculative")
