"""The llama.cpp build cache: what a build is, where it lives, and which one a run uses.

A build lives in ``$LLAMASPEC_CACHE/builds/<commit>-<accel>-<key>/`` with ``bin/`` (static
binaries, relocatable) and ``manifest.json``, written last: a folder without a manifest is not
a build. ``latest-<commit>-<accel>`` names the last good build of a commit for an accelerator,
so a run finds it without probing compilers or toolkits. A prebuilt binaries folder can stand
in for a build (``--bin-dir``/``LLAMASPEC_BIN_DIR``).

``accel`` is what the programs compute on: ``cpu``, ``cuda`` or ``metal`` (the word "backend"
names an engine such as llama.cpp or transformers, see ``llamaspec.registry.engines``).

Its size: the cache's layout (manifests, ``latest-`` pointers) and the search for a build
(prebuilt folder, PATH, the cache, in that order) read and write the same manifest and pointer
files; kept together, the file format has one owner.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import os
import re
from collections.abc import Iterator
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from llamaspec.base import atomic, host, paths
from llamaspec.base.errors import LlamaspecError
from llamaspec.llamacpp import source as sources

log = logging.getLogger(__name__)

ACCELS = ("cpu", "cuda", "metal")

# The programs llamaspec runs: role -> binary names, with older names where llama.cpp renamed
# them. Each tree gets the first name of each row that its CMake files define.
BINARIES: dict[str, tuple[str, ...]] = {
    "speculative": ("llama-speculative", "speculative"),
    "speculative-simple": ("llama-speculative-simple",),
    "completion": ("llama-completion", "llama-cli", "main"),
    "quantize": ("llama-quantize", "quantize"),
    "server": ("llama-server", "server"),
    "bench": ("llama-bench", "llama-bench"),
}
REQUIRED_PROGRAMS = ("speculative", "completion", "quantize")
# llama.cpp's RPC server (holds model layers for another machine's programs): in builds made with
# GGML_RPC=ON (``build.plan(rpc=True)``), under this role. The default build has it wherever the
# tree has one (the backend and server add about 12 s of CPU time to a build), so such a build is
# both the plain latest build and ``latest-<commit>-<accel>-rpc``; one made with ``--no-rpc`` is
# only the plain one, and an RPC run never picks it.
RPC_ROLE = "rpc-server"


@dataclass(frozen=True)
class Build:
    """A usable set of llama.cpp programs and where they came from."""

    bin_dir: str
    commit: str
    accel: str
    cmake_args: list[str] = field(default_factory=list)
    programs: dict[str, str] = field(default_factory=dict)  # role -> file name
    source: str = ""
    key: str = ""
    built_at: str = ""
    build_seconds: float = 0.0
    smoke_host: str = ""
    prebuilt: bool = False
    pending: dict[str, str] = field(default_factory=dict)  # role -> target: in the plan, built when first needed

    def program(self, role: str) -> Path:
        name = self.programs.get(role)
        if not name and role in self.pending:
            raise LlamaspecError(f"this llama.cpp build has not built its {role} program ({self.pending[role]}) yet",
                                 hint=f"build it with `llamaspec build --{role}` (the first run that needs it does so too)")
        if not name:
            raise LlamaspecError(
                f"this llama.cpp build has no {role} program ({', '.join(BINARIES.get(role, (role,)))})",
                hint=f"build it with `llamaspec build`, or add it to {self.bin_dir}",
            )
        return Path(self.bin_dir) / name

    @property
    def label(self) -> str:
        return f"llama.cpp {self.commit} ({self.accel})"


def safe_name(text: str) -> str:
    return re.sub(r"[^A-Za-z0-9_.-]", "_", text)


def check_accel(accel: str) -> None:
    if accel not in ("auto", *ACCELS):
        raise LlamaspecError(f"unknown accelerator {accel!r}", hint=f"choose one of: auto, {', '.join(ACCELS)}")


# --- manifests -----------------------------------------------------------------------------------

_FIELDS = {f.name for f in dataclasses.fields(Build)}


def from_manifest(data: dict[str, Any]) -> Build:
    """A Build from its manifest. Manifests written before the rename say ``backend`` for ``accel``."""
    data = dict(data)
    if "accel" not in data and "backend" in data:
        data["accel"] = data.pop("backend")
    return Build(**{k: v for k, v in data.items() if k in _FIELDS})


def load_build(folder: Path) -> Build | None:
    manifest = folder / "manifest.json"
    if not manifest.is_file():
        return None
    try:
        data = json.loads(manifest.read_text())
        return from_manifest(data) if isinstance(data, dict) else None
    except (json.JSONDecodeError, TypeError):
        return None


def provenance(build: Build, version: Any) -> dict[str, Any]:
    """What a build is, for the provenance of the numbers it produced (``version``: a program's
    parsed ``--version``, for builds that do not know their own commit)."""
    commit = build.commit if build.commit != "unknown" else version.commit
    return {
        "version": commit,  # the engine's version, as the results store keeps it (engine_version)
        "commit": commit,
        "build_number": version.number,
        "accel": build.accel,
        "cmake_args": list(build.cmake_args),
        "bin_dir": build.bin_dir,
        "programs": dict(build.programs),
        "source": build.source,
        "origin": origin(build),
        "build_key": build.key,
    }


def origin(build: Build) -> str:
    """Where a build's programs came from: ``PATH`` (found there), ``bin-dir`` (named) or ``llamaspec``
    (built and cached by llamaspec)."""
    if build.source.startswith("PATH:"):
        return "PATH"
    return "bin-dir" if build.prebuilt else "llamaspec"


def write_manifest(build: Build) -> None:
    # On disk the key stays "backend": llamaspec before the rename reads manifests with exactly the
    # fields it knows and rebuilds (wiping the folder) when it meets another; from_manifest reads both.
    data = asdict(build)
    data["backend"] = data.pop("accel")
    atomic.write_json(Path(build.bin_dir).parent / "manifest.json", data)


def stamp_smoke_host(build: Build) -> Build:
    """Record that the build passed its smoke test on this machine."""
    stamped = dataclasses.replace(build, smoke_host=host.fingerprint())
    write_manifest(stamped)
    return stamped


# --- latest pointers -----------------------------------------------------------------------------

def latest_pointer(accel: str, commit: str) -> Path:
    return paths.builds_dir() / f"latest-{safe_name(commit)}-{accel}"


def point_latest(accel: str, commit: str, folder: Path) -> None:
    """Remember the last good build per source commit and accelerator, so runs find it without rebuilding."""
    atomic.write_text(latest_pointer(accel, commit), str(folder) + "\n")


def pointer_names(build: Build) -> tuple[str, ...]:
    """The accelerator parts of the latest pointers a build answers: ``cpu``, and ``cpu-rpc`` as
    well when it has the RPC server."""
    return (build.accel, build.accel + "-rpc") if RPC_ROLE in build.programs else (build.accel,)


def point_latest_at(build: Build) -> None:
    """Make ``build`` the latest of its commit under each pointer it answers."""
    for name in pointer_names(build):
        point_latest(name, build.commit, Path(build.bin_dir).parent)


def latest(accel: str, commit: str) -> Build | None:
    pointer = latest_pointer(accel, commit)
    found = load_build(Path(pointer.read_text().strip())) if pointer.is_file() else None
    if found is not None and found.commit == commit and Path(found.bin_dir).is_dir():
        return found
    return None


# --- which build a run uses ----------------------------------------------------------------------
#
# One lookup, in this order (``find``; ``doctor`` shows every step with ``candidates``):
#   1. --bin-dir / LLAMASPEC_BIN_DIR: the folder named, and nothing else;
#   2. llamaspec's cached build of the wanted commit (the source tree's, else the pinned one);
#   3. llama.cpp programs on PATH (Homebrew, a distribution's package, one's own build) that have
#      the programs and flags the run needs: the results are then tied to that build;
#   4. building the wanted commit (minutes: said first, with the expected time), where allowed.
# A llama.cpp on PATH that is there but cannot serve the run (too old), with none after it that
# can, ends the lookup with its version and the missing flag rather than a build nobody asked for.

# The programs (roles) each engine runs: what a folder of someone else's programs must hold.
RUN_ROLES = ("speculative", "completion")  # the llama.cpp engine (llama-speculative and its baseline)
SERVER_ROLES = ("server",)  # the llama-server engine
AUTO_BUILD_ENV = "LLAMASPEC_AUTO_BUILD"  # 0: never build during a run, say what to do instead
# A CPU build of the pinned tree's six programs, in seconds of compiling times jobs: 0c1e570 built in
# 1067 s with 2 jobs on a shared 2-core VM (GCC 12, x86_64; its manifest's build_seconds).
BUILD_JOB_SECONDS = 2 * 1067.0


@dataclass(frozen=True)
class Candidate:
    """One place a run's llama.cpp programs may come from, as the lookup saw it."""

    origin: str  # --bin-dir, LLAMASPEC_BIN_DIR, cache, PATH or build
    where: str  # a folder, or the commit that would be built
    build: Build | None = None  # set when it can serve the run
    problem: str = ""  # why it cannot
    hint: str = ""
    fatal: bool = False  # a problem that ends the lookup (a named folder, a broken source tree)
    versions: dict[str, str] = field(default_factory=dict)  # program file name -> its --version, for PATH

    def error(self) -> LlamaspecError:
        return LlamaspecError(self.problem, hint=self.hint or None)


