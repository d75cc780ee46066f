"""How noisy are speed measurements on this machine, and how many paired repeats does a speedup need?

For each thread count, runs the target alone (llama-completion) and the pair (llama-speculative)
back to back, the order alternating (ABBA), ``--repeats`` times, and prints:

- the baseline's run-to-run spread (median t/s, min-max, coefficient of variation) and the
  speculative run's;
- the paired speedup (speculative over the baseline run next to it): median and CV of the ratios;
- the half-width of the 95 % bootstrap interval of the median paired speedup reached with 3, 5
  and 10 paired repeats (``llamaspec.base.stats``; the median over every window of that many
  consecutive pairs, so one lucky window does not decide).

Speeds follow ``llamaspec.measure.contract.SPEED_DEFINITION``: tokens after the first over the time from the
first generated token to the last (llama-speculative: (N-1)/T of "decoded N tokens in T seconds";
llama-completion: eval runs / (eval time + sampling time)).

    PYTHONPATH=$PWD .venv/bin/python benchmarks/noise.py [--threads 1,2] [--repeats 10] [-n 128]
        [--draft-max 8] [--bin-dir DIR] [--target F32.gguf] [--draft Q4_1.gguf]

Defaults: the cached build of the pinned llama.cpp and the offline pair (SmolLM2-135M F32 target,
Q4_1 draft) under models/smollm2-135m/. The machine should be otherwise idle; say so if it was not.
"""

from __future__ import annotations

import argparse
import re
import statistics
import sys
import tempfile
from pathlib import Path

from llamaspec.base import paths, proc, stats
from llamaspec.base.errors import LlamaspecError
from llamaspec.llamacpp import parse

PROMPT = "# Quick-sort implementation in Python and sample usage:"
WINDOWS = (3, 5, 10)


def completion_tps(c: parse.CompletionStats) -> float:
    t = c.timings
    if not t.eval_runs or t.eval_ms is None:
        raise LlamaspecError("llama-completion printed no eval timing", hint="read its stderr")
    return t.eval_runs / ((t.eval_ms + (t.sampling_total_ms or 0.0)) / 1000.0)


def speculative_tps(s: parse.SpeculativeStats) -> float:
    if s.n_decoded < 2 or s.decode_s <= 0:
        raise LlamaspecError("llama-speculative decoded too little to time", hint="raise -n")
    return (s.n_decoded - 1) / s.decode_s


def window_half_widths(ratios: list[float], n: int) -> float | None:
    """Median over windows of n consecutive paired ratios of the 95 % interval's relative half-width."""
    if len(ratios) < n:
        return None
    widths = []
    for i in range(len(ratios) - n + 1):
        s = stats.spread(ratios[i:i + n])
        assert s is not None
        widths.append(s.half_width)
    return statistics.median(widths)


# proc.run's log interleaves the two streams line by line, so a stderr log line can land after the
# generated text's last, unterminated stdout line; put such a line back on its own.
_GLUED = re.compile(r"(?<=[^\n])(?=\d+\.\d{2}\.\d{3}\.\d{3} [IWED] )")


def _log(path: Path) -> str:
    return _GLUED.sub("\n", path.read_text(errors="replace"))


def from_logs(log_dir: Path, threads: int) -> tuple[list[float], list[float], list[float]]:
    """The speeds of an earlier run, read back from the logs it kept (``--logs``); a pair cut short
    (interrupted run) ends the series."""
    base, spec = [], []
    r = 0
    while (log_dir / f"t{threads}-r{r}-baseline.log").is_file() and (log_dir / f"t{threads}-r{r}-speculative.log").is_file():
        try:
            b = completion_tps(parse.parse_completion(_log(log_dir / f"t{threads}-r{r}-baseline.log")))
            s = speculative_tps(parse.parse_speculative(_log(log_dir / f"t{threads}-r{r}-speculative.log")))
        except LlamaspecError as exc:
            print(f"  -t {threads} repeat {r + 1}: {exc.message}; stopping there", file=sys.stderr)
            break
        base.append(b)
        spec.append(s)
        r += 1
    return base, spec, [s / b for s, b in zip(spec, base, strict=True)]


