"""A workload from stored runs: which prompt and which setup each run measured, as
:class:`llamaspec.decision.workload.Cell` objects (:func:`workload_of_runs`).

A study decides from its stored rows through this one function and
:func:`llamaspec.decision.workload.decide_workload` (:mod:`llamaspec.studies.state`, on one machine
and on a cluster's coordinator alike, which names each run's setup as the study named it). Pure:
run rows (as ``Store.runs`` returns them) in, cells out.

- **The prompt** of a run is its ``prompt_id`` (its case's name where it has none); its category
  the run's ``category`` (the prompt where it has none).
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
from llamaspec.measure.summary import FINISHED, Summary
from llamaspec.store.rows import BASELINES_KIND

ENDED = (*FINISHED, "failed")  # a run whose cell counts: its figures, or its failure


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


def cell_of(run: Mapping[str, Any], prompt: str, setup: RunSetup) -> workload.Cell:
    """One stored run as the cell of ``setup`` on ``prompt``: its pair ratios and how it ended."""
    summary = Summary.from_dict(run.get("summary"))
    if run.get("status") not in FINISHED or summary.status not in FINISHED:
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


def workload_of_runs(runs: Sequence[Mapping[str, Any]], setup: Callable[[Mapping[str, Any]], RunSetup]
                     ) -> tuple[list[workload.Cell], dict[str, str]]:
    """The cells of these runs and their workload (prompt -> category, in the order the prompts
    were first measured), for :func:`llamaspec.decision.workload.decide_workload`. ``setup`` names each
    run's setup: the study that measured it names it (never its stored settings)."""
    ordered = sorted((r for r in runs if r.get("status") in ENDED and r.get("kind") != BASELINES_KIND),
                     key=lambda r: r.get("id") or 0)
    latest: dict[tuple[str, Hashable], workload.Cell] = {}
    prompts: dict[str, str] = {}
    for run in ordered:
        prompt, category = prompt_of(run)
        prompts.setdefault(prompt, category)
        found = setup(run)
        latest[(prompt, found.key)] = cell_of(run, prompt, found)
    return list(latest.values()), prompts


__all__ = ["RunSetup", "cell_of", "cost", "draft_bytes", "model_bytes", "prompt_of", "workload_of_runs"]
