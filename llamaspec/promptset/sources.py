"""The prompt set an experiment names, and what identifies one case's run over it.

``source_of`` reads the command line's or the experiment's ``prompts:``; ``set_key`` is the id
that makes a rerun over the same case settings, models, build, set and repeats resume;
``prompt_case`` puts one prompt into a resolved case; ``method_label`` names a case in the output.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import replace
from pathlib import Path
from typing import Any

from llamaspec.base.errors import LlamaspecError
from llamaspec.measure import spectypes
from llamaspec.measure.contract import Engine, ResolvedCase
from llamaspec.studies.prompts import Prompt, PromptSource, parse_source


def source_of(exp: Any, override: str | None = None, **options: Any) -> PromptSource:
    """The prompt set to run: the command line's, else the experiment's ``prompts:``."""
    base_dir = Path(exp.path).parent if getattr(exp, "path", "") else None
    spec = override if override is not None else getattr(exp, "prompts", None)
    if spec is None:
        raise LlamaspecError(f"experiment {exp.name} names no prompt set",
                             hint="pass --prompts FILE (or spec-bench:PATH, alpaca), or add prompts: to the experiment")
    if isinstance(spec, dict):
        spec = dict(spec)
        where = spec.pop("source", None)
        if not isinstance(where, str):
            raise LlamaspecError(f"{exp.path}: prompts.source: missing", hint="prompts: {source: FILE, format: chat}")
        unknown = set(spec) - {"format", "turns", "limit", "seed"}
        if unknown:
            raise LlamaspecError(f"{exp.path}: prompts: unknown key {sorted(unknown)[0]!r}",
                                 hint="keys: source, format, turns, limit, seed")
        merged = {**spec, **{k: v for k, v in options.items() if v is not None}}
        return parse_source(where, base_dir, **merged)
    return parse_source(spec, base_dir, **options)


def set_key(backend: Engine, case: ResolvedCase, source: PromptSource, repeats: int) -> str:
    """Same case settings, models, build, prompt set and repeats: the same set run (resumable)."""
    blob = {"identity": backend.identity(), "experiment": case.experiment, "case": case.case,
            "target": case.target.sha256 or case.target.path,
            "draft": (case.draft.sha256 or case.draft.path) if case.draft else None,
            "settings": {k: v for k, v in case.settings.to_dict().items() if k != "timeout"},
            "source": {"kind": source.kind, "path": source.path, "format": source.format, "turns": source.turns},
            "repeats": repeats}
    return "set-" + hashlib.sha256(json.dumps(blob, sort_keys=True, default=str).encode()).hexdigest()[:16]


def prompt_case(case: ResolvedCase, prompt: Prompt) -> ResolvedCase:
    return replace(case, prompt=prompt.prompt, prompt_file=None, prompt_id=prompt.id, category=prompt.category,
                   chat=prompt.chat, history=prompt.history)


def method_label(case: ResolvedCase) -> str:
    s = case.settings
    spec_type = s.spec_type or "draft"
    if spectypes.needs_draft(spec_type):
        return f"{case.case} (draft {case.draft.label if case.draft else '?'}, k={s.draft_max})"
    sizes = ", ".join(f"{k[-1]}={getattr(s, k)}" for k in ("ngram_size_n", "ngram_size_m") if getattr(s, k) is not None)
    return f"{case.case} ({spec_type}{', ' + sizes if sizes else ''})"
