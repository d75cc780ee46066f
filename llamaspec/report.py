"""Render run results for people (a console table) and for machines (JSON)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import asdict
from typing import Any

from llamaspec.experiment import Reference


def _num(value: float | None, digits: int = 2) -> str:
    return "-" if value is None else f"{value:.{digits}f}"


def _spread(s: dict[str, Any] | None, digits: int = 2, suffix: str = "") -> str:
    if not s:
        return "-"
    text = f"{s['median']:.{digits}f}{suffix}"
    if s.get("n", 1) > 1:
        text += f" [{s['min']:.{digits}f}-{s['max']:.{digits}f}]"
    return text


def _ratio(measured: float | None, reference: float | None) -> str:
    if measured is None or not reference:
        return ""
    return f"{measured / reference:.2f}x"


def lossless_text(lossless: dict[str, Any] | None) -> str:
    if not lossless or lossless.get("identical") is None:
        return "not checked"
    if lossless["identical"]:
        return f"identical over {lossless['compared_chars']} chars ({lossless['checked']}/{lossless['checked']} repeats)"
    first = lossless.get("first_mismatch") or {}
    return (f"DIFFERS at char {first.get('first_difference')}: speculative {first.get('speculative_excerpt')!r} "
            f"vs baseline {first.get('baseline_excerpt')!r}")


def rows(summary: dict[str, Any], reference: Reference | None) -> list[tuple[str, str, str, str]]:
    ref = reference or Reference()
    med = lambda key: (summary.get(key) or {}).get("median")  # noqa: E731
    speedup = summary.get("speedup") or None
    out = [
        ("decode t/s (speculative)", _spread(summary.get("decode_tps")), _num(ref.decode_tps), _ratio(med("decode_tps"), ref.decode_tps)),
        ("encode t/s (speculative)", _spread(summary.get("encode_tps")), _num(ref.encode_tps), _ratio(med("encode_tps"), ref.encode_tps)),
        ("decode t/s (baseline)", _spread(summary.get("baseline_decode_tps")), "-", ""),
        ("speedup", _spread(speedup, suffix="x"), _num(ref.speedup), _ratio(speedup and speedup.get("median"), ref.speedup)),
        ("accept %", _spread(summary.get("accept"), 3), _num(ref.accept_pct, 3), _ratio(med("accept"), ref.accept_pct)),
        ("n_drafted", str(summary.get("n_drafted", "-")), str(ref.n_drafted or "-"), _ratio(summary.get("n_drafted"), ref.n_drafted)),
        ("n_accept", str(summary.get("n_accept", "-")), str(ref.n_accept or "-"), _ratio(summary.get("n_accept"), ref.n_accept)),
        ("n_predict", str(summary.get("n_predict", "-")), str(ref.n_predict or "-"), ""),
        ("tokens per target call", _num(summary.get("tokens_per_call")), "-", ""),
        ("mean accepted length", _num(summary.get("mean_accepted")), "-", ""),
        ("peak memory (spec/base)", f"{_mib(summary.get('peak_rss_bytes'))} / {_mib(summary.get('baseline_peak_rss_bytes'))}", "-", ""),
    ]
    if ref.n_drafted is not None and ref.n_accept is not None and ref.n_predict is not None:
        calls = ref.n_predict - ref.n_accept
        out[8] = (out[8][0], out[8][1], _num(ref.n_predict / calls), _ratio(summary.get("tokens_per_call"), ref.n_predict / calls))
        out[9] = (out[9][0], out[9][1], _num(ref.n_accept / calls), _ratio(summary.get("mean_accepted"), ref.n_accept / calls))
    return out


def _mib(value: int | None) -> str:
    return "-" if not value else f"{value / 2**20:.0f} MiB"


def table(title: str, summary: dict[str, Any], reference: Reference | None) -> str:
    lines = [title]
    body = rows(summary, reference)
    header = ("metric", "measured (median [min-max])", f"reference{' (' + reference.hardware + ')' if reference and reference.hardware else ''}", "ratio")
    widths = [max(len(r[i]) for r in [header, *body]) for i in range(4)]
    for r in [header, *body]:
        lines.append("  " + "  ".join(cell.ljust(widths[i]) for i, cell in enumerate(r)).rstrip())
    lines.append(f"  lossless: {lossless_text(summary.get('lossless'))}")
    return "\n".join(lines)


def case_title(result: Any) -> str:
    case = result.case
    draft = case.draft.label if case.draft else f"none ({case.settings.spec_type})"
    return (f"{case.experiment} / {case.case}  [run {result.run_id}, {result.status}]\n"
            f"  target {case.target.label}, draft {draft}, draft_max {case.settings.draft_max}, "
            f"n_predict {case.settings.n_predict}, threads {case.settings.threads}")


def render(results: Sequence[Any]) -> str:
    blocks = []
    for r in results:
        text = table(case_title(r), r.summary, r.reference)
        if r.status != "ok":
            text += f"\n  error: {r.error}"
        blocks.append(text)
    return "\n\n".join(blocks)


def as_json(results: Sequence[Any]) -> list[dict[str, Any]]:
    return [{"run_id": r.run_id, "experiment": r.case.experiment, "case": r.case.case, "status": r.status,
             "error": r.error, "settings": asdict(r.case.settings), "target": asdict(r.case.target),
             "draft": asdict(r.case.draft) if r.case.draft else None,
             "reference": asdict(r.reference) if r.reference else None, "summary": r.summary} for r in results]


# --- Markdown reports from the results store ---------------------------------------------------

COMPARE_BY = {
    "build": lambda run: f"llama.cpp {run.get('llamacpp_commit')} ({run.get('backend')})",
    "machine": lambda run: ((run.get("provenance") or {}).get("hardware") or {}).get("host", "?") + " / "
    + ((run.get("provenance") or {}).get("hardware") or {}).get("cpu", "?"),
    "pair": lambda run: f"{run.get('target')} + {run.get('draft') or 'no draft'}",
}


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
    ok = [r for r in runs if r["status"] == "ok"]
    out = [f"# {experiment_name}", ""]
    latest = ok[0] if ok else runs[0]
    prov = latest.get("provenance") or {}
    hw = prov.get("hardware") or {}
    out += [f"- latest run: {latest['id']} ({latest['started_at']}), llama.cpp {latest.get('llamacpp_commit')} "
            f"({latest.get('backend')}), flags: `{' '.join((prov.get('llamacpp') or {}).get('cmake_args') or [])}`",
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
            best = max(rs, key=lambda r: ((r.get("summary") or {}).get("speedup") or {}).get("median") or 0)
            s = best.get("summary") or {}
            body.append([label, str(len(rs)), str(best["draft_max"]), _spread(s.get("decode_tps")),
                         _spread(s.get("baseline_decode_tps")), _spread(s.get("speedup"), suffix="x"),
                         _spread(s.get("accept"), 1), str(best["id"])])
        out += [_md_table(["group", "runs", "best draft", "spec t/s", "baseline t/s", "speedup", "accept %", "run"], body), ""]
    plain = [r for r in ok if r["kind"] == "run"]
    if plain:
        out += ["## Runs", ""]
        body = []
        for r in plain[:20]:
            s = r.get("summary") or {}
            body.append([str(r["id"]), r["case_name"], f"{r.get('target')} + {r.get('draft')}", str(r["draft_max"]),
                         _spread(s.get("decode_tps")), _spread(s.get("baseline_decode_tps")),
                         _spread(s.get("speedup"), suffix="x"), _spread(s.get("accept"), 1),
                         lossless_text(s.get("lossless")).split(" (")[0]])
        out += [_md_table(["run", "case", "pair", "draft", "spec t/s", "baseline t/s", "speedup", "accept %", "lossless"], body), ""]
        ref_rows = []
        from llamaspec import experiment as experiments
        try:
            exp = experiments.load(experiment_name)
            refs = {c.name: c.reference for c in exp.cases if c.reference}
        except LlamaspecError:
            refs = {}
        for r in plain:
            if r["case_name"] in refs:
                ref_rows.append((r, refs.pop(r["case_name"])))
        for r, ref in ref_rows:
            out += [f"### Run {r['id']} against the reference ({ref.hardware})", "",
                    _md_table(["metric", "measured", "reference", "ratio"], [list(row) for row in rows(r["summary"] or {}, ref)]), ""]
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
