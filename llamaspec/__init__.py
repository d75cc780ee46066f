"""llamaspec: measure whether speculative decoding pays off, with llama.cpp doing the work.

The package is an importable core with a thin Click CLI on top (``llamaspec.cli``). Its folders
follow the data: llama.cpp source -> build (``llamacpp``) -> models (``models``) -> the measurement
core (``measure``: settings, the engine contract, pairs, summaries) -> the results store (``store``)
-> decisions (``decision``) and views (``views``: analysis, plots, reports); ``studies`` (runs,
sweeps, workload studies, tuning) drive that flow, and ``base`` holds what every room stands on.
docs/development.md draws the layout.

The former root modules keep their short names: ``from llamaspec import run, sweep, results``
still works (each name is imported from its package on first use).
"""

from __future__ import annotations

import importlib
from typing import Any

__version__ = "0.1.0"

# A module's short name -> the package that holds it (the layout in docs/development.md).
MODULES: dict[str, str] = {
    **dict.fromkeys(("errors", "atomic", "progress", "paths", "proc", "lock", "cpu", "host", "stats"), "base"),
    **dict.fromkeys(("spectypes", "settings", "contract", "pairs", "estimators", "summary"), "measure"),
    "engines": "registry",
    "results": "store",
    **dict.fromkeys(("decide", "workload", "workload_runs"), "decision"),
    **dict.fromkeys(("analysis", "plot", "report", "doctor"), "views"),
    **dict.fromkeys(("experiment", "run", "sweep", "prompts", "adhoc", "study", "deploy"), "studies"),
}


def __getattr__(name: str) -> Any:
    package = MODULES.get(name)
    if package is None:
        raise AttributeError(f"module 'llamaspec' has no attribute {name!r}")
    module = importlib.import_module(f"llamaspec.{package}.{name}")
    globals()[name] = module
    return module
