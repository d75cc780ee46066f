"""One name, one meaning: an option name (long or short) means the same on every command that has
it, a value has one name everywhere, and a list option's help says what its list takes."""

from __future__ import annotations

import re
from collections import defaultdict
from collections.abc import Iterator
from typing import Any

import click
import pytest
from click.testing import CliRunner

from llamaspec.base.errors import LlamaspecError
from llamaspec.cli import CONTEXT, main
from llamaspec.measure.settings import FIELDS, SWEEPABLE
from llamaspec.studies.grid import parse_values

# What each option name shared by several commands means: a phrase every one of its helps carries.
# (A setting's options carry the setting's own help instead.) A name newly shared must be added here.
MEANINGS = {
    "--accel": "compute", "-h": "Show this message", "--help": "Show this message", "--bin-dir": "llama.cpp binaries", "--json": "JSON", "--name": "study's name",
    "--n-predict": "Tokens to generate", "-n": "Tokens to generate", "--prompt": "prompt", "-p": "prompt",
    "--prompt-file": "prompt from a file", "-f": "prompt from a file", "--repeats": "Pairs (baseline + speculative)",
    "-r": "Pairs (baseline + speculative)", "--limit": "Keep N prompts", "--sample-seed": "Sample", "--format": "chat",
    "--turns": "turn", "--prompts": "prompt set", "-P": "prompt set", "--no-wait": "another measurement", "--check-deploy": "llama-server command", "--no-check-deploy": "llama-server command",
    "--plot": "plot", "--no-plot": "plot", "--experiment": "experiment", "-e": "experiment", "--output": "file",
    "-o": "file", "--force": "already", "--cluster": "Ray", "-m": "target", "--model": "target", "-md": "draft",
    "--model-draft": "draft", "--threads": "CPU threads", "-t": "CPU threads", "--source": "path:/your/llama.cpp",
}


def _commands() -> Iterator[tuple[str, list[click.Option]]]:
    def walk(cmd: click.Command, path: list[str], ctx: click.Context) -> Iterator[tuple[str, list[click.Option]]]:
        if isinstance(cmd, click.Group):
            for name in cmd.list_commands(ctx):
                sub = cmd.get_command(ctx, name)
                assert sub is not None
                yield from walk(sub, [*path, name], click.Context(sub, parent=ctx, info_name=name, **CONTEXT))
        else:  # get_params: the options a command adds when first used (concurrency's settings) too
            yield " ".join(path), [p for p in cmd.get_params(ctx) if isinstance(p, click.Option)]
    yield from walk(main, [], click.Context(main, info_name="llamaspec", **CONTEXT))


def _shown() -> Iterator[tuple[str, click.Option]]:
    """Every option a command's help shows. A hidden one may only be a pointer to where it went
    (a callback that ends the command, no value): never a second spelling of a live option."""
    for path, options in _commands():
        for option in options:
            if option.hidden:
                assert not option.expose_value and option.callback is not None, (path, option.opts)
                continue
            yield path, option


def _kind(option: click.Option) -> tuple[Any, ...]:
    """What an option is apart from its wording: where its value goes, flag or value, which values."""
    choices = tuple(option.type.choices) if isinstance(option.type, click.Choice) else None
    return option.name, "flag" if option.is_flag else "count" if option.count else "value", choices


def test_each_option_name_has_one_meaning_on_every_command() -> None:
    kinds: dict[str, dict[tuple[Any, ...], list[str]]] = defaultdict(lambda: defaultdict(list))
    helps: dict[str, list[tuple[str, str]]] = defaultdict(list)
    dests: dict[str, str] = {}
    for path, option in _shown():
        for name in option.opts + option.secondary_opts:
            kinds[name][_kind(option)].append(path)
            helps[name].append((path, option.help or ""))
            dests[name] = str(option.name)
    assert len(kinds) > 60  # every command's options were found (the walk imports each command)
    clashes = {name: dict(k) for name, k in kinds.items() if len(k) > 1}
    assert not clashes, clashes
    for name, said in helps.items():
        if len(said) < 2:
            continue
        dest = dests[name]  # one, by the test above
        phrase = FIELDS[dest].metadata["help"][:20] if dest in FIELDS else MEANINGS.get(name)
        assert phrase, f"{name} is on {[p for p, _ in said]}: say what it means in MEANINGS"
        assert all(phrase.lower() in help.lower() for _, help in said), (name, phrase, said)


def test_each_value_has_one_name_on_every_command() -> None:
    names: dict[str, set[tuple[str, ...]]] = defaultdict(set)
    for _, option in _shown():
        names[str(option.name)].add(tuple(sorted(option.opts + option.secondary_opts)))
    assert {dest: spellings for dest, spellings in names.items() if len(spellings) > 1} == {}
    # the llama.cpp tree to fetch (build's and `source fetch`'s): one spelling
    assert {tuple(o.opts) for _, o in _shown() if "path:/your/llama.cpp" in (o.help or "")} == {("--source",)}


@pytest.mark.parametrize("args", [
    ["rpc", "serve", "--bin-dir", "/nonexistent", "-p", "50052"], ["results", "export", "--format", "csv"], ["results", "list", "--limit", "3"],
    ["watch", "http://127.0.0.1:1", "--plot", "plots"], ["concurrency", "x", "--repeats", "2"],
    ["source", "fetch", "--spec", "path:/x"], ["sweep", "x", "--ngram-n", "2"], ["prompts", "list", "x", "--seed", "3"],
])
def test_a_spelling_that_meant_something_else_is_no_option(args: list[str]) -> None:
    done = CliRunner().invoke(main, args)
    assert done.exit_code == 2 and "No such option" in done.output, done.output


def test_a_list_options_help_says_what_the_list_takes() -> None:
    sweep = dict(_commands())["sweep"]
    lists = {str(o.name): o.help or "" for o in sweep if o.metavar == "LIST" and o.name in SWEEPABLE}
    assert set(lists) == set(SWEEPABLE)
    for setting, help in lists.items():
        example = re.search(r"e\.g\. (\S+)(?: or (\S+))?\.$", help)
        if example:  # each example it gives is one the sweep takes
            for text in filter(None, example.groups()):
                assert parse_values(setting, text), (setting, text)
        try:  # a range: whole numbers only (p-min's 0..1 is two whole numbers, 1..2 refused)
            took = bool(parse_values(setting, "1..2"))
        except LlamaspecError:
            took = False
        assert ("range" in help) == took, (setting, help)
    assert lists["flash_attn"].endswith("on, off or auto: one or more, comma-separated.")
    assert parse_values("flash_attn", "on,off") == ("on", "off")
    assert lists["draft_p_min"].endswith("a list, e.g. 0.5,0.8.") and lists["draft_max"].endswith("1,2,4 or 1..16.")

