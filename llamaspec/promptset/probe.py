"""The divergence probe: where a differing output first diverges, and whether the target alone
saw a greedy near-tie there (its top two candidates within ``NEAR_TIE``)."""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from llamaspec.base.errors import LlamaspecError
from llamaspec.measure.contract import Engine, Measurement, ResolvedCase
from llamaspec.measure.summary import compare_outputs

log = logging.getLogger(__name__)

# The target's top two candidates count as a near-tie when their probabilities are this close
# (absolute): float rounding of a batched verification against single-token decoding moves logits
# by ~1e-5 relative, enough to flip only such a pair. The label explains; the prompt still counts
# as not lossless.
NEAR_TIE = 0.02


@dataclass(frozen=True)
class Divergence:
    """The first differing token of a prompt's output, and the target alone's top two there
    (``top``: the engine's ``{"id", "p", ...}`` entries; None where not probed)."""

    position: int
    baseline_token: int | None
    speculative_token: int | None
    top: tuple[dict[str, Any], ...] | None = None
    gap: float | None = None  # p of the first candidate minus p of the second
    near_tie: bool | None = None  # gap <= NEAR_TIE and the two are the two outputs' tokens
    probe_error: str | None = None  # why the probe failed (then top is None)

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {"position": self.position, "baseline_token": self.baseline_token,
                               "speculative_token": self.speculative_token,
                               "top": list(self.top) if self.top is not None else None, "gap": self.gap,
                               "near_tie": self.near_tie}
        if self.probe_error is not None:
            out["probe_error"] = self.probe_error
        return out

    @classmethod
    def from_dict(cls, data: Mapping[str, Any] | None) -> Divergence | None:
        if not data:
            return None
        top = data.get("top")
        return cls(position=data["position"], baseline_token=data.get("baseline_token"),
                   speculative_token=data.get("speculative_token"), top=tuple(top) if top is not None else None,
                   gap=data.get("gap"), near_tie=data.get("near_tie"), probe_error=data.get("probe_error"))


def divergence(backend: Engine, case: ResolvedCase, measured: Sequence[Measurement], log_path: Path) -> Divergence | None:
    """Where a differing output first diverges, and whether the target alone saw a near-tie there.

    Asks the engine (``top_tokens``, where its capabilities say it has it) for the target's two most
    probable next tokens at the divergence position, on the baseline's own path. The outputs
    compared are the first whole pair's (``pairs.whole_pairs``) whose outputs differ, as the
    lossless verdict compared them."""
    from llamaspec.measure.pairs import whole_pairs

    found = next((p for p in whole_pairs(measured) if p.baseline.tokens and p.speculative.tokens is not None
                  and compare_outputs(p.speculative, p.baseline).verdict == "differs"), None)
    if found is None:
        return None
    base, spec = found.baseline, found.speculative
    if base.tokens is None or spec.tokens is None:
        return None
    at = compare_outputs(spec, base).first_difference
    if at is None:
        return None
    out = Divergence(position=at, baseline_token=base.tokens[at] if at < len(base.tokens) else None,
                     speculative_token=spec.tokens[at] if at < len(spec.tokens) else None)
    if not backend.capabilities.top_tokens or at >= len(base.tokens):
        return out
    try:
        top = backend.top_tokens(case, at, base.tokens[:at], log_path)
    except LlamaspecError as exc:
        log.warning("%s: could not probe the divergence at token %d: %s", case.prompt_id, at, exc.message)
        return replace(out, probe_error=exc.message)
    if top is None or len(top) < 2:
        return out
    pair = {out.baseline_token, out.speculative_token}
    gap = top[0]["p"] - top[1]["p"]
    return replace(out, top=tuple(top[:2]), gap=gap, near_tie=gap <= NEAR_TIE and {t["id"] for t in top[:2]} == pair)


def divergence_text(d: Divergence | None, first_difference: int | None = None) -> str:
    """``differs at token 28: near-tie p 0.2704 vs 0.2704 (gap 7.7e-05)`` (or what is known)."""
    if not d:
        return f"differs at token {first_difference}" if first_difference is not None else "differs"
    head = f"differs at token {d.position}"
    if not d.top:
        return head + (f" (top-2 not probed: {d.probe_error})" if d.probe_error else "")
    p1, p2 = d.top[0]["p"], d.top[1]["p"]
    if d.near_tie:
        return f"{head}: near-tie p {p1:.4f} vs {p2:.4f} (gap {p1 - p2:.1e})"
    return f"{head}: not a near-tie (target's top two p {p1:.4f} vs {p2:.4f})"
