"""Models loaded once (llama-server) against a process per prompt (llama-speculative and
llama-completion), on the same prompts, settings and pair.

Prints, for each way, the total wall time (server starts and model loads included) and the
share of it spent outside generation (prompt processing plus decoding, from each engine's own
timings), and for the server where that share went: the one-time server starts (both servers
load side by side), time inside requests but outside the engine's timings, and the client side.
Goal for the server: at most 15 % outside generation.

    .venv/bin/python benchmarks/server_overhead.py [--prompts llamaspec-mini] [--limit 8] [-n 64] [--draft 8]
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from dataclasses import dataclass, replace
from pathlib import Path

from llamaspec import models
from llamaspec.base.stats import percent_text
from llamaspec.llamacpp import modeltools
from llamaspec.llamacpp.build import find
from llamaspec.llamacpp.runner import LlamaCppEngine
from llamaspec.llamacpp.server import ServerEngine
from llamaspec.measure.contract import Measurement, ModelPath, ResolvedCase
from llamaspec.measure.settings import Settings
from llamaspec.studies import prompts


def generation_seconds(m: Measurement) -> float:
    """Prompt processing plus decoding, by the engine's own clock."""
    seconds = 0.0
    if m.n_prompt and m.encode_tps:
        seconds += m.n_prompt / m.encode_tps
    if m.n_predict and m.n_predict > 1 and m.decode_tps:
        seconds += (m.n_predict - 1) / m.decode_tps
    return seconds


@dataclass
class Tally:
    wall: float = 0.0  # the whole run, server starts included
    generation: float = 0.0  # prompt processing plus decoding, by the engine's clock
    requests: float = 0.0  # wall time of the measurements themselves (HTTP round trips, or processes)
    starting: float = 0.0  # wall time spent starting servers before the first request
    failed: int = 0


def run(backend: object, cases: list[ResolvedCase], log_dir: Path) -> Tally:
    """Every prompt, baseline then speculative, the way a prompt-set run drives the backend
    (servers started side by side before the first request where the backend can)."""
    tally = Tally()
    t0 = time.perf_counter()
    prepare = getattr(backend, "prepare", None)
    if prepare is not None:
        prepare(cases[0])
        tally.starting = time.perf_counter() - t0
    for i, case in enumerate(cases):
        for mode in ("baseline", "speculative"):
            m = backend.measure(case, mode, log_dir / f"{i}-{mode}.log")  # type: ignore[attr-defined]
            tally.generation += generation_seconds(m)
            tally.requests += m.wall_seconds
            tally.failed += not m.ok
    close = getattr(backend, "close", None)
    if close:
        close()
    tally.wall = time.perf_counter() - t0
    return tally


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--prompts", default="llamaspec-mini")
    parser.add_argument("--limit", type=int, default=8)
    parser.add_argument("-n", "--n-predict", type=int, default=64)
    parser.add_argument("--draft", type=int, default=8)
    parser.add_argument("--threads", type=int, default=2)
    args = parser.parse_args()
    build = find()
    tools = modeltools.tools(build)
    target, draft = models.resolve("smollm2-135m", "f32", tools=tools), models.resolve("smollm2-135m", "q4_1", tools=tools)
    settings = Settings(n_predict=args.n_predict, seed=20, temperature=0.0, draft_max=args.draft, threads=args.threads,
                        ctx_size=2048).with_defaults()
    # Raw prompts on both sides: llama-speculative and llama-completion do not apply chat templates.
    chosen = prompts.load(prompts.parse_source(args.prompts, format="raw", limit=args.limit, seed=0)).prompts
    base = ResolvedCase("server-overhead", "k", ModelPath("t", str(target.path)), ModelPath("d", str(draft.path)),
                        None, None, settings)
    cases = [replace(base, prompt=p.prompt, prompt_id=p.id, category=p.category, chat=False) for p in chosen]
    logs = Path(tempfile.mkdtemp(prefix="llamaspec-server-overhead-"))
    results: dict[str, Tally] = {}
    server_backend = ServerEngine(build, servers_dir=logs / "servers")
    for name, backend in (("server (loaded once)", server_backend), ("process per prompt", LlamaCppEngine(build))):
        tally = run(backend, cases, logs / name.split()[0])
        results[name] = tally
        print(f"  {name}: {tally.wall:.1f} s wall, {tally.generation:.1f} s generating, {tally.failed} failed",
              file=sys.stderr)
    print(f"{len(cases)} prompts x (baseline + speculative), -n {args.n_predict}, draft {args.draft}, -t {args.threads}")
    for name, t in results.items():
        print(f"  {name:<22} total {t.wall:7.1f} s   outside generation {percent_text(1 - t.generation / t.wall, 1):>6}")
    server, per_process = results["server (loaded once)"], results["process per prompt"]
    share = 1 - server.generation / server.wall
    # Where the server's time outside generation went (all of it is in the share above).
    client = server.wall - server.starting - server.requests
    print(f"  server, outside generation: starting the servers {server.starting:.1f} s, "
          f"inside requests but outside the engine's timings {server.requests - server.generation:.2f} s, "
          f"client side (polls, logs, stopping) {client:.2f} s")
    print(f"process-per-prompt / server wall time: {per_process.wall / server.wall:.2f}x; server outside generation "
          f"{percent_text(share, 1)} (goal <= 15 %: {'met' if share <= 0.15 else 'NOT met'}); the server starts are paid once "
          f"per run, so the share falls with more prompts (--limit) and longer outputs (-n)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
