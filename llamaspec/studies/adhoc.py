"""Studies of models named on the command line: ``llamaspec sweep -m T.gguf -md D.gguf``.

The front door for a user's own files: an :class:`~llamaspec.studies.experiment.Experiment` built from a
target and drafts in llama.cpp's words (a GGUF path, ``USER/REPO[:QUANT]`` as ``-hf`` takes it,
or a catalog ``NAME[:VARIANT]``), with no catalog entry and no YAML written by hand::

    from llamaspec.studies import adhoc
    exp = adhoc.experiment_from_models("T.gguf", ["D.gguf"], settings=Settings(n_predict=64))
    exp.name            # 't-d-1a2b3c4d': stable, from the files' sha256 and the settings
    adhoc.save_study(exp)   # then `llamaspec sweep NAME`, `report NAME`, `plot NAME` find it

Models are ``ModelRef(GIVEN, location)``: engines resolve them through ``models.gguf_model`` like
catalog models, with the file's sha256 in every run's provenance. Several drafts are the case's
``drafts``: ``sweep`` measures each as one more dimension (the draft variant), and the
decision counts the smaller file as the cheaper setting (``speedup_model.PointRow.cost``).

Without a prompt, the study runs the built-in workload (:func:`builtin_prompts`: 54 chat prompts,
9 in each of code, multi-turn, summarization, rag, math and rewriting, the kinds of task Spec-Bench
and SPEED-Bench measure), one case per prompt, so the answer is not about one prompt.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import logging
import re
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from llamaspec.base.errors import LlamaspecError
from llamaspec.measure import spectypes
from llamaspec.measure.settings import DEFAULTS, Settings
from llamaspec.studies.experiment import GIVEN, Case, Experiment, ModelRef, study_path

log = logging.getLogger("llamaspec")

_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,79}$")


# What a study of -m/-md models measures with unless told otherwise (sweep): 64 tokens a
# prompt (docs/method.md: the acceptance and the decision at 64 against 256 tokens), on
# llama-speculative-simple, which drafts up to k as llama-server does, counts acceptance by draft
# position (one long draft predicts the shorter ones) and runs the draft-free n-gram modes.
WORKLOAD_DEFAULTS = Settings(n_predict=64, program="speculative-simple")


def workload_settings(settings: Settings) -> Settings:
    """The command line's settings for a study of -m/-md models, :data:`WORKLOAD_DEFAULTS` where unset."""
    return settings.over(WORKLOAD_DEFAULTS)


def draft_names(exp: Experiment) -> dict[str, str]:
    """A short name for each draft a study compares (its file name, or USER/REPO:QUANT as given)."""
    names = {}
    for c in exp.cases:
        for d in c.drafts:
            text = d.variant
            names[text] = Path(text).name if ("/" in text and Path(text).expanduser().exists()) or text.endswith(".gguf") else text
    return names


def builtin_prompts() -> Path:
    """The built-in workload's file (package data; its first line says what it is): read it with
    :func:`builtin_workload`, as any prompt file is."""
    return Path(__file__).resolve().parents[1] / "data" / "prompts" / "workload.jsonl"  # llamaspec/data


