"""Round profiles: how a speculative program spends a round and counts them (:class:`RoundProfile`).

Each engine defines its programs' profiles in its own package (``llamaspec.llamacpp.profiles``,
``llamaspec.hf.profiles``); the engine registry above them finds one by the name a measurement
records (``llamaspec.registry.engines.round_profile(Measurement.program)``). The model names no
program: every observation, cost model and fit is given the profile of the program it models.
"""

from __future__ import annotations

from dataclasses import dataclass

from llamaspec.base.errors import LlamaspecError


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
