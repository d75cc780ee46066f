"""One reading of ``llamaspec watch``, computed once (:class:`Report`) and rendered as lines for
people (:meth:`Report.lines`) and as a JSON object for tools (:meth:`Report.to_dict`): the server,
the window's figures, the prediction, the verdict and the command-line change (:class:`Change`)."""

from __future__ import annotations

import contextlib
import dataclasses
import shlex
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from llamaspec.base.errors import LlamaspecError
from llamaspec.base.stats import percent_text
from llamaspec.watch.costs import PairCosts
from llamaspec.watch.forecast import Forecast
from llamaspec.watch.serving import DRAFT, Serving
from llamaspec.watch.window import Window

DRAFT_LENGTH_FLAG = "--spec-draft-n-max"  # the pinned server's spelling, where neither its command nor --help says


@dataclass(frozen=True)
class Change:
    """What to change on the server's command line, in words and (where it is known) as the whole line."""

    verdict: str
    words: str
    command: str | None = None


def length_flag(serving: Serving) -> str:
    """The server's flag for its draft length: as its command line spells it, else as its --help
    does (a draft model), else the n-gram mode's size-m flag."""
    from llamaspec.llamacpp import command, flags, programhelp

    if serving.draft_free and serving.speculation:
        names = flags.spec_type_flags(serving.speculation).sizes.get("ngram_size_m", (DRAFT_LENGTH_FLAG,))
    else:
        names = flags.FLAG_TABLE["draft_max"].names + command.ALIASES["draft_max"]
    for token in serving.argv or ():
        if token.split("=", 1)[0] in names:
            return token.split("=", 1)[0]
    if serving.argv and not serving.draft_free and Path(serving.argv[0]).is_file():
        with contextlib.suppress(LlamaspecError):  # a --help that does not read: the first spelling
            picked = programhelp.program_flags(Path(serving.argv[0])).pick(names)
            if picked:
                return picked
    return names[0]


def change_for(forecast: Forecast, serving: Serving) -> Change:
    """The command-line change the verdict asks for."""
    from llamaspec.llamacpp import command

    flag = length_flag(serving)
    k = forecast.running
    argv = list(serving.argv) if serving.argv else None
    if forecast.verdict == "keep":
        return Change("keep", f"none: keep {flag} {k}")
    if forecast.verdict == "undecided":
        return Change("undecided", f"none yet: keep {flag} {k} and watch longer")
    if forecast.verdict == "change":
        line = command.edited(argv, draft_max=forecast.best, spec_type=serving.speculation, length_flag=flag) if argv else None
        return Change("change", f"{flag} {forecast.best} (in place of {k})", shlex.join(line) if line else None)
    line = command.edited(argv, speculative=False) if argv else None
    what = (f"without --spec-type {serving.speculation}" if serving.draft_free
            else "without -md and the draft's flags (--spec-type, the draft length)")
    return Change("no draft", f"{what}: the target alone", shlex.join(line) if line else None)


