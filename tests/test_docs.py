"""The README and docs/ stay true: generated tables match the recordings, quoted error messages exist
in the code, and every command line shown (README, docs, each command's `Example:`) parses."""

from __future__ import annotations

import re
import shlex
import sys
from collections.abc import Iterator
from pathlib import Path

import click
import pytest

from llamaspec.cli import main

ROOT = Path(__file__).resolve().parent.parent
DOCS = sorted((ROOT / "docs").glob("*.md"))
PAGES = [ROOT / "README.md", *DOCS]

sys.path.insert(0, str(ROOT / "docs"))
import make_results  # noqa: E402


def test_results_tables_match_the_recordings() -> None:
    current = (ROOT / "docs" / "results.md").read_text()
    assert make_results.BEGIN in current, "docs/results.md lost its generated block: run `make docs`"
    assert make_results.render(current) == current, "docs/results.md differs from the recordings: run `make docs`"


def test_a_changed_recording_changes_the_tables(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The check above can fail: a recording whose figure moved makes another table."""
    import json

    rec = make_results.RECORDINGS[0]
    data = json.loads((ROOT / rec.path).read_text())
    data["points"][0]["summary"]["speedup"]["median"] += 0.5
    moved = tmp_path / "sweep.json"
    moved.write_text(json.dumps(data))
    before = make_results.generated()
    monkeypatch.setattr(make_results, "RECORDINGS", (make_results.Recording(rec.title, str(moved), rec.llamaspec_commit),))
    monkeypatch.setattr(make_results, "ROOT", Path("/"))
    assert make_results.generated() not in before


def _sources() -> str:
    return "\n".join(p.read_text() for p in (ROOT / "llamaspec").rglob("*.py"))


def test_quoted_error_messages_exist_in_the_code() -> None:
    text = (ROOT / "docs" / "troubleshooting.md").read_text()
    code = _sources()
    messages = [m for row in text.splitlines() if row.startswith("| `")
                for m in re.findall(r"`([^`]+)`", row.split(" | ")[0])]
    assert len(messages) >= 20
    missing = []
    for message in messages:
        for part in message.split("..."):
            part = part.strip()
            if len(part) >= 4 and part not in code:
                missing.append(f"{message!r} ({part!r})")
    assert not missing, "troubleshooting.md quotes messages the code no longer writes: " + "; ".join(missing)


# --- command lines -----------------------------------------------------------------------------------


def _shell_lines(text: str) -> Iterator[str]:
    """`llamaspec ...` command lines: in ```sh blocks (comments dropped) and in inline code spans."""
    in_block = False
    for line in text.splitlines():
        if line.startswith("```"):
            in_block = line.strip() in ("```sh", "```bash", "```console")
            continue
        if in_block:
            command = line.split(" #", 1)[0].strip()
            if command.startswith("llamaspec "):
                yield command
    yield from re.findall(r"`(llamaspec [^`]+)`", text)


def parse_command_line(line: str) -> None:
    """Parse ``line`` through Click as the shell would hand it over, without running anything."""
    args = shlex.split(line)
    assert args[0] == "llamaspec", line
    ctx = main.make_context("llamaspec", args[1:])
    command: click.Command = main
    while isinstance(command, click.Group):
        rest = [*getattr(ctx, "_protected_args", []), *ctx.args]
        if not rest:
            break
        name, sub, rest = command.resolve_command(ctx, rest)
        assert sub is not None, f"{line}: no command {name}"
        assert not sub.hidden, f"{line}: {name} is now another command's form (its one-line pointer says which)"
        command = sub
        ctx = command.make_context(name or "", rest, parent=ctx)


def _parses(line: str) -> str | None:
    try:
        parse_command_line(line)
    except click.exceptions.Exit:
        return None
    except click.BadParameter as exc:
        if "does not exist" in exc.format_message():  # an example's file: the shape is what is checked
            return None
        return f"{line}: {exc.format_message()}"
    except click.ClickException as exc:
        return f"{line}: {exc.format_message()}"
    return None


@pytest.mark.parametrize("page", PAGES, ids=lambda p: p.name)
def test_command_lines_in_the_docs_parse(page: Path) -> None:
    lines = list(_shell_lines(page.read_text()))
    failures = [f for f in map(_parses, lines) if f]
    assert not failures, "\n".join(failures)


def _commands(group: click.Group, ctx: click.Context, prefix: str) -> Iterator[tuple[str, click.Command]]:
    for name in group.list_commands(ctx):
        command = group.get_command(ctx, name)
        if command is None:
            continue
        yield f"{prefix} {name}", command
        if isinstance(command, click.Group):
            yield from _commands(command, click.Context(command, parent=ctx, info_name=name), f"{prefix} {name}")


def _examples() -> list[tuple[str, str]]:
    ctx = click.Context(main, info_name="llamaspec")
    found = []
    for path, command in _commands(main, ctx, "llamaspec"):
        for match in re.findall(r"Example:\s*(llamaspec [^\n]+)", command.help or ""):
            found.append((path, match.split("  #", 1)[0].strip()))
    return found


def test_every_help_example_parses() -> None:
    examples = _examples()
    assert len(examples) >= 20
    failures = [f"{path}: {f}" for path, line in examples if (f := _parses(line))]
    assert not failures, "\n".join(failures)


def test_a_wrong_example_would_be_caught() -> None:
    assert _parses("llamaspec sweep smollm2-quicksort --no-such-flag 3") is not None
    assert _parses("llamaspec no-such-command") is not None
    assert _parses("llamaspec sweep smollm2-quicksort --draft 1,2") is None
