"""Does a study's 64-token generation answer what a longer one would? Acceptance by draft position
at -n 64 against -n 256, per prompt of the built-in workload (``--limit N``: its first N).

A study of -m/-md models generates 64 tokens a prompt unless told otherwise (llamaspec.studies.adhoc
WORKLOAD_DEFAULTS), so that the built-in workload's answer fits in minutes. What the speedup of a
setup depends on that the length could change is what the draft gets accepted: the rounds'
acceptance by draft position (the cost of a step depends on the context's depth, which 64 or 256
tokens after a short prompt moves little). Greedy decoding makes the counts exact and the same
whatever the machine's load, so this compares them directly: for each prompt, one
llama-speculative-simple run at draft ``--draft`` (-lv 4, its statistics line) at each length,
and from each curve the tokens per round at draft 1..K; then the n-gram modes' drafted and
accepted tokens, which the length can move more (they copy from what was generated).

    .venv/bin/python benchmarks/length.py [--draft 16] [--lengths 64,256] [-t 1] [--limit 12]
"""

from __future__ import annotations

import argparse
import math
import os
import subprocess
import tempfile
import time
from pathlib import Path


def main() -> int:
    models = Path(os.environ.get("LLAMASPEC_MODELS", "models")) / "smollm2-135m"
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--target", type=Path, default=models / "ggml-model-f32.gguf")
    ap.add_argument("--draft-model", type=Path, default=models / "ggml-model-q4_1.gguf")
    ap.add_argument("--draft", type=int, default=16, help="draft length of the runs whose positions are compared")
    ap.add_argument("--lengths", default="64,256", help="the generation lengths compared (the first is the study's)")
    ap.add_argument("--modes", default="ngram-simple,ngram-cache", help="n-gram modes whose counts are compared too")
    ap.add_argument("-t", "--threads", type=int, default=1)
    ap.add_argument("--limit", type=int, default=None, help="the built-in workload's first N prompts (default: all)")
    a = ap.parse_args()

    from llamaspec.base.stats import percent_text
    from llamaspec.llamacpp.runner import open_engine
    from llamaspec.measure.contract import EngineOptions, ModelPath, ResolvedCase
    from llamaspec.measure.settings import Settings
    from llamaspec.studies import adhoc
    from llamaspec.studies import prompts as loader
    from llamaspec.theory.positions import PositionCurve

    lengths = [int(x) for x in a.lengths.split(",")]
    prompts = loader.select(list(adhoc.builtin_workload().prompts), a.limit, None)
    engine = open_engine(EngineOptions())
    target = ModelPath("target", str(a.target.resolve()))
    draft = ModelPath("draft", str(a.draft_model.resolve()))
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True).stdout.strip()
    print(f"{time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}, llamaspec {commit}, {engine.build.label}, "
          f"{a.target.name} + {a.draft_model.name}, llama-speculative-simple, -t {a.threads}, draft {a.draft}")
    print(f"{'prompt':<22} {'n':>4} {'accept':>7} {'rounds':>6}  tokens per round at draft 1, 2, 4, 8, 16 "
          "(from the curve)")
    worst = 0.0
    curves: dict[str, dict[int, PositionCurve]] = {}
    with tempfile.TemporaryDirectory() as tmp:
        for p in prompts:
            per: dict[int, PositionCurve] = {}
            for n in lengths:
                settings = Settings(n_predict=n, threads=a.threads, draft_max=a.draft, program="speculative-simple",
                                    ctx_size=2048).with_defaults()
                case = ResolvedCase("length", p.id, target, draft, p.prompt, None, settings, chat=p.chat,
                                    history=p.history)
                m = engine.measure(case, "speculative", Path(tmp) / f"{p.id}-{n}.log")
                if not m.ok or not m.drafted_by_position:
                    print(f"{p.id:<22} {n:>4} failed: {m.error or 'no acceptance by position'}")
                    continue
                curve = PositionCurve(m.drafted_by_position, m.accepted_by_position or ())
                per[n] = curve
                curves.setdefault(p.id, {})[n] = curve
                tail = curve.through[-1] if curve.through else 0.0
                tpr = [curve.tokens_per_round(k, tail) for k in (1, 2, 4, 8, 16)]
                print(f"{p.id:<22} {n:>4} {percent_text(m.acceptance or 0, 1):>7} {m.rounds or 0:>6}  "
                      + ", ".join(f"{v:.2f}" for v in tpr))
            if len(per) == len(lengths):
                base, *others = (per[n] for n in lengths)
                for other in others:
                    gaps = [abs(other.tokens_per_round(k, other.through[-1]) / base.tokens_per_round(k, base.through[-1]) - 1)
                            for k in range(1, a.draft + 1)]
                    worst = max(worst, max(gaps))
                    print(f"{'':<22} tokens per round, {lengths[0]} against {lengths[lengths.index(lengths[0]) + 1]} "
                          f"tokens: at most {percent_text(max(gaps), 1)} apart over draft 1..{a.draft}")
        print(f"largest gap over the prompts: {percent_text(worst, 1)}")
        # What the decision sees: the workload's speedup at each length (the geometric mean over the
        # prompts) under the simplest cost model, a round of k costing 1 + k c target steps.
        both = [p.id for p in prompts if all(n in curves.get(p.id, {}) for n in lengths)]
        print(f"\nthe workload's predicted speedup, tokens per round / (1 + k c), geometric mean over {len(both)} prompts:")
        for c in (0.05, 0.2, 0.45, 0.6):
            line = []
            for n in lengths:
                def at(k: int, n: int = n, c: float = c) -> float:
                    logs = [math.log(curves[q][n].tokens_per_round(k, curves[q][n].through[-1]) / (1 + k * c)) for q in both]
                    return math.exp(sum(logs) / len(logs))
                best = max(range(1, a.draft + 1), key=at)
                line.append(f"-n {n}: best draft {best} {at(best):.2f}x, draft 8 {at(8):.2f}x")
            print(f"  c = {c:.2f}: " + "; ".join(line))
        modes = [m for m in a.modes.split(",") if m]
        if modes:
            print(f"\n{'n-gram mode':<14} {'prompt':<22} " + " ".join(f"{f'drafted/accepted at {n}':>24}" for n in lengths))
        for mode in modes:
            for p in prompts:
                cells = []
                for n in lengths:
                    settings = Settings(n_predict=n, threads=a.threads, program="speculative-simple", spec_type=mode,
                                        ctx_size=2048).with_defaults()
                    case = ResolvedCase("length", p.id, target, None, p.prompt, None, settings, chat=p.chat,
                                        history=p.history)
                    try:
                        m = engine.measure(case, "speculative", Path(tmp) / f"{p.id}-{mode}-{n}.log")
                    except Exception as exc:  # a build without the mode: say so and go on
                        cells.append(f"{type(exc).__name__}")
                        continue
                    cells.append(f"{m.n_drafted}/{m.n_accept} ({percent_text((m.n_accept or 0) / max(m.n_predict or 1, 1))} of tokens)")
                print(f"{mode:<14} {p.id:<22} " + " ".join(f"{c:>24}" for c in cells))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
