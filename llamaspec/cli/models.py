"""``llamaspec models``: list, show, fetch and check-pair. Parses and renders; the work is in llamaspec.models."""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING, Any

import click

from llamaspec.cli import main

if TYPE_CHECKING:
    from llamaspec.models import GGUFMetadata, ModelFile

json_option = click.option("--json", "as_json", is_flag=True, help="Print JSON on stdout instead of a table.")


@main.group()
def models() -> None:
    """The model catalog (models/catalog.yaml) and the GGUF files made from it."""


def _summary(meta: GGUFMetadata) -> dict[str, Any]:
    v = meta.vocab
    return {
        "architecture": meta.architecture,
        "parameters": meta.parameters,
        "file_type": meta.file_type,
        "context_length": meta.context_length,
        "vocab_type": v.type,
        "vocab_size": v.size,
        "bos": v.bos_id,
        "eos": v.eos_id,
        "add_bos": v.add_bos,
        "add_eos": v.add_eos,
    }


def _file_dict(f: ModelFile) -> dict[str, Any]:
    return {"label": f.label, "path": str(f.path), "sha256": f.sha256, "size": f.metadata.file_size,
            "metadata": f.metadata.to_dict(), "provenance": f.provenance}


def _meta_cells(meta: GGUFMetadata | None) -> list[str]:
    if meta is None:
        return ["-"] * 6
    v = meta.vocab
    return [meta.architecture, meta.parameters_label, meta.file_type or "?", str(meta.context_length or "?"),
            f"{v.type} {v.size}", f"{v.bos_id}/{v.eos_id}"]


def _describe_file(f: ModelFile) -> str:
    m = f.metadata
    v = m.vocab
    tensor_types = ", ".join(f"{k} {n}" for k, n in sorted(m.tensor_types.items(), key=lambda kv: (-kv[1], kv[0])))
    lines = [
        ("file", str(f.path)),
        ("sha256", f.sha256),
        ("size", f"{m.file_size / 1e6:.1f} MB"),
        ("architecture", m.architecture + (f" ({m.name})" if m.name else "")),
        ("parameters", f"{m.parameters:,} ({m.parameters_label})"),
        ("file type", m.file_type or "?"),
        ("tensor types", tensor_types),
        ("context length", str(m.context_length)),
        ("vocabulary", f"{v.type} ({v.model}{', pre ' + v.pre if v.pre else ''}), {v.size} tokens"),
        ("BOS / EOS", f"{v.bos_id} / {v.eos_id} (add BOS {str(v.add_bos).lower()}, add EOS {str(v.add_eos).lower()})"),
    ]
    origin = f.provenance
    if origin:
        details = ", ".join(f"{k}={val}" for k, val in origin.items() if k != "kind")
        lines.append(("made by", f"{origin.get('kind', '?')}: {details}"))
    return "\n".join(f"  {k + ':':<16}{val}" for k, val in lines)


@models.command("list")
@json_option
def list_models(as_json: bool) -> None:
    """List the catalog's models and variants, with metadata for those on disk.

    Example: llamaspec models list
    """
    from llamaspec import models as core
    from llamaspec.models import store
    from llamaspec.views.report import columns

    cat = core.load_catalog()
    rows = [["MODEL", "VARIANT", "ON DISK", "ARCH", "PARAMS", "TYPE", "CTX", "VOCAB", "BOS/EOS", "SOURCE"]]
    out = []
    for name, entry in sorted(cat.models.items()):
        have = store.local_variants(entry)
        for variant in entry.variants:
            f = have.get(variant)
            out.append({"name": name, "variant": variant, "on_disk": f is not None, "source": entry.source.describe(),
                        **({"path": str(f.path), **_summary(f.metadata)} if f else {})})
            rows.append([name, variant, "yes" if f else "no", *_meta_cells(f.metadata if f else None),
                         entry.source.describe()])
    if as_json:
        pair = cat.default_pair
        click.echo(json.dumps({"models": out, "default_pair": None if pair is None else
                               {"target": str(pair.target), "draft": str(pair.draft), "draft_max": pair.draft_max,
                                "note": pair.note}},
                              indent=2))
        return
    click.echo("\n".join(columns(rows)))
    if cat.default_pair:
        p = cat.default_pair
        click.echo(f"\ndefault offline pair: target {p.target}, draft {p.draft}"
                   + (f", draft length {p.draft_max}" if p.draft_max else ""))


