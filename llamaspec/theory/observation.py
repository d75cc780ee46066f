"""One measured speculative setting as the model reads it (:class:`Observation`): its counters, speeds and rounds."""

from __future__ import annotations

from dataclasses import dataclass, field

from llamaspec.base.errors import LlamaspecError
from llamaspec.measure import contract
from llamaspec.theory.maths import HINT_COUNTS, alpha_from_tokens_per_round, count, positive
from llamaspec.theory.positions import PositionCurve
from llamaspec.theory.profiles import RoundProfile


@dataclass(frozen=True)
class Observation:
    """One measured speculative setting (its repeats pooled) and its baseline.

    - ``draft_max``: the requested draft length (k).
    - ``n_drafted``, ``n_accept``: the program's ``n_drafted =`` and ``n_accept =`` lines (summed over
      repeats). Its ``accept = x%`` line is ``100 * n_accept / n_drafted`` (see :attr:`acceptance`).
    - ``n_generated``: ``n_predict =`` (summed over repeats).
    - ``spec_decode_tps``, ``baseline_decode_tps``: speeds on SPEED_DEFINITION (medians).
    - ``rounds``: every verification round (target call after the prompt), summed, as the
      measurements carry them (``Measurement.rounds``, one definition for every engine); None
      derives them from the counters of one run by ``program``'s own loop (:meth:`RoundProfile.rounds`).
    - ``drafted_rounds``: the rounds that drafted something, where the engine counts them apart
      (llama-server's /metrics: a step whose draft came back empty is a plain decode); None where
      every round drafts or the engine does not say.
    - ``speedup``: the measured speedup if known better than the ratio of the two medians (the median
      of paired ratios); None uses spec/baseline.
    - ``positions``: acceptance by draft position (``Measurement.drafted_by_position`` and
      ``accepted_by_position``), where the engine counts it; None where it does not.
    """

    draft_max: int
    n_drafted: int
    n_accept: int
    n_generated: int
    spec_decode_tps: float
    baseline_decode_tps: float
    rounds: int | None = None
    profile: RoundProfile = field(kw_only=True)  # the program whose loop made the counters
    speedup: float | None = None
    drafted_rounds: int | None = None
    positions: PositionCurve | None = None

    def __post_init__(self) -> None:
        count("draft_max", self.draft_max, minimum=1)
        count("n_drafted", self.n_drafted)
        count("n_accept", self.n_accept)
        count("n_generated", self.n_generated, minimum=1)
        if self.n_accept > self.n_drafted:
            raise LlamaspecError(
                f"n_accept ({self.n_accept}) exceeds n_drafted ({self.n_drafted}): only drafted tokens can be accepted",
                hint=HINT_COUNTS,
            )
        if self.rounds is not None:
            count("rounds", self.rounds, minimum=1)
            if self.rounds + self.n_accept > self.n_generated:
                raise LlamaspecError(
                    f"rounds ({self.rounds}) + n_accept ({self.n_accept}) exceed n_generated ({self.n_generated}): "
                    "every round emits its accepted tokens plus one",
                    hint=HINT_COUNTS,
                )
        if self.drafted_rounds is not None:
            count("drafted_rounds", self.drafted_rounds)
            if self.drafted_rounds > self.calls:
                raise LlamaspecError(
                    f"{self.profile.name} counted {self.drafted_rounds} rounds that drafted, more than its "
                    f"{self.calls} rounds (n_predict {self.n_generated}, n_accept {self.n_accept})", hint=HINT_COUNTS)
        if self.rounds is None and self.derived_rounds < 1:
            raise LlamaspecError(
                f"n_accept ({self.n_accept}) leaves no verification round in {self.n_generated} generated tokens "
                f"({self.profile.name}: rounds = n_predict - n_accept"
                f"{' - 1' if self.profile.first_token_from_prompt else ''})",
                hint=HINT_COUNTS,
            )
        if self.positions is not None and self.positions.length > self.draft_max:
            raise LlamaspecError(
                f"{self.profile.name} counted acceptance at draft position {self.positions.length}, past its draft "
                f"length {self.draft_max}", hint=HINT_COUNTS)
        positive("spec_decode_tps", self.spec_decode_tps)
        positive("baseline_decode_tps", self.baseline_decode_tps)
        if self.speedup is not None:
            positive("speedup", self.speedup)

    @property
    def derived_rounds(self) -> int:
        return self.profile.rounds(self.n_generated, self.n_accept)

    @property
    def acceptance(self) -> float | None:
        """llama.cpp's ``accept`` as a fraction (n_accept / n_drafted); None if nothing was drafted."""
        return contract.acceptance(self.n_accept, self.n_drafted)

    @property
    def calls(self) -> int:
        """Verification rounds: as measured, or derived from the counters by the program's loop."""
        return self.rounds if self.rounds is not None else self.derived_rounds

    @property
    def drafted_per_round(self) -> float:
        """Mean tokens actually drafted per round (≤ draft_max unless the build adapts it)."""
        value = contract.drafted_per_round(self.n_drafted, self.calls)
        assert value is not None  # calls >= 1, checked on construction
        return value

    @property
    def tokens_per_round(self) -> float:
        """Tokens emitted per round, measured: accepted + the target's own (Spec-Bench's tau)."""
        value = contract.tokens_per_round(self.n_accept, self.calls)
        assert value is not None  # calls >= 1, checked on construction
        return value

    @property
    def measured_speedup(self) -> float:
        return self.speedup if self.speedup is not None else self.spec_decode_tps / self.baseline_decode_tps

    @property
    def alpha(self) -> float | None:
        """This point's own α, from tokens per round at its mean drafted length; None if nothing drafted."""
        if self.n_drafted == 0:
            return None
        k = self.drafted_per_round
        return alpha_from_tokens_per_round(min(self.tokens_per_round, k + 1.0), k)
