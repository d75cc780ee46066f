"""The watch itself (:class:`Watcher`): read the server every few seconds, keep the window, make a
:class:`~llamaspec.watch.report.Report` of each reading, and store the window in the results store
when it ends (the watch stops, or the server restarts).

What goes wrong is one line in the reading's notes, and the watch goes on where it can: a server
that does not answer (it is tried again at the next reading), a restart (a new window from the new
server's start), a server without speculation (its traffic is shown; nothing to tune), one without
the per-position series (one α from the mean accepted length, labelled), a window with no
speculative request yet, no costs to predict with. Only the first reading's trouble ends the watch
(an unreachable URL, not llama-server, no ``--metrics``): with nothing read there is nothing to show.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from llamaspec.base.errors import LlamaspecError
from llamaspec.llamacpp import live
from llamaspec.measure import spectypes
from llamaspec.watch import costs as pair_costs
from llamaspec.watch.forecast import BOOTSTRAP, forecast
from llamaspec.watch.report import Report, change_for, forecast_dict, window_dict
from llamaspec.watch.serving import Serving, describe
from llamaspec.watch.window import Tracker, Window

log = logging.getLogger(__name__)

INTERVAL = 5.0  # seconds between readings
SPAN = 300.0  # the window: the last five minutes


@dataclass
class Watcher:
    """A watch of the llama-server at ``url`` (see the module's docstring). ``span``: the window's
    length in seconds (None: everything since the watch began); ``cost``: ``--cost C[,V]``;
    ``measure``: time the costs here when no stored study has them; ``store``: keep each window."""

    url: str
    span: float | None = SPAN
    cost: str | None = None
    measure: bool = True
    api_key: str | None = None
    store: bool = True
    refits: int = BOOTSTRAP
    read: Callable[[live.Address], live.Reading | live.Trouble] | None = None  # tests: another reader
    local_command: Callable[[live.Address], tuple[str, ...] | None] = live.local_command
    tracker: Tracker = field(init=False)
    serving: Serving | None = field(default=None, init=False)
    costs: pair_costs.PairCosts | None = field(default=None, init=False)
    no_costs: str | None = field(default=None, init=False)  # why there are none (tried once)
    last: Report | None = field(default=None, init=False)
    stored: list[int] = field(default_factory=list, init=False)  # ids of the windows stored

    def __post_init__(self) -> None:
        self.where = live.address(self.url)
        self.tracker = Tracker(self.span)

    # --- readings -------------------------------------------------------------------------------

    def _read(self) -> live.Reading | live.Trouble:
        if self.read is not None:
            return self.read(self.where)
        return live.read_server(self.where, self.api_key or live.api_key_from_env())

    def _first(self) -> live.Reading:
        got = self._read()
        if isinstance(got, live.Trouble):
            raise got.error()
        self.serving = describe(self.where, got, self.local_command(self.where))
        return got

    def once(self) -> Report:
        """One reading: the window is everything since the server started (its counters), or,
        with ``span``, the traffic of the next ``span`` seconds."""
        reading = self._first()
        if self.span is None:
            self.tracker.start_from_zero(reading)
            return self._report(reading, ())
        self.tracker.add(reading)
        time.sleep(self.span)
        return self.step()

    def start(self) -> Report:
        """The first reading of a live watch: the window begins here."""
        reading = self._first()
        self.tracker.add(reading)
        return self._report(reading, ("the window begins now: the next readings show the requests that finish from here",))

    def step(self) -> Report:
        """The next reading."""
        got = self._read()
        if isinstance(got, live.Trouble):
            return Report(self.where.url, time.time(), self.serving, None, notes=(f"{got.message} ({got.hint})",))
        notes: list[str] = []
        previous = self.last
        why = self.tracker.add(got)
        if why is not None:
            self._store(previous)
            self.costs, self.no_costs = None, None
            self.serving = describe(self.where, got, self.local_command(self.where))
            notes.append(f"the server restarted ({why}): a new window starts from its start")
        elif self._described_from_less(got):
            self.serving = describe(self.where, got, self.serving.argv if self.serving else None)
        return self._report(got, tuple(notes))

    def _described_from_less(self, reading: live.Reading) -> bool:
        """The reading tells the draft length better than the description has it (the per-position
        series appeared with the first finished speculative request)."""
        s = self.serving
        return s is not None and reading.metrics.accepted_by_position is not None and (
            s.draft_max_from != "the per-position series" or s.draft_max != len(reading.metrics.accepted_by_position))

    # --- one report -------------------------------------------------------------------------------

    def _report(self, reading: live.Reading, notes: tuple[str, ...]) -> Report:
        s = self.serving
        assert s is not None
        w = self.tracker.window()
        said = list(notes)
        fc = change = None
        if s.speculation is not None and spectypes.keeps_state(s.speculation):
            said.append(f"{s.speculation} keeps n-gram state between requests: this window is warm traffic, drafted from "
                        f"what the server kept of earlier requests; a study's figure for {s.speculation} is cold (a fresh "
                        "server per request) unless it was measured with `sweep --warm` (docs/watch.md)")
        if s.speculation is None:
            said.append("this llama-server runs no speculative decoding (no draft model, no n-gram mode): nothing to tune")
        elif w is None:
            pass
        elif not w.speculative_counters:
            said.append("this llama-server counts no speculative decoding in /metrics (a build from before it): "
                        "nothing to tune from its traffic")
        elif not w.speculated:
            said.append("no speculative request has finished in this window yet (the server counts finished requests)")
        elif s.draft_max is None:
            said.append("the server's draft length is not known (no per-position series, and its command line "
                        "is not readable here)")
        else:
            if w.accepted_by_position is None:
                said.append("this llama-server has no per-position series (a build from before it): the mean accepted "
                            "length only, the prediction from one alpha")
            found = self._costs(w, reading)
            if found is None:
                said.append(self.no_costs or "no costs")
            else:
                fc = forecast(w, found.cost, s.draft_max, absolute=found.absolute, fit=(s.slots or 1) == 1,
                              fit_draft=found.fit_draft, refits=self.refits)
                change = change_for(fc, s)
        if w is not None and w.tokens and w.requests is None:
            said.append("the number of requests is unknown: something else reads /metrics too (each read resets the "
                        "server's rate gauge), so speeds are per token and every step is taken as drafting")
        if w is not None and w.rounded:
            said.append(f"the server prints its counters to 6 digits: {', '.join(w.rounded)} are rounded")
        if (s.slots or 1) > 1:
            said.append(f"{s.slots} slots: the model prices one request at a time; with several generating at once "
                        "each step verifies for all of them")
        report = Report(self.where.url, reading.at, s, w, fc, self.costs if fc is not None else None, change,
                        tuple(said), None if self.tracker.from_start else self.span)
        self.last = report
        return report

    def _costs(self, w: Window, reading: live.Reading) -> pair_costs.PairCosts | None:
        if self.costs is not None or self.no_costs is not None:
            return self.costs
        s = self.serving
        assert s is not None
        try:
            if self.cost is not None:
                self.costs = pair_costs.given(self.cost, s.draft_free)
                return self.costs
            from llamaspec.store.results import Store

            self.costs = pair_costs.stored(Store.open(), s)
            if self.costs is None and self.measure:
                from llamaspec.base import paths

                self.costs = pair_costs.measured(s, w, paths.runs_dir() / "watch", reading.metrics.processing)
        except LlamaspecError as exc:
            if self.cost is not None:
                raise
            self.no_costs = f"no costs for the prediction: {exc.message} ({exc.hint})" if exc.hint else exc.message
            return None
        if self.costs is None:
            self.no_costs = ("no costs for the prediction: no stored study of these files, and timing them here is off "
                             "(give --cost C[,V], or drop --no-measure)")
        return self.costs

    # --- storing ----------------------------------------------------------------------------------

    def _store(self, report: Report | None) -> int | None:
        if not self.store or report is None or report.window is None or report.serving is None or not report.window.tokens:
            return None
        from llamaspec.base import host
        from llamaspec.store.results import Store
        from llamaspec.studies import run

        s, w = report.serving, report.window
        record = {
            "url": s.url, "started_at": window_dict(w)["start"], "finished_at": window_dict(w)["end"],
            "speculation": s.speculation, "draft_max": s.draft_max, "threads": s.threads,
            "target_sha256": s.target_sha256, "draft_sha256": s.draft_sha256, "counts": window_dict(w, report.span),
            "costs": report.costs.to_dict() if report.costs else None,
            "forecast": {**forecast_dict(report.forecast), "change": report.change.words if report.change else None,
                         "command": report.change.command if report.change else None} if report.forecast else None,
            "provenance": {"server": s.to_dict(), "notes": list(report.notes), "llamaspec": run.own_provenance(),
                           "hardware": host.hardware(), "date": time.strftime("%Y-%m-%dT%H:%M:%S%z")},
        }
        window_id = Store.open().add_window(record)
        self.stored.append(window_id)
        return window_id

    def finish(self) -> int | None:
        """Store the last window (the watch ends); its id, or None when nothing was stored."""
        found = self._store(self.last)
        self.last = None
        return found

    def run(self, emit: Callable[[Report], None], interval: float = INTERVAL, samples: int | None = None,
            sleep: Callable[[float], None] = time.sleep) -> None:
        """Read, emit a report, wait ``interval``; ``samples`` readings in all (None: until
        interrupted); the last window is stored however it ends."""
        try:
            emit(self.start())
            taken = 1
            while samples is None or taken < samples:
                sleep(interval)
                emit(self.step())
                taken += 1
        finally:
            self.finish()
