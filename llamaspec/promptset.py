"""Run an experiment over a prompt set, and the set-level statistics.

Per prompt and per case (a method: a draft length, an n-gram mode): the baseline and the
speculative generation are measured seconds apart on two live servers, in ABBA order over the
repeats, and stored as one run row (``kind="promptset"``) as soon as the prompt finishes. The
row's ``group_id`` identifies (case settings, models, build, prompt set) and its ``point_key``
the prompt, so a rerun skips what is finished and resumes where a run stopped.

Over the set (``set_statistics``):

- total-token speedup: all speculative decode tokens over their time, against the same for the
  baseline (prompts weighted by their length), with a bootstrap interval over prompts;
- end to end, prompt included (``e2e_*``): the same total over each request's whole time on the
  server, prompt processing plus generation (llama-server's ``prompt_ms + predicted_ms``), and the
  geometric mean of per-prompt end-to-end speedups. The decode figures above leave the prompt
  out; on llama-server the speculative server processes each prompt with the draft as well (2.5-4x
  the target-only server's prompt time on the offline pair), so a short answer can be faster to
  decode and slower to get: a user choosing a method needs both, and both recommendations;
- mean and geometric mean of per-prompt speedups, each with a 95 % bootstrap interval;
- per-category breakdown of the same;
- mean accepted tokens per round, counting the target's own token (Spec-Bench's tau), where
  the backend knows the rounds, and tokens per target call (every call, drafted or not);
- lossless rate: prompts whose speculative token ids equal the baseline's;
- prompts that ended early (end of text before n_predict) listed apart and kept out of every
  speedup: a 3-token answer's "speed" says nothing about decoding.

Only the resolve and provenance steps come from the run core, through ``_resolver`` and
``_provenance`` below (the run core is being rewritten; these are the two calls needed).
"""

from __future__ import annotations

import hashlib
import json
import logging
import math
import statistics
import sys
import time
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from llamaspec import decide, pairs, paths, progress, stats
from llamaspec.backend import Backend, Measurement, ResolvedCase
from llamaspec.errors import LlamaspecError
from llamaspec.prompts import Prompt, PromptSet, PromptSource, parse_source
from llamaspec.results import Group, MeasurementRow, Store, measurements_of
from llamaspec.summary import compare_outputs
from llamaspec.summary import summarize as summarize_point

log = logging.getLogger(__name__)

Event = Callable[[str, dict[str, Any]], None]
STOPPING_ERRORS = ("server", "timeout")  # the server is gone or stuck: later prompts would fail alike


# --- the run core, through a thin adapter ------------------------------------------------------

def _resolver(backend: Backend) -> Callable[[Any, Any], ResolvedCase]:
    from llamaspec import run

    def resolve(exp: Any, case: Any) -> ResolvedCase:
        resolved = run.resolve_case(exp, case, backend)
        run.check_settings(resolved, backend)
        return resolved

    return resolve


def _provenance(backend: Backend, case: ResolvedCase, hardware: dict[str, Any]) -> dict[str, Any]:
    from llamaspec import run

    return run.provenance(backend, case, hardware)


# --- the prompt set an experiment names --------------------------------------------------------

def source_of(exp: Any, override: str | None = None, **options: Any) -> PromptSource:
    """The prompt set to run: the command line's, else the experiment's ``prompts:``."""
    base_dir = Path(exp.path).parent if getattr(exp, "path", "") else None
    spec = override if override is not None else getattr(exp, "prompts", None)
    if spec is None:
        raise LlamaspecError(f"experiment {exp.name} names no prompt set",
                             hint="pass --prompts FILE (or spec-bench:PATH, alpaca), or add prompts: to the experiment")
    if isinstance(spec, dict):
        spec = dict(spec)
        where = spec.pop("source", None)
        if not isinstance(where, str):
            raise LlamaspecError(f"{exp.path}: prompts.source: missing", hint="prompts: {source: FILE, format: chat}")
        unknown = set(spec) - {"format", "turns", "limit", "seed"}
        if unknown:
            raise LlamaspecError(f"{exp.path}: prompts: unknown key {sorted(unknown)[0]!r}",
                                 hint="keys: source, format, turns, limit, seed")
        merged = {**spec, **{k: v for k, v in options.items() if v is not None}}
        return parse_source(where, base_dir, **merged)
    return parse_source(spec, base_dir, **options)


# --- per prompt --------------------------------------------------------------------------------

def set_key(backend: Backend, case: ResolvedCase, source: PromptSource, repeats: int) -> str:
    """Same case settings, models, build, prompt set and repeats: the same set run (resumable)."""
    blob = {"identity": backend.identity(), "experiment": case.experiment, "case": case.case,
            "target": case.target.sha256 or case.target.path,
            "draft": (case.draft.sha256 or case.draft.path) if case.draft else None,
            "settings": {k: v for k, v in case.settings.to_dict().items() if k != "timeout"},
            "source": {"kind": source.kind, "path": source.path, "format": source.format, "turns": source.turns},
            "repeats": repeats}
    return "set-" + hashlib.sha256(json.dumps(blob, sort_keys=True, default=str).encode()).hexdigest()[:16]


def prompt_case(case: ResolvedCase, prompt: Prompt) -> ResolvedCase:
    return replace(case, prompt=prompt.prompt, prompt_file=None, prompt_id=prompt.id, category=prompt.category,
                   chat=prompt.chat)


def _ended_early_note(base: Sequence[Measurement], spec: Sequence[Measurement]) -> str | None:
    """Which side stopped at end of text, and after how many tokens: a speculative output that
    diverged and then ended is not the baseline ending early."""
    def ended(ms: Sequence[Measurement]) -> int | None:
        counts = [m.n_predict or 0 for m in ms if m.end_of_text]
        return min(counts) if counts else None

    b, s = ended(base), ended(spec)
    if b is None and s is None:
        return None
    if s is None:
        return f"{b} tokens"
    if b is None:
        ran = max((m.n_predict or 0 for m in base), default=0)
        return f"the speculative output ended after {s} tokens, the baseline ran on to {ran}"
    return f"{b} tokens" if b == s else f"baseline after {b} tokens, speculative after {s}"


def decode_totals(m: Measurement) -> tuple[int, float] | None:
    """(tokens after the first, seconds) behind one decode speed: what total-token speedups add up."""
    if not m.ok or not m.decode_tps or not m.n_predict or m.n_predict < 2:
        return None
    tokens = m.n_predict - 1
    return tokens, tokens / m.decode_tps


