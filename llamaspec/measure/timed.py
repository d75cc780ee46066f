"""What a run timed: enough tokens to time, and whether the target's output loops.

A speedup is only as good as the generation it timed. Two things make one unfit to speak for a
workload, whatever the engines measured:

- **Too short to time.** Decode speed counts the tokens after the first (``SPEED_DEFINITION``);
  a prompt the target answers in a few tokens times one or two verification rounds, start-up
  costs and all. A run is *too short to time* when the target alone generated fewer than
  :func:`floor` tokens after the first: :data:`FLOOR_TOKENS` (32), or half of the tokens asked
  for (``-n``) where that is fewer. The baseline's count decides (the target alone's output is
  the one every setup on that prompt must reproduce).
- **A loop.** A target output that repeats one span to the end of the generation (a tiny model
  answering "Portugal e Portugal e ..."): an n-gram mode drafts such text almost for free, so its
  gain there is the loop's, not the workload's. :func:`loop_of` finds it on the generated text:
  the shortest span ``s`` such that the output ends with ``s`` repeated, the repeated part (the
  last occurrence may be cut by ``-n``) at least two whole spans long, at least
  :data:`LOOP_MIN_CHARS` characters and at least :data:`LOOP_MIN_SHARE` of the output (trailing
  whitespace left out).

Pure: text and counts in, verdicts out.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import asdict, dataclass
from typing import Any

FLOOR_TOKENS = 32
LOOP_MIN_CHARS = 32
LOOP_MIN_SHARE = 0.3

FLOOR_TEXT = (f"fewer than {FLOOR_TOKENS} tokens after the first (or than half of -n, where that is fewer) "
              "is too short to time")


def floor(n_predict: int | None) -> int:
    """The fewest tokens after the first a run must decode to be timed, with ``-n`` ``n_predict``."""
    if n_predict is None or n_predict <= 0:
        return FLOOR_TOKENS
    return max(1, min(FLOOR_TOKENS, n_predict // 2))


def too_short(timed: int | None, n_predict: int | None) -> bool:
    """Whether ``timed`` tokens after the first are too few to time (None: unknown, not too short)."""
    return timed is not None and timed < floor(n_predict)


def short_text(timed: int, n_predict: int | None) -> str:
    return (f"too short to time: the target alone answers in {timed + 1} token{'s' if timed else ''} "
            f"({timed} after the first; fewer than {floor(n_predict)})")


@dataclass(frozen=True)
class Loop:
    """The span an output repeats to its end."""

    span: str  # the repeated text
    start: int  # the character where the repetition starts (its first whole span)
    repeats: float  # how many spans long the repeated part is
    length: int  # the output's characters

    def text(self) -> str:
        shown = self.span if len(self.span) <= 24 else self.span[:21] + "..."
        return f"loops: {shown!r} x{self.repeats:.0f} to the end (from character {self.start} of {self.length})"

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: Mapping[str, Any] | None) -> Loop | None:
        return cls(**data) if data else None


def loop_of(text: str | None) -> Loop | None:
    """The loop ``text`` ends in (see the module's docstring), or None. Trailing whitespace (the
    newline a program prints after the generation) is no part of it."""
    text = (text or "").rstrip()
    if not text:
        return None
    n = len(text)
    need = max(LOOP_MIN_CHARS, LOOP_MIN_SHARE * n)
    best: Loop | None = None
    for p in range(1, n // 2 + 1):
        # how far back from the end the text equals itself shifted by p
        run = 0
        while run < n - p and text[n - 1 - run] == text[n - 1 - run - p]:
            run += 1
        covered = run + p  # the periodic suffix: p characters, then each equal to the one p before it
        if covered >= 2 * p and covered >= need and (best is None or covered > best.repeats * len(best.span)):
            start = n - covered
            best = Loop(text[start:start + p], start, covered / p, n)
            if covered == n:
                break
    return best


__all__ = ["FLOOR_TEXT", "FLOOR_TOKENS", "Loop", "floor", "loop_of", "short_text", "too_short"]
