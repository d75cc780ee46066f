"""Read llama-bench's JSON (``-o json``): what one batch of n tokens costs, pooled over runs."""

from __future__ import annotations

import json
from dataclasses import dataclass, field

from llamaspec.llamacpp.parse import ParseError


@dataclass(frozen=True)
class BatchTimings:
    """What one batch of n tokens costs (llama-bench ``-p n -n 0 [-d D]``), in milliseconds.

    A verification round processes the draft plus one token in one batch; on CPUs its cost grows
    with the batch, which the paper's model (verification = one target step) leaves out.
    ``ms_by_tokens`` holds llama-bench's mean per size; ``samples_ms`` every repetition, for
    medians and for pooling several llama-bench runs. ``depth`` is the
    context depth (``-d``) the batches ran at."""

    ms_by_tokens: dict[int, float]
    samples_ms: dict[int, tuple[float, ...]] = field(default_factory=dict)
    depth: int = 0
    all_outputs: bool = False  # -embd 1: every token of the batch had its logits computed

    def ms(self, tokens: float) -> float:
        """Linear interpolation (and extrapolation from the last two points) over measured sizes."""
        sizes = sorted(self.ms_by_tokens)
        if not sizes:
            raise ParseError("no batch timings", hint="rerun the measurement")
        if len(sizes) == 1:
            return self.ms_by_tokens[sizes[0]] * tokens / sizes[0]
        lo = max([s for s in sizes if s <= tokens], default=sizes[0])
        hi = min([s for s in sizes if s >= tokens and s != lo], default=sizes[-1])
        if hi == lo:
            lo, hi = sizes[-2], sizes[-1]
        y0, y1 = self.ms_by_tokens[lo], self.ms_by_tokens[hi]
        return y0 + (y1 - y0) * (tokens - lo) / (hi - lo)

    @property
    def median_ms(self) -> dict[int, float]:
        """The median repetition per size (robust to a busy machine); the mean where no samples were kept."""
        import statistics

        return {n: statistics.median(self.samples_ms[n]) if self.samples_ms.get(n) else ms
                for n, ms in self.ms_by_tokens.items()}


def parse_bench_json(text: str) -> BatchTimings:
    """llama-bench ``-o json`` output: prompt-processing tests (n_gen 0) by batch size, at one depth."""
    try:
        records = json.loads(text[text.index("["):])
    except (ValueError, json.JSONDecodeError) as exc:
        raise ParseError("llama-bench printed no JSON result list", hint="run llama-bench with -o json yourself to see why") from exc
    pp = [r for r in records if isinstance(r, dict) and r.get("n_gen") == 0 and r.get("n_prompt") and r.get("avg_ns")]
    if not pp:
        raise ParseError("llama-bench's JSON has no prompt-processing results", hint="check its -p values")
    depths = {int(r.get("n_depth") or 0) for r in pp}
    if len(depths) > 1:
        raise ParseError(f"llama-bench's JSON mixes context depths {sorted(depths)}", hint="time one depth per run (-d D)")
    out = {int(r["n_prompt"]): float(r["avg_ns"]) / 1e6 for r in pp}
    samples = {int(r["n_prompt"]): tuple(float(x) / 1e6 for x in r.get("samples_ns") or ()) for r in pp}
    return BatchTimings(out, samples, depth=depths.pop(), all_outputs=all(bool(r.get("embeddings")) for r in pp))
