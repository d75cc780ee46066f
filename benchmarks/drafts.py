"""How long does ``llamaspec models drafts`` take over many real GGUF files?

Makes ``--count`` hard links to one real draft file (SmolLM2-135M Q4_1 by default: 49,152 tokens
and 48,900 merges in its header, the parts that cost) in a temporary folder (copies where the
temporary folder is on another file system), then judges them all against the target twice: first with no remembered headers (every
header parsed), then again (headers remembered per path, size and modification time). Hard
links are separate paths to one file, so each is read and judged like a file of its own, with
the file in the page cache (as on a second look; a cold disk adds its own read time). CPU time
is shown beside wall time: on a busy machine the wall time is the CPU time stretched by the load.

    .venv/bin/python benchmarks/drafts.py [--target T.gguf] [--draft D.gguf] [--count 200]
"""

from __future__ import annotations

import argparse
import os
import platform
import shutil
import subprocess
import tempfile
import time
from pathlib import Path


def main() -> int:
    models = Path(os.environ.get("LLAMASPEC_MODELS", "models")) / "smollm2-135m"
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--target", type=Path, default=models / "ggml-model-f32.gguf")
    parser.add_argument("--draft", type=Path, default=models / "ggml-model-q4_1.gguf")
    parser.add_argument("--count", type=int, default=200)
    args = parser.parse_args()

    from llamaspec.models import drafts

    for path in (args.target, args.draft):
        if not path.is_file():
            raise SystemExit(f"{path} not found: run `llamaspec models fetch smollm2-135m` or pass --target/--draft")
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp) / "many"
        folder.mkdir()
        for i in range(args.count):
            try:
                os.link(args.draft, folder / f"draft-{i:04d}.gguf")
            except OSError:
                shutil.copy(args.draft, folder / f"draft-{i:04d}.gguf")
        headers = Path(tmp) / "headers"
        cold_start, cold_cpu = time.monotonic(), time.process_time()
        first = drafts.survey(args.target, [folder], caches=False, cache_dir=headers)
        cold, cold_cpu = time.monotonic() - cold_start, time.process_time() - cold_cpu
        warm_start, warm_cpu = time.monotonic(), time.process_time()
        second = drafts.survey(args.target, [folder], caches=False, cache_dir=headers)
        warm, warm_cpu = time.monotonic() - warm_start, time.process_time() - warm_cpu
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True).stdout.strip()
    load = os.getloadavg()[0] if hasattr(os, "getloadavg") else float("nan")
    print(f"{time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}, llamaspec {commit}, {platform.node()} "
          f"({os.cpu_count()} cores, load {load:.1f})")
    print(f"{args.count} links to {args.draft.name} ({args.draft.stat().st_size / 1e6:.1f} MB) judged against "
          f"{args.target.name}: {len(first.of('accepted'))} accepted")
    print(f"  headers parsed:     {cold:6.2f} s wall, {cold_cpu:6.2f} s CPU ({first.read} read, "
          f"{1000 * cold_cpu / args.count:.1f} ms CPU a file)")
    print(f"  headers remembered: {warm:6.2f} s wall, {warm_cpu:6.2f} s CPU ({second.read} read)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
