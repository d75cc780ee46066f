"""Which flags a llama.cpp build takes, and how an experiment's intent maps onto them.

llama.cpp renames flags between generations (``--draft`` in 2023, ``--draft-max`` 2024 to early
2026, ``--spec-draft-n-max`` now) and its defaults drift. So we read each program's ``--help``
once, keep the set of flags it accepts (minus the ones it lists as removed), and build command
lines from a declarative table: for each setting, the flag names in order of preference.
"""

from __future__ import annotations

import functools
import re
import subprocess
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

from llamaspec.errors import LlamaspecError

GPU_ALL = 999  # "offload every layer" on builds where -ngl counts layers (2024 on)


@dataclass(frozen=True)
class Version:
    number: int | None
    commit: str
    backend: str | None = None


@dataclass(frozen=True)
class Capabilities:
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

    @property
    def generation(self) -> str:
        """A name for the flag family: 2023 (--draft), 2024 (--draft-max) or 2026 (--spec-draft-n-max)."""
        if self.has("--spec-draft-n-max"):
            return "2026"
        if self.has("--draft-max"):
            return "2024"
        return "2023"


@dataclass(frozen=True)
class Settings:
    """What an experiment asks for, independent of any llama.cpp generation."""

    target: str
    draft: str | None = None
    prompt: str | None = None
    prompt_file: str | None = None
    n_predict: int = 256
    seed: int = 20
    temperature: float = 0.0
    draft_max: int | None = None
    draft_min: int | None = None
    draft_p_min: float | None = None
    threads: int | None = None
    threads_draft: int | None = None
    gpu_layers: int | None = None  # layers, already mapped from intent by gpu_layers()
    draft_gpu_layers: int | None = None
    ctx_size: int | None = None
    batch_size: int | None = None
    escape: bool = True
    spec_type: str | None = None  # "draft" (a draft model) or one of the build's n-gram modes
    extra_args: tuple[str, ...] = ()
    rpc: tuple[str, ...] = ()  # RPC servers (host:port) for the target's layers


# setting -> flag names, most recent first. The first name the build accepts wins.
FLAG_TABLE: dict[str, tuple[str, ...]] = {
    "target": ("-m", "--model"),
    "draft": ("-md", "--model-draft", "--spec-draft-model"),
    "prompt": ("-p", "--prompt"),
    "prompt_file": ("-f", "--file"),
    "n_predict": ("-n", "--n-predict"),
    "seed": ("-s", "--seed"),
    "temperature": ("--temp",),
    "draft_max": ("--spec-draft-n-max", "--draft-max", "--draft"),
    "draft_min": ("--spec-draft-n-min", "--draft-min"),
    "draft_p_min": ("--spec-draft-p-min", "--draft-p-min"),
    "threads": ("-t", "--threads"),
    "threads_draft": ("-td", "--threads-draft", "--spec-draft-threads"),
    "gpu_layers": ("-ngl", "--n-gpu-layers", "--gpu-layers"),
    "draft_gpu_layers": ("-ngld", "--n-gpu-layers-draft", "--gpu-layers-draft", "--spec-draft-ngl"),
    "ctx_size": ("-c", "--ctx-size"),
    "batch_size": ("-b", "--batch-size"),
    "spec_type": ("--spec-type",),
    "rpc": ("--rpc",),
}
# Settings that llamaspec must be able to pass when asked for: a build without them is refused.
REQUIRED_WHEN_SET = {"draft", "draft_max", "draft_p_min", "spec_type", "draft_min", "rpc"}

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

    from llamaspec import atomic, paths

    key = hashlib.sha256(f"{program}|{mtime}|{size}".encode()).hexdigest()[:20]
    cached = paths.cache_dir() / "capabilities" / f"{key}.json"
    if cached.is_file():
        try:
            data = json.loads(cached.read_text())
            return data["help"], data["version"]
        except (ValueError, KeyError):
            pass

    def out(arg: str) -> str:
        try:
            done = subprocess.run([program, arg], capture_output=True, text=True, timeout=60, errors="replace")
        except (OSError, subprocess.TimeoutExpired) as exc:
            raise LlamaspecError(f"cannot run {program} {arg}: {exc}", hint="check the binary and its build") from exc
        if done.returncode < 0:
            raise LlamaspecError(f"{program} {arg} was killed by signal {-done.returncode}",
                                 hint="the binary does not run on this machine; rebuild with `llamaspec build --force`")
        return done.stdout + done.stderr

    help_text, version_text = out("--help"), out("--version")
    atomic.write_json(cached, {"program": program, "help": help_text, "version": version_text})
    return help_text, version_text


def probe_version(program: Path) -> Version:
    return capabilities(program).version


def capabilities(program: Path) -> Capabilities:
    """Read a program's flags (cached per binary and modification time)."""
    program = Path(program)
    if not program.is_file():
        raise LlamaspecError(f"llama.cpp program not found: {program}", hint="run `llamaspec build` first")
    st = program.stat()
    help_text, version_text = _probe(str(program), st.st_mtime, st.st_size)
    options, removed, spec_types = parse_help(help_text)
    if not options:
        raise LlamaspecError(f"{program.name} --help printed no options", hint="is this a llama.cpp program?")
    return Capabilities(str(program), options, removed, spec_types, parse_version(version_text), help_text)