def experiment_from_models(target: str, drafts: Sequence[str] = (), *, settings: Settings | None = None,
                           prompt: str | None = None, prompt_file: str | Path | None = None,
                           prompts: str | None = None, name: str | None = None, engine: str = "llama.cpp",
                           repeats: int | str = 3, description: str = "", workload: Any = None) -> Experiment:
    """An experiment measuring ``target`` with each of ``drafts`` against the target alone.

    ``target``/``drafts``: ``-m``/``-md`` text (a GGUF path, ``USER/REPO[:QUANT]``, a catalog
    ``NAME[:VARIANT]``); the models are resolved here (downloaded if needed) for their sha256.
    ``settings``: the command line's settings (every setting flag, as for an experiment).
    The prompt: ``prompt`` (text), ``prompt_file``, ``prompts`` (a prompt set, for llama-server),
    ``workload`` (a ``prompts.PromptSet``: one case per prompt, as sweep measures it), or
    none of them: the built-in workload, one case per prompt. ``name``: the study's name
    (default: made from the files' sha256, the settings and the prompt, the same on every rerun).
    Raises LlamaspecError (one line and a hint) for bad input: a missing or non-GGUF file, a repo
    without that quant, a draft with an n-gram spec type, no draft without one, two prompts.
    """
    from llamaspec.models import given
    from llamaspec.registry import engines

    settings = settings or Settings()
    spec_type = settings.over(DEFAULTS).spec_type
    if drafts and spectypes.of(spec_type).draft_free:
        raise LlamaspecError(f"--spec-type {spec_type} drafts without a draft model, and -md was given",
                             hint=f"drop -md to measure {spec_type}, or drop --spec-type to measure the draft model")
    if not drafts and spectypes.needs_draft(spec_type):
        raise LlamaspecError("no draft model: -md DRAFT is missing",
                             hint="give -md DRAFT.gguf (or USER/REPO[:QUANT]), or a draft-free mode: --spec-type ngram-simple")
    if sum(x is not None for x in (prompt, prompt_file, prompts, workload)) > 1:
        raise LlamaspecError("give one of -p, -f and --prompts", hint="one prompt, one prompt file, or one prompt set")
    specs = [given.parse(target), *(given.parse(d) for d in drafts)]  # what each names: the study keeps that text
    if len({s.text for s in specs[1:]}) != len(specs) - 1:
        raise LlamaspecError("the same draft is given twice", hint="give each -md once")
    files = [given.open_ref(s.text, tools=engines.model_tools()) for s in specs]  # downloaded or read now: their sha256 names the study
    # a catalog model without a variant is named with the one resolved (the label a catalog ref has)
    refs = [ModelRef(GIVEN, f"{f.name}:{f.variant}" if s.kind == "catalog" else s.text) for s, f in zip(specs, files, strict=True)]
    prompt_path = str(Path(prompt_file).expanduser().resolve()) if prompt_file is not None else None
    if prompt_path is not None and not Path(prompt_path).is_file():
        raise LlamaspecError(f"prompt file not found: {prompt_file}", hint="check the path given to -f/--prompt-file")
    draft, others = (refs[1], tuple(refs[1:])) if len(refs) > 1 else (None, ())
    builtin = workload is None and prompt is None and prompt_path is None and prompts is None
    if builtin:
        workload = builtin_workload()
    if workload is not None:
        from llamaspec.studies import prompts as loader

        cases: tuple[Case, ...] = loader.workload_cases(workload.prompts, refs[0], draft, settings, others)
    else:
        case = "set" if prompts is not None else "prompt"  # a prompt set's prompts are named by their own ids
        cases = (Case(case, refs[0], draft, prompt, prompt_path, settings, drafts=others),)
    identity = {
        "target": files[0].sha256, "drafts": [f.sha256 for f in files[1:]], "engine": engine,
        "settings": {k: v for k, v in settings.to_dict().items() if v is not None},
        "prompt": _digest(prompt) if prompt is not None else None,
        "prompt_file": _file_digest(prompt_path) if prompt_path else None,
        # a prompt set file by its content (the built-in one is the same set wherever llamaspec is installed)
        "prompts": _file_digest(prompts) if prompts and Path(prompts).is_file() else prompts,
        "workload": _digest(json.dumps([[c.name, c.category, c.prompt, c.chat, c.history] for c in cases]))
        if workload is not None and not builtin else None,
        "builtin": _file_digest(str(builtin_prompts())) if builtin else None,
    }
    digest = hashlib.sha256(json.dumps(identity, sort_keys=True, default=str).encode()).hexdigest()
    chosen = check_name(name) if name is not None else study_name(files, digest)
    text = description or f"{files[0].name} with " + (", ".join(f.name for f in files[1:]) or str(spec_type))
    return Experiment(chosen, text, engine, repeats, cases, path="", settings=settings, sha256=digest, prompts=prompts)


def builtin_workload() -> Any:
    """The built-in workload (:func:`builtin_prompts`), loaded as any prompt file is."""
    from llamaspec.studies import prompts as loader

    return loader.load(loader.parse_source(str(builtin_prompts())))


def builtin_sample(per_category: int = 1) -> Any:
    """The first ``per_category`` prompts of each category of the built-in workload (``run``'s sample)."""
    from llamaspec.studies import prompts as loader

    full = builtin_workload()
    return dataclasses.replace(full, prompts=tuple(loader.first_of_each_category(full.prompts, per_category)))


def builtin_label(exp: Experiment) -> str:
    """How a message names the built-in workload's prompts a study measures, and their categories."""
    categories = dict.fromkeys(c.category or "uncategorized" for c in exp.cases)
    return f"{len(exp.cases)} prompts of the built-in workload ({', '.join(categories)})"


