"""What a llama.cpp program offers, read from its ``--help`` and ``--version`` (asked once per
binary and kept on disk): its flags, the ones it lists as removed, its speculative modes, the
defaults it states, its version and with it the flag generation it belongs to."""

from __future__ import annotations

import functools
import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

from llamaspec.base.errors import LlamaspecError


@dataclass(frozen=True)
class Version:
    number: int | None
    commit: str


@dataclass(frozen=True)
class HelpFlags:
    """What one program's ``--help`` offers: its flags, the ones it lists as removed, its speculative
    modes and version (an engine's own abilities are ``backend.Capabilities``)."""

    program: str
    options: frozenset[str]
    removed: frozenset[str]
    spec_types: tuple[str, ...]
    version: Version
    help_text: str = field(repr=False, default="")

    def has(self, flag: str) -> bool:
        return flag in self.options and flag not in self.removed

    def pick(self, candidates: Sequence[str]) -> str | None:
        return next((c for c in candidates if self.has(c)), None)

    def default_of(self, flag: str) -> str | None:
        """The default the help states for ``flag`` (``(default: 48)``), its description read onto
        the lines that continue it; None where it states none."""
        lines = self.help_text.splitlines()
        for i, line in enumerate(lines):
            m = _OPTION_LINE.match(line)
            if m and flag in [n.strip() for n in m.group(1).split(",")]:
                text = line[m.end():]
                for more in lines[i + 1:]:
                    if _OPTION_LINE.match(more) or not more.strip():
                        break
                    text += " " + more.strip()
                found = re.search(r"\(default:\s*([^)]*)\)", text)
                return found.group(1).strip() if found else None
        return None

    def takes_value(self, flag: str) -> bool:
        """Whether the help shows an argument after ``flag`` (``-fa on|off|auto`` vs a bare ``-fa``)."""
        for line in self.help_text.splitlines():
            m = _OPTION_LINE.match(line)
            if m and flag in [n.strip() for n in m.group(1).split(",")]:
                rest = line[m.end():].split()
                return bool(rest) and (rest[0].isupper() or rest[0].startswith(("[", "<")))
        return False

    @property
    def generation(self) -> str:
        """A name for the flag family: 2023 (--draft), 2024 (--draft-max) or 2026 (--spec-draft-n-max)."""
        if self.has("--spec-draft-n-max"):
            return "2026"
        if self.has("--draft-max"):
            return "2024"
        return "2023"


_OPTION_LINE = re.compile(r"^\s{0,4}(-[-\w]+(?:,\s*-[-\w]+)*)")
# "version: 4880 (c2a67efe)" until 2026; "version: 0.5.0-dev (build 0, commit 0c1e570)" since.
_VERSION = re.compile(r"version:\s*(\S+)\s*\((?:build\s+(\d+),\s*commit\s+)?(\w+)\)")


def parse_help(text: str) -> tuple[frozenset[str], frozenset[str], tuple[str, ...]]:
    """Flags offered by a ``--help`` text, the ones it marks as removed, and its --spec-type values."""
    options: set[str] = set()
    removed: set[str] = set()
    spec_types: tuple[str, ...] = ()
    names: list[str] = []
    for line in text.splitlines():
        m = _OPTION_LINE.match(line)
        if not m:
            # When the names column is wider than 40 characters the description, and with it
            # "the argument has been removed", starts on the next line.
            if "argument has been removed" in line:
                removed.update(names)
            continue
        names = [n.strip() for n in m.group(1).split(",")]
        options.update(names)
        rest = line[m.end():]
        if "has been removed" in rest or "argument has been removed" in line:
            removed.update(names)
        if "--spec-type" in names:
            first = rest.split()
            if first:
                spec_types = tuple(v for v in re.split(r"[\[\],|]", first[0]) if v and not v.startswith("<"))
    return frozenset(options), frozenset(removed), spec_types


def parse_version(text: str) -> Version:
    m = _VERSION.search(text)
    if not m:
        return Version(None, "unknown")
    number = m.group(2) or m.group(1)
    return Version(int(number) if number.isdigit() else None, m.group(3))


@functools.lru_cache(maxsize=32)
def _probe(program: str, mtime: float, size: int) -> tuple[str, str]:
    """``--help`` and ``--version`` of a program, kept on disk per binary (path, mtime, size) so
    that a run does not pay four extra process starts."""
    import hashlib
    import json

    from llamaspec.base import atomic, paths, proc

    key = hashlib.sha256(f"{program}|{mtime}|{size}".encode()).hexdigest()[:20]
    cached = paths.cache_dir() / "capabilities" / f"{key}.json"
    if cached.is_file():
        try:
            data = json.loads(cached.read_text())
            return data["help"], data["version"]
        except (ValueError, KeyError):
            pass

    def out(arg: str) -> str:
        done = proc.run([program, arg], timeout=60, check=False, what=f"{Path(program).name} {arg}",
                        hint="check the binary and its build")
        if done.timed_out:
            raise LlamaspecError(f"{program} {arg} did not answer within 60 s", hint="check the binary and its build")
        if done.returncode < 0:
            raise LlamaspecError(f"{program} {arg} {done.describe_exit()}",
                                 hint="the binary does not run on this machine; rebuild with `llamaspec build --force`")
        return done.stdout + done.stderr

    help_text, version_text = out("--help"), out("--version")
    atomic.write_json(cached, {"program": program, "help": help_text, "version": version_text})
    return help_text, version_text


def probe_version(program: Path) -> Version:
    return program_flags(program).version


def program_flags(program: Path) -> HelpFlags:
    """Read a program's flags from its ``--help`` (cached per binary and modification time)."""
    program = Path(program)
    if not program.is_file():
        raise LlamaspecError(f"llama.cpp program not found: {program}", hint="run `llamaspec build` first")
    st = program.stat()
    help_text, version_text = _probe(str(program), st.st_mtime, st.st_size)
    options, removed, spec_types = parse_help(help_text)
    if not options:
        raise LlamaspecError(f"{program.name} --help printed no options", hint="is this a llama.cpp program?")
    return HelpFlags(str(program), options, removed, spec_types, parse_version(version_text), help_text)
