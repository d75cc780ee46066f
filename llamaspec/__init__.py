"""llamaspec: measure whether speculative decoding pays off, with llama.cpp doing the work.

The package is an importable core with a thin Click CLI on top (``llamaspec.cli``).
Data flows one way: llama.cpp source -> build -> models -> experiment -> run -> parse ->
results store -> theory / plots / reports.
"""

__version__ = "0.1.0"
