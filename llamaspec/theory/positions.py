"""Acceptance by draft position: the measured curve the model reads instead of one α where it is known.

A run that counts acceptance by position (``Measurement.drafted_by_position`` and
``accepted_by_position``: llama-speculative-simple's statistics line, llama-server's ``/metrics``,
transformers' round hook) says, for each draft position i, how many rounds drafted it and how many
of those were accepted through it. The share accepted through position i is the chance that a
round's i-th drafted token is emitted, so a round of length k emits on average

    E[tokens / round](k) = 1 + Σ_{i ≤ k} P(accepted through i)

whatever the shape of the curve: no single α is assumed (Leviathan et al.'s closed form is the
special case P(through i) = α^i).

**The assumption.** Pooling runs of different lengths, and predicting a short length from a long
run's rounds, takes the acceptance at position i measured in rounds of length K to stand for rounds
of length k < K. Under greedy decoding the first k tokens a draft proposes do not depend on how
many more it will propose, so a position's acceptance changes only through where rounds start
(after a long round the next one starts elsewhere in the text). :func:`contradictions` says where a
measured point's own tokens per round are more than :data:`CONTRADICTION` from what the other
points' curve predicts for it.

Beyond the longest measured position, the curve is extended with the pooled α (each further position
accepted with probability α after the last measured one); :attr:`PositionCurve.length` says where
the measurement ends.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from functools import cached_property

from llamaspec.base.errors import LlamaspecError
from llamaspec.base.stats import percent_text
from llamaspec.theory.maths import HINT_COUNTS, count

# A measured point contradicts the curve of the other points when its tokens per round differ from
# the curve's by more than this share. The recordings in tests/fixtures/llamacpp/0c1e570/positions/ (llama-speculative-simple, drafts
# 1..16, one greedy run each) differ from their leave-one-out curve by a median of a few per cent.
CONTRADICTION = 0.10


@dataclass(frozen=True)
class PositionCurve:
    """Rounds that drafted each position (index i-1 = position i) and of those the rounds accepted
    through it, summed over the runs it pools."""

    drafted: tuple[int, ...]
    accepted: tuple[int, ...]

    def __post_init__(self) -> None:
        object.__setattr__(self, "drafted", tuple(self.drafted))
        object.__setattr__(self, "accepted", tuple(self.accepted))
        if len(self.drafted) != len(self.accepted):
            raise LlamaspecError(f"acceptance by position: {len(self.drafted)} drafted counts but {len(self.accepted)} "
                                 "accepted ones", hint=HINT_COUNTS)
        for i, (d, a) in enumerate(zip(self.drafted, self.accepted, strict=True), start=1):
            count(f"rounds drafting position {i}", d)
            count(f"rounds accepted through position {i}", a)
            if a > d:
                raise LlamaspecError(f"acceptance by position: {a} rounds accepted through position {i}, but only {d} "
                                     "drafted it", hint=HINT_COUNTS)

    @cached_property
    def length(self) -> int:
        """The longest position some round drafted (0: none)."""
        return max((i for i, d in enumerate(self.drafted, start=1) if d > 0), default=0)

    @cached_property
    def through(self) -> tuple[float, ...]:  # the curve is frozen: computed once (a fit asks thousands of times)
        """P(accepted through position i) for i = 1..length. A round accepted through i + 1 was
        accepted through i, so the shares are made non-increasing (a later position reading higher
        is what pooling runs of other lengths can do, not what a round can)."""
        out: list[float] = []
        for d, a in zip(self.drafted[:self.length], self.accepted[:self.length], strict=True):
            share = a / d if d else (out[-1] if out else 0.0)
            out.append(min(share, out[-1]) if out else share)
        return tuple(out)

    def tokens_per_round(self, k: float, tail_alpha: float) -> float:
        """Mean tokens a round of (mean) length ``k`` emits: 1 + Σ_{i ≤ k} P(through i); a
        fractional k takes that share of the next position; positions past :attr:`length` are
        accepted with probability ``tail_alpha`` each after the last measured one."""
        if not (k >= 0):
            raise LlamaspecError(f"draft length must be >= 0, got {k!r}")
        shares = self.through
        whole = int(k)
        total = 1.0
        last = shares[-1] if shares else 1.0
        for i in range(1, whole + 2):
            weight = 1.0 if i <= whole else k - whole
            if weight <= 0:
                break
            p = shares[i - 1] if i <= len(shares) else last * tail_alpha ** (i - len(shares))
            total += weight * p
        return total

    @staticmethod
    def pooled(curves: Sequence[PositionCurve]) -> PositionCurve | None:
        """The counts of several runs summed position by position (None for no curves)."""
        if not curves:
            return None
        n = max(len(c.drafted) for c in curves)

        def total(values: Sequence[tuple[int, ...]]) -> tuple[int, ...]:
            return tuple(sum(v[i] for v in values if i < len(v)) for i in range(n))

        return PositionCurve(total([c.drafted for c in curves]), total([c.accepted for c in curves]))

    def text(self, limit: int = 16) -> str:
        """``97 %, 93 %, ...``: the shares accepted through positions 1..``limit``."""
        shares = [percent_text(p) for p in self.through[:limit]]
        return ", ".join(shares) + (", ..." if self.length > limit else "")


__all__ = ["CONTRADICTION", "PositionCurve"]
