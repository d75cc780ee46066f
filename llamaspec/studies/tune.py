"""``llamaspec tune``: the workload study over everything there is to choose: draft file, draft
length and the draft-free n-gram modes.

Tune is :func:`llamaspec.studies.study.run_study` with a wider set of setups than a sweep's: every draft
variant (the drafts a study of -m/-md models compares, else the catalog's plain variants of the
case's draft model), each at every draft length up to :data:`MAX_DRAFT`, and every draft-free mode
the engine runs. The study's adaptive policy does the searching: a pair of each mode and of each
variant's longest lengths on every prompt, then the lengths the speedup model (fitted per variant
and prompt, on the acceptance by position and the cost timings) puts near its best, then what the
decision asks for, within the study's budget. The answer, its per-category verdicts, its table and
its deploy command are the sweep's.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence

from llamaspec.base.errors import LlamaspecError
from llamaspec.measure.contract import Engine
from llamaspec.store.results import Store
from llamaspec.studies.experiment import Experiment
from llamaspec.studies.study import Setup, StudyResult, modes_for, run_study, setups_for
from llamaspec.studies.sweep import Budget

log = logging.getLogger(__name__)

MAX_DRAFT = 16


def variants_of(exp: Experiment, asked: Sequence[str] | None = None) -> tuple[str, ...]:
    """The draft variants a tune weighs: ``asked``, else the drafts the study compares, else the
    catalog's plain variants of the cases' draft model (the case's own first); ``()``: the case's
    own draft alone."""
    if asked:
        return tuple(dict.fromkeys(asked))
    drafts = {c.draft for c in exp.cases if c.draft is not None}
    if not drafts:
        return ()
    if len({d.model for d in drafts}) > 1:
        raise LlamaspecError(f"the cases of {exp.name} have different draft models",
                             hint="tune one draft model at a time (or give --variants)")
    compared = tuple(dict.fromkeys(d.variant for c in exp.cases for d in c.drafts))
    if compared:
        return compared
    draft = next(iter(drafts))
    if draft.given or asked is not None:
        return (draft.variant,)
    from llamaspec import models

    plain = models.load_catalog().entry(draft.model).plain_variants
    return tuple(dict.fromkeys((draft.variant, *plain)))


def tune_setups(exp: Experiment, engine: Engine, variants: Sequence[str] | None = None,
                modes: Sequence[str] | None = None) -> tuple[Setup, ...]:
    """Every variant at every length 1..MAX_DRAFT, then each draft-free mode."""
    from llamaspec.studies import adhoc

    found = variants_of(exp, variants)
    axes: dict[str, tuple[object, ...]] = {}
    if found:
        axes["draft_max"] = tuple(range(1, MAX_DRAFT + 1))
        if len(found) > 1 or variants:
            axes["draft_variant"] = found
    return setups_for(axes, modes_for(engine, modes), adhoc.draft_names(exp))


def tune(exp: Experiment, engine: Engine, store: Store, variants: Sequence[str] | None = None,
         modes: Sequence[str] | None = None, budget: Budget | None = None, *, over_prompts: bool = True,
         count_loops: bool = False) -> StudyResult:
    """The tune of ``exp``'s workload (its cases' prompts): one study, one decision."""
    return run_study(exp, tune_setups(exp, engine, variants, modes), engine, store, budget, over_prompts=over_prompts,
                     count_loops=count_loops)


__all__ = ["MAX_DRAFT", "tune", "tune_setups", "variants_of"]