def auto_build() -> bool:
    """Whether a run may build the wanted llama.cpp when no other is found (``LLAMASPEC_AUTO_BUILD=0``: no)."""
    return os.environ.get(AUTO_BUILD_ENV, "1").strip().lower() not in ("0", "no", "false", "off")


def _executable(path: Path) -> bool:
    return path.is_file() and os.access(path, os.X_OK)


def _programs(folder: Path, only_llama: bool = False) -> dict[str, str]:
    """role -> file name of the llama.cpp programs in ``folder`` (the first name of each row it has).
    ``only_llama``: the ``llama-`` names only (on PATH, ``main`` or ``server`` may be anything)."""
    found = {}
    for role, names in BINARIES.items():
        for name in names:
            if (not only_llama or name.startswith("llama-")) and _executable(folder / name):
                found[role] = name
                break
    return found


def _version_text(version: Any) -> str:
    if version.number is not None:
        return f"build {version.number}, commit {version.commit}"
    return f"commit {version.commit}"


def _missing_role(folder: Path, programs: dict[str, str], roles: tuple[str, ...], only_llama: bool = False) -> str | None:
    for role in roles:
        if role not in programs:
            names = [n for n in BINARIES.get(role, (role,)) if not only_llama or n.startswith("llama-")]
            return f"{folder} holds no {' or '.join(names)} program"
    return None


