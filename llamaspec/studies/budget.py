"""A study's budget: what it may spend (pairs, measuring time, or both), its text form and its
default. Its own module, light on imports, because the command line's help reads the defaults;
:mod:`llamaspec.studies.policy` spends it."""

from __future__ import annotations

import re
from dataclasses import dataclass

from llamaspec.base.errors import LlamaspecError

_BUDGET = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*(s|m|h|pairs?)?\s*$", re.I)


@dataclass(frozen=True)
class Budget:
    """How much an adaptive sweep may spend: pairs (baseline + speculative), wall time, or both."""

    pairs: int | None = None
    seconds: float | None = None

    def text(self) -> str:
        parts = ([f"{self.pairs} pairs"] if self.pairs is not None else []) + (
            [f"{self.seconds:.0f} s"] if self.seconds is not None else [])
        return " or ".join(parts) or "none"


# The whole study's budget when none is given: DEFAULT_MINUTES of measuring, grown (up to
# MAX_DEFAULT_MINUTES, said) where this machine's pace times too few prompts to decide on.
DEFAULT_MINUTES, MAX_DEFAULT_MINUTES = 4, 30
DEFAULT_BUDGET = Budget(seconds=60.0 * DEFAULT_MINUTES)


def parse_budget(text: str) -> Budget:
    """``10m``, ``90s``, ``1h`` (wall time) or ``40`` / ``40 pairs``."""
    m = _BUDGET.match(text or "")
    if not m:
        raise LlamaspecError(f"--budget: {text!r} is neither a time nor a number of pairs",
                             hint="e.g. --budget 10m, --budget 90s or --budget 40 (pairs)")
    value, unit = float(m.group(1)), (m.group(2) or "pairs").lower()
    if value <= 0:
        raise LlamaspecError(f"--budget: {text!r} allows nothing to be measured", hint="give a positive budget, e.g. 10m")
    if unit.startswith("pair"):
        if value != int(value):
            raise LlamaspecError(f"--budget: {text!r}: pairs are counted whole", hint="e.g. --budget 40")
        return Budget(pairs=int(value))
    return Budget(seconds=value * {"s": 1, "m": 60, "h": 3600}[unit])