@dataclass(frozen=True)
class Report:
    """One reading of the watch: everything it shows, computed once."""

    url: str
    at: float
    serving: Serving | None
    window: Window | None
    forecast: Forecast | None = None
    costs: PairCosts | None = None
    change: Change | None = None
    notes: tuple[str, ...] = ()  # one line each: a restart, a server that counts no positions, no costs ...
    span: float | None = None  # the window's length asked for (None: since the watch or the server began)

    # --- for people ------------------------------------------------------------------------------

    def lines(self) -> list[str]:
        out = [f"{time.strftime('%H:%M:%S', time.localtime(self.at))} {self._server_line()}"]
        s = self.serving
        if s is not None and (s.target or s.draft):
            files = [f"target {s.target}" + (f" (sha256 {s.target_sha256[:12]})" if s.target_sha256 else "")]
            if s.draft:
                files.append(f"draft {s.draft}" + (f" (sha256 {s.draft_sha256[:12]})" if s.draft_sha256 else ""))
            out.append("  " + ", ".join(files))
        w = self.window
        if w is not None:
            out += self._window_lines(w)
        f = self.forecast
        if f is not None:
            out += self._forecast_lines(f)
        out += [f"note: {n}" for n in self.notes]
        if self.change is not None:
            out.append(f"change: {self.change.words}")
            if self.change.command:
                out.append(f"  {self.change.command}")
        return out

    def _server_line(self) -> str:
        s = self.serving
        if s is None:
            return f"llama-server {self.url}"
        facts = [f"llama.cpp {s.commit}" if s.commit else None, f"{s.slots} slot{'s' if s.slots != 1 else ''}" if s.slots else None]
        head = f"llama-server {s.url} ({', '.join(x for x in facts if x)})"
        if s.speculation is None:
            return f"{head}: no speculative decoding ({s.speculation_from})"
        kind = "a draft model" if s.speculation == DRAFT else f"n-gram mode {s.speculation}"
        length = f"draft length {s.draft_max} ({s.draft_max_from})" if s.draft_max else "draft length not known yet"
        return f"{head}: {kind}, {length}"

    def _window_lines(self, w: Window) -> list[str]:
        if w.start is None:
            when = "since the server started"
        else:
            span = f"the last {self.span:.0f} s" if self.span else "since the watch began"
            when = (f"{span}, {time.strftime('%H:%M:%S', time.localtime(w.start))}-"
                    f"{time.strftime('%H:%M:%S', time.localtime(w.end))}")
        requests = f"requests {w.requests}" if w.requests is not None else "requests unknown"
        speed = f"decode {w.decode_tps:.1f} t/s a request" if w.decode_tps else (
            f"{w.tokens / w.generation_seconds:.1f} tokens/s of generation" if w.generation_seconds > 0 else "no generation")
        out = [f"window ({when}): {requests}, {w.tokens} tokens generated ({w.prompt_tokens} prompt), {speed}"
               + (f", {w.throughput:.1f} t/s over the window" if w.throughput is not None else "")]
        if w.speculated:
            out.append(f"  verification steps {w.steps}, drafted {w.drafted}, accepted {w.accepted} "
                       f"({percent_text(w.acceptance, 1)}); accepted per step {w.mean_accepted:.2f} "
                       f"(llama.cpp's mean len {w.tokens_per_step:.2f})"
                       + (f"; steps that drafted nothing {w.plain_steps}" if w.plain_steps else ""))
            shares = w.by_position
            if shares is not None:
                out.append(f"  accepted through position 1..{len(shares)} (of the steps): "
                           + ", ".join(percent_text(p) for p in shares))
        return out

    def _forecast_lines(self, f: Forecast) -> list[str]:
        costs = self.costs.label if self.costs else "?"
        out = [f"prediction ({f.acceptance_model}; costs: {costs}):",
               f"  {'draft':>5}  {'tok/step':>8}  {'speedup [95 %]':>20}" + ("  predicted t/s" if f.absolute else "")]
        for p in f.lengths:
            mark = " <- running" if p.draft_max == f.running else (" <- best" if p.draft_max == f.best else "")
            tps = f"  {f.predicted_tps(p.draft_max):>13.1f}" if f.absolute and f.predicted_tps(p.draft_max) else ""
            out.append(f"  {p.draft_max:>5}  {p.tokens_per_step:>8.2f}  {p.speedup:>7.2f}x [{p.low:.2f}-{p.high:.2f}]"
                       f"{tps}{mark}")
        alone = f.predicted_tps(None)
        out.append("  target alone: 1.00x" + (f" ({alone:.1f} t/s predicted)" if alone else ""))
        model_now = f.predicted_tps(f.running)
        if f.calibrated == "loop":
            out.append(f"  the server's own loop: {f.cost.loop_overhead_ms:.1f} ms a token, set so that the model meets "
                       f"the window's decode speed at the running length ({f.measured_tps:.1f} t/s a request)")
        elif f.calibrated == "draft":
            out.append(f"  the draft's cost: c {f.cost.cost_ratio:.2f} (timed alone {f.cost.timed_cost_ratio:.2f}), set so "
                       f"that the model meets the window's decode speed at the running length ({f.measured_tps:.1f} t/s "
                       "a request)")
        elif model_now and f.measured_tps:
            out.append(f"  at the running length the model predicts {model_now:.1f} t/s a request, the window measured "
                       f"{f.measured_tps:.1f}")
        if f.plain_share and f.plain_known:
            out.append(f"  {percent_text(f.plain_share)} of the tokens came from steps that drafted nothing (as measured, "
                       "at every length)")
        top = f.at(f.best)
        pays = {"no draft": "; the draft does not pay on this traffic", "undecided": ""}
        out.append(f"verdict: {f.verdict}: {f.reason}" + pays.get(
            f.verdict, f"; the draft pays: {top.speedup:.2f}x [{top.low:.2f}-{top.high:.2f}] at draft {top.draft_max}"))
        if f.best == f.running and f.verdict == "keep":
            out.append(f"  the best is the longest the server drafts: a longer draft may be faster still (restart with a "
                       f"longer {length_flag(self.serving) if self.serving else DRAFT_LENGTH_FLAG} to see)")
        return out

    # --- for tools ----------------------------------------------------------------------------------

    def to_dict(self) -> dict[str, Any]:
        w, f = self.window, self.forecast
        return {
            "url": self.url, "at": time.strftime("%Y-%m-%dT%H:%M:%S%z", time.localtime(self.at)),
            "server": self.serving.to_dict() if self.serving else None,
            "window": window_dict(w, self.span) if w is not None else None,
            "costs": self.costs.to_dict() if self.costs else None,
            "forecast": forecast_dict(f) if f is not None else None,
            "change": dataclasses.asdict(self.change) if self.change else None,
            "notes": list(self.notes),
        }


