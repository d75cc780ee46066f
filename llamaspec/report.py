"""Render run results for people (a console table) and for machines (JSON)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import asdict
from typing import Any

from llamaspec.backend import SPEED_DEFINITION
from llamaspec.experiment import Reference
from llamaspec.stats import Spread
from llamaspec.summary import Summary


def _num(value: float | None, digits: int = 2) -> str:
    return "-" if value is None else f"{value:.{digits}f}"


def _spread(s: Spread | None, digits: int = 2, suffix: str = "") -> str:
    return "-" if s is None else s.text("{:." + str(digits) + "f}", suffix)


def _ratio(measured: float | None, reference: float | None) -> str:
    if measured is None or not reference:
        return ""
    return f"{measured / reference:.2f}x"


def rows(summary: Summary, reference: Reference | None) -> list[tuple[str, str, str, str]]:
    s = summary
    ref = reference or Reference()
    med = lambda sp: sp.median if sp else None  # noqa: E731
    ref_rounds = ref.n_predict - ref.n_accept - 1 if ref.n_predict is not None and ref.n_accept is not None else None
    out = [
        ("decode t/s (speculative)", _spread(s.decode_tps), _num(ref.decode_tps), _ratio(med(s.decode_tps), ref.decode_tps)),
        ("encode t/s (speculative)", _spread(s.encode_tps), _num(ref.encode_tps), _ratio(med(s.encode_tps), ref.encode_tps)),
        ("decode t/s (baseline)", _spread(s.baseline_decode_tps)
         + (f", CV {s.baseline_decode_tps.cv:.1%}" if s.baseline_decode_tps and s.baseline_decode_tps.cv is not None else ""), "-", ""),
        ("speedup" + ("" if s.paired else " (shared baseline, unpaired)"), _spread(s.speedup, suffix="x"), _num(ref.speedup),
         _ratio(med(s.speedup), ref.speedup)),
        ("accept %", _spread(s.accept, 3), _num(ref.accept_pct, 3), _ratio(med(s.accept), ref.accept_pct)),
        ("draft length (asked / policy)", f"{s.draft.label} / {s.draft.policy or '-'}", "-", ""),
        ("n_drafted", str(s.n_drafted if s.n_drafted is not None else "-"), str(ref.n_drafted or "-"), _ratio(s.n_drafted, ref.n_drafted)),
        ("n_accept", str(s.n_accept if s.n_accept is not None else "-"), str(ref.n_accept or "-"), _ratio(s.n_accept, ref.n_accept)),
        ("n_predict", str(s.n_predict if s.n_predict is not None else "-"), str(ref.n_predict or "-"), ""),
        ("rounds (target verifications)", str(s.rounds if s.rounds is not None else "-"), str(ref_rounds if ref_rounds else "-"), ""),
        ("tokens per round", _num(s.tokens_per_round),
         _num(ref.n_predict / ref_rounds) if ref_rounds and ref.n_predict else "-",
         _ratio(s.tokens_per_round, ref.n_predict / ref_rounds) if ref_rounds and ref.n_predict else ""),
        ("mean accepted length", _num(s.mean_accepted),
         _num(ref.n_accept / ref_rounds) if ref_rounds and ref.n_accept is not None else "-",
         _ratio(s.mean_accepted, ref.n_accept / ref_rounds) if ref_rounds and ref.n_accept else ""),
        ("peak memory (spec/base)", f"{_mib(s.peak_rss_bytes)} / {_mib(s.baseline_peak_rss_bytes)}", "-", ""),
    ]
    return out


def _mib(value: int | None) -> str:
    return "-" if not value else f"{value / 2**20:.0f} MiB"


def table(title: str, summary: Summary, reference: Reference | None) -> str:
    lines = [title]
    body = rows(summary, reference)
    header = ("metric", "measured (median [95% CI])", f"reference{' (' + reference.hardware + ')' if reference and reference.hardware else ''}", "ratio")
    widths = [max(len(r[i]) for r in [header, *body]) for i in range(4)]
    for r in [header, *body]:
        lines.append("  " + "  ".join(cell.ljust(widths[i]) for i, cell in enumerate(r)).rstrip())
    lines.append(f"  lossless: {summary.lossless.text()}")
    lines.append(f"  speed: {summary.speed_definition}")
    for mode, basis in summary.speed_basis.items():
        lines.append(f"    {mode}: {basis}")
    for warning in summary.warnings:
        lines.append(f"  warning: {warning}")
    return "\n".join(lines)


def case_title(result: Any) -> str:
    case = result.case
    draft = case.draft.label if case.draft else f"none ({case.settings.spec_type})"
    return (f"{case.experiment} / {case.case}  [run {result.run_id}, {result.status}]\n"
            f"  target {case.target.label}, draft {draft}, draft_max {case.settings.draft_max}, "
            f"n_predict {case.settings.n_predict}, threads {case.settings.threads}, program {case.settings.program}")


def render(results: Sequence[Any]) -> str:
    blocks = []
    for r in results:
        text = table(case_title(r), r.summary, r.reference)
        if r.status not in ("ok", "differs"):
            text += f"\n  error: {r.error}"
        blocks.append(text)
    return "\n\n".join(blocks)


def as_json(results: Sequence[Any]) -> list[dict[str, Any]]:
    return [{"run_id": r.run_id, "experiment": r.case.experiment, "case": r.case.case, "status": r.status,
             "error": r.error, "settings": asdict(r.case.settings), "target": asdict(r.case.target),
             "draft": asdict(r.case.draft) if r.case.draft else None,
             "reference": asdict(r.reference) if r.reference else None, "summary": r.summary.to_dict()} for r in results]


# --- Markdown reports from the results store ---------------------------------------------------

COMPARE_BY = {
    "build": lambda run: f"llama.cpp {run.get('llamacpp_commit')} ({run.get('backend')})",
    "machine": lambda run: run.get("machine") or (((run.get("provenance") or {}).get("hardware") or {}).get("host", "?")
                                                  + " / " + ((run.get("provenance") or {}).get("hardware") or {}).get("cpu", "?")),
    "pair": lambda run: f"{run.get('target')} + {run.get('draft') or 'no draft'}",
}


_ZERO = Spread(0.0, 0.0, 0.0, 0, 0.0, 0.0, None)


def _reference_as_run(run: dict[str, Any]) -> tuple[Reference | None, str | None]:
    """The reference block stored with the run (as it was when run), and a line saying whether the
    experiment file has changed since."""
    import hashlib
    from pathlib import Path

    info = (run.get("provenance") or {}).get("experiment") or {}
    if not info.get("reference"):
        return None, None
    ref = Reference(**info["reference"])
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


def markdown(store: Any, experiment_name: str, compare_by: str | None = None, plot: bool = True) -> str:
    """A Markdown summary of an experiment from the store; with ``compare_by``, its runs grouped by
    build, machine or model pair side by side."""
    from llamaspec import analysis
    from llamaspec.errors import LlamaspecError

    runs = store.runs(experiment=experiment_name)
    if not runs:
        raise LlamaspecError(f"no runs of {experiment_name!r} in {store.path}",
                             hint=f"run `llamaspec run {experiment_name}` first")
    ok = [r for r in runs if r["status"] in ("ok", "differs")]
    out = [f"# {experiment_name}", ""]
    latest = ok[0] if ok else runs[0]
    prov = latest.get("provenance") or {}
    hw = prov.get("hardware") or {}
    out += [f"- latest run: {latest['id']} ({latest['started_at']}), llama.cpp {latest.get('llamacpp_commit')} "
            f"({latest.get('backend')}), flags: `{' '.join((prov.get('engine') or prov.get('llamacpp') or {}).get('cmake_args') or [])}`",
            f"- hardware: {hw.get('cpu')} ({hw.get('cores')} cores, {(hw.get('memory_bytes') or 0) / 2**30:.0f} GiB), "
            f"{', '.join(hw.get('gpus') or []) or 'no GPU'}",
            f"- runs stored: {len(runs)} ({len(ok)} ok, {sum(r['status'] == 'failed' for r in runs)} failed, "
            f"{sum(r['status'] == 'interrupted' for r in runs)} interrupted)", ""]
    if compare_by:
        if compare_by not in COMPARE_BY:
            raise LlamaspecError(f"cannot compare by {compare_by!r}", hint=f"use one of {', '.join(COMPARE_BY)}")
        key = COMPARE_BY[compare_by]
        groups: dict[str, list[dict[str, Any]]] = {}
        for r in ok:
            groups.setdefault(key(r), []).append(r)
        out += [f"## Compared by {compare_by}", ""]
        body = []
        for label, rs in groups.items():
            lossless = [r for r in rs if r["status"] == "ok"] or rs
            best = max(lossless, key=lambda r: (Summary.from_dict(r.get("summary")).speedup or _ZERO).median)
            s = Summary.from_dict(best.get("summary"))
            body.append([label, str(len(rs)), str(best["draft_max"]), _spread(s.decode_tps),
                         _spread(s.baseline_decode_tps), _spread(s.speedup, suffix="x"),
                         _spread(s.accept, 1), str(best["id"])])
        out += [_md_table(["group", "runs", "best draft", "spec t/s", "baseline t/s", "speedup [95% CI]", "accept %", "run"], body), ""]
    plain = [r for r in ok if r["kind"] == "run"]
    if plain:
        out += ["## Runs", ""]
        body = []
        for r in plain[:20]:
            s = Summary.from_dict(r.get("summary"))
            body.append([str(r["id"]), r["case_name"], f"{r.get('target')} + {r.get('draft')}", str(r["draft_max"]),
                         _spread(s.decode_tps), _spread(s.baseline_decode_tps),
                         _spread(s.speedup, suffix="x") + ("" if s.paired else " (unpaired)"), _spread(s.accept, 1),
                         s.lossless.text().split(" (")[0], r["status"]])
        out += [_md_table(["run", "case", "pair", "draft", "spec t/s", "baseline t/s", "speedup [95% CI]", "accept %",
                           "lossless", "status"], body), ""]
        out += [f"Speed: {SPEED_DEFINITION}. Speedup: median of paired ratios with a 95 % bootstrap interval.", ""]
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
            out += [_md_table(["metric", "measured", "reference", "ratio"],
                              [list(row) for row in rows(Summary.from_dict(r.get("summary")), ref)]), ""]
    sweeps = [r for r in ok if r["kind"] == "sweep"]
    if sweeps:
        rep = analysis.sweep_report(store, sweeps[0]["sweep_id"], plot=plot)
        out += ["## Latest sweep", "", "```", rep.render(), "```", ""]
        for g in rep.groups:
            out += [f"![{g.label or 'sweep'}]({p})" for p in g.plots if p.name.startswith("dashboard") and p.suffix == ".png"]
    failed = [r for r in runs if r["status"] == "failed"][:5]
    if failed:
        out += ["", "## Recent failures", ""] + [f"- run {r['id']}: {r.get('error')}" for r in failed]
    return "\n".join(out).rstrip() + "\n"