def request_totals(m: Measurement) -> tuple[int, float] | None:
    """(generated tokens, seconds from the start of prompt processing to the last token) of one
    request: what end-to-end speedups add up. From llama-server's ``timings`` (``prompt_ms`` runs
    from the prompt's first batch to the first sampled token, ``predicted_ms`` from there to the
    last token, so their sum is the whole request on the server, without HTTP and queueing);
    None where the backend gives no such timings."""
    if not m.ok or not m.n_predict:
        return None
    prompt_ms, predicted_ms = m.prompt_ms, m.generation_ms
    if prompt_ms is None or predicted_ms is None:
        return None
    if prompt_ms + predicted_ms <= 0:
        return None
    return m.n_predict, (prompt_ms + predicted_ms) / 1000.0


def _prompt_ms(m: Measurement) -> float | None:
    return m.prompt_ms


def _median(values: Sequence[float | None]) -> float | None:
    clean = [v for v in values if v is not None]
    return statistics.median(clean) if clean else None


def prompt_summary(prompt: Prompt, measured: Sequence[Measurement]) -> dict[str, Any]:
    """One prompt's figures from its measurements (repeats paired by order).

    The speedup (median of paired ratios) and the lossless verdict are the run core's own
    (``summary.summarize``, ``summary.compare_outputs``): one definition for a prompt and a point.
    """
    point = summarize_point(measured)
    base = [m for m in measured if m.mode == "baseline" and m.ok]
    spec = [m for m in measured if m.mode == "speculative" and m.ok]
    speed = point.speedup
    verdict = point.lossless
    totals_b = [t for t in (decode_totals(m) for m in base) if t]
    totals_s = [t for t in (decode_totals(m) for m in spec) if t]
    drafted = sum(m.n_drafted or 0 for m in spec)
    accepted = sum(m.n_accept or 0 for m in spec)
    rounds = [m.rounds for m in spec]
    failed = next((m for m in measured if not m.ok), None)
    # End to end: paired in the order taken, as the decode speedup is (n-th with n-th).
    e2e_b = [request_totals(m) for m in base]
    e2e_s = [request_totals(m) for m in spec]
    e2e_pairs = [(s_, b_) for s_, b_ in zip(e2e_s, e2e_b, strict=False) if s_ and b_] if point.paired else []
    e2e = stats.spread([(ns / ts) / (nb / tb) for (ns, ts), (nb, tb) in e2e_pairs])
    return {
        "id": prompt.id, "category": prompt.category,
        "status": "failed" if failed else "ok",
        "error": failed.error if failed else None,
        "error_kind": failed.error_kind if failed else None,
        "repeats": point.pairs,
        "paired": point.paired,
        "speedup": speed.median if speed else None,
        "speedup_spread": speed.to_dict() if speed else None,
        "baseline_tps": statistics.median([m.decode_tps for m in base if m.decode_tps]) if totals_b else None,
        "speculative_tps": statistics.median([m.decode_tps for m in spec if m.decode_tps]) if totals_s else None,
        "n_prompt": base[0].n_prompt if base else (spec[0].n_prompt if spec else None),
        "n_predict": base[0].n_predict if base else None,
        "ended_early": any(m.end_of_text for m in (*base, *spec)),
        "ended_early_note": _ended_early_note(base, spec),
        "baseline_tokens": sum(t for t, _ in totals_b), "baseline_seconds": sum(s for _, s in totals_b),
        "speculative_tokens": sum(t for t, _ in totals_s), "speculative_seconds": sum(s for _, s in totals_s),
        "speculative_n_predict": sum(m.n_predict or 0 for m in spec),
        # end to end, prompt included: generated tokens over prompt processing plus generation
        "e2e_speedup": e2e.median if e2e else None,
        "e2e_speedup_spread": e2e.to_dict() if e2e else None,
        "baseline_e2e_tokens": sum(b_[0] for _s, b_ in e2e_pairs),
        "baseline_e2e_seconds": sum(b_[1] for _s, b_ in e2e_pairs),
        "speculative_e2e_tokens": sum(s_[0] for s_, _b in e2e_pairs),
        "speculative_e2e_seconds": sum(s_[1] for s_, _b in e2e_pairs),
        "baseline_prompt_ms": _median([_prompt_ms(m) for m in base]),
        "speculative_prompt_ms": _median([_prompt_ms(m) for m in spec]),
        "n_drafted": drafted if spec else None, "n_accept": accepted if spec else None,
        "accept": 100.0 * accepted / drafted if drafted else None,
        "rounds": sum(r for r in rounds if r is not None) if spec and all(r is not None for r in rounds) else None,
        "lossless": verdict.identical if spec and base else None,
        "first_difference": verdict.first_difference if verdict.verdict == "differs" else None,
        "lossless_unit": verdict.unit,
        "lossless_text": verdict.text() if spec and base else None,
        "divergence": None,  # filled by the run when the output differs and the backend can probe it
        "draft_len": spec[0].draft_len if spec else None,
    }


# The target's top two candidates count as a near-tie when their probabilities are this close
# (absolute): float rounding of a batched verification against single-token decoding moves logits
# by ~1e-5 relative, enough to flip only such a pair. The label explains; the prompt still counts
# as not lossless.
NEAR_TIE = 0.02


def divergence(backend: Backend, case: ResolvedCase, measured: Sequence[Measurement], log_path: Path) -> dict[str, Any] | None:
    """Where a differing output first diverges, and whether the target alone saw a near-tie there.

    Asks the backend (``top_tokens``, where its capabilities say it has it) for the target's two most
    probable next tokens at the divergence position, on the baseline's own path."""
    base = next((m for m in measured if m.mode == "baseline" and m.ok and m.tokens), None)
    spec = next((m for m in measured if m.mode == "speculative" and m.ok and m.tokens is not None
                 and base is not None and compare_outputs(m, base).verdict == "differs"), None)
    if base is None or spec is None or base.tokens is None or spec.tokens is None:
        return None
    at = compare_outputs(spec, base).first_difference
    if at is None:
        return None
    out: dict[str, Any] = {"position": at, "baseline_token": base.tokens[at] if at < len(base.tokens) else None,
                           "speculative_token": spec.tokens[at] if at < len(spec.tokens) else None,
                           "top": None, "gap": None, "near_tie": None}
    if not backend.capabilities.top_tokens or at >= len(base.tokens):
        return out
    try:
        top = backend.top_tokens(case, at, base.tokens[:at], log_path)
    except LlamaspecError as exc:
        log.warning("%s: could not probe the divergence at token %d: %s", case.prompt_id, at, exc.message)
        return {**out, "probe_error": exc.message}
    if top is None or len(top) < 2:
        return out
    pair = {out["baseline_token"], out["speculative_token"]}
    gap = top[0]["p"] - top[1]["p"]
    out.update(top=top[:2], gap=gap, near_tie=gap <= NEAR_TIE and {t["id"] for t in top[:2]} == pair)
    return out


