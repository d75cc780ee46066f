"""An experiment over a prompt set as a workload study: its cases are the methods weighed (the
study's setups), the set's prompts the workload (the study's cases).

An experiment that names ``prompts:`` (``smollm2-server-mini``: the draft at k=8 against
ngram-simple) is measured by the one workload study (:func:`llamaspec.studies.study.run_study`),
as ``sweep -m T -md D --prompts FILE`` is: each case becomes a setup whose settings are the case's
own (a draft file other than the first case's is its ``draft_variant``), labelled by the case's
name; each prompt becomes a case of the target and the first case's draft. The answer, its
interval over prompts, its table and its deploy command are the study's.
"""

from __future__ import annotations

import dataclasses

from llamaspec.base.errors import LlamaspecError
from llamaspec.measure import spectypes
from llamaspec.measure.settings import DEFAULTS, SWEEPABLE
from llamaspec.studies.experiment import Experiment
from llamaspec.studies.grid import Point
from llamaspec.studies.prompts import PromptSet, workload_cases
from llamaspec.studies.setups import Setup


def case_setups(exp: Experiment) -> tuple[Setup, ...]:
    """Each case of ``exp`` as a setup: its own settings (sweepable ones; another is refused by
    name), its draft file where it differs from the first case's, labelled by the case's name."""
    targets = {c.target for c in exp.cases}
    if len(targets) > 1:
        raise LlamaspecError(f"the cases of {exp.name} have {len(targets)} targets: a study weighs setups of one target "
                             "against that target alone", hint="give each target an experiment of its own")
    drafts = [c.draft for c in exp.cases if c.draft is not None]
    if len({d.model for d in drafts}) > 1:
        raise LlamaspecError(f"the cases of {exp.name} have different draft models",
                             hint="study one draft model at a time (its files are compared as variants)")
    first = drafts[0] if drafts else None
    found = []
    common = exp.settings.to_dict()
    for case in exp.cases:  # a case's settings are the experiment's with its own over them
        own = {k: v for k, v in case.settings.to_dict().items() if v is not None and v != common.get(k)}
        fixed = sorted(set(own) - set(SWEEPABLE))
        if fixed:
            raise LlamaspecError(f"{exp.name}: case {case.name} sets {fixed[0]}, which a study cannot vary between setups",
                                 hint=f"move {fixed[0]} to the experiment's settings:")
        merged = case.settings.over(exp.settings).over(DEFAULTS)
        if spectypes.of(merged.spec_type).draft_free:
            own["spec_type"] = merged.spec_type
        elif case.draft is None:
            raise LlamaspecError(f"{exp.name}: case {case.name} has no draft and no draft-free spec_type",
                                 hint="give it a draft: or spec_type: ngram-simple")
        else:
            own["draft_max"] = merged.draft_max
            if first is not None and case.draft.variant != first.variant:
                own["draft_variant"] = case.draft.variant
        found.append(Setup(Point(tuple(sorted(own.items()))), case.name))
    if len({s.key for s in found}) < len(found):
        raise LlamaspecError(f"{exp.name}: two cases measure the same setup", hint="give each case settings of its own")
    return tuple(found)


def study_of_set(exp: Experiment, prompt_set: PromptSet) -> tuple[Experiment, tuple[Setup, ...]]:
    """``exp`` as a workload study over ``prompt_set``: (the experiment whose cases are the prompts,
    its cases as setups). The prompts are checked against the context before anything runs."""
    if not prompt_set.prompts:
        raise LlamaspecError(f"{prompt_set.source.label}: no prompts to measure", hint="`llamaspec prompts list SOURCE`")
    setups = case_setups(exp)
    first = exp.cases[0]
    draft = next((c.draft for c in exp.cases if c.draft is not None), None)
    # each prompt a case with the experiment's settings (a loaded case holds them, its own over them)
    cases = workload_cases(prompt_set.prompts, first.target, draft, exp.settings)
    return dataclasses.replace(exp, cases=cases), setups


__all__ = ["case_setups", "study_of_set"]
