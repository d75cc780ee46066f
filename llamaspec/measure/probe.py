"""The divergence probe: where a speculative output first leaves the target alone's, and whether
the target alone saw a greedy near-tie there (its top two candidates within :data:`NEAR_TIE`).

Batched verification is not bit-identical to one-token decoding: float rounding moves logits by
about 1e-5 relative, enough to flip a greedy choice between two near-equal tokens and no other. A
difference at such a place is the engine's arithmetic, not the draft's doing; anywhere else it is a
wrong output. Asked of engines whose capabilities say ``top_tokens`` (llama-server's ``n_probs``).
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path

from llamaspec.base.errors import LlamaspecError
from llamaspec.measure.contract import Engine, Measurement, ResolvedCase
from llamaspec.measure.summary import Lossless, compare_outputs

log = logging.getLogger(__name__)

# The target's top two count as a near-tie when their probabilities are this close (absolute).
NEAR_TIE = 0.02


def near_tie(backend: Engine, case: ResolvedCase, measured: Sequence[Measurement], lossless: Lossless,
             log_path: Path) -> Lossless:
    """``lossless`` as it stands (the probe could not be asked), ``probed`` (the target's top two
    there are not the two outputs' tokens within :data:`NEAR_TIE`: a wrong output), or (a
    token-level difference the probe shows to be a greedy near-tie) with ``near_tie`` set to the
    target's top-two gap there and the reason saying so.

    The outputs probed are the first speculative run whose tokens differ from a baseline's (greedy:
    every baseline of a prompt says the same), on that baseline's own path."""
    if lossless.verdict != "differs" or lossless.unit != "tokens" or not backend.capabilities.top_tokens:
        return lossless
    bases = [m for m in measured if m.mode == "baseline" and m.ok and m.tokens]
    if not bases:
        return lossless
    base = bases[0]
    spec = next((m for m in measured if m.mode == "speculative" and m.ok and m.tokens is not None
                 and compare_outputs(m, base).verdict == "differs"), None)
    at = compare_outputs(spec, base).first_difference if spec is not None else None
    if spec is None or spec.tokens is None or base.tokens is None or at is None or at >= min(len(spec.tokens), len(base.tokens)):
        return lossless
    try:
        top = backend.top_tokens(case, at, base.tokens[:at], log_path)
    except LlamaspecError as exc:
        log.warning("%s: could not probe the divergence at token %d: %s", case.prompt_id or case.case, at, exc.message)
        return lossless
    if not top or len(top) < 2:
        return lossless
    if {t["id"] for t in top[:2]} != {base.tokens[at], spec.tokens[at]}:
        return replace(lossless, probed=True)
    p1, p2 = top[0]["p"], top[1]["p"]
    if p1 - p2 > NEAR_TIE:
        return replace(lossless, probed=True)
    return replace(lossless, near_tie=p1 - p2, probed=True,
                   reason=f"a greedy near-tie at token {at}: the target alone's top two there are p {p1:.4f} and "
                          f"{p2:.4f}, the two outputs' tokens")


__all__ = ["NEAR_TIE", "near_tie"]