def divergence_text(d: dict[str, Any] | None, first_difference: int | None = None) -> str:
    """``differs at token 28: near-tie p 0.2704 vs 0.2704 (gap 7.7e-05)`` (or what is known)."""
    if not d:
        return f"differs at token {first_difference}" if first_difference is not None else "differs"
    head = f"differs at token {d['position']}"
    if not d.get("top"):
        return head + (f" (top-2 not probed: {d['probe_error']})" if d.get("probe_error") else "")
    p1, p2 = d["top"][0]["p"], d["top"][1]["p"]
    if d["near_tie"]:
        return f"{head}: near-tie p {p1:.4f} vs {p2:.4f} (gap {p1 - p2:.1e})"
    return f"{head}: not a near-tie (target's top two p {p1:.4f} vs {p2:.4f})"


# --- running -----------------------------------------------------------------------------------

@dataclass(frozen=True)
class CaseSet:
    """One case (method) over the set: its per-prompt summaries and what did not run."""

    case: ResolvedCase
    set_id: str
    items: tuple[dict[str, Any], ...]
    not_run: tuple[str, ...] = ()  # prompt ids left after a stopping failure
    error: str | None = None

    @property
    def label(self) -> str:
        return method_label(self.case)


@dataclass(frozen=True)
class SetRun:
    experiment: str
    source: PromptSource
    prompts: PromptSet
    cases: tuple[CaseSet, ...]

    @property
    def complete(self) -> bool:
        return all(not c.not_run for c in self.cases)


def method_label(case: ResolvedCase) -> str:
    s = case.settings
    spec_type = s.spec_type or "draft"
    if spec_type == "draft":
        return f"{case.case} (draft {case.draft.label if case.draft else '?'}, k={s.draft_max})"
    sizes = ", ".join(f"{k[-1]}={getattr(s, k)}" for k in ("ngram_size_n", "ngram_size_m") if getattr(s, k) is not None)
    return f"{case.case} ({spec_type}{', ' + sizes if sizes else ''})"


def run_set(exp: Any, prompt_set: PromptSet, backend: Backend, store: Store, *, repeats: int = 1,
            hardware: dict[str, Any] | None = None, on_event: Event | None = None,
            resolve: Callable[[Any, Any], ResolvedCase] | None = None) -> SetRun:
    """Measure every case of ``exp`` on every prompt of the set; stored per prompt; resumable."""
    emit = on_event or (lambda _e, _d: None)
    resolve = resolve or _resolver(backend)
    cases = [resolve(exp, c) for c in exp.cases]
    for case in cases:
        backend.check(case)
    hw = hardware or {}
    total = len(cases) * len(prompt_set.prompts)
    clock = _Clock(total)
    out: list[CaseSet] = []
    for case in cases:
        set_id = set_key(backend, case, prompt_set.source, repeats)
        items: list[dict[str, Any]] = []
        not_run: list[str] = []
        error = None
        for index, prompt in enumerate(prompt_set.prompts):
            done = store.finished_point(set_id, prompt.id)
            if done is not None and done.get("summary"):
                items.append(_with_end_to_end(done["summary"], prompt, store, done["id"]))
                clock.tick(skipped=True)
                emit("skip", {"case": case.case, "prompt": prompt.id})
                continue
            emit("start", {"case": case.case, "prompt": prompt.id, "index": index, "count": len(prompt_set.prompts)})
            _prepare(backend, prompt_case(case, prompt))
            summary = _run_prompt(prompt_case(case, prompt), prompt, backend, store, set_id, repeats, hw)
            items.append(summary)
            clock.tick()
            emit("done", {"case": case.case, "prompt": prompt.id, "summary": summary, "eta": clock.eta()})
            if summary["status"] != "ok" and summary.get("error_kind") in STOPPING_ERRORS:
                not_run = [p.id for p in prompt_set.prompts[index + 1:]]
                error = summary["error"]
                emit("stopped", {"case": case.case, "error": error, "not_run": not_run})
                break
        out.append(CaseSet(case, set_id, tuple(items), tuple(not_run), error))
    return SetRun(exp.name, prompt_set.source, prompt_set, tuple(out))


E2E_KEYS = ("e2e_speedup", "e2e_speedup_spread", "baseline_e2e_tokens", "baseline_e2e_seconds",
            "speculative_e2e_tokens", "speculative_e2e_seconds", "baseline_prompt_ms", "speculative_prompt_ms")


def _with_end_to_end(summary: dict[str, Any], prompt: Prompt, store: Store, run_id: int) -> dict[str, Any]:
    """A prompt stored before the end-to-end figures existed gets them from its stored
    measurements (their server timings), so that a resumed set has them for every prompt."""
    if "e2e_speedup" in summary:
        return summary
    again = prompt_summary(prompt, measurements_of(store.measurements(run_id)))
    return {**summary, **{k: again[k] for k in E2E_KEYS}}


def _prepare(backend: Backend, case: ResolvedCase) -> None:
    """Servers started (side by side) and the prompt rendered before the prompt's first timing,
    where the backend can (llama-server). A server that cannot start raises here, as the
    measurement would; one that died is left for the measurement to report."""
    if backend.capabilities.prepares:
        backend.prepare(case)


def _run_prompt(case: ResolvedCase, prompt: Prompt, backend: Backend, store: Store, set_id: str, repeats: int,
                hardware: dict[str, Any]) -> dict[str, Any]:
    run_id = store.start_run(experiment=case.experiment, case_name=case.case,
                             settings={**case.settings.to_dict(), "prompt_id": prompt.id, "category": prompt.category},
                             provenance=_provenance(backend, case, hardware), kind="promptset",
                             group=Group("promptset", set_id), point_key=prompt.id)
    logs = paths.runs_dir() / f"{run_id:06d}"
    measured: list[Measurement] = []

    def measure(mode: str, r: int) -> Measurement:
        m = pairs.metered(lambda: backend.measure(case, mode, logs / f"{mode}-{r}.json"))
        store.add_measurement(MeasurementRow.of(m, run_id=run_id, repeat=r))
        measured.append(m)
        return m

    try:
        pairs.measure_pairs(measure, at_least=repeats)
    except KeyboardInterrupt:
        store.finish_run(run_id, "interrupted", prompt_summary(prompt, measured), "interrupted by the user")
        raise
    summary = prompt_summary(prompt, measured)
    if summary["lossless"] is False:  # outside every timing: one more request to the target alone
        summary["divergence"] = divergence(backend, case, measured, logs / "divergence.json")
    store.finish_run(run_id, summary["status"], summary, summary["error"])
    return summary


class _Clock:
    """Progress with an ETA from the prompts measured so far (resumed ones cost nothing)."""

    def __init__(self, total: int) -> None:
        self.total = total
        self.done = 0
        self.measured = 0
        self.start = time.monotonic()

    def tick(self, skipped: bool = False) -> None:
        self.done += 1
        self.measured += 0 if skipped else 1

    def eta(self) -> float | None:
        if not self.measured:
            return None
        return (time.monotonic() - self.start) / self.measured * (self.total - self.done)