def _put(argv: list[str], caps: Capabilities, setting: str, value: object) -> None:
    """Append ``flag value`` for a setting, with the first flag name this build accepts."""
    if value is None:
        return
    flag = caps.pick(FLAG_TABLE[setting])
    if flag is None:
        if setting in REQUIRED_WHEN_SET:
            raise LlamaspecError(
                f"{Path(caps.program).name} ({caps.version.commit}) has no flag for {setting.replace('_', ' ')}"
                f" (tried {', '.join(FLAG_TABLE[setting])})",
                hint="drop that setting from the experiment, or use a llama.cpp build that has it",
            )
        return
    argv.extend([flag, str(value)])


def common_argv(caps: Capabilities, s: Settings, *, with_draft: bool) -> list[str]:
    argv: list[str] = []
    put = functools.partial(_put, argv, caps)
    put("target", s.target)
    if with_draft:
        put("draft", s.draft)
    if s.prompt_file is not None:
        put("prompt_file", s.prompt_file)
    else:
        put("prompt", s.prompt)
    put("n_predict", s.n_predict)
    put("seed", s.seed)
    put("temperature", s.temperature)
    put("threads", s.threads)
    put("gpu_layers", s.gpu_layers)
    put("ctx_size", s.ctx_size)
    put("batch_size", s.batch_size)
    if s.rpc:
        put("rpc", ",".join(s.rpc))
    if s.escape and caps.has("-e"):
        argv.append("-e")
    elif not s.escape and caps.has("--no-escape"):
        argv.append("--no-escape")
    return argv


def speculative_argv(caps: Capabilities, program: Path, s: Settings) -> list[str]:
    """The speculative program's command line for these settings."""
    draftless = s.spec_type not in (None, "draft")
    if s.draft is None:
        # The speculative example lists the draft-free n-gram modes in --spec-type (shared option
        # table) but itself stops with "--model-draft is required" (seen on 0c1e570).
        raise LlamaspecError(
            f"{program.name} needs a draft model" + (f"; it cannot run --spec-type {s.spec_type} alone" if draftless else ""),
            hint="give the case a draft model; draft-free n-gram modes are served by llama-server (planned backend)",
        )
    argv = [str(program), *common_argv(caps, s, with_draft=True)]
    put = functools.partial(_put, argv, caps)
    put("draft_max", s.draft_max)
    put("draft_min", s.draft_min)
    put("draft_p_min", s.draft_p_min)
    put("threads_draft", s.threads_draft)
    put("draft_gpu_layers", s.draft_gpu_layers)
    if caps.has("--spec-type"):
        kind = "draft-simple" if s.spec_type in (None, "draft") else s.spec_type
        if caps.spec_types and kind not in caps.spec_types:
            raise LlamaspecError(f"{program.name} does not know --spec-type {kind}",
                                 hint=f"this build offers: {', '.join(caps.spec_types)}")
        argv.extend(["--spec-type", kind])
    elif draftless:
        raise LlamaspecError(f"{program.name} ({caps.version.commit}) has no --spec-type (speculative modes)",
                             hint="drop spec_type, or use a llama.cpp build from 2026 on")
    argv.extend(s.extra_args)
    return argv


def completion_argv(caps: Capabilities, program: Path, s: Settings) -> list[str]:
    """The target-only baseline's command line (llama-completion, or llama-cli/main on older builds)."""
    argv = [str(program), *common_argv(caps, s, with_draft=False)]
    if caps.has("-no-cnv"):
        argv.append("-no-cnv")  # plain completion of the prompt, never chat mode
    argv.extend(s.extra_args)
    return argv


def gpu_layers(intent: int | str | None, backend: str, generation: str) -> int | None:
    """Map the experiment's offload intent onto -ngl for this build.

    "all" means every layer on the GPU. On 2023 Metal builds any ``-ngl > 0`` offloaded the whole
    model (the write-up's ``-ngl 1``), so it stays 1 there; from 2024 on -ngl counts layers.
    A CPU build gets an explicit 0: there is nothing to offload, and defaults drift.
    """
    if intent is None:
        return None
    if backend == "cpu" or intent == "none":
        return 0
    if intent == "all":
        return 1 if (generation == "2023" and backend == "metal") else GPU_ALL
    return int(intent)


BATCH_SIZES = tuple(range(1, 18))  # verification batches: a draft of up to 16 tokens plus one


def bench_argv(program: Path, target: str, threads: int | None, gpu_layers: int | None,
               sizes: tuple[int, ...] = BATCH_SIZES, repetitions: int = 3) -> list[str]:
    """llama-bench timing the target on batches of each size (prompt processing only). Its flags
    (-m -p -n -r -t -ngl -o) have been stable since 2023."""
    argv = [str(program), "-m", target, "-p", ",".join(str(s) for s in sizes), "-n", "0", "-r", str(repetitions),
            "-o", "json"]
    if threads is not None:
        argv += ["-t", str(threads)]
    if gpu_layers is not None:
        argv += ["-ngl", str(gpu_layers)]
    return argv
