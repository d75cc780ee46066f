"""Read the statistics line of llama.cpp's speculative implementations (``common_speculative_print_stats``):
its counts and its acceptance rates by draft position."""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class DraftStatistics:
    """One line of ``common_speculative_print_stats`` (common/speculative.cpp), which the pinned
    llama-speculative-simple calls at its end and logs at trace level (``-lv 4``)::

        spec common_specu: statistics     draft-simple: #calls(b,g,a) =    1     15     14, #gen drafts =     14,
            #acc drafts =    12, #gen tokens =    112, #acc tokens =    58, #mean acc len = 5.14,
            #acc rate/pos = (0.857, 0.786, ...)

    Each field, from the implementation's counters:

    - ``calls_begin/calls_draft/calls_accept`` (``#calls(b,g,a)``): begin, draft and accept calls;
      ``calls_accept`` is every verification round after the first draft (an empty draft still calls
      accept with 0), the denominator of ``#mean acc len`` and ``#acc rate/pos``;
    - ``gen_drafts`` / ``gen_tokens``: the rounds that drafted at least one token, and the tokens
      they drafted; ``acc_drafts`` / ``acc_tokens``: the rounds that had at least one accepted, and
      the accepted tokens;
    - ``mean_acc_len``: 1 + acc_tokens / calls_accept, as printed (2 decimals);
    - ``acc_rate_by_position`` (``#acc rate/pos``): per position i, the rounds accepted through i
      over ``calls_accept`` (3 decimals). Only the rates are printed, so the counts are derived:
      rate x calls_accept, rounded (exact while calls_accept < 1000, and checked against
      acc_drafts and acc_tokens); see :func:`llamaspec.llamacpp.parse.positions`. The list is as long as the longest
      accepted run: positions beyond it had no token accepted.

    Printed only when the implementation was called to accept at least once; without a round the
    line ends after ``#acc tokens`` (mean and rates None).
    """

    implementation: str  # draft-simple, ngram-mod, ...
    calls_begin: int
    calls_draft: int
    calls_accept: int
    gen_drafts: int
    acc_drafts: int
    gen_tokens: int
    acc_tokens: int
    mean_acc_len: float | None = None
    acc_rate_by_position: tuple[float, ...] | None = None


_STAT_FIELD = re.compile(r"#(?P<label>[a-z][a-z/(),]*(?: [a-z/]+)*)\s*=\s*(?P<value>\([^)]*\)?|[^,]*)")
_STAT_INTS = {"gen drafts": "gen_drafts", "acc drafts": "acc_drafts", "gen tokens": "gen_tokens",
              "acc tokens": "acc_tokens"}


def parse_statistics_line(implementation: str, rest: str) -> DraftStatistics:
    """The fields of one ``statistics <impl>: #calls(b,g,a) = ...`` line (``rest`` from ``#calls``
    on), keyed on labels; ValueError naming what is missing or unreadable."""
    values: dict[str, Any] = {}
    for m in _STAT_FIELD.finditer(rest):
        label, value = m.group("label").strip(), m.group("value").strip()
        if label == "calls(b,g,a)":
            parts = value.split()
            if len(parts) != 3 or not all(p.isdigit() for p in parts):
                raise ValueError(f"#calls(b,g,a) is not three counts: {value!r}")
            values["calls_begin"], values["calls_draft"], values["calls_accept"] = (int(p) for p in parts)
        elif label in _STAT_INTS:
            if not value.isdigit():
                raise ValueError(f"#{label} is not a count: {value!r}")
            values[_STAT_INTS[label]] = int(value)
        elif label == "mean acc len":
            try:
                values["mean_acc_len"] = float(value)
            except ValueError:
                raise ValueError(f"#mean acc len is not a number: {value!r}") from None
        elif label == "acc rate/pos":
            if not (value.startswith("(") and value.endswith(")")):
                raise ValueError("the #acc rate/pos list is cut off (no closing parenthesis)")
            try:
                rates = tuple(float(x) for x in value[1:-1].split(",") if x.strip())
            except ValueError:
                raise ValueError(f"#acc rate/pos holds something other than numbers: {value[:80]!r}") from None
            if any(not (0.0 <= r <= 1.0) for r in rates):
                raise ValueError(f"#acc rate/pos holds a rate outside 0..1: {value[:80]!r}")
            values["acc_rate_by_position"] = rates
    missing = [n for n in ("calls_accept", *_STAT_INTS.values()) if n not in values]
    if missing:
        raise ValueError(f"the line is cut off or malformed: no {', '.join(missing)}")
    if values["calls_accept"] > 0 and "acc_rate_by_position" not in values:
        raise ValueError("the line is cut off: no #acc rate/pos after its rounds")
    return DraftStatistics(implementation=implementation, **values)