def _probe_folder(folder: Path, programs: dict[str, str], roles: tuple[str, ...]) -> tuple[dict[str, str], str | None]:
    """Each needed program's ``--version``, and the first flag the run needs that one lacks (None: all there)."""
    from llamaspec.llamacpp import flags, programhelp

    versions: dict[str, str] = {}
    for role in roles:
        caps = programhelp.program_flags(folder / programs[role])
        versions[programs[role]] = _version_text(caps.version)
        lacking = flags.lacks(caps, role)
        if lacking:
            return versions, f"{programs[role]} ({versions[programs[role]]}) has {lacking}"
    return versions, None


def prebuilt(bin_dir: Path, roles: tuple[str, ...] = ("speculative",)) -> Build:
    """A folder of llama.cpp programs someone else built (any generation), holding ``roles``."""
    bin_dir = bin_dir.expanduser().resolve()
    if not bin_dir.is_dir():
        raise LlamaspecError(f"binaries folder not found: {bin_dir}", hint="pass the folder that holds llama-speculative")
    programs = _programs(bin_dir)
    missing = _missing_role(bin_dir, programs, roles)
    if missing:
        raise LlamaspecError(missing, hint="pass the folder of a llama.cpp build, e.g. build/bin")
    return _found(bin_dir, programs, roles, "bin")


