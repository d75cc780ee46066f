"""llamaspec: measure whether speculative decoding pays off, with llama.cpp doing the work.

The package is an importable core with a thin Click CLI on top (``llamaspec.cli``). Its folders
follow the data: llama.cpp source -> build (``llamacpp``) -> models (``models``) -> the measurement
core (``measure``: settings, the engine contract, pairs, summaries) -> the results store (``store``)
-> decisions (``decision``) and views (``views``: analysis, plots, reports); ``studies`` (runs,
sweeps, workload studies, tuning) drive that flow, and ``base`` holds what every room stands on.
docs/development.md draws the layout.
"""

__version__ = "0.1.0"
