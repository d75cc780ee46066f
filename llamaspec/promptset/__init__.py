"""Run an experiment over a prompt set, and the set-level statistics.

Per prompt and per case (a method: a draft length, an n-gram mode): the baseline and the
speculative generation are measured seconds apart on two live servers, in ABBA order over the
repeats, and stored as one run row (``kind="promptset"``) as soon as the prompt finishes. The
row's ``sweep_id`` identifies (case settings, models, build, prompt set) and its ``point_key``
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

The modules, by reason: ``sources`` (the set an experiment names, the set's key), ``measure``
(measuring and resuming, progress lines), ``prompt_figures`` (one prompt's figures), ``probe``
(the divergence probe), ``concurrency`` (throughput against server slots), ``plots``.
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable, Sequence
from typing import Any

from llamaspec import decide, stats
from llamaspec.backend import Backend, ResolvedCase
from llamaspec.promptset.concurrency import (
    CONCURRENCY_REPEATS,
    MODES,
    level_figures,
    render_concurrency,
    run_concurrency,
)
from llamaspec.promptset.measure import STOPPING_ERRORS, CaseSet, Event, SetRun, progress_printer, run_set
from llamaspec.promptset.plots import plot_concurrency, plot_set
from llamaspec.promptset.probe import NEAR_TIE, divergence, divergence_text
from llamaspec.promptset.prompt_figures import E2E_KEYS, _median, decode_totals, prompt_summary, request_totals
from llamaspec.promptset.sources import method_label, prompt_case, set_key, source_of

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


def as_json(summary: dict[str, Any]) -> str:
    """Set-level and per-category figures (per-prompt values left out of the intervals' dicts)."""
    def strip(obj: Any) -> Any:
        if isinstance(obj, dict):
            return {k: strip(v) for k, v in obj.items() if k != "values"}
        if isinstance(obj, list):
            return [strip(v) for v in obj]
        return obj
    return json.dumps(strip(summary), indent=2, default=str)


__all__ = ["CONCURRENCY_REPEATS", "DEFINITIONS", "E2E_KEYS", "MODES", "NEAR_TIE", "STOPPING_ERRORS", "CaseSet",
           "Event", "SetRun", "as_json", "decode_totals", "divergence", "divergence_text", "group_statistics",
           "level_figures", "method_label", "near_tie_note", "plot_concurrency", "plot_set", "progress_printer",
           "prompt_case", "prompt_summary", "recommend", "render", "render_concurrency", "request_totals",
           "run_concurrency", "run_set", "set_key", "set_statistics", "source_of", "summarize", "total_speedup"]

