"""How much does llamaspec add on top of running llama.cpp yourself?

Runs `llamaspec run EXPERIMENT` and then, directly, the very command lines it ran (read back from
the results store), alternating, and prints the orchestrator's overhead as a ratio and in
milliseconds (medians of paired differences). Target: under 2 % and under 150 ms.

    .venv/bin/python benchmarks/overhead.py [--experiment smollm2-quicksort] [--repeats 5] [-n 64]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time

from llamaspec.base.stats import percent_text


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--experiment", default="smollm2-quicksort")
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("-n", "--n-predict", type=int, default=64)
    args = parser.parse_args()
    llamaspec = [sys.executable, "-m", "llamaspec"]
    env = {**os.environ, "LLAMASPEC_DATA": tempfile.mkdtemp(prefix="llamaspec-bench-")}
    run_cmd = [*llamaspec, "-q", "run", args.experiment, "-n", str(args.n_predict), "--json"]
    subprocess.run(run_cmd, env=env, check=True, capture_output=True)  # warm: models, page cache
    orchestrated, direct, outside = [], [], []
    argvs: list[list[str]] = []

    def run_direct() -> None:
        t0 = time.perf_counter()
        for argv in argvs:
            subprocess.run(argv, check=True, capture_output=True)
        direct.append(time.perf_counter() - t0)

    for i in range(args.repeats):
        if argvs and i % 2:  # alternate the order, so warm caches favour neither side
            run_direct()
        t0 = time.perf_counter()
        out = subprocess.run(run_cmd, env=env, check=True, capture_output=True, text=True).stdout
        orchestrated.append(time.perf_counter() - t0)
        run_id = json.loads(out)[0]["run_id"]
        shown = subprocess.run([*llamaspec, "results", "show", str(run_id)], env=env, check=True, capture_output=True, text=True)
        measurements = json.loads(shown.stdout)["measurements"]
        argvs = [m["argv"] for m in measurements]
        outside.append(orchestrated[-1] - sum(m["wall_seconds"] for m in measurements))
        if not i % 2:
            run_direct()
        print(f"  repeat {i + 1}: llamaspec {orchestrated[-1]:.3f} s (of which outside llama.cpp {outside[-1] * 1000:.0f} ms), "
              f"direct {direct[-1]:.3f} s", file=sys.stderr)
    diffs = [a - b for a, b in zip(orchestrated, direct, strict=True)]
    overhead_ms = statistics.median(diffs) * 1000
    ratio = statistics.median(a / b for a, b in zip(orchestrated, direct, strict=True)) - 1
    print(f"experiment {args.experiment}, -n {args.n_predict}, {args.repeats} paired repeats")
    print(f"llamaspec run: median {statistics.median(orchestrated):.3f} s; the same commands directly: "
          f"median {statistics.median(direct):.3f} s")
    print(f"time llamaspec spends outside the llama.cpp processes (start-up, models, store): "
          f"median {statistics.median(outside) * 1000:.0f} ms")
    print(f"overhead: {overhead_ms:.0f} ms per run ({percent_text(ratio, 1)}), target < 150 ms and < 2 %: "
          f"{'met' if overhead_ms < 150 and ratio < 0.02 else 'NOT met'}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
