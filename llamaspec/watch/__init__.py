"""``llamaspec watch URL``: is speculation paying off on a running llama-server's real traffic?

Importable without Click::

    from llamaspec.watch import Watcher
    report = Watcher("http://127.0.0.1:8080", span=None).once()   # since the server started
    print("\\n".join(report.lines()))

The package, one module per part, in the order the data moves: ``llamacpp.live`` reads the server
(``/metrics``, ``/props``, ``/slots``, its command line); :mod:`~llamaspec.watch.serving` says what it
runs; :mod:`~llamaspec.watch.window` takes differences of its counters (a restart starts a new
window); :mod:`~llamaspec.watch.costs` finds the pair's costs; :mod:`~llamaspec.watch.forecast`
predicts every draft length up to the running one and decides; :mod:`~llamaspec.watch.report` is
one reading computed once, for people and for tools; :mod:`~llamaspec.watch.loop` is the watch.
"""

from __future__ import annotations

from llamaspec.watch.loop import INTERVAL, SPAN, Watcher
from llamaspec.watch.report import Change, Report

__all__ = ["INTERVAL", "SPAN", "Change", "Report", "Watcher"]