@models.command("show")
@click.argument("model")
@json_option
def show(model: str, as_json: bool) -> None:
    """Show a catalog model (its source and the variants on disk) or any GGUF file's metadata.

    MODEL is a catalog name, NAME:VARIANT, or a path to a .gguf file. Nothing is downloaded.

    Example: llamaspec models show smollm2-135m
    """

    from llamaspec import models as core
    from llamaspec.models import catalog, given, store

    if given.parse(model).kind == "file":  # a file's own metadata; else the catalog's entry below
        f = given.open_ref(model)
        click.echo(json.dumps(_file_dict(f), indent=2) if as_json else f"{f.path.name}\n{_describe_file(f)}")
        return
    ref = catalog.parse_ref(model)
    cat = core.load_catalog()
    entry = cat.entry(ref.name)
    variants = [ref.variant] if ref.variant else list(entry.variants)
    if ref.variant:
        cat.variant(ref.name, ref.variant)
    have = store.local_variants(entry)
    if as_json:
        click.echo(json.dumps({
            "name": entry.name, "description": entry.description, "license": entry.license,
            "source": {"kind": entry.source.kind, **entry.source.options}, "variants": list(entry.variants),
            "fetch": list(entry.fetch), "on_disk": {v: _file_dict(have[v]) for v in variants if v in have},
        }, indent=2, default=str))
        return
    click.echo(f"{entry.name}: {entry.description}" if entry.description else entry.name)
    click.echo(f"  source:   {entry.source.describe()}")
    if entry.license:
        click.echo(f"  license:  {entry.license}")
    click.echo(f"  variants: {', '.join(entry.variants)} (fetch makes: {', '.join(entry.fetch)})")
    for v in variants:
        if v in have:
            click.echo(f"\n{entry.name}:{v}\n{_describe_file(have[v])}")
        else:
            click.echo(f"\n{entry.name}:{v}: not on disk (llamaspec models fetch {entry.name} --variant {v})")


@models.command("fetch")
@click.argument("names", nargs=-1, required=True, metavar="NAME...")
@click.option("--variant", "variants", multiple=True, metavar="V",
              help="A variant to make (repeatable; default: the catalog's fetch list). With one NAME only.")
@click.option("--update", is_flag=True,
              help="Move each Hugging Face model's pin (models/catalog.lock) to what its revision points at now.")
@json_option
def fetch(names: tuple[str, ...], variants: tuple[str, ...], update: bool, as_json: bool) -> None:
    """Download, convert and quantize catalog models into models/NAME/ (finished files are reused).

    NAME may carry a variant (NAME:VARIANT), as everywhere else a model is named. A Hugging Face
    checkpoint is downloaded at the commit pinned in models/catalog.lock (pinned on its first
    fetch); before downloading, the sizes, the free disk and a time estimate are printed.

    Example: llamaspec models fetch codellama-7b tinyllama-1.1b-python
    """
    from llamaspec import models as core
    from llamaspec.base.errors import LlamaspecError
    from llamaspec.models import catalog, hf, store
    from llamaspec.registry import engines

    if variants and len(names) > 1:
        raise LlamaspecError("--variant applies to one model", hint="fetch one NAME with --variant, or write NAME:VARIANT")
    cat = core.load_catalog()
    refs = [catalog.parse_ref(n) for n in names]
    entries = [cat.entry(r.name) for r in refs]  # every name checked before anything is downloaded
    files: list[ModelFile] = []
    for ref, entry in zip(refs, entries, strict=True):
        if entry.source.kind == "hf" and not hf.offline() and (update or store.pinned_commit(entry, cat)):
            try:
                change = store.hub_pin(entry, cat, update=update)
            except LlamaspecError as exc:
                if update:
                    raise
                click.echo(f"warning: could not compare {entry.name}'s pin with the hub: {exc.message}", err=True)
            else:
                if update or change.old != change.new:
                    note = "" if update or change.old is None else (
                        f"; keeping the pin (llamaspec models fetch --update {entry.name} moves it)")
                    click.echo(change.describe() + note, err=True)
        wanted = ([ref.variant] if ref.variant else []) + list(variants)
        files += core.ensure(ref.name, wanted or None, catalog=cat, tools=engines.model_tools())
    if as_json:
        click.echo(json.dumps([{**_file_dict(f), "made_now": f.made_now} for f in files], indent=2))
        return
    for f in files:
        state = "made" if f.made_now else "already there"
        click.echo(f"{f.label} ({state})\n{_describe_file(f)}")
    if not any(f.made_now for f in files):
        done = [f.variant if len(names) == 1 else f.label for f in files]
        click.echo(f"nothing to do: {', '.join(done)} already fetched", err=True)


@models.command("check-pair")
@click.argument("target")
@click.argument("draft")
def check_pair(target: str, draft: str) -> None:
    """Check that llama.cpp would accept DRAFT as a draft model for TARGET.

    Each is NAME:VARIANT (fetched if needed) or a path to a .gguf file. Compares what llama.cpp
    compares: vocabulary type, BOS/EOS, vocabulary size (at most 128 apart) and token texts.

    Example: llamaspec models check-pair smollm2-135m:f32 smollm2-135m:q4_1
    """
    from llamaspec import models as core
    from llamaspec.models import given
    from llamaspec.registry import engines

    t, d = given.path_of(target, engines.model_tools()), given.path_of(draft, engines.model_tools())
    v = core.check_pair(t, d)
    click.echo(f"ok: llama.cpp accepts {d.name} as a draft for {t.name} ({v.type} vocabulary, {v.size} tokens)")