def progress_printer(stream: Any = None) -> Event:
    """Progress lines on stderr: each prompt's speedups (decode, end to end), with an ETA."""
    out = stream or sys.stderr
    counts = {"done": 0}

    def on_event(event: str, data: dict[str, Any]) -> None:
        if event == "done":
            counts["done"] += 1
            s = data["summary"]
            eta = data.get("eta")
            eta_text = f", ETA {progress.duration(eta)}" if eta is not None else ""
            if s["status"] != "ok":
                what = f"failed: {s['error']}"
            elif s["ended_early"]:
                what = f"ended early: {s.get('ended_early_note') or str(s['n_predict']) + ' tokens'} (kept out of speedups)"
            else:
                acc = f", accept {s['accept']:.0f}%" if s.get("accept") is not None else ""
                differs = f", OUTPUT {divergence_text(s.get('divergence'), s.get('first_difference'))}"
                e2e = f", {s['e2e_speedup']:.2f}x end to end" if s.get("e2e_speedup") else ""
                what = f"{s['speedup']:.2f}x decode{e2e}{acc}" + ("" if s["lossless"] is not False else differs)
            print(f"[{counts['done']}] {data['case']} {data['prompt']}: {what}{eta_text}", file=out, flush=True)
        elif event == "stopped":
            print(f"{data['case']}: stopped ({data['error']}); {len(data['not_run'])} prompts not run: "
                  "rerun the same command to resume", file=out, flush=True)

    return on_event


# --- statistics --------------------------------------------------------------------------------

def _ratio_of_totals(items: Sequence[dict[str, Any]], basis: str = "") -> float | None:
    bt = sum(i.get(f"baseline_{basis}tokens") or 0 for i in items)
    bs = sum(i.get(f"baseline_{basis}seconds") or 0 for i in items)
    st = sum(i.get(f"speculative_{basis}tokens") or 0 for i in items)
    ss = sum(i.get(f"speculative_{basis}seconds") or 0 for i in items)
    if not (bt and bs and st and ss):
        return None
    return (st / ss) / (bt / bs)


def total_speedup(items: Sequence[dict[str, Any]], end_to_end: bool = False) -> stats.Spread | None:
    """Total-token speedup with a bootstrap interval over prompts (in a Spread: ``median`` holds it).

    Decode (default): tokens after the first over generation time. ``end_to_end``: every
    generated token over the whole request, prompt processing included (the prompts that have
    server timings)."""
    basis, per_key = ("e2e_", "e2e_speedup") if end_to_end else ("", "speedup")
    if end_to_end:
        items = [i for i in items if i.get("e2e_speedup")]
    value = _ratio_of_totals(items, basis)
    if value is None:
        return None
    index = [float(i) for i in range(len(items))]

    def estimator(sample: Sequence[float]) -> float:
        return _ratio_of_totals([items[int(i)] for i in sample], basis) or math.nan

    low, high = stats.bootstrap(index, estimator) if len(items) > 1 else (value, value)
    per = [i[per_key] for i in items if i.get(per_key)]
    return stats.Spread(median=value, low=low, high=high, n=len(items), min=min(per, default=value),
                        max=max(per, default=value), cv=None)


