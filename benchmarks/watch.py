"""Does ``llamaspec watch``'s prediction agree with a measurement of the same pair and prompts?

1. **The traffic.** A llama-server with the offline pair at draft ``--running`` (8), on the flags the
   llama-server engine measures with (``-t 1 -c 1024``, one slot, ``--metrics``), serves the built-in
   workload's prompts (``--limit N``: its first N, which cover every category from 6 on) through the
   model's chat template ``--passes`` times, ``-n 64``, greedy. A watch
   (``llamaspec.watch.Watcher``) reads it before and after: its window, and its prediction at every
   draft length with the costs it finds (a stored study of the same files, else llama-bench here).
2. **The measurement.** The llama-server engine measures the same prompts at the two draft lengths
   (``--drafts``, default 4 and 8) against the target alone, ``--pairs`` ABBA pairs each through the
   one pairs loop (``pairs.measure_pairs``), in passes (a pair at each length per pass). A pair's
   speedup is over the whole prompt mix, as the watch predicts it: the tokens after each request's
   first, summed over the prompts, over the generation time summed (SPEED_DEFINITION, pooled), the
   speculative side over the baseline of its pair; the median over pairs with its 95 % bootstrap
   interval (``estimators.POINT``).
3. **Printed**: at each length, predicted (with the window's interval) and measured, their ratio,
   and whether the prediction is within the model's stated error (``speedup_model.PREDICTION_ERROR``)
   of the measurement, or at least within the measurement's interval widened by that error.

Run on an otherwise quiet machine, with a data folder of its own (the costs are then timed here):

    LLAMASPEC_DATA=$(mktemp -d) .venv/bin/python benchmarks/watch.py [--pairs 5] [--passes 2] [--limit 12]
"""

from __future__ import annotations

import argparse
import dataclasses
import signal
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from llamaspec import models
from llamaspec.base import host, stats
from llamaspec.decision.speedup_model import PREDICTION_ERROR
from llamaspec.llamacpp import modeltools, server, server_process
from llamaspec.measure import chat, estimators, pairs
from llamaspec.measure.contract import EngineOptions, Measurement, ModelPath, ResolvedCase
from llamaspec.measure.settings import Settings
from llamaspec.studies import adhoc
from llamaspec.studies import prompts as loader
from llamaspec.watch import Watcher

N_PREDICT = 64


def cases(target: Any, draft: Any, k: int, limit: int | None) -> list[ResolvedCase]:
    """The built-in workload's prompts (its first ``limit``), as the workload serves them (chat)."""
    chosen = loader.select(list(adhoc.builtin_workload().prompts), limit, None)
    s = Settings(n_predict=N_PREDICT, threads=1, ctx_size=1024, seed=20, temperature=0.0, draft_max=k,
                 spec_type="draft").with_defaults()
    return [ResolvedCase("watch-benchmark", p.id, ModelPath("smollm2-135m:f32", str(target.path), target.sha256),
                         ModelPath("smollm2-135m:q4_1", str(draft.path), draft.sha256), p.prompt, None, s,
                         category=p.category, chat=p.chat, history=p.history)
            for p in chosen]