def human_count(n: int) -> str:
    from llamaspec.models.reader import human_count as count

    return count(n) if n else "?"


def _size(n: int) -> str:
    return f"{n / 1e9:.2f} GB" if n >= 1e9 else f"{n / 1e6:.1f} MB"


@models.command("drafts")
@click.argument("target")
@click.argument("folders", nargs=-1, type=click.Path(path_type=Path))
@click.option("--no-caches", is_flag=True,
              help="Look only in the FOLDERs given, not in the Hugging Face, llama.cpp and LM Studio caches.")
@json_option
def drafts(target: str, folders: tuple[Path, ...], no_caches: bool, as_json: bool) -> None:
    """List the GGUF files llama.cpp would accept as a draft for TARGET, smallest first.

    TARGET is a GGUF file or a catalog NAME[:VARIANT]. Looks in each FOLDER and, unless --no-caches,
    in the Hugging Face hub cache (HF_HUB_CACHE, HF_HOME/hub, ~/.cache/huggingface/hub), llama.cpp's
    download cache (LLAMA_CACHE, ~/.cache/llama.cpp) and LM Studio's models folders (~/.lmstudio/models,
    ~/.cache/lm-studio/models). Each file's vocabulary is compared as llama.cpp compares a draft's
    (type, BOS/EOS, size within 128, token texts); the files it would refuse are listed with the
    reason, and unreadable ones (truncated, not GGUF) as such. Reads file headers only.

    Example: llamaspec models drafts ~/models/Qwen2.5-7B-Instruct-Q4_K_M.gguf ~/models
    """
    from llamaspec.base import paths
    from llamaspec.base.progress import Progress
    from llamaspec.models import drafts as finder
    from llamaspec.models import given
    from llamaspec.registry import engines
    from llamaspec.views.report import columns

    if no_caches and not folders:
        from llamaspec.base.errors import LlamaspecError

        raise LlamaspecError("--no-caches with no FOLDER leaves nowhere to look", hint="give a folder, or drop --no-caches")
    target_path = given.path_of(target, engines.model_tools())
    bar: list[Progress] = []

    def on_file(i: int, n: int, path: Path) -> None:
        if n < 50:  # a few files take a moment: no bar
            return
        if not bar:
            bar.append(Progress(f"reading {n} GGUF headers", total=n))
        bar[0].update(i, path.name)

    try:
        found = finder.survey(target_path, folders, caches=not no_caches, cache_dir=paths.cache_dir(), on_file=on_file)
    finally:
        if bar:
            bar[0].close()
    if as_json:
        click.echo(json.dumps(finder.survey_dict(found), indent=2))
        return
    t, v = found.target_metadata, found.target_metadata.vocab
    click.echo(f"target: {found.target} ({t.architecture}, {t.parameters_label} parameters, {t.file_type or '?'}; "
               f"{v.type} vocabulary, {v.size} tokens)")
    accepted, refused, unreadable = found.of("accepted"), found.of("refused"), found.of("unreadable")

    def where(c: finder.DraftFile) -> str:
        return f"{c.path}" + (f"  [{c.repo}]" if c.repo else "")

    if accepted:
        click.echo(f"\nllama.cpp accepts {len(accepted)} as a draft (smallest first):")
        rows = [["SIZE", "PARAMS", "QUANT", "ARCH", "FILE"]]
        rows += [[_size(c.size), human_count(c.parameters), c.quantization, c.metadata.architecture if c.metadata else "?",
                  where(c)] for c in accepted]
        click.echo("\n".join("  " + line for line in columns(rows)))
    else:
        click.echo("\nno GGUF file here would be accepted as a draft for this target")
    if refused:
        click.echo(f"\nrefused ({len(refused)}):")
        for c in refused:
            click.echo(f"  {where(c)} ({_size(c.size)}, {human_count(c.parameters)}, {c.quantization}): {c.reason}")
    if unreadable:
        click.echo(f"\nunreadable ({len(unreadable)}):")
        for c in unreadable:
            click.echo(f"  {where(c)}: {c.reason}")
    looked = "; ".join(f"{p.path} ({n} GGUF)" if n >= 0 else f"{p.path} (not there)" for p, n in found.places)
    click.echo(f"\nlooked in: {looked}", err=True)
    kept = len(found.candidates) - found.read
    click.echo(f"{len(found.candidates)} GGUF files in {found.seconds:.1f} s ({found.read} headers read"
               + (f", {kept} remembered from an earlier look" if kept > 0 else "") + ")", err=True)