def _found(folder: Path, programs: dict[str, str], roles: tuple[str, ...], origin: str) -> Build:
    """The programs in ``folder`` as a build of the commit the first role's program reports."""
    from llamaspec.llamacpp import programhelp

    version = programhelp.probe_version(folder / programs[roles[0]])
    return Build(bin_dir=str(folder), commit=version.commit, accel="unknown", programs=programs,
                 source=f"{origin}:{folder}", prebuilt=True)


def wanted_commit() -> tuple[str, str | None]:
    """The llama.cpp commit a run uses, and why the source tree was not asked (None when it was).

    The source tree's commit when there is one; without a tree (a fresh checkout that shares the
    build cache with another), the pinned commit, so that its cached build is used as is."""
    try:
        return sources.current().commit, None
    except LlamaspecError as exc:
        tree = paths.vendor_dir()
        if os.environ.get("LLAMASPEC_LLAMACPP") or (tree.is_dir() and any(tree.iterdir())):
            raise  # a tree that is there but broken is the user's to fix, not ours to skip
        return sources.pinned().commit, exc.message


def path_folders() -> list[Path]:
    """The folders of ``PATH`` in order, each once (by where it leads)."""
    seen: set[Path] = set()
    folders = []
    for entry in os.environ.get("PATH", "").split(os.pathsep):
        if not entry:
            continue
        folder = Path(entry).expanduser()
        try:
            key = folder.resolve()
        except OSError:
            continue
        if key not in seen and folder.is_dir():
            seen.add(key)
            folders.append(folder)
    return folders


def _explicit(bin_dir: Path | None, roles: tuple[str, ...]) -> Candidate | None:
    origin = "--bin-dir" if bin_dir is not None else "LLAMASPEC_BIN_DIR"
    chosen = bin_dir or (Path(os.environ["LLAMASPEC_BIN_DIR"]) if os.environ.get("LLAMASPEC_BIN_DIR") else None)
    if chosen is None:
        return None
    try:
        found = prebuilt(chosen, roles)
        versions, lacking = _probe_folder(Path(found.bin_dir), found.programs, roles)
    except LlamaspecError as exc:
        return Candidate(origin, str(chosen), problem=exc.message, hint=exc.hint or "", fatal=True)
    if lacking:
        return Candidate(origin, found.bin_dir, problem=f"the llama.cpp in {found.bin_dir} is too old for this run: {lacking}",
                         hint="pass --bin-dir with a newer llama.cpp build, or drop --bin-dir to use llamaspec's "
                              "(`llamaspec build`)", fatal=True, versions=versions)
    return Candidate(origin, found.bin_dir, found, versions=versions)


def _cached(accel: str, rpc: bool, commit: str) -> Candidate:
    where = f"{paths.builds_dir()} (llama.cpp {commit})"
    for candidate in (("metal", "cuda", "cpu") if accel == "auto" else (accel,)):
        found = latest(candidate + ("-rpc" if rpc else ""), commit)
        if found is None:
            continue
        return Candidate("cache", found.bin_dir, found)
    return Candidate("cache", where, problem=f"no build of {commit} ({accel}{', with RPC' if rpc else ''})")


def _programs_key(folder: Path, programs: dict[str, str], commit: str) -> str:
    """An identity for programs found on PATH: their commit and the files themselves (a package
    upgrade in place changes it), so that studies measured with one are not resumed with another."""
    import hashlib

    files = []
    for name in sorted(programs.values()):
        real = (folder / name).resolve()
        st = real.stat()
        files.append(f"{real}|{st.st_size}|{st.st_mtime_ns}")
    return f"path-{safe_name(commit)}-" + hashlib.sha256("\n".join(files).encode()).hexdigest()[:12]


def _on_path(folder: Path, roles: tuple[str, ...], pinned: str) -> Candidate:
    programs = _programs(folder, only_llama=True)
    missing = _missing_role(folder, programs, roles, only_llama=True)
    hint = (f"run `llamaspec build` (llama.cpp {pinned}, which llamaspec knows), or pass --bin-dir with a newer "
            "llama.cpp build")
    if missing:
        return Candidate("PATH", str(folder), problem=f"llama.cpp on PATH cannot serve this run: {missing}", hint=hint)
    try:
        versions, lacking = _probe_folder(folder, programs, roles)
    except LlamaspecError as exc:
        return Candidate("PATH", str(folder), problem=f"llama.cpp on PATH in {folder} does not answer: {exc.message}",
                         hint=hint)
    if lacking:
        return Candidate("PATH", str(folder), problem=f"llama.cpp on PATH in {folder} is too old for this run: {lacking}",
                         hint=hint, versions=versions)
    build = _found(folder, programs, roles, "PATH")
    return Candidate("PATH", str(folder), dataclasses.replace(build, key=_programs_key(folder, programs, build.commit)),
                     versions=versions)