def window_dict(w: Window, span: float | None = None) -> dict[str, Any]:
    return {"start": _iso(w.start), "end": _iso(w.end), "span_s": span, "since_server_start": w.start is None,
            "requests": w.requests, "tokens": w.tokens, "prompt_tokens": w.prompt_tokens,
            "generation_seconds": w.generation_seconds, "decode_tps": w.decode_tps, "throughput_tps": w.throughput,
            "verification_steps": w.steps, "drafted": w.drafted, "accepted": w.accepted, "acceptance": w.acceptance,
            "mean_accepted": w.mean_accepted, "tokens_per_step": w.tokens_per_step,
            "accepted_by_position": list(w.accepted_by_position) if w.accepted_by_position is not None else None,
            "acceptance_by_position": list(w.by_position) if w.by_position is not None else None,
            "rounds": w.rounds, "plain_steps": w.plain_steps, "rounded_counters": list(w.rounded)}


def forecast_dict(f: Forecast) -> dict[str, Any]:
    return {"running": f.running, "best": f.best, "verdict": f.verdict, "reason": f.reason,
            "acceptance_model": f.acceptance_model, "plain_share": f.plain_share, "plain_known": f.plain_known,
            "calibrated": f.calibrated, "loop_ms_per_token": f.cost.loop_overhead_ms,
            "timed_cost_ratio": f.cost.timed_cost_ratio,
            "measured_tps": f.measured_tps,
            "cost_ratio": f.cost.cost_ratio, "resamples": f.resamples,
            "target_alone_tps": f.predicted_tps(None),
            "lengths": [{"draft_max": p.draft_max, "tokens_per_step": p.tokens_per_step, "speedup": p.speedup,
                         "low": p.low, "high": p.high, "beats_running": p.beats_running,
                         "predicted_tps": f.predicted_tps(p.draft_max)} for p in f.lengths]}


def _iso(at: float | None) -> str | None:
    return None if at is None else time.strftime("%Y-%m-%dT%H:%M:%S%z", time.localtime(at))


def draw(report: Report, out_dir: Path, stem: str = "watch") -> list[Path]:
    """The window's acceptance curve and the predicted speedups (``plot.plot_watch``)."""
    from llamaspec.views import plot

    w, f = report.window, report.forecast
    shares = [p or 0.0 for p in (w.by_position or ())] if w is not None else []
    if f is None:
        raise LlamaspecError("nothing to plot: this window has no prediction",
                             hint="wait for speculative requests, and give the costs (--cost) if none are found")
    title = f"llamaspec watch {report.url}: {w.requests if w and w.requests is not None else '?'} requests, " \
            f"{w.tokens if w else 0} tokens; verdict {f.verdict}"
    return plot.plot_watch(shares, [(p.draft_max, p.low, p.high) for p in f.lengths],
                           [(p.draft_max, p.speedup) for p in f.lengths], f.running, title, out_dir, stem=stem)