def measure(bin_dir: Path, target: Path, draft: Path, threads: int, n: int, draft_max: int, repeats: int,
            log_dir: Path) -> tuple[list[float], list[float], list[float]]:
    common = ["-p", PROMPT, "-e", "-s", "20", "--temp", "0", "-t", str(threads), "-c", "4096", "-n", str(n)]
    base_argv = [str(bin_dir / "llama-completion"), "-m", str(target), *common, "-no-cnv"]
    spec_argv = [str(bin_dir / "llama-speculative"), "-m", str(target), "-md", str(draft), *common,
                 "--spec-type", "draft-simple", "--spec-draft-n-max", str(draft_max)]
    base, spec = [], []
    for r in range(repeats):
        order = [("baseline", base_argv), ("speculative", spec_argv)]
        if r % 2:
            order.reverse()
        for mode, argv in order:
            done = proc.run(argv, log_path=log_dir / f"t{threads}-r{r}-{mode}.log", timeout=900, what=Path(argv[0]).name)
            if mode == "baseline":
                base.append(completion_tps(parse.parse_completion(done.stdout, done.stderr)))
            else:
                spec.append(speculative_tps(parse.parse_speculative(done.stdout, done.stderr)))
        print(f"  -t {threads} repeat {r + 1}/{repeats}: baseline {base[-1]:.1f} t/s, speculative {spec[-1]:.1f} t/s, "
              f"ratio {spec[-1] / base[-1]:.3f}", file=sys.stderr, flush=True)
    return base, spec, [s / b for s, b in zip(spec, base, strict=True)]


def default_bin_dir() -> Path:
    from llamaspec.llamacpp import build

    return Path(build.find("cpu").bin_dir)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--bin-dir", type=Path, default=None, help="llama.cpp binaries (default: the cached pinned build)")
    parser.add_argument("--target", type=Path, default=None, help="default: models/smollm2-135m/ggml-model-f32.gguf")
    parser.add_argument("--draft", type=Path, default=None, help="default: models/smollm2-135m/ggml-model-q4_1.gguf")
    parser.add_argument("-n", "--n-predict", type=int, default=128)
    parser.add_argument("--repeats", type=int, default=10, help="paired repeats per thread count (>= 10 for every window)")
    parser.add_argument("--threads", default="1,2", help="thread counts to compare, comma-separated")
    parser.add_argument("--draft-max", type=int, default=8)
    parser.add_argument("--logs", type=Path, default=None, help="tabulate an earlier run from the logs it kept instead of running")
    args = parser.parse_args()
    threads = [int(t) for t in args.threads.split(",")]
    try:
        if args.logs:
            log_dir = args.logs
            print(f"noise: from the logs in {log_dir}")
            table({t: from_logs(log_dir, t) for t in threads if from_logs(log_dir, t)[0]})
            print(NOTE)
            return 0
        bin_dir = args.bin_dir or default_bin_dir()
        folder = paths.models_dir() / "smollm2-135m"
        target = args.target or folder / "ggml-model-f32.gguf"
        draft = args.draft or folder / "ggml-model-q4_1.gguf"
        for p in (target, draft):
            if not p.is_file():
                raise LlamaspecError(f"model not found: {p}", hint="run `llamaspec models fetch smollm2-135m`, or pass --target/--draft")
        log_dir = Path(tempfile.mkdtemp(prefix="llamaspec-noise-"))
        print(f"noise: {target.name} (+ {draft.name} at draft {args.draft_max}), -n {args.n_predict}, "
              f"{args.repeats} paired repeats (ABBA) per thread count; logs in {log_dir}", flush=True)
        for t in threads:  # one row as soon as its thread count is done: a slow one does not hide the others
            table({t: measure(bin_dir, target, draft, t, args.n_predict, args.draft_max, args.repeats, log_dir)},
                  header=t == threads[0])
    except LlamaspecError as exc:
        print(f"Error: {exc.message}" + (f"\nHint: {exc.hint}" if exc.hint else ""), file=sys.stderr)
        return 1
    print(NOTE)
    return 0


NOTE = ("±95% n=N: half-width of the bootstrap 95 % interval of the median paired speedup with N pairs "
        "(median over all windows of N consecutive pairs), relative to the median")


def table(results: dict[int, tuple[list[float], list[float], list[float]]], header: bool = True) -> None:
    if header:
        print(f"{'threads':>7} {'baseline t/s':>22} {'CV':>6} {'speculative t/s':>22} {'CV':>6} {'paired speedup':>14} {'CV':>6}"
              + "".join(f" {f'±95% n={n}':>10}" for n in WINDOWS))
    for t, (base, spec, ratios) in results.items():
        b, s, r = stats.spread(base), stats.spread(spec), stats.spread(ratios)
        assert b is not None and s is not None and r is not None

        def pct(x: float | None) -> str:
            return stats.percent_text(x, 1)

        row = (f"{t:>7} {f'{b.median:.1f} [{b.min:.1f}-{b.max:.1f}]':>22} {pct(b.cv):>6} "
               f"{f'{s.median:.1f} [{s.min:.1f}-{s.max:.1f}]':>22} {pct(s.cv):>6} {f'{r.median:.3f}x':>14} {pct(r.cv):>6}")
        row += "".join(f" {pct(window_half_widths(ratios, n)):>10}" for n in WINDOWS)
        print(row, flush=True)


if __name__ == "__main__":
    raise SystemExit(main())
