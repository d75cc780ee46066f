"""Read llama-server's ``/metrics`` (Prometheus text): one series, the per-position acceptance, the
counters' change across a request, and a request's acceptance by position from them."""

from __future__ import annotations

import contextlib
import math
import re

from llamaspec.measure.contract import Positions
from llamaspec.theory.drafted import by_position

_METRIC_LINE = re.compile(r'^llamacpp:(?P<name>\w+)(?:\{(?P<labels>[^}]*)\})?\s+(?P<value>\S+)\s*$')
PER_POSITION = "spec_decode_num_accepted_tokens_per_pos_total"


def metric_value(text: str, name: str) -> float | None:
    """One unlabelled ``llamacpp:`` series from ``/metrics`` text, None when absent or unreadable."""
    for line in text.splitlines():
        m = _METRIC_LINE.match(line.strip())
        if m and m.group("name") == name and not m.group("labels"):
            with contextlib.suppress(ValueError):
                return float(m.group("value"))
    return None


def accepted_per_position(text: str) -> tuple[int, ...] | None:
    """``llamacpp:spec_decode_num_accepted_tokens_per_pos_total{position="i"}`` (i from 0: draft
    position i + 1), as a tuple indexed by position; None when the series is absent (a server from
    before it, or one that has verified no draft yet) or a position is missing or unreadable.

    What it counts (tools/server/server-context.cpp, pinned 0c1e570): each verification step adds
    one at positions 1..n where n tokens of its draft were accepted, so position i's count is the
    steps accepted through i; the vector is as long as the longest draft the server may make
    (``common_speculative_n_max``) and summed over finished requests. Its denominator is
    ``spec_decode_num_drafts_total`` (verification steps), as in the server's own log line."""
    found: dict[int, int] = {}
    for line in text.splitlines():
        m = _METRIC_LINE.match(line.strip())
        if not m or m.group("name") != PER_POSITION:
            continue
        label = re.search(r'position="(\d+)"', m.group("labels") or "")
        try:
            value = float(m.group("value"))
        except ValueError:
            return None
        if label is None or not math.isfinite(value) or value < 0 or value != int(value):
            return None
        found[int(label.group(1))] = int(value)
    if not found or sorted(found) != list(range(len(found))):
        return None
    return tuple(found[i] for i in range(len(found)))


def metrics_change(before: str | None, after: str | None) -> dict[str, float]:
    """How each unlabelled counter of ``/metrics`` grew between two readings (both present only)."""
    if before is None or after is None:
        return {}
    out: dict[str, float] = {}
    for name in ("spec_decode_num_drafts_total", "spec_decode_num_draft_tokens_total",
                 "spec_decode_num_accepted_tokens_total"):
        a, b = metric_value(before, name), metric_value(after, name)
        if a is not None and b is not None:
            out[name] = b - a
    return out


def positions_from_metrics(before: str, after: str, draft_len: int | None, *, p_min_zero: bool = False,
                           ran_out: bool = False) -> Positions:
    """One request's acceptance by position: the change of /metrics' per-position series across it
    (one slot, one request at a time), with drafted counts by ``theory.drafted.by_position``'s rule from the
    change of verification steps and drafted tokens. The server cuts a draft to what is left of the
    context and of n_predict, each shrinking by the tokens a step emits, as llama-speculative-simple
    does: with p-min 0 (``p_min_zero``) its short drafts are the last ones, each shorter than the one
    before; ``ran_out``: the request stopped at its n_predict (``stop_type`` "limit"), so the last of
    them left nothing to draft after it. A labelled gap where the server has no per-position
    series, or where the counts contradict each other."""
    change = metrics_change(before, after)
    steps = change.get("spec_decode_num_drafts_total")
    tokens = change.get("spec_decode_num_draft_tokens_total")
    if steps is None or tokens is None:
        return Positions(note="/metrics has no speculative counters (a server without --metrics?)")
    if steps == 0:
        return Positions(note="nothing was drafted")
    after_counts = accepted_per_position(after)
    if after_counts is None:
        return Positions(note=f"/metrics has no readable {PER_POSITION} series (a llama-server from before it)")
    before_counts = accepted_per_position(before) or ()
    if len(before_counts) > len(after_counts):
        return Positions(note="/metrics' per-position series got shorter during the request (a restarted server?)")
    padded = before_counts + (0,) * (len(after_counts) - len(before_counts))
    counts = tuple(a - b for a, b in zip(after_counts, padded, strict=True))
    if any(c < 0 for c in counts):
        return Positions(note="/metrics' per-position counts went down during the request (a restarted server?)")
    accepted = change.get("spec_decode_num_accepted_tokens_total")
    if accepted is not None and sum(counts) != accepted:
        return Positions(note=f"/metrics' per-position counts sum to {sum(counts)}, its accepted tokens to {accepted:.0f}")
    while counts and counts[-1] == 0:  # the series is as long as the longest draft allowed: trailing zeros say nothing
        counts = counts[:-1]
    return by_position(counts, int(steps), int(tokens), draft_len or 0, shrinking=p_min_zero, ran_out=ran_out)