def _digest(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()


def _file_digest(path: str) -> str:
    return hashlib.sha256(Path(path).read_bytes()).hexdigest()


def _short(f: Any) -> str:
    """A few readable characters for a model in a study name: the file's stem, the repo's name and quant."""
    from llamaspec.models import headers

    origin = f.provenance.get("kind")
    if origin == "hf_gguf":
        text = f"{f.provenance['repo'].split('/')[-1].removesuffix('-GGUF')}-{f.name.rpartition(':')[2]}"
    elif origin == "file":
        text = headers.stem(Path(f.path).name)
    else:
        text = f"{f.name}-{f.variant}"
    return re.sub(r"[^A-Za-z0-9_.-]+", "-", text).strip("-.").lower()[:28] or "model"


def study_name(files: Sequence[Any], digest: str) -> str:
    """``target-draft-1a2b3c4d`` (``+N`` for N more drafts): readable, and the same for the same
    files, settings and prompt (the last 8 characters are of their digest)."""
    parts = [_short(files[0])] + ([_short(files[1])] if len(files) > 1 else [])
    more = f"+{len(files) - 2}" if len(files) > 2 else ""
    return f"{'-'.join(parts)}{more}-{digest[:8]}"


def check_name(name: str) -> str:
    if not _NAME.match(name):
        raise LlamaspecError(f"--name {name!r}: a study name is letters, digits, '.', '_' and '-' (at most 80)",
                             hint="e.g. --name my-pair")
    return name


def _model_yaml(ref: ModelRef) -> dict[str, str]:
    from llamaspec.models import given

    spec = given.parse(ref.variant)
    if spec.kind == "catalog":
        name, _, variant = spec.text.partition(":")  # complete: experiment_from_models names the variant
        return {"model": name, "variant": variant}
    return {"file": spec.text} if spec.kind == "file" else {"hf": spec.text}


def to_yaml(exp: Experiment) -> dict[str, Any]:
    """The study as an experiment file (``experiments/README.md``'s schema), to be found again by name."""
    def case(c: Case) -> dict[str, Any]:
        body: dict[str, Any] = {"name": c.name, "target": _model_yaml(c.target)}
        if c.draft is not None:
            body["draft"] = _model_yaml(c.draft)
        if len(c.drafts) > 1:
            body["drafts"] = [_model_yaml(d) for d in c.drafts]
        if c.prompt is not None:
            body["prompt"] = c.prompt
        if c.prompt_file is not None:
            body["prompt_file"] = c.prompt_file
        if c.category is not None:
            body["category"] = c.category
        if c.chat:
            body["chat"] = True
        if c.history:
            body["history"] = [{"role": r, "content": t} for r, t in c.history]
        return body

    doc: dict[str, Any] = {"name": exp.name, "description": exp.description, "engine": exp.engine, "repeats": exp.repeats}
    given_settings = {k: (list(v) if isinstance(v, tuple) else v) for k, v in exp.settings.to_dict().items() if v is not None}
    if given_settings:
        doc["settings"] = given_settings
    if exp.prompts is not None:
        doc["prompts"] = exp.prompts
    doc["cases"] = [case(c) for c in exp.cases]
    doc["study"] = exp.sha256
    doc["files"] = files_of(exp)
    return doc


def files_of(exp: Experiment) -> dict[str, str]:
    """Each model of ``exp`` named by location -> its sha256 (resolved now; once per process)."""
    from llamaspec.models import given
    from llamaspec.registry import engines

    refs = {r.variant for c in exp.cases for r in (c.target, c.draft, *c.drafts) if r is not None and r.given}
    return {text: given.open_ref(text, tools=engines.model_tools()).sha256 for text in sorted(refs)}


def check_kept(exp: Experiment) -> None:
    """A study rerun by name measures the bytes it was named for: a file changed since (the same
    path, other bytes) is refused, so that its numbers never join the old ones under one name."""
    import yaml

    if not exp.path or not Path(exp.path).is_file():
        return
    _refuse_changed(exp.name, (yaml.safe_load(Path(exp.path).read_text()) or {}).get("files") or {}, files_of(exp))


def _refuse_changed(name: str, kept: dict[str, str], now: dict[str, str]) -> None:
    """One line for the first file (path -> sha256) of study ``name`` whose bytes are not those it was named for."""
    for text, sha in kept.items():
        if now.get(text, sha) != sha:
            raise LlamaspecError(f"{text} has changed since study {name} was named for it "
                                 f"(sha256 {now[text][:12]}, was {sha[:12]})",
                                 hint="measure it as a new study (the same command with -m/-md names it anew), "
                                      "or put the old file back")


def save_study(exp: Experiment) -> Path:
    """Keep the study as ``LLAMASPEC_DATA/studies/NAME.yaml``, so that ``run``, ``sweep``,
    ``report`` and ``plot`` take its name. A name already kept for other models or settings is
    refused (its results would mix with these): nothing measured under it is touched."""
    import yaml

    from llamaspec.base import atomic

    path = study_path(exp.name)
    if path.is_file():
        try:
            doc = yaml.safe_load(path.read_text()) or {}
        except yaml.YAMLError:
            doc = {}
        if doc.get("study") == exp.sha256:
            return path
        _refuse_changed(exp.name, doc.get("files") or {}, files_of(exp))  # the same files, other bytes: say which
        raise LlamaspecError(f"study {exp.name} already names other models, settings or prompts ({path})",
                             hint="choose another --name, or drop --name for the name made from the files")
    atomic.write_text(path, "# A llamaspec study made from the command line (llamaspec.studies.adhoc); rerun it by name.\n"
                      + yaml.safe_dump(to_yaml(exp), sort_keys=False, allow_unicode=True))
    return path


def draft_axis(exp: Experiment) -> tuple[str, ...]:
    """The drafts every case of ``exp`` compares (their ModelRef variants), for a sweep's or a
    study's draft dimension; () when there is one draft or none."""
    sets = {tuple(d.variant for d in c.drafts) for c in exp.cases}
    if len(sets) > 1:
        raise LlamaspecError(f"the cases of {exp.name} compare different drafts",
                             hint="sweep them as separate experiments")
    found = next(iter(sets), ())
    if len(found) > 1 and len({d.model for c in exp.cases for d in c.drafts}) > 1:
        raise LlamaspecError(f"the drafts of {exp.name} mix catalog models", hint="give them as files or USER/REPO:QUANT")
    return found if len(found) > 1 else ()


def open_study(experiment_name: str | None, model: str | None, drafts: Sequence[str], study: str | None, *,
               settings: Settings | None = None, prompt: str | None = None, prompt_file: Path | None = None,
               prompts: str | None = None, repeats: int | str | None = None, command: str = "run",
               several_drafts: bool = True, workload: Any = None) -> Any:
    """The experiment a measurement runs: NAME|PATH as ever, or (with ``model``) a study of the
    models given, made by ``experiment_from_models`` on the engine the core picks for it (a prompt
    set: llama-server; one prompt: llama.cpp's programs where one runs the spec type or one is
    named, else the engine that does), kept under its name and announced. ``workload``: a loaded
    prompt set whose prompts are the study's cases (sweep); ``command``: the caller's name
    in messages. The CLI's measuring commands and ``llamaspec.studies.adhoc`` users alike."""
    from llamaspec.studies import experiment

    if model is None:
        if drafts or study:
            raise LlamaspecError(f"{'-md' if drafts else '--name'} needs -m TARGET",
                                 hint=f"e.g. llamaspec {command} -m target.gguf -md draft.gguf")
        if experiment_name is None:
            raise LlamaspecError("which experiment? give a NAME|PATH, or your own models with -m TARGET -md DRAFT",
                                 hint=f"e.g. llamaspec {command} -m target.gguf -md draft.gguf (`llamaspec {command} -h`)")
        if workload is not None:  # sweep NAME --prompts: studies/methods.py makes the cases
            raise LlamaspecError(f"a workload with the experiment {experiment_name}: its cases are its own",
                                 hint=f"`llamaspec sweep {experiment_name} --prompts ...` weighs its cases over a set")
        loaded = experiment.load(experiment_name)
        if study_path(loaded.name) == Path(loaded.path):
            check_kept(loaded)  # a study by name: the same bytes as when it was named
        return loaded
    if experiment_name is not None:
        raise LlamaspecError(f"-m {model} and the experiment {experiment_name} together: the experiment names its own models",
                             hint=f"drop {experiment_name} to measure -m/-md, or drop -m to run the experiment")
    found = list(drafts)
    if len(found) > 1 and not several_drafts:
        raise LlamaspecError(f"llamaspec {command} measures one draft, {len(found)} were given",
                             hint="compare drafts with `llamaspec sweep` (it takes several -md)")
    settings = settings or Settings()
    spec_type = settings.over(DEFAULTS).spec_type
    # a prompt set runs on llama-server; one prompt on llama.cpp's programs where one runs the type
    # (an n-gram mode on llama-speculative-simple) or one is named (--program), else on the engine that does
    engine = ("llama-server" if prompts is not None else "llama.cpp" if settings.program is not None
              else spectypes.engine_for(spec_type))
    if prompts is not None and Path(prompts).expanduser().is_file():
        prompts = str(Path(prompts).expanduser().resolve())
    exp = experiment_from_models(model, found, settings=settings, prompt=prompt,
                                 prompt_file=prompt_file, prompts=prompts, name=study, engine=engine,
                                 repeats=repeats if repeats is not None else 3, workload=workload)
    path = save_study(exp)
    what = (f"the prompt set {exp.prompts}" if exp.prompts is not None
            else f"the {len(exp.cases)} prompts of {workload.source.label}"
            if workload is not None and workload.source.path != str(builtin_prompts())
            else "one prompt" if len(exp.cases) == 1
            else builtin_label(exp))
    log.info("study %s: %s on %s (kept in %s; `llamaspec report %s`, `llamaspec plot %s`, or rerun with the same "
             "command or by name)", exp.name, exp.description, what, path, exp.name, exp.name)
    return exp
