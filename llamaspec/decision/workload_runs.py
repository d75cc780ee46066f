"""A workload from stored runs: which prompt and which setup each run measured, as
:class:`llamaspec.decision.workload.Cell` objects (:func:`workload_of_runs`).

Every way of asking that keeps its points as run rows decides from them through this one
function and :func:`llamaspec.decision.workload.decide_workload`: a cluster study per machine
(``sweep --cluster``): a machine's study points on the coordinator, and the local study's own rows
(:mod:`llamaspec.studies.study`, which names its setups itself: its adaptive loop names a setup before it
is measured). Pure: run rows (as ``Store.runs`` returns them) in, cells out.

- **The prompt** of a run is its ``prompt_id`` (its case's name where it has none); its category
  the run's ``category`` (the prompt where it has none).
- **The setup** of a run (where the caller does not name it): its spec type, its draft (the draft
  model's label), its draft length, and every other sweepable setting that varies among the runs
  of one prompt with that spec type. A setting that differs only from prompt to prompt is the
  prompt's, not a setup's. A draft-free mode is named by its mode and its own varying settings
  (its draft length among them only where it varies: the mode may not read it).
- **The cell**: the run's pair ratios (``Summary.speedup.values``; paired runs only, a shared
  baseline's ratios are not pairs) and what they timed (``Summary.timed_tokens``, its ``loop``),
  "ok" or "differs" as its summary says, or failed with its error. Of several finished runs of one setup on one prompt the latest counts (a rerun after a
  failure); a run still running, or interrupted, measured nothing to decide on.
- **The cost** (:func:`cost`, smaller is cheaper): a draft-free mode (no second model to hold),
  then the shorter draft, then the smaller draft file.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from llamaspec.decision import workload
from llamaspec.measure import spectypes
from llamaspec.measure.settings import SWEEPABLE
from llamaspec.measure.summary import Summary
from llamaspec.store.rows import BASELINES_KIND

MODE = "spec_type"
DRAFT = "draft_variant"  # the axis a sweep over draft files names (the run's ``draft`` column holds its label)
LENGTH = "draft_max"
FINISHED = ("ok", "differs", "failed")


@dataclass(frozen=True)
class RunSetup:
    """What a run measured, as a setup of the workload: its identity, its label and its cost."""

    key: Hashable
    label: str
    cost: tuple[float, ...]


def cost(draft_free: bool, length: int | None, draft_bytes: int = 0) -> tuple[float, ...]:
    """A setup's cost, compared as a tuple (smaller is cheaper): a draft-free mode, then the
    shorter draft length, then the smaller draft file."""
    if draft_free:
        return (0.0, 0.0, 0.0)
    return (1.0, float(length or 0), float(draft_bytes))


def draft_bytes(run: Mapping[str, Any]) -> int:
    """The draft file's size as recorded with the run (0 when unknown or draft-free)."""
    draft = ((run.get("provenance") or {}).get("models") or {}).get("draft") or {}
    return model_bytes(draft.get("metadata"))


def model_bytes(metadata: Mapping[str, Any] | None) -> int:
    """A model file's size from its metadata (``ModelPath.metadata``; 0 when unknown)."""
    meta = metadata or {}
    size = meta.get("size_bytes") or meta.get("size") or meta.get("file_size")
    return int(size) if isinstance(size, (int, float)) else 0


def prompt_of(run: Mapping[str, Any]) -> tuple[str, str]:
    """(prompt, category) of a run."""
    prompt = str(run.get("prompt_id") or run.get("case_name") or "?")
    return prompt, str(run.get("category") or prompt)


def _mode(run: Mapping[str, Any]) -> str:
    return str((run.get("settings") or {}).get(MODE) or "draft")


def _value(run: Mapping[str, Any], axis: str) -> Any:
    return run.get("draft") if axis == DRAFT else (run.get("settings") or {}).get(axis)


def setup_axes(runs: Sequence[Mapping[str, Any]]) -> dict[str, tuple[str, ...]]:
    """Per spec type, the settings that name its setups: the sweepable settings (and the draft)
    that vary among the runs of one prompt with that spec type."""
    groups: dict[tuple[str, str], list[Mapping[str, Any]]] = {}
    for run in runs:
        groups.setdefault((prompt_of(run)[0], _mode(run)), []).append(run)
    out: dict[str, list[str]] = {}
    for (_prompt, mode), rows in groups.items():
        found = out.setdefault(mode, [])
        # a draft setup always names its draft length (setup_of); a draft-free one has no draft
        skip = {MODE, LENGTH} if spectypes.needs_draft(mode) else {MODE, DRAFT}
        for axis in (DRAFT, *SWEEPABLE):
            if axis in skip or axis in found:
                continue
            if len({str(_value(r, axis)) for r in rows}) > 1:
                found.append(axis)
    return {mode: tuple(axes) for mode, axes in out.items()}


