"""Models loaded once (llama-server) against a process per prompt (llama-speculative and
llama-completion), on the same prompts, settings and pair.

Prints, for each way, the total wall time (server starts and model loads included) and the
share of it spent outside generation (prompt processing plus decoding, from each engine's own
timings). Goal for the server: at most 15 % outside generation.

    .venv/bin/python benchmarks/server_overhead.py [--prompts llamaspec-mini] [--limit 8] [-n 64] [--draft 8]
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from dataclasses import replace
from pathlib import Path

from llamaspec import models, prompts
from llamaspec.backend import Measurement, ModelPath, ResolvedCase
from llamaspec.llamacpp.build import find
from llamaspec.llamacpp.runner import LlamaCppBackend
from llamaspec.llamacpp.server import ServerBackend
from llamaspec.settings import Settings


def generation_seconds(m: Measurement) -> float:
    """Prompt processing plus decoding, by the engine's own clock."""
    seconds = 0.0
    if m.n_prompt and m.encode_tps:
        seconds += m.n_prompt / m.encode_tps
    if m.n_predict and m.n_predict > 1 and m.decode_tps:
        seconds += (m.n_predict - 1) / m.decode_tps
    return seconds


def run(backend: object, cases: list[ResolvedCase], log_dir: Path) -> tuple[float, float, int]:
    t0 = time.perf_counter()
    gen = 0.0
    failed = 0
    for i, case in enumerate(cases):
        for mode in ("baseline", "speculative"):
            m = backend.measure(case, mode, log_dir / f"{i}-{mode}.log")  # type: ignore[attr-defined]
            gen += generation_seconds(m)
            failed += not m.ok
    close = getattr(backend, "close", None)
    if close:
        close()
    return time.perf_counter() - t0, gen, failed


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--prompts", default="llamaspec-mini")
    parser.add_argument("--limit", type=int, default=8)
    parser.add_argument("-n", "--n-predict", type=int, default=64)
    parser.add_argument("--draft", type=int, default=8)
    parser.add_argument("--threads", type=int, default=2)
    args = parser.parse_args()
    build = find()
    target, draft = models.resolve("smollm2-135m", "f32", build=build), models.resolve("smollm2-135m", "q4_1", build=build)
    settings = Settings(n_predict=args.n_predict, seed=20, temperature=0.0, draft_max=args.draft, threads=args.threads,
                        ctx_size=2048).with_defaults()
    # Raw prompts on both sides: llama-speculative and llama-completion do not apply chat templates.
    chosen = prompts.load(prompts.parse_source(args.prompts, format="raw", limit=args.limit, seed=0)).prompts
    base = ResolvedCase("server-overhead", "k", ModelPath("t", str(target.path)), ModelPath("d", str(draft.path)),
                        None, None, settings)
    cases = [replace(base, prompt=p.prompt, prompt_id=p.id, category=p.category, chat=False) for p in chosen]
    logs = Path(tempfile.mkdtemp(prefix="llamaspec-server-overhead-"))
    results = {}
    for name, backend in (("server (loaded once)", ServerBackend(build, servers_dir=logs / "servers")),
                          ("process per prompt", LlamaCppBackend(build))):
        wall, gen, failed = run(backend, cases, logs / name.split()[0])
        results[name] = (wall, gen)
        print(f"  {name}: {wall:.1f} s wall, {gen:.1f} s generating, {failed} failed", file=sys.stderr)
    print(f"{len(cases)} prompts x (baseline + speculative), -n {args.n_predict}, draft {args.draft}, -t {args.threads}")
    for name, (wall, gen) in results.items():
        print(f"  {name:<22} total {wall:7.1f} s   outside generation {100 * (1 - gen / wall):5.1f} %")
    server_wall, server_gen = results["server (loaded once)"]
    proc_wall, _ = results["process per prompt"]
    share = 1 - server_gen / server_wall
    print(f"process-per-prompt / server wall time: {proc_wall / server_wall:.2f}x; server outside generation "
          f"{100 * share:.1f} % (goal <= 15 %: {'met' if share <= 0.15 else 'NOT met'})")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