def candidates(accel: str = "auto", bin_dir: Path | None = None, rpc: bool = False,
               roles: tuple[str, ...] = RUN_ROLES, on_path: bool = True) -> Iterator[Candidate]:
    """Every place the lookup looks, in its order, lazily (``find`` stops at the first usable one;
    ``doctor`` lists them all). The last is the build that would be made. ``on_path``: look on PATH
    (a cluster's machines do not: they all run the one commit the study binds)."""
    check_accel(accel)
    explicit = _explicit(bin_dir, roles)
    if explicit is not None:
        yield explicit
        return  # a named folder is the only choice: nothing else stands in for it silently
    try:
        commit, no_source = wanted_commit()
    except LlamaspecError as exc:
        yield Candidate("cache", str(paths.builds_dir()), problem=exc.message, hint=exc.hint or "", fatal=True)
        return
    yield _cached(accel, rpc, commit)
    if on_path and not rpc:  # an RPC run needs llamaspec's build with the RPC backend (`llamaspec build --rpc`)
        for folder in path_folders():
            if any(_executable(folder / n) for names in BINARIES.values() for n in names if n.startswith("llama-")):
                yield _on_path(folder, roles, sources.pinned().commit)
    what = f"llama.cpp {commit} ({accel}{', with RPC' if rpc else ''})"
    if no_source is not None:
        problem = f"{no_source}, and no build of the pinned {what} in {paths.builds_dir()}"
        hint = (f"run `llamaspec build{' --rpc' if rpc else ''}` first (it fetches the pinned source), or pass --bin-dir "
                "with your own binaries")
    else:
        problem = f"no llama.cpp build of {commit} ({accel}{', with RPC' if rpc else ''}) in {paths.builds_dir()}"
        hint = f"run `llamaspec build{' --rpc' if rpc else ''}` first (or pass --bin-dir with your own llama.cpp binaries)"
    yield Candidate("build", what, problem=problem, hint=hint)


def expected_build_time(accel: str) -> str:
    """How long building llama.cpp takes here: the last build of this accelerator on this machine
    when there is one, else an estimate from the cores."""
    past = []
    folder = paths.builds_dir()
    if folder.is_dir():
        for sub in folder.iterdir():
            done = load_build(sub) if sub.is_dir() else None
            if done is not None and done.build_seconds > 0 and done.smoke_host == host.fingerprint() and \
                    (accel == "auto" or done.accel == accel):
                past.append((done.built_at, done.build_seconds))
    if past:
        seconds = max(past)[1]
        return f"about {max(round(seconds / 60), 1)} min (the last build on this machine took that long)"
    cores = os.cpu_count() or 1
    minutes = BUILD_JOB_SECONDS / cores / 60
    text = f"roughly {max(round(minutes / 2), 1)} to {max(round(minutes), 2)} min on {cores} cores"
    return text + ("" if accel in ("auto", "cpu") else f" for a CPU build; a {accel} build takes longer")


_announced: set[str] = set()


def _say_found(chosen: Candidate, wanted: str) -> None:
    """Say which programs from PATH a run uses, their versions, and that its results are tied to them."""
    if chosen.origin != "PATH" or chosen.where in _announced:
        return
    _announced.add(chosen.where)
    versions = sorted(set(chosen.versions.values()))
    names = ", ".join(chosen.versions)
    log.warning("using llama.cpp from PATH: %s in %s (%s); the results are tied to that build (llamaspec's own is "
                "llama.cpp %s: `llamaspec build`)", names, chosen.where,
                versions[0] if len(versions) == 1 else "; ".join(f"{n}: {v}" for n, v in chosen.versions.items()), wanted)