def group_statistics(items: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """Speedups, acceptance and lossless rate over some prompts (a set, or one category)."""
    ok = [i for i in items if i["status"] == "ok"]
    early = [i for i in ok if i["ended_early"]]
    counted = [i for i in ok if not i["ended_early"] and i.get("speedup")]
    speedups = [i["speedup"] for i in counted]
    drafted = sum(i["n_drafted"] or 0 for i in counted)
    accepted = sum(i["n_accept"] or 0 for i in counted)
    rounds = [i["rounds"] for i in counted]
    known_rounds = bool(counted) and all(r is not None for r in rounds)
    n_rounds = sum(r for r in rounds if r is not None)
    lossless = [i["lossless"] for i in ok if i["lossless"] is not None]
    e2e = [i["e2e_speedup"] for i in counted if i.get("e2e_speedup")]
    near_ties = [i["divergence"] for i in ok if i["lossless"] is False and (i.get("divergence") or {}).get("near_tie")]

    def as_dict(s: stats.Spread | None) -> dict[str, Any] | None:
        return s.to_dict() if s else None

    return {
        "prompts": len(items), "counted": len(counted), "ended_early": len(early),
        "failed": len(items) - len(ok),
        "total_speedup": as_dict(total_speedup(counted)),
        "mean_speedup": as_dict(stats.mean_spread(speedups)),
        "geomean_speedup": as_dict(stats.mean_spread(speedups, geometric=True)),
        "median_speedup": as_dict(stats.spread(speedups)),
        # end to end, prompt included (server timings); e2e_counted: counted prompts that have them
        "e2e_counted": len(e2e),
        "e2e_total_speedup": as_dict(total_speedup(counted, end_to_end=True)),
        "e2e_geomean_speedup": as_dict(stats.mean_spread(e2e, geometric=True)),
        "baseline_prompt_ms": _median([i.get("baseline_prompt_ms") for i in counted]),
        "speculative_prompt_ms": _median([i.get("speculative_prompt_ms") for i in counted]),
        "accept": 100.0 * accepted / drafted if drafted else None,
        "n_drafted": drafted, "n_accept": accepted,
        # as backend.Measurement defines them, over the set's rounds (Spec-Bench's tau = tokens per round)
        "tokens_per_round": (accepted + n_rounds) / n_rounds if known_rounds and n_rounds else None,
        "mean_accepted": accepted / n_rounds if known_rounds and n_rounds else None,
        "model": _model_forecast(drafted, accepted, n_rounds if known_rounds else None, speedups),
        "lossless_rate": sum(lossless) / len(lossless) if lossless else None,
        "lossless_checked": len(lossless),
        "differing": sum(1 for i in ok if i["lossless"] is False),
        # differing prompts whose divergence the target alone saw as a near-tie (still not lossless)
        "differs_near_tie": len(near_ties),
        "near_tie_max_gap": max((d["gap"] for d in near_ties if d.get("gap") is not None), default=None),
    }


def _model_forecast(drafted: int, accepted: int, rounds: int | None, speedups: Sequence[float]) -> dict[str, Any] | None:
    """The paper's model through these prompts' one measured point (acceptance and drafted tokens
    per round from the counters, the geometric-mean speedup): alpha, the cost ratio it implies and
    the draft length it predicts best (``theory.fit_one_point``). None without rounds or drafts."""
    if not rounds or not drafted or not speedups:
        return None
    from llamaspec import theory

    fit = theory.fit_one_point(accepted / drafted, drafted / rounds, stats.geometric_mean(speedups))
    if fit is None:
        return None
    return {"alpha": fit.alpha, "drafted_per_round": fit.draft_len, "cost_ratio": fit.cost_ratio,
            "best_draft": fit.best_draft, "best_speedup": fit.best_speedup,
            "basis": "Leviathan et al.'s model through the measured point (verification costs one target step)"}


def set_statistics(items: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """Set-level figures, per-category figures, and the prompts set apart."""
    categories = sorted({i["category"] for i in items})
    return {
        "set": group_statistics(items),
        "categories": {c: group_statistics([i for i in items if i["category"] == c]) for c in categories},
        "ended_early": [{"id": i["id"], "category": i["category"], "n_predict": i["n_predict"],
                         "note": i.get("ended_early_note") or f"{i['n_predict']} tokens"}
                        for i in items if i["status"] == "ok" and i["ended_early"]],
        "failed": [{"id": i["id"], "category": i["category"], "error": i["error"]} for i in items if i["status"] != "ok"],
        "differs": [{"id": i["id"], "category": i["category"], "first_difference": i["first_difference"],
                     "divergence": i.get("divergence"),
                     "label": divergence_text(i.get("divergence"), i["first_difference"])}
                    for i in items if i["lossless"] is False],
    }


def near_tie_note(g: dict[str, Any]) -> str | None:
    """``output differs on 1 of 48 prompts, each at a greedy near-tie (gap <= 0.0035)`` when every
    difference of a group is a probed near-tie; None when its output never differed or when a
    difference is not a near-tie (or was not probed)."""
    differing = g.get("differing")
    if differing is None and g.get("lossless_rate") is not None:  # figures from before "differing" existed
        differing = round((1.0 - g["lossless_rate"]) * g["lossless_checked"])
    if not differing or (g.get("differs_near_tie") or 0) < differing:
        return None
    gap = g.get("near_tie_max_gap")
    bound = f" (gap <= {gap:.2g})" if gap is not None else ""
    return f"output differs on {differing} of {g['lossless_checked']} prompts, each at a greedy near-tie{bound}"


def recommend(methods: dict[str, dict[str, Any]], metric: str = "geomean_speedup") -> dict[str, dict[str, Any]]:
    """Per category (and "all"): the method the one decision rule (``llamaspec.decide``) picks by
    ``metric`` among those whose output never differed or differed only at greedy near-ties, the
    contenders that might still beat it ("tied"), "baseline" when none is a gain ("no draft") or
    "undecided" when the intervals are too wide to tell (with what to measure next).

    A method with a difference that is not a near-tie, or was not probed, is excluded. One whose
    every difference is a near-tie the target alone saw (its top two within NEAR_TIE: float
    rounding of batched verification flips such a pair) stays a candidate, labelled
    (``near_tie_only``, ``note``): its lossless rate stays as measured."""
    out: dict[str, dict[str, Any]] = {}
    names = sorted({c for s in methods.values() for c in s["categories"]}) + ["all"]
    for category in names:
        candidates: list[tuple[str, stats.Spread]] = []
        excluded: list[str] = []
        notes: dict[str, str] = {}
        groups: dict[str, dict[str, Any]] = {}
        for label, figures in methods.items():
            g = figures["set"] if category == "all" else figures["categories"].get(category)
            if not g:
                continue
            groups[label] = g
            if g["lossless_rate"] is not None and g["lossless_rate"] < 1.0:
                note = near_tie_note(g)
                if note is None:
                    excluded.append(label)
                    continue
                notes[label] = note
            spread = stats.Spread.from_dict(g.get(metric))
            if spread is not None:
                candidates.append((label, spread))
        if not candidates:
            out[category] = {"method": None, "reason": "no method with counted prompts and identical output "
                             "(or output that differs only at greedy near-ties)", "excluded": excluded}
            continue
        decision = decide.decide([decide.Candidate(label, label, spread) for label, spread in candidates])
        if decision.verdict != "recommend" or decision.chosen is None:
            best_label = decision.chosen.label if decision.chosen else candidates[0][0]
            out[category] = {"method": "baseline" if decision.verdict == "no draft" else "undecided",
                             "reason": decision.reason, "tied": [], "excluded": excluded,
                             "measure_next": [r.to_dict() for r in decision.requests], "best": best_label}
            continue
        best = decision.chosen.label
        best_spread = decision.chosen.measured
        tied = [e.label for e in decision.contenders]
        g = groups[best]
        out[category] = {"method": best, "speedup": best_spread.to_dict(), "tied": [t for t in tied if t != best],
                         "excluded": excluded, "significant": best_spread.low > 1.0,
                         "reason": decision.reason, "how_sure": decision.sureness,
                         "near_tie_only": best in notes,
                         "differing": g.get("differing", 0) if best in notes else 0,
                         "lossless_checked": g["lossless_checked"],
                         "near_tie_max_gap": g.get("near_tie_max_gap") if best in notes else None,
                         "note": notes.get(best),
                         "tied_near_tie_only": [t for t in tied if t != best and t in notes]}
    return out


def summarize(result: SetRun) -> dict[str, Any]:
    methods = {c.label: set_statistics(c.items) for c in result.cases}
    return {
        "experiment": result.experiment,
        "prompt_set": result.source.label,
        "prompts": len(result.prompts.prompts),
        "skipped_lines": list(result.prompts.skipped),
        "methods": {c.label: {"case": c.case.case, "spec_type": c.case.settings.spec_type or "draft",
                              "draft_len": c.case.settings.draft_max if (c.case.settings.spec_type or "draft") == "draft"
                              else c.case.settings.ngram_size_m, "set_id": c.set_id, **methods[c.label],
                              "not_run": list(c.not_run), "error": c.error}
                    for c in result.cases},
        "recommendation": recommend(methods),
        "recommendation_end_to_end": recommend(methods, "e2e_geomean_speedup"),
        "definitions": DEFINITIONS,
        "complete": result.complete,
    }


# What each family of figures measures (in the JSON, so that a reader of it needs no source).
DEFINITIONS = {
    "decode": "speedup, *_speedup, total_speedup, recommendation: decode speed only, tokens after the first over "
              "the time from the first generated token to the last (prompt processing left out)",
    "end_to_end": "e2e_*, recommendation_end_to_end: end to end, prompt included: generated tokens over the "
                  "request's time on the server, prompt processing plus generation (llama-server timings "
                  "prompt_ms + predicted_ms; HTTP and queueing left out)",
    "prompt_ms": "baseline_prompt_ms / speculative_prompt_ms: prompt processing time per request (median); the "
                 "speculative server processes the prompt with the draft model too",
}


# --- rendering ---------------------------------------------------------------------------------

def _fmt(d: dict[str, Any] | None, suffix: str = "x") -> str:
    s = stats.Spread.from_dict(d)
    return s.text(suffix=suffix) if s else "-"


def _ms(value: float | None) -> str:
    return f"{value:.0f} ms" if value is not None else "-"


def render(summary: dict[str, Any]) -> str:
    lines = [f"{summary['experiment']} over {summary['prompt_set']}: {summary['prompts']} prompts",
             "decode: tokens after the first over generation time (prompt left out); end to end: every generated",
             "token over prompt processing plus generation (server timings). Speedups: speculative over the target",
             "alone, paired per prompt; [95 % bootstrap interval over prompts]."]
    if summary["skipped_lines"]:
        lines.append(f"  skipped {len(summary['skipped_lines'])} malformed entries: {summary['skipped_lines'][0]} ...")
    for label, m in summary["methods"].items():
        s = m["set"]
        lines.append("")
        lines.append(f"{label}")
        lines.append(f"  decode:      total-token speedup {_fmt(s['total_speedup'])}   geometric mean "
                     f"{_fmt(s['geomean_speedup'])}   mean {_fmt(s['mean_speedup'])}   ({s['counted']} prompts counted)")
        if s.get("e2e_counted"):
            lines.append(f"  end to end, prompt included: total-time speedup {_fmt(s['e2e_total_speedup'])}   "
                         f"geometric mean {_fmt(s['e2e_geomean_speedup'])}   ({s['e2e_counted']} prompts)   prompt "
                         f"processing {_ms(s['baseline_prompt_ms'])} alone vs {_ms(s['speculative_prompt_ms'])} "
                         "speculative (median)")
        else:
            lines.append("  end to end, prompt included: - (no prompt timings from this backend)")
        tau = f"{s['tokens_per_round']:.2f}" if s["tokens_per_round"] is not None else "-"
        acc = f"{s['accept']:.1f}%" if s["accept"] is not None else "-"
        rate = f"{100 * s['lossless_rate']:.0f}% of {s['lossless_checked']}" if s["lossless_rate"] is not None else "-"
        mean_acc = f"{s['mean_accepted']:.2f}" if s["mean_accepted"] is not None else "-"
        lines.append(f"  accept {acc}   accepted/round {mean_acc}   tokens/round (Spec-Bench's tau) {tau}"
                     f"   identical output {rate}")
        lines.append(f"  {'':<16} {'':>3} {'decode':^45} {'end to end, prompt included':^45}".rstrip())
        lines.append(f"  {'category':<16} {'n':>3} {'geomean speedup':>22} {'total-token':>22} {'geomean speedup':>22}"
                     f" {'total-time':>22} {'accept':>7} {'same':>5}  model: best draft (alpha)")
        for cat, g in m["categories"].items():
            acc = f"{g['accept']:.0f}%" if g["accept"] is not None else "-"
            same = f"{100 * g['lossless_rate']:.0f}%" if g["lossless_rate"] is not None else "-"
            lines.append(f"  {cat:<16} {g['counted']:>3} {_fmt(g['geomean_speedup']):>22} {_fmt(g['total_speedup']):>22}"
                         f" {_fmt(g.get('e2e_geomean_speedup')):>22} {_fmt(g.get('e2e_total_speedup')):>22}"
                         f" {acc:>7} {same:>5}")
        if any(g.get("model") for g in m["categories"].values()):
            lines.append("  model column: Leviathan et al.'s model through each category's measured point (its "
                         "acceptance and speedup at the drafted length): a forecast to check with a sweep")
        if m["ended_early"]:
            lines.append("  ended early (not in speedups): " + ", ".join(
                f"{e['id']} ({e.get('note') or str(e['n_predict']) + ' tokens'})" for e in m["ended_early"]))
        if m["differs"]:
            lines.append("  OUTPUT DIFFERS from the baseline (counted as not lossless): " + "; ".join(
                f"{d['id']} {d.get('label') or divergence_text(None, d['first_difference'])}" for d in m["differs"]))
        if m["failed"]:
            lines.append("  failed: " + "; ".join(f"{f['id']}: {f['error']}" for f in m["failed"]))
        if m["not_run"]:
            lines.append(f"  NOT RUN ({len(m['not_run'])} prompts, after: {m['error']}); rerun the same command to resume")
    for key, title in (("recommendation", "decode"), ("recommendation_end_to_end", "end to end, prompt included")):
        if key not in summary:
            continue
        lines.append("")
        lines.append(f"Recommendation, {title} (best geometric-mean speedup; a method whose output differs is "
                     "excluded unless every difference is a greedy near-tie):")
        lines.extend(_recommendation_lines(summary[key]))
    return "\n".join(lines)


def _forecast(model: dict[str, Any] | None) -> str:
    if not model:
        return "-"
    return f"k={model['best_draft']} -> {model['best_speedup']:.2f}x (alpha {model['alpha']:.2f})"


def _recommendation_lines(recommendation: dict[str, dict[str, Any]]) -> list[str]:
    lines = []
    for cat, r in recommendation.items():
        excluded = f" (excluded, output differs: {', '.join(r['excluded'])})" if r.get("excluded") else ""
        if r["method"] in (None, "baseline", "undecided"):
            lines.append(f"  {cat:<16} {r['method'] or '-'}: {r['reason']}{excluded}")
        else:
            near = set(r.get("tied_near_tie_only") or ())
            tied = (f"; could still beat it: {', '.join(t + (' (differs at near-ties)' if t in near else '') for t in r['tied'])}"
                    if r["tied"] else "")
            sure = "" if r["significant"] else " (interval includes 1)"
            note = f" - {r['note']}" if r.get("note") else ""
            lines.append(f"  {cat:<16} {r['method']} {_fmt(r['speedup'])}{sure}{note}{tied}{excluded}")
    return lines


# --- plots -------------------------------------------------------------------------------------

def plot(summary: dict[str, Any], out_dir: Path) -> list[Path]:
    """Per-prompt speedup distribution, and speedup and acceptance per category (per method)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    out_dir.mkdir(parents=True, exist_ok=True)
    methods = summary["methods"]
    written: list[Path] = []
    stem = summary["experiment"]

    fig, ax = plt.subplots(figsize=(7, 4))
    for label, m in methods.items():
        values = (m["set"]["geomean_speedup"] or {}).get("values") or []
        if values:
            ax.hist(values, bins=min(20, max(5, len(values) // 2)), alpha=0.5, label=label)
    ax.axvline(1.0, color="black", linewidth=0.8)
    ax.set_xlabel("speedup per prompt (speculative / baseline decode speed)")
    ax.set_ylabel("prompts")
    ax.legend(fontsize=7)
    ax.set_title(f"{stem}: per-prompt speedup")
    written.append(_save(plt, fig, out_dir / f"{stem}-speedup-distribution.png"))

    categories = sorted({c for m in methods.values() for c in m["categories"]})
    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(11, 4))
    width = 0.8 / max(1, len(methods))
    for k, (label, m) in enumerate(methods.items()):
        xs, ys, lo, hi, acc = [], [], [], [], []
        for j, cat in enumerate(categories):
            g = m["categories"].get(cat)
            s = stats.Spread.from_dict((g or {}).get("geomean_speedup"))
            if s is None:
                continue
            xs.append(j + k * width)
            ys.append(s.median)
            lo.append(s.median - s.low)
            hi.append(s.high - s.median)
            acc.append((g or {}).get("accept") or 0.0)
        ax1.bar(xs, ys, width, yerr=[lo, hi], capsize=3, label=label)
        ax2.bar(xs, acc, width, label=label)
    for ax in (ax1, ax2):
        ax.set_xticks([j + width * (len(methods) - 1) / 2 for j in range(len(categories))])
        ax.set_xticklabels(categories, rotation=20, fontsize=8)
    ax1.axhline(1.0, color="black", linewidth=0.8)
    ax1.set_ylabel("geometric-mean speedup (95 % interval)")
    ax2.set_ylabel("draft tokens accepted (%)")
    ax1.legend(fontsize=7)
    fig.suptitle(f"{stem}: per category")
    written.append(_save(plt, fig, out_dir / f"{stem}-categories.png"))
    return written


# --- concurrency -------------------------------------------------------------------------------

CONCURRENCY_REPEATS = 3
MODES = pairs.PAIR_MODES


def run_concurrency(exp: Any, prompt_set: PromptSet, backend: Backend, levels: Sequence[int], *,
                    repeats: int = CONCURRENCY_REPEATS, resolve: Callable[[Any, Any], ResolvedCase] | None = None,
                    on_event: Event | None = None) -> list[dict[str, Any]]:
    """For each case and each N in ``levels``: both servers (target alone, and speculative) started
    with N slots and kept loaded side by side, every prompt's template rendered, then ``repeats``
    pairs of batches: a baseline batch and a speculative batch back to back, in ABBA order over the
    pairs (B S, S B, B S, ...). A batch sends every prompt of the set through N client threads.

    Per level, see :func:`level_figures`: aggregate and per-request throughput per mode over the
    batches, and the speedups as medians of the paired batch ratios with bootstrap intervals."""
    if repeats < 1:
        raise LlamaspecError("concurrency needs at least one pair of batches per level", hint="--repeats 3")
    emit = on_event or (lambda _e, _d: None)
    resolve = resolve or _resolver(backend)
    rows: list[dict[str, Any]] = []
    logs = paths.runs_dir() / "concurrency" / time.strftime("%Y%m%d-%H%M%S")
    cases = [resolve(exp, c) for c in exp.cases]
    total = len(cases) * len(levels) * repeats * len(MODES)
    clock = _Clock(total)
    for case in cases:
        for n in levels:
            level_case = replace(case, settings=replace(case.settings, parallel=n))
            backend.check(level_case)
            log_dir = logs / f"{case.case}-np{n}"
            _warm(level_case, prompt_set.prompts, backend, log_dir)
            batches: list[dict[str, Any]] = []
            for r in range(repeats):
                for mode in pairs.order(r):  # batches have no Measurement of their own: the loop's order
                    batch = _concurrent_batch(level_case, prompt_set.prompts, backend, mode, n, log_dir, r)
                    batches.append(batch)
                    clock.tick()
                    emit("batch", {"case": case.case, "parallel": n, "batch": batch, "eta": clock.eta()})
            backend.close()  # this level's servers hold N slots of context each: not kept for the next level
            row = {"case": case.case, "method": method_label(case), "parallel": n,
                   **level_figures(batches, n, len(prompt_set.prompts))}
            emit("level", row)
            rows.append(row)
    return rows


def _warm(case: ResolvedCase, prompts: Sequence[Prompt], backend: Backend, log_dir: Path) -> None:
    """Both servers started and every prompt rendered before any timed batch; one short request
    per mode so that nothing a first request pays lands in a batch."""
    if backend.capabilities.prepares:
        for p in prompts:
            backend.prepare(prompt_case(case, p))
    short = replace(case, settings=replace(case.settings, n_predict=4))
    for mode in MODES:
        backend.measure(prompt_case(short, prompts[0]), mode, log_dir / f"{mode}-warmup.json")


def _concurrent_batch(case: ResolvedCase, prompts: Sequence[Prompt], backend: Backend, mode: str, clients: int,
                      log_dir: Path, repeat: int = 0) -> dict[str, Any]:
    t0 = time.monotonic()
    with ThreadPoolExecutor(max_workers=clients) as pool:
        measured = list(pool.map(lambda ip: backend.measure(prompt_case(case, ip[1]), mode,
                                                            log_dir / f"{mode}-{repeat}-{ip[0]}.json"),
                                 enumerate(prompts)))
    wall = time.monotonic() - t0
    ok = [m for m in measured if m.ok]
    generated = sum(m.n_predict or 0 for m in ok)
    per_request = [m.decode_tps for m in ok if m.decode_tps]
    return {"mode": mode, "repeat": repeat, "requests": len(measured), "failed": len(measured) - len(ok),
            "generated": generated, "wall_seconds": wall,
            "aggregate_tps": generated / wall if wall > 0 and generated else None,
            "per_request_tps": statistics.median(per_request) if per_request else None,
            "errors": sorted({m.error for m in measured if m.error})[:3]}


def level_figures(batches: Sequence[dict[str, Any]], slots: int, prompts: int) -> dict[str, Any]:
    """One concurrency level's figures from its batches (pure).

    - per mode: ``aggregate_tps`` (tokens the batch generated over its wall time) and
      ``per_request_tps`` (the median request's decode speed in a batch), each a Spread over the
      batches that completed (a batch with a failed request generated less: left out, counted);
    - ``aggregate_speedup`` / ``per_request_speedup``: medians of the paired batch ratios
      (speculative over the baseline batch of the same pair) with 95 % bootstrap intervals;
    - ``pairs``: usable pairs; ``unpaired``: completed batches whose partner failed (their
      throughput is in the per-mode figures, not in any speedup). Without a pair the speedups are
      None and ``paired`` is False: no ratio of batches measured apart is ever reported.
    """
    good = {mode: {b["repeat"]: b for b in batches if b["mode"] == mode and not b["failed"] and b["aggregate_tps"]}
            for mode in MODES}
    both = sorted(set(good["baseline"]) & set(good["speculative"]))
    agg = [good["speculative"][r]["aggregate_tps"] / good["baseline"][r]["aggregate_tps"] for r in both]
    req = [good["speculative"][r]["per_request_tps"] / good["baseline"][r]["per_request_tps"] for r in both
           if good["speculative"][r]["per_request_tps"] and good["baseline"][r]["per_request_tps"]]
    notes: list[str] = []
    if prompts % slots:
        notes.append(f"{prompts} prompts over {slots} slots: the last wave runs {prompts % slots} requests at once")
    if prompts < slots:
        notes.append(f"fewer prompts ({prompts}) than slots ({slots}): the level never runs {slots} requests at once")
    unpaired = sum(len(g) for g in good.values()) - 2 * len(both)
    if unpaired:
        notes.append(f"{unpaired} batch(es) without a completed partner: in the per-mode figures, not in the speedups")

    def per_mode(mode: str) -> dict[str, Any]:
        done = list(good[mode].values())
        mine = [b for b in batches if b["mode"] == mode]
        agg_s = stats.spread([b["aggregate_tps"] for b in done])
        req_s = stats.spread([b["per_request_tps"] for b in done])
        return {"batches": len(mine), "completed": len(done), "failed_requests": sum(b["failed"] for b in mine),
                "aggregate_tps": agg_s.to_dict() if agg_s else None,
                "per_request_tps": req_s.to_dict() if req_s else None,
                "errors": sorted({e for b in mine for e in b["errors"]})[:3], "runs": [dict(b) for b in mine]}

    agg_speedup, req_speedup = stats.spread(agg), stats.spread(req)
    return {"prompts": prompts, "repeats": max((b["repeat"] for b in batches), default=-1) + 1,
            "pairs": len(both), "paired": bool(both), "unpaired": unpaired,
            "baseline": per_mode("baseline"), "speculative": per_mode("speculative"),
            "aggregate_speedup": agg_speedup.to_dict() if agg_speedup else None,
            "per_request_speedup": req_speedup.to_dict() if req_speedup else None,
            "notes": notes}


def render_concurrency(rows: Sequence[dict[str, Any]]) -> str:
    """Throughput against slots: medians over the batches [95 % interval]; speedups are medians
    of paired batch ratios."""
    def fmt(d: dict[str, Any] | None, f: str = "{:.1f}", suffix: str = "") -> str:
        s = stats.Spread.from_dict(d)
        return s.text(f, suffix) if s else "-"

    lines = ["Aggregate t/s: tokens a batch generated over its wall time; per-request t/s: the median request's",
             "decode speed in a batch. Median over the batches [95 % interval]; speedup: median of paired batch ratios.",
             f"{'method':<36} {'N':>2} {'pairs':>5} {'aggregate t/s base':>20} {'spec':>20} {'agg speedup':>19}"
             f" {'per-request t/s base':>20} {'spec':>20} {'per-req speedup':>19}"]
    for r in rows:
        agg = fmt(r["aggregate_speedup"], "{:.2f}", "x") if r["paired"] else "UNPAIRED"
        req = fmt(r["per_request_speedup"], "{:.2f}", "x") if r["paired"] else "UNPAIRED"
        lines.append(f"{r['method'][:36]:<36} {r['parallel']:>2} {r['pairs']:>5}"
                     f" {fmt(r['baseline']['aggregate_tps']):>20} {fmt(r['speculative']['aggregate_tps']):>20} {agg:>19}"
                     f" {fmt(r['baseline']['per_request_tps']):>20} {fmt(r['speculative']['per_request_tps']):>20}"
                     f" {req:>19}")
        for mode in MODES:
            if r[mode]["failed_requests"]:
                lines.append(f"    {mode}: {r[mode]['failed_requests']} failed requests; {'; '.join(r[mode]['errors'])}")
        for note in r["notes"]:
            lines.append(f"    note: {note}")
    return "\n".join(lines)


def plot_concurrency(rows: Sequence[dict[str, Any]], out_dir: Path, stem: str) -> list[Path]:
    """Aggregate and per-request throughput against N, speculative (solid) and its paired baseline
    (dashed) per method, with the 95 % intervals over the batches."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    out_dir.mkdir(parents=True, exist_ok=True)
    fig, axes = plt.subplots(1, 2, figsize=(11, 4))
    methods = list(dict.fromkeys(r["method"] for r in rows))
    colors = plt.rcParams["axes.prop_cycle"].by_key()["color"]
    for k, method in enumerate(methods):
        mine = sorted((r for r in rows if r["method"] == method), key=lambda r: r["parallel"])
        for ax, key in zip(axes, ("aggregate_tps", "per_request_tps"), strict=True):
            for mode, style in (("speculative", "-"), ("baseline", "--")):
                xs, ys, lo, hi = [], [], [], []
                for r in mine:
                    s = stats.Spread.from_dict(r[mode][key])
                    if s is None:
                        continue
                    xs.append(r["parallel"])
                    ys.append(s.median)
                    lo.append(s.median - s.low)
                    hi.append(s.high - s.median)
                if xs:
                    label = method if mode == "speculative" else f"baseline (paired with {method.split(' ')[0]})"
                    ax.errorbar(xs, ys, yerr=[lo, hi], fmt="o" + style, capsize=3, color=colors[k % len(colors)],
                                label=label, alpha=1.0 if mode == "speculative" else 0.6)
    levels = sorted({r["parallel"] for r in rows})
    for ax, title in zip(axes, ("aggregate throughput (t/s)", "per-request decode speed (t/s)"), strict=True):
        ax.set_xscale("log", base=2)
        ax.set_xticks(levels)
        ax.set_xticklabels([str(n) for n in levels])
        ax.set_xlabel("concurrent requests (server slots) N")
        ax.set_ylabel(title)
        ax.set_ylim(bottom=0)
    axes[0].legend(fontsize=7)
    fig.suptitle(f"{stem}: throughput against concurrency (median over batches, 95 % interval)")
    return [_save(plt, fig, out_dir / f"{stem}-concurrency.png")]


def as_json(summary: dict[str, Any]) -> str:
    """Set-level and per-category figures (per-prompt values left out of the intervals' dicts)."""
    def strip(obj: Any) -> Any:
        if isinstance(obj, dict):
            return {k: strip(v) for k, v in obj.items() if k != "values"}
        if isinstance(obj, list):
            return [strip(v) for v in obj]
        return obj
    return json.dumps(strip(summary), indent=2, default=str)


__all__ = ["DEFINITIONS", "CaseSet", "SetRun", "as_json", "divergence", "group_statistics", "level_figures",
           "near_tie_note", "plot", "plot_concurrency", "prompt_summary", "recommend", "render", "render_concurrency",
           "request_totals", "run_concurrency", "run_set", "set_statistics", "source_of", "summarize", "total_speedup"]


def _save(plt: Any, fig: Any, path: Path) -> Path:
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return path
