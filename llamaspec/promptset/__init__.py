"""Run an experiment over a prompt set on llama-server, and the set-level figures.

Per prompt and per case (a method: a draft length, an n-gram mode): the baseline and the
speculative generation are measured seconds apart on two live servers, in ABBA order over the
repeats, and stored as one run row (``kind="promptset"``) as soon as the prompt finishes. The
row's ``group_id`` identifies (case settings, models, build, prompt set) and its ``point_key``
the prompt, so a rerun skips what is finished and resumes where a run stopped.

The modules, one reason each:

- ``sources``: the prompt set an experiment names, the set's key, a prompt put into a case;
- ``measure``: measuring a set and resuming it, the progress lines;
- ``prompt_figures``: one prompt's figures (``PromptFigures``, what a run row stores);
- ``probe``: the divergence probe (``Divergence``, ``NEAR_TIE``);
- ``set_figures``: figures over the set and per category (``SetFigures``, ``GroupFigures``,
  ``Forecast``), decode and end to end;
- ``recommendation``: which method, over the set and per category: the workload's one decision
  (``SetRecommendation``, through ``llamaspec.decision.workload.decide_workload``);
- ``output``: the run's summary (``SetSummary``), its text and its JSON;
- ``concurrency``: throughput against server slots;
- ``plots``: the figures, drawn as :mod:`llamaspec.views.plot` draws a sweep;
- ``runcore``: the only two calls into the run core (resolve a case, its provenance), looked up
  there when called so that a test can replace them.
"""

from __future__ import annotations

from llamaspec.promptset.concurrency import (
    CONCURRENCY_REPEATS,
    MODES,
    batch_measurement,
    level_figures,
    render_concurrency,
    run_concurrency,
)
from llamaspec.promptset.measure import STOPPING_ERRORS, CaseSet, Event, SetRun, progress_printer, run_set
from llamaspec.promptset.output import DEFINITIONS, MethodFigures, SetSummary, as_json, render, set_summary
from llamaspec.promptset.plots import plot_concurrency, plot_set
from llamaspec.promptset.probe import NEAR_TIE, Divergence, divergence, divergence_text
from llamaspec.promptset.prompt_figures import E2E_KEYS, PromptFigures, decode_totals, prompt_summary, request_totals
from llamaspec.promptset.recommendation import BASES, NearTie, SetRecommendation, near_tie_note, recommend
from llamaspec.promptset.set_figures import (
    DifferingPrompt,
    EndedEarly,
    FailedPrompt,
    Forecast,
    GroupFigures,
    SetFigures,
    group_statistics,
    set_statistics,
    total_speedup,
)
from llamaspec.promptset.sources import method_label, prompt_case, set_key, source_of

__all__ = ["BASES", "CONCURRENCY_REPEATS", "DEFINITIONS", "E2E_KEYS", "MODES", "NEAR_TIE", "STOPPING_ERRORS", "CaseSet",
           "DifferingPrompt", "Divergence", "EndedEarly", "Event", "FailedPrompt", "Forecast", "GroupFigures",
           "MethodFigures", "NearTie", "PromptFigures", "SetFigures", "SetRecommendation", "SetRun", "SetSummary", "as_json",
           "batch_measurement",
           "decode_totals", "divergence", "divergence_text", "group_statistics", "level_figures", "method_label",
           "near_tie_note", "plot_concurrency", "plot_set", "progress_printer", "prompt_case", "prompt_summary",
           "recommend", "render", "render_concurrency", "request_totals", "run_concurrency", "run_set", "set_key",
           "set_statistics", "set_summary", "source_of", "total_speedup"]