def mix(measured: list[Measurement], mode: str, pair: int) -> Measurement:
    """The prompts' measurements in one mode as one: tokens after each first, over the generation time."""
    failed = next((m for m in measured if not m.ok), None)
    if failed is not None:
        return dataclasses.replace(failed, pair=pair)
    tokens = sum((m.n_predict or 1) - 1 for m in measured)
    ms = sum(m.generation_ms or 0.0 for m in measured)
    return Measurement(mode=mode, ok=True, error=None, argv=(), exit_code=0, wall_seconds=sum(m.wall_seconds for m in measured),
                       peak_rss_bytes=None, n_predict=tokens + len(measured), decode_tps=1000.0 * tokens / ms, pair=pair,
                       tokens=tuple(t for m in measured for t in (m.tokens or ())))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--drafts", default="4,8", help="the two draft lengths measured (default 4,8)")
    ap.add_argument("--running", type=int, default=8, help="the watched server's draft length (default 8)")
    ap.add_argument("--pairs", type=int, default=5, help="ABBA pairs at each measured length (default 5)")
    ap.add_argument("--passes", type=int, default=2, help="times the traffic sends each prompt (default 2)")
    ap.add_argument("--cost", default=None, help="--cost C[,V] for the watch (default: stored, else timed here)")
    ap.add_argument("--limit", type=int, default=None, help="the built-in workload's first N prompts (default: all)")
    args = ap.parse_args()
    drafts = [int(x) for x in args.drafts.split(",")]
    engine = server.open_engine(EngineOptions(accel="cpu"))
    target = models.resolve("smollm2-135m", "f32", tools=modeltools.tools(engine.build))
    draft = models.resolve("smollm2-135m", "q4_1", tools=modeltools.tools(engine.build))
    started = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())
    try:
        # 1. the traffic, watched
        running = cases(target, draft, args.running, args.limit)
        argv = server.server_args(engine.caps, engine.build.accel, running[0], "speculative")
        with tempfile.TemporaryDirectory() as tmp:
            traffic = server_process.Server(engine.program, argv, Path(tmp) / "traffic.log", "traffic")
            traffic.start()
            try:
                watch = Watcher(f"http://127.0.0.1:{traffic.port}", span=None, cost=args.cost, refits=200)
                watch.start()
                rendered = [traffic.post("/apply-template", {"messages": chat.as_dicts([*c.history, ("user", c.prompt or "")])},
                                         timeout=60)["prompt"] for c in running]  # as the workload is served
                for _ in range(args.passes):
                    for text in rendered:
                        traffic.post("/completion", {"prompt": text, "n_predict": N_PREDICT, "temperature": 0,
                                                     "seed": 20, "cache_prompt": False}, timeout=600)
                reading = watch.step()
                watch.finish()
            finally:
                traffic.stop()
        print("\n".join(reading.lines()))
        f = reading.forecast
        if f is None:
            raise SystemExit("the watch made no prediction: " + "; ".join(reading.notes))
        # 2. the measurement, in passes
        by_k = {k: cases(target, draft, k, args.limit) for k in drafts}
        taken: dict[int, list[Measurement]] = {k: [] for k in drafts}
        each: list[Measurement] = []  # every request, for the machine's noise meanwhile
        with tempfile.TemporaryDirectory() as tmp:
            for p in range(args.pairs):
                for k in drafts:
                    def measure(mode: str, pair: int, k: int = k) -> Measurement:
                        got = [pairs.measure_one(engine, c, mode, pair, Path(tmp) / f"{k}-{pair}-{mode}-{c.case}.log")
                               for c in by_k[k]]
                        each.extend(got)
                        return mix(got, mode, pair)

                    got = pairs.measure_pairs(measure, at_least=1, start=p)
                    if got.failed:
                        raise SystemExit(f"draft {k}, pair {p}: {got.failed}")
                    taken[k] += got.measurements
    finally:
        engine.close()
    # 3. predicted against measured
    print(f"\nllamaspec watch against a measurement ({started}; llama.cpp {engine.build.commit}; {len(running)} prompts of the built-in workload, "
          f"-n {N_PREDICT}, -t 1; traffic {args.passes} passes at draft {args.running}; {args.pairs} pairs a length)")
    print(f"{'draft':>5}  {'predicted [window]':>20}  {'measured [95 %]':>20}  {'ratio':>6}  within the model's error "
          f"({stats.percent_text(PREDICTION_ERROR)})")
    for k in drafts:
        ratios = [r for pr in pairs.whole_pairs(taken[k]) if (r := pr.ratio) is not None]
        same = all(pr.baseline.tokens == pr.speculative.tokens for pr in pairs.whole_pairs(taken[k]))
        m = stats.spread(ratios)
        predicted = f.at(k) if k <= f.running else None
        if m is None or predicted is None:
            print(f"{k:>5}  nothing to compare")
            continue
        ratio = predicted.speedup / m.median
        within = abs(ratio - 1) <= PREDICTION_ERROR
        near = m.low * (1 - PREDICTION_ERROR) <= predicted.speedup <= m.high * (1 + PREDICTION_ERROR)
        print(f"{k:>5}  {predicted.speedup:>7.2f}x [{predicted.low:.2f}-{predicted.high:.2f}]  {m.median:>7.2f}x [{m.low:.2f}-{m.high:.2f}]  "
              f"{ratio:>6.3f}  {'yes' if within else 'no'}"
              + ("" if within else f" (within the measurement's interval and the error: {'yes' if near else 'no'})")
              + ("" if same else "  (some outputs differ with the draft)"))
    print(f"measured: {estimators.POINT}, of the prompt mix's decode speed; predicted: the window's interval "
          "(its counts only, the costs taken as exact)")
    noise = host.NoiseSample.combine([m.noise for m in each])
    if noise is not None:
        print(f"machine during the measurement: {noise.text()}")


if __name__ == "__main__":
    # SIGTERM (`timeout`, kill) unwinds like Ctrl-C, so that the finally blocks stop the servers
    # this started; a default SIGTERM would leave them running, serving nobody
    signal.signal(signal.SIGTERM, lambda _signum, _frame: sys.exit(143))
    main()
