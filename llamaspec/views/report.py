"""Render run results for people (a console table) and for machines (JSON).

Its size: the one run's console table, its comparison with a write-up's reference, and the
Markdown report of the store (overview, comparisons by build, machine, pair or engine, the
workload's kept answer, the latest sweeps): the views of stored runs for people, each built from
the same rows; the decision itself lives in llamaspec.decision.decide and llamaspec.decision.workload.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import asdict, dataclass
from typing import Any

from llamaspec.base import stats
from llamaspec.base.cpu import CpuInfo
from llamaspec.base.stats import Spread, percent_text
from llamaspec.measure import estimators, spectypes
from llamaspec.measure.contract import SPEED_DEFINITION, Measurement, mean_accepted, tokens_per_round
from llamaspec.measure.summary import FINISHED, CaseResult, Reference, Summary
from llamaspec.registry import engines
from llamaspec.store.rows import STUDY_KIND, built_from, engine_of, measurement_of


def _num(value: float | None, digits: int = 2) -> str:
    return "-" if value is None else f"{value:.{digits}f}"


def _spread(s: Spread | None, digits: int = 2, suffix: str = "") -> str:
    return "-" if s is None else s.text("{:." + str(digits) + "f}", suffix)


def _percent(s: Spread | None, digits: int = 1) -> str:
    """A spread of fractions (acceptance) as percentages."""
    return "-" if s is None else s.percent_text(digits)


def _ratio(measured: float | None, reference: float | None) -> str:
    if measured is None or not reference:
        return ""
    return f"{measured / reference:.2f}x"


@dataclass(frozen=True)
class Seconds:
    """Wall time of one generation, per mode, and the wall-time speedup (baseline seconds over
    speculative seconds, paired as the speed ratios are): what write-ups that timed the whole call
    report (the guanaco table's 69 s and 38 s), next to the decode speeds."""

    speculative: Spread | None
    baseline: Spread | None
    speedup: Spread | None
    n_predict: int | None  # tokens the speculative generations made (median)
    generation_only: bool  # True: the generation call alone (transformers' generate()); False: the engine's
    # whole measurement (llama.cpp: process start and model load included)

    @property
    def basis(self) -> str:
        return "generate() call" if self.generation_only else "whole process, model load included"


def seconds_of(measurements: Sequence[Any]) -> Seconds | None:
    """Seconds from a run's measurements (``Measurement`` objects or stored rows), over its whole
    pairs (``pairs.whole_pairs``, as the speedup is): each pair's baseline seconds over its
    speculative seconds."""
    from llamaspec.measure.pairs import whole_pairs

    whole = [p for p in whole_pairs(m if isinstance(m, Measurement) else measurement_of(m) for m in measurements)
             if p.speculative.wall_seconds and p.baseline.wall_seconds]
    if not whole:
        return None
    spec, base = [p.speculative for p in whole], [p.baseline for p in whole]
    ratios = [p.baseline.wall_seconds / p.speculative.wall_seconds for p in whole]
    counts = sorted(int(m.n_predict) for m in spec if m.n_predict is not None)
    only = all("generate_seconds" in (m.stats or {}) for m in (*spec, *base))
    return Seconds(stats.spread([m.wall_seconds for m in spec]), stats.spread([m.wall_seconds for m in base]),
                   stats.spread(ratios), counts[len(counts) // 2] if counts else None, only)


def _seconds_rows(seconds: Seconds, ref: Reference) -> list[tuple[str, str, str, str]]:
    """Measured seconds against the reference's, the ratio only where both made as many tokens."""
    comparable = ref.n_predict is None or seconds.n_predict == ref.n_predict
    why = "" if comparable else f"n/a ({seconds.n_predict} vs {ref.n_predict} tokens)"

    def ratio(measured: Spread | None, reference: float | None) -> str:
        if reference is None or measured is None:
            return ""
        return _ratio(measured.median, reference) if comparable else why

    ref_speedup = ref.baseline_seconds / ref.seconds if ref.seconds and ref.baseline_seconds else None
    return [
        (f"seconds (speculative; {seconds.basis})", _spread(seconds.speculative, suffix=" s"), _num(ref.seconds),
         ratio(seconds.speculative, ref.seconds)),
        ("seconds (baseline)", _spread(seconds.baseline, suffix=" s"), _num(ref.baseline_seconds),
         ratio(seconds.baseline, ref.baseline_seconds)),
        ("speedup in wall time (baseline s / spec s)", _spread(seconds.speedup, suffix="x"), _num(ref_speedup),
         ratio(seconds.speedup, ref_speedup)),
    ]


def rows(summary: Summary, reference: Reference | None, seconds: Seconds | None = None) -> list[tuple[str, str, str, str]]:
    """The metric rows of a run against its reference. With ``seconds``, wall times too: where the
    generation call alone was timed (transformers) or the reference gives seconds (a write-up that
    timed the whole call)."""
    s = summary
    ref = reference or Reference()
    med = lambda sp: sp.median if sp else None  # noqa: E731
    # the write-up's numbers come from Sep 2023's `speculative`, which counts rounds as llama-speculative does
    ref_rounds = (engines.round_profile("llama-speculative").rounds(ref.n_predict, ref.n_accept)
                  if ref.n_predict is not None and ref.n_accept is not None else None)
    ref_tpr, ref_mal = tokens_per_round(ref.n_accept, ref_rounds), mean_accepted(ref.n_accept, ref_rounds)
    out = [
        ("decode t/s (speculative)", _spread(s.decode_tps), _num(ref.decode_tps), _ratio(med(s.decode_tps), ref.decode_tps)),
        ("encode t/s (speculative)", _spread(s.encode_tps), _num(ref.encode_tps), _ratio(med(s.encode_tps), ref.encode_tps)),
        ("decode t/s (baseline)", _spread(s.baseline_decode_tps)
         + (f", CV {percent_text(s.baseline_decode_tps.cv, 1)}" if s.baseline_decode_tps and s.baseline_decode_tps.cv is not None else ""), "-", ""),
        ("speedup" + ("" if s.paired else " (shared baseline, unpaired)"), _spread(s.speedup, suffix="x"), _num(ref.speedup),
         _ratio(med(s.speedup), ref.speedup)),
        ("acceptance", _percent(s.acceptance, 3), percent_text(ref.acceptance, 3), _ratio(med(s.acceptance), ref.acceptance)),
        ("draft length (asked / policy)", f"{s.draft.label} / {s.draft.policy or '-'}", "-", ""),
        ("n_drafted", str(s.n_drafted if s.n_drafted is not None else "-"), str(ref.n_drafted or "-"), _ratio(s.n_drafted, ref.n_drafted)),
        ("n_accept", str(s.n_accept if s.n_accept is not None else "-"), str(ref.n_accept or "-"), _ratio(s.n_accept, ref.n_accept)),
        ("n_predict", str(s.n_predict if s.n_predict is not None else "-"), str(ref.n_predict or "-"), ""),
        ("rounds (target verifications)", str(s.rounds if s.rounds is not None else "-"), str(ref_rounds if ref_rounds else "-"), ""),
        ("tokens per round (tau)", _num(s.tokens_per_round), _num(ref_tpr), _ratio(s.tokens_per_round, ref_tpr)),
        ("mean accepted length", _num(s.mean_accepted), _num(ref_mal), _ratio(s.mean_accepted, ref_mal)),
        ("peak memory (spec/base)", f"{_mib(s.peak_rss_bytes)} / {_mib(s.baseline_peak_rss_bytes)}", "-", ""),
    ]
    if seconds is not None and (seconds.generation_only or ref.seconds or ref.baseline_seconds):
        out[3:3] = _seconds_rows(seconds, ref)  # after the decode speeds, before the speed ratio
    return out


def _mib(value: int | None) -> str:
    return "-" if not value else f"{value / 2**20:.0f} MiB"


def columns(rows: Sequence[Sequence[str]]) -> list[str]:
    """Rows of cells as lines of left-aligned columns, two spaces apart."""
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    return ["  ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)).rstrip() for r in rows]


def table(title: str, summary: Summary, reference: Reference | None, seconds: Seconds | None = None) -> str:
    lines = [title]
    body = rows(summary, reference, seconds)
    header = ("metric", "measured (median [95% CI])", f"reference{' (' + reference.hardware + ')' if reference and reference.hardware else ''}", "ratio")
    lines += ["  " + line for line in columns([header, *body])]
    lines.append(f"  lossless: {summary.lossless.text()}")
    if (positions := summary.positions_text()) is not None:
        lines.append(f"  {positions}")
    lines.append(f"  speed: {summary.speed_definition}")
    for mode, basis in summary.speed_basis.items():
        lines.append(f"    {mode}: {basis}")
    if summary.noise is not None:
        lines.append(f"  machine: {summary.noise.text()} (measured over {summary.noise.windows} generations)")
    for warning in summary.warnings:
        lines.append(f"  warning: {warning}")
    return "\n".join(lines)


def case_title(result: CaseResult) -> str:
    case = result.case
    s = case.settings
    if case.draft is not None or spectypes.needs_draft(s.spec_type):
        draft = f"{case.draft.label if case.draft else 'none'}, draft_max {s.draft_max}"
    else:  # a draft-free mode: its own sizes, where set (draft_max means nothing to it)
        sizes = "".join(f", {k[-1]}={getattr(s, k)}" for k in ("ngram_size_n", "ngram_size_m") if getattr(s, k) is not None)
        draft = f"none ({s.spec_type}{sizes})"
    engine = result.engine
    # the program is a setting only where the engine takes it (None: the result does not say)
    takes = result.engine_settings
    program = f", program {case.settings.program}" if takes is None or "program" in takes else ""
    sampled = f", temperature {case.settings.temperature:g} (sampled)" if (case.settings.temperature or 0) > 0 else ""
    passed = (f"\n  passed through to both sides: {' '.join(case.settings.extra_args)}"
              if case.settings.extra_args else "")
    return (f"{case.experiment} / {case.case}  [run {result.run_id}, {result.status}{', ' + engine if engine else ''}]\n"
            f"  target {case.target.label}, draft {draft}, "
            f"n_predict {case.settings.n_predict}, threads {case.settings.threads}{program}{sampled}{passed}")


def render(results: Sequence[CaseResult]) -> str:
    blocks = []
    for r in results:
        text = table(case_title(r), r.summary, r.reference, seconds_of(r.measurements))
        if r.status not in FINISHED:
            text += f"\n  error: {r.error}"
        blocks.append(text)
    return "\n\n".join(blocks)


def as_json(results: Sequence[Any]) -> list[dict[str, Any]]:
    return [{"run_id": r.run_id, "experiment": r.case.experiment, "case": r.case.case, "status": r.status,
             "error": r.error, "settings": asdict(r.case.settings), "target": asdict(r.case.target),
             "draft": asdict(r.case.draft) if r.case.draft else None,
             "reference": asdict(r.reference) if r.reference else None, "summary": r.summary.to_dict()} for r in results]


# --- Markdown reports from the results store ---------------------------------------------------

def engine_name(run: dict[str, Any]) -> str:
    """The engine that measured a stored run (the store fills it in for runs stored before it had a column)."""
    return str(run.get("engine") or "?")


def _version(run: dict[str, Any]) -> str:
    return f"{run.get('engine_version')}" + (f" ({run['accel']})" if run.get("accel") else "")


def engine_label(run: dict[str, Any]) -> str:
    """The engine with its version: an engine built from source, by its build's commit and accel; an
    engine in a library, by its identity (library versions, device)."""
    if built_from(run):
        return f"{engine_name(run)} {_version(run)}"
    return str((run.get("provenance") or {}).get("identity") or engine_name(run))


def build_label(run: dict[str, Any]) -> str:
    """The build that measured a stored run: the source tree and its commit (two engines built from one
    tree share a build), or a library engine's identity."""
    source = built_from(run)
    return f"{source} {_version(run)}" if source else engine_label(run)


def pair_label(run: dict[str, Any]) -> str:
    draft = run.get("draft") or f"no draft ({(run.get('settings') or {}).get('spec_type') or 'draft'})"
    return f"{run.get('target')} + {draft}"

def machine_label(run: dict[str, Any]) -> str:
    """The host and its CPU's kind: two VMs that both call their CPU "AMD EPYC" are told apart."""
    hw = (run.get("provenance") or {}).get("hardware") or {}
    return f"{hw.get('host', '?')} / {CpuInfo.from_hardware(hw).short()}"


COMPARE_BY = {
    "build": build_label,
    "machine": lambda run: run.get("machine") or machine_label(run),
    "pair": lambda run: f"{run.get('target')} + {run.get('draft') or 'no draft'}",
    "engine": lambda run: f"{engine_name(run)} · {pair_label(run)}",
}


def _reference_as_run(run: dict[str, Any]) -> tuple[Reference | None, str | None]:
    """The reference block stored with the run (as it was when run), and a line saying whether the
    experiment file has changed since."""
    import hashlib
    from pathlib import Path

    info = (run.get("provenance") or {}).get("experiment") or {}
    if not info.get("reference"):
        return None, None
    ref = Reference.from_dict(info["reference"])
    path = Path(info.get("path") or "")
    try:
        now = hashlib.sha256(path.read_bytes()).hexdigest()
    except OSError:
        return ref, f"Ran `{path}` (sha256 {str(info.get('sha256'))[:12]}); that file is gone now."
    same = now == info.get("sha256")
    return ref, (f"Ran `{path}` (sha256 {str(info.get('sha256'))[:12]})"
                 + ("; unchanged since." if same else f"; **the file has changed since** (now {now[:12]}): "
                    "the figures below are the reference as it was when run."))


def _md_table(header: Sequence[str], body: Sequence[Sequence[str]]) -> str:
    lines = ["| " + " | ".join(header) + " |", "|" + "|".join(" --- " for _ in header) + "|"]
    lines += ["| " + " | ".join(str(c) for c in row) + " |" for row in body]
    return "\n".join(lines)


def markdown(store: Any, experiment_name: str | Sequence[str], compare_by: str | None = None, plot: bool = True) -> str:
    """A Markdown summary of one or more experiments from the store; with ``compare_by``, their runs
    grouped by build, machine, model pair or engine (runs of the same pair by each engine side by
    side) next to each other."""
    names, compare_by, stored, ok = _select(store, experiment_name, compare_by)
    several = len(names) > 1
    out = [f"# {', '.join(names)}", ""]
    for name in names:
        out += ([f"## {name}", ""] if several else []) + _overview(stored[name], ok[name])
    if compare_by == "engine":
        out += _compare_engines([r for name in names for r in ok[name]])
    elif compare_by:
        out += _compare(compare_by, [r for name in names for r in ok[name]])
    for name in names:
        out += _details(store, name, stored[name], ok[name], plot, "## " if not several else "## " + name + ": ")
    return "\n".join(out).rstrip() + "\n"


def _select(store: Any, experiment_name: str | Sequence[str], compare_by: str | None
            ) -> tuple[list[str], str | None, dict[str, list[dict[str, Any]]], dict[str, list[dict[str, Any]]]]:
    """What a report shows: the names, the grouping, each experiment's stored runs and its ok ones."""
    from llamaspec.base.errors import LlamaspecError

    names = [experiment_name] if isinstance(experiment_name, str) else list(dict.fromkeys(experiment_name))
    if compare_by and compare_by not in COMPARE_BY:
        raise LlamaspecError(f"cannot compare by {compare_by!r}", hint=f"use one of {', '.join(COMPARE_BY)}")
    stored: dict[str, list[dict[str, Any]]] = {}
    for name in names:
        # A cluster study's own row only points at its machine's stored points: not a run of its own
        # (cluster-tune: the kind such rows had before `tune` became `sweep`).
        # (a study's decision row is its answer, not a run: shown apart, from the newest)
        stored[name] = [r for r in store.runs(experiment=name) if r["kind"] not in ("cluster-study", "cluster-tune", STUDY_KIND)]
        if not stored[name]:
            raise LlamaspecError(f"no runs of {name!r} in {store.path}", hint=f"run `llamaspec run {name}` first")
    return names, compare_by, stored, {name: [r for r in runs if r["status"] in FINISHED] for name, runs in stored.items()}


def data(store: Any, experiment_name: str | Sequence[str], compare_by: str | None = None, plot: bool = True) -> dict[str, Any]:
    """The report's data (``report --json``), from the runs its Markdown shows: per experiment the
    counts, the study's kept answer, the plain runs, the latest sweeps and the recent failures; with
    ``compare_by``, each group's runs and the one that stands for it."""
    from llamaspec.views import analysis

    names, compare_by, stored, ok = _select(store, experiment_name, compare_by)
    keys = ("id", "started_at", "kind", "case_name", "status", "engine", "target", "draft", "draft_max", "settings", "summary")
    out: dict[str, Any] = {"experiments": [], "compare_by": compare_by}
    for name in names:
        answer = stored_answer(store, name)
        counts = {s: sum(r["status"] == s for r in stored[name]) for s in ("ok", "differs", "failed", "interrupted")}
        out["experiments"].append({
            "name": name, "runs": {"stored": len(stored[name]), **counts},
            "answer": (answer.get("summary") or {}).get("study") if answer else None,
            "plain_runs": [{k: r.get(k) for k in keys} for r in ok[name] if r["kind"] == "run"],
            "sweeps": [analysis.sweep_report(store, sweep_id, plot=plot).as_dict() for sweep_id in _latest_sweeps(ok[name])],
            "failures": [{"id": r["id"], "error": r.get("error")} for r in stored[name] if r["status"] == "failed"][:5]})
    choose = _chosen if compare_by == "engine" else _best
    groups = _groups(compare_by, [r for name in names for r in ok[name]]) if compare_by else {}
    out["groups"] = {label: {"runs": [r["id"] for r in rs], "chosen": choose(rs)["id"]} for label, rs in groups.items()}
    return out


def _latest_sweeps(ok: list[dict[str, Any]]) -> list[str]:
    """A sweep is one case's: the newest sweep of each case, newest first."""
    latest: dict[str, str] = {}
    for r in ok:
        if r["kind"] == "sweep":
            latest.setdefault(r["case_name"], r["group_id"])
    return list(dict.fromkeys(latest.values()))


def _overview(runs: list[dict[str, Any]], ok: list[dict[str, Any]]) -> list[str]:
    latest = ok[0] if ok else runs[0]
    prov = latest.get("provenance") or {}
    hw = prov.get("hardware") or {}
    engine = engine_label(latest)
    if built_from(latest):  # the build's CMake flags
        engine += f", flags: `{' '.join(engine_of(prov).get('cmake_args') or [])}`"
    return [f"- latest run: {latest['id']} ({latest['started_at']}), {engine}",
            f"- hardware: {CpuInfo.from_hardware(hw).text()}; {hw.get('cores')} cores, {(hw.get('memory_bytes') or 0) / 2**30:.0f} GiB, "
            f"{', '.join(hw.get('gpus') or []) or 'no GPU'}",
            *_other_cpus(runs, CpuInfo.from_hardware(hw).text()),
            f"- runs stored: {len(runs)} ({len(ok)} ok, {sum(r['status'] == 'failed' for r in runs)} failed, "
            f"{sum(r['status'] == 'interrupted' for r in runs)} interrupted)", ""]


def _other_cpus(runs: list[dict[str, Any]], latest: str) -> list[str]:
    """A line naming the runs measured on another kind of CPU than the latest one, if any: their
    speeds (and often their speedups) are not comparable."""
    by_cpu: dict[str, list[int]] = {}
    for r in runs:
        text = CpuInfo.from_hardware((r.get("provenance") or {}).get("hardware") or {}).text()
        by_cpu.setdefault(text, []).append(r["id"])
    others = [f"{text} (runs {', '.join(map(str, sorted(ids)))})" for text, ids in by_cpu.items() if text != latest]
    return [f"- also measured on: {'; '.join(others)}"] if others else []


def _best(rs: list[dict[str, Any]]) -> dict[str, Any]:
    """The run the one decision rule picks among those with an unchanged output (if any): shown
    faster, the cheapest near the best (``decide.decide``), not the highest median (a best-of is
    biased upwards); where it picks none, its best estimate; the newest where none has a speedup."""
    from llamaspec.decision import decide

    lossless = [r for r in rs if r["status"] == "ok"] or rs
    found = [decide.Candidate(r["id"], str(r["id"]), sp, (float(r.get("draft_max") or 0),))
             for r in lossless if (sp := Summary.from_dict(r.get("summary")).speedup) is not None]
    chosen = decide.decide(found).chosen if found else None
    return next((r for r in lossless if chosen is not None and r["id"] == chosen.key), max(lossless, key=lambda r: r["id"]))


def _groups(compare_by: str, ok: list[dict[str, Any]]) -> dict[str, list[dict[str, Any]]]:
    groups: dict[str, list[dict[str, Any]]] = {}
    for r in ok:
        groups.setdefault(COMPARE_BY[compare_by](r), []).append(r)
    return groups


def _compare(compare_by: str, ok: list[dict[str, Any]]) -> list[str]:
    out = [f"## Compared by {compare_by}", ""]
    body = []
    for label, rs in _groups(compare_by, ok).items():
        best = _best(rs)
        s = Summary.from_dict(best.get("summary"))
        body.append([label, str(len(rs)), str(best["draft_max"]), _spread(s.decode_tps),
                     _spread(s.baseline_decode_tps), _spread(s.speedup, suffix="x"),
                     _percent(s.acceptance), str(best["id"])])
    return out + [_md_table(["group", "runs", "best draft", "spec t/s", "baseline t/s", "speedup [95% CI]", "acceptance", "run"],
                            body), ""]


def _chosen(rs: list[dict[str, Any]]) -> dict[str, Any]:
    """The run that stands for a group of one pair on one engine: the newest plain run, not the
    luckiest of many (a best-of is biased upwards); a sweep's best point where there is none."""
    plain = [r for r in rs if r["kind"] == "run"]
    return max(plain, key=lambda r: r["id"]) if plain else _best(rs)


# Settings that change what a speedup means: a pair measured by two engines under different values
# of these is flagged (threads and dtypes change absolute speeds, which are not compared anyway).
_SAME_FOR_COMPARISON = ("n_predict", "temperature", "seed")


def _compare_engines(ok: list[dict[str, Any]]) -> list[str]:
    """Each model pair's runs per engine, side by side: speed, speedup, acceptance, lossless.

    Absolute speeds of two engines are not comparable (other kernels, other weight formats, each
    engine's own timing); each speedup is paired with its own engine's baseline, so speedups are."""
    pairs: dict[str, dict[str, list[dict[str, Any]]]] = {}
    for r in ok:
        pairs.setdefault(pair_label(r), {}).setdefault(engine_name(r), []).append(r)
    out = ["## Compared by engine", "",
           "Absolute speeds (t/s) of different engines are **not comparable**: each runs its own kernels on its own "
           "weight format (transformers dequantizes a GGUF file to float32) and times decoding its own way (the "
           "speed basis below). Each speedup is against **its own engine's baseline**, measured next to it, "
           "so the speedups (and acceptance, and the lossless verdicts) are what compares across engines.", ""]
    body = []
    notes: list[str] = []
    bases: dict[str, set[str]] = {}
    for pair in sorted(pairs, key=lambda p: (-len(pairs[p]), p)):
        by_engine = pairs[pair]
        for engine in sorted(by_engine):
            rs = by_engine[engine]
            best = _chosen(rs)
            s = Summary.from_dict(best.get("summary"))
            differ = sum(r["status"] == "differs" for r in rs)
            lossless = s.lossless.text().split(" (")[0] + (f"; {differ} of {len(rs)} runs DIFFER" if differ else "")
            settings = best.get("settings") or {}
            body.append([pair, engine_label(best), f"{best['experiment']} / {best['case_name']}", str(len(rs)),
                         str(best["draft_max"]), str(settings.get("n_predict")), str(settings.get("threads")),
                         _spread(s.decode_tps), _spread(s.baseline_decode_tps),
                         _spread(s.speedup, suffix="x") + ("" if s.paired else " (unpaired)"), _percent(s.acceptance),
                         lossless, str(best["id"])])
            for mode, basis in s.speed_basis.items():
                bases.setdefault(engine, set()).add(f"{mode}: {basis}")
        if len(by_engine) < 2:
            notes.append(f"- {pair}: measured by {next(iter(by_engine))} only.")
            continue
        chosen = {engine: _chosen(rs).get("settings") or {} for engine, rs in by_engine.items()}
        for key in _SAME_FOR_COMPARISON:
            values = {engine: chosen[engine].get(key) for engine in chosen}
            if len(set(map(str, values.values()))) > 1:
                notes.append(f"- {pair}: **{key} differs between the engines** "
                             f"({', '.join(f'{e} {v}' for e, v in sorted(values.items()))}): the speedups answer "
                             "different questions.")
    out += [_md_table(["pair", "engine", "experiment / case", "runs", "draft", "n_predict", "threads",
                       "spec t/s", "baseline t/s", "speedup [95% CI]", "acceptance", "lossless", "run"], body), ""]
    out += ["Each row is the engine's newest `llamaspec run` of that pair (where the pair was only swept: the sweep "
            "point the decision rule picks among those with an unchanged output); `runs` counts all of them, sweep "
            "points included.", ""]
    if notes:
        out += notes + [""]
    out += ["Speed basis per engine:", ""] + [f"- {engine}: {'; '.join(sorted(b))}" for engine, b in sorted(bases.items())] + [""]
    return out


def stored_answer(store: Any, target: str) -> dict[str, Any] | None:
    """The newest answer a study kept as it was made (its row of kind ``STUDY_KIND``): of the study
    named ``target`` (its experiment's name), of the study whose id it is, or of the study one of
    whose prompts' sweeps (``STUDY/PROMPT``) it names. Every view of a study prints this; none
    decides again."""
    study = target.split("/")[0]
    return next((r for r in store.runs(kind=STUDY_KIND) if r["status"] == "ok"
                 and (r["experiment"] == target or r.get("group_id") in (target, study))), None)


def answer_text(answer: dict[str, Any]) -> str:
    """The study's answer, the same lines the command that made it printed."""
    return str((answer.get("summary") or {}).get("text", "")).rstrip()


def _details(store: Any, name: str, runs: list[dict[str, Any]], ok: list[dict[str, Any]], plot: bool, head: str) -> list[str]:
    from llamaspec.views import analysis

    out: list[str] = []
    answer = stored_answer(store, name)
    if answer is not None:  # the workload's one decision, as the sweep or tune that made it printed it
        out += [f"{head}The workload's answer (study {answer['group_id']}, {answer['finished_at']})", "",
                "```", answer_text(answer), "```", ""]
    plain = [r for r in ok if r["kind"] == "run"]
    if plain:
        out += [f"{head}Runs", ""]
        body = []
        for r in plain[:20]:
            s = Summary.from_dict(r.get("summary"))
            body.append([str(r["id"]), r["case_name"], pair_label(r), str(r["draft_max"]),
                         _spread(s.decode_tps), _spread(s.baseline_decode_tps),
                         _spread(s.speedup, suffix="x") + ("" if s.paired else " (unpaired)"), _percent(s.acceptance),
                         s.lossless.text().split(" (")[0], r["status"]])
        out += [_md_table(["run", "case", "pair", "draft", "spec t/s", "baseline t/s", "speedup [95% CI]", "acceptance",
                           "lossless", "status"], body), ""]
        out += [f"Speed: {SPEED_DEFINITION}. Speedup: {estimators.POINT}.", ""]
        seen: set[str] = set()
        for r in plain:
            if r["case_name"] in seen:
                continue
            seen.add(r["case_name"])
            ref, ran = _reference_as_run(r)
            if ref is None:
                continue
            out += [f"### Run {r['id']} against the reference ({ref.hardware})", ""]
            out += [ran, ""] if ran else []
            seconds = seconds_of(store.measurements(r["id"]))
            out += [_md_table(["metric", "measured", "reference", "ratio"],
                              [list(row) for row in rows(Summary.from_dict(r.get("summary")), ref, seconds)]), ""]
    latest = _latest_sweeps(ok)
    if latest:
        out += [f"{head}Latest sweep" + ("s (one per case)" if len(latest) > 1 else ""), ""]
    for sweep_id in latest:
        rep = analysis.sweep_report(store, sweep_id, plot=plot)
        out += ["```", rep.render(), "```", ""]
        for label, figures in rep.plots.items():
            out += [f"![{label or 'sweep'}]({p})" for p in figures if p.name.startswith("dashboard") and p.suffix == ".png"]
    failed = [r for r in runs if r["status"] == "failed"][:5]
    if failed:
        out += ["", f"{head}Recent failures", ""] + [f"- run {r['id']}: {r.get('error')}" for r in failed]
    return out