def _shown(axis: str, value: Any) -> str:
    if axis == DRAFT:  # a catalog draft by its variant; a file or repo (a '/' in its label) whole
        text = str(value)
        return text if "/" in text else text.split(":")[-1]
    return f"{axis}={value}"


def setup_of(run: Mapping[str, Any], axes: Mapping[str, Sequence[str]]) -> RunSetup:
    """The setup a run measured, named by its settings over ``axes`` (:func:`setup_axes`)."""
    mode = _mode(run)
    named = tuple((a, _value(run, a)) for a in axes.get(mode, ()))
    shown = [_shown(a, v) for a, v in named if v is not None]
    if spectypes.of(mode).draft_free:
        return RunSetup(((MODE, mode), *named), mode + (f" ({', '.join(shown)})" if shown else ""), cost(True, None))
    k = (run.get("settings") or {}).get(LENGTH)
    length = int(k) if k is not None else None
    label = (f"draft {length}" if length is not None else "draft") + (f" ({', '.join(shown)})" if shown else "")
    return RunSetup(((MODE, mode), (LENGTH, length), *named), label, cost(False, length, draft_bytes(run)))


def cell_of(run: Mapping[str, Any], prompt: str, setup: RunSetup) -> workload.Cell:
    """One stored run as the cell of ``setup`` on ``prompt``: its pair ratios and how it ended."""
    summary = Summary.from_dict(run.get("summary"))
    if run.get("status") not in ("ok", "differs") or summary.status not in ("ok", "differs"):
        why = run.get("error") or summary.error or f"run {run.get('id')} {run.get('status') or summary.status}"
        return workload.Cell(prompt, setup.key, setup.label, (), setup.cost, "failed", str(why))
    ratios = tuple(summary.speedup.values) if summary.speedup and summary.own_baselines else ()
    e2e = tuple(summary.end_to_end.values) if ratios and summary.end_to_end else ()
    loop = summary.loop.text() if summary.loop else None
    asked = (run.get("settings") or {}).get("n_predict")
    lossless = summary.lossless
    if summary.output_differs:
        return workload.Cell(prompt, setup.key, setup.label, ratios, setup.cost, workload.DIFFERS, lossless.text(),
                             summary.timed_tokens, loop, asked, lossless.first_difference, probed=lossless.probed)
    # a difference at a greedy near-tie is the engine's rounding, not the draft's: kept, and said
    near_tie = (f"{prompt} at token {lossless.first_difference} (top-two gap {lossless.near_tie:.1e})"
                if lossless.near_tie is not None else None)
    return workload.Cell(prompt, setup.key, setup.label, ratios, setup.cost, workload.OK, None, summary.timed_tokens, loop,
                         asked, lossless.first_difference if near_tie else None, near_tie, e2e)


def workload_of_runs(runs: Sequence[Mapping[str, Any]],
                     setup: Callable[[Mapping[str, Any]], RunSetup] | None = None
                     ) -> tuple[list[workload.Cell], dict[str, str]]:
    """The cells of these runs and their workload (prompt -> category, in the order the prompts
    were first measured), for :func:`llamaspec.decision.workload.decide_workload`. ``setup`` names each
    run's setup where the caller knows it; by default its settings do (:func:`setup_of`)."""
    ordered = sorted((r for r in runs if r.get("status") in FINISHED and r.get("kind") != BASELINES_KIND),
                     key=lambda r: r.get("id") or 0)
    axes = setup_axes(ordered)
    name = setup or (lambda run: setup_of(run, axes))
    latest: dict[tuple[str, Hashable], workload.Cell] = {}
    prompts: dict[str, str] = {}
    for run in ordered:
        prompt, category = prompt_of(run)
        prompts.setdefault(prompt, category)
        found = name(run)
        latest[(prompt, found.key)] = cell_of(run, prompt, found)
    return list(latest.values()), prompts


__all__ = ["RunSetup", "cell_of", "cost", "draft_bytes", "model_bytes", "prompt_of", "setup_axes", "setup_of", "workload_of_runs"]
