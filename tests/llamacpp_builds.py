"""The llama.cpp builds the slow tier runs, made in one place.

The tests ask here (``llama_build`` in conftest, the early-2025 and 2023 generations), so that
``make test`` can make them all in the background while the quick tier runs, with the same
calls and so the same cache entries:

    python tests/llamacpp_builds.py    # each build once per cache; exit 1 with one line if one fails

The pinned build comes with llama-server (built into its folder on first need) and its RPC server
(part of the default build); the older generations are built without RPC (none before 2024, and
no test of theirs uses it).
"""

from __future__ import annotations

import sys
import time
from collections.abc import Callable

from llamaspec.llamacpp import build, source
from llamaspec.llamacpp.cache import Build

# The older generations the suite runs, as pinned sdist versions (source.PINNED_SDISTS).
EARLY_2025 = "0.3.8"
GENERATIONS_2023 = ("0.2.7", "0.2.20")
# Another machine's llama.cpp in tests/test_cluster_ray.py (llama.cpp b38a16d): the first slow-tier
# file to run (conftest.LONGEST_FIRST), so its build comes right after the pinned one.
OTHER_MACHINE = "0.2.20"


def pinned() -> Build:
    """The pinned llama.cpp, CPU, with llama-server."""
    return build.ensure_program(build.build("cpu", source=source.fetch()), "server")


def older_tree(version: str) -> source.SourceInfo:
    """An older generation's source tree, from its pinned sdist (``EARLY_2025`` or one of
    ``GENERATIONS_2023``), in the cache. Extracted under the build cache's lock for that folder:
    a test that asks while ``make test``'s background is extracting it waits, and never finds
    the tree replaced under it (a second extraction would swap the folder)."""
    dest = source.paths.cache_dir() / "trees" / f"llama-cpp-python-{version}"
    with build.exclusive(dest):
        return source.fetch(f"pypi:llama-cpp-python=={version}", dest)


# The older generations are compiled at -O1, not at the Release build's -O3: their tests check what
# the programs print and do over a few dozen tokens, never their speed, and -O1 compiles llama.cpp
# 7841fc7 in 74 s of CPU against 112 s (2-core Intel Xeon VM, 2026-12-07). Its own cache entry.
OLDER_FLAGS = ("-DCMAKE_C_FLAGS_RELEASE=-O1 -DNDEBUG", "-DCMAKE_CXX_FLAGS_RELEASE=-O1 -DNDEBUG")


def older(version: str) -> Build:
    """An older generation's build (at -O1: :data:`OLDER_FLAGS`)."""
    return build.build("cpu", OLDER_FLAGS, source=older_tree(version), rpc=False)


def everything() -> list[tuple[str, Callable[[], object]]]:
    """What the slow tier needs, in order: the source trees first (seconds: a test that needs one
    later finds it whole rather than half extracted), then each build in the order the tests
    first need them."""
    versions = (OTHER_MACHINE, EARLY_2025, *(v for v in GENERATIONS_2023 if v != OTHER_MACHINE))
    return [("the pinned source", source.fetch),
            *[(f"the source of llama-cpp-python {v}", lambda v=v: older_tree(v)) for v in versions],
            ("the pinned build with llama-server", pinned),
            *[(f"llama.cpp of llama-cpp-python {v}", lambda v=v: older(v)) for v in versions]]


def main() -> int:
    import logging

    from llamaspec.base.errors import LlamaspecError

    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(message)s", datefmt="%H:%M:%S")
    start = time.monotonic()
    for what, make in everything():
        t0 = time.monotonic()
        try:
            made = make()
        except LlamaspecError as exc:
            print(f"Error: {what}: {exc.message}" + (f" (hint: {exc.hint})" if exc.hint else ""), flush=True)
            return 1
        where = getattr(made, "bin_dir", None) or getattr(made, "path", "")
        print(f"ready: {what} in {time.monotonic() - t0:.0f} s: {where}", flush=True)
    print(f"done: every build the slow tier needs, in {time.monotonic() - start:.0f} s", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
