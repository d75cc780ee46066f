"""The answer as a command: the deploy command for a recommended setting (or the target alone).

The engine that measured a setting writes its command (``Engine.deployment``; without an open
engine, ``engines.deployment(name, ...)``); this module only finds what to deploy from a stored
run: its settings and model files as stored, its prompt from the experiment. The run core names
no engine module here either.

    from llamaspec.studies import deploy
    d = deploy.for_run(engine, exp, store.run(run_id))          # the recommended setting
    d = deploy.for_run(engine, exp, store.run(run_id), speculative=False)  # "no draft"
    print(d.render()); json.dumps(d.to_dict())
"""

from __future__ import annotations

import dataclasses
from typing import Any

from llamaspec.base.errors import LlamaspecError
from llamaspec.measure import chat
from llamaspec.measure.contract import ClientPrompt, Deployment, Engine, ModelPath, ResolvedCase
from llamaspec.measure.settings import Settings
from llamaspec.studies.experiment import Case, Experiment


def client_prompts(exp: Experiment) -> list[ClientPrompt]:
    """The deploy check's prompts: the first of each category (each prompt its own where there are
    none), each as the study's engine read it (:func:`llamaspec.measure.chat.prompt_of`, escapes at
    the settings' defaults as measured)."""
    firsts: dict[str, Case] = {}
    for c in exp.cases:
        firsts.setdefault(c.category or c.name, c)
    return [ClientPrompt(c.name, chat.prompt_of(dataclasses.replace(c, settings=c.settings.with_defaults())), c.chat,
                         c.history) for c in firsts.values()]


def case_of_run(exp: Experiment, run: dict[str, Any]) -> ResolvedCase:
    """The resolved case a stored run measured (a sweep point, a tune point, a run)."""
    case = next((c for c in exp.cases if c.name == run.get("case_name")), None)
    if case is None:
        raise LlamaspecError(f"run {run.get('id')} measured case {run.get('case_name')!r}, which experiment {exp.name} "
                             "no longer has", hint="deploy from the experiment file as it was when it ran")
    models = (run.get("provenance") or {}).get("models") or {}
    if "target" not in models:
        raise LlamaspecError(f"run {run.get('id')} stored no model files", hint="measure it again with this llamaspec")
    target = ModelPath(**models["target"])
    draft = ModelPath(**models["draft"]) if models.get("draft") else None
    return ResolvedCase(exp.name, case.name, target, draft, case.prompt, case.prompt_file,
                        Settings.from_dict(run.get("settings") or {}), chat=case.chat, history=case.history)


def for_run(backend: Engine, exp: Experiment, run: dict[str, Any], speculative: bool = True) -> Deployment:
    return backend.deployment(case_of_run(exp, run), speculative)
