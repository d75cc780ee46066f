"""The llama.cpp build cache: what a build is, where it lives, and which one a run uses.

A build lives in ``$LLAMASPEC_CACHE/builds/<commit>-<accel>-<key>/`` with ``bin/`` (static
binaries, relocatable) and ``manifest.json``, written last: a folder without a manifest is not
a build. ``latest-<commit>-<accel>`` names the last good build of a commit for an accelerator,
so a run finds it without probing compilers or toolkits. A prebuilt binaries folder can stand
in for a build (``--bin-dir``/``LLAMASPEC_BIN_DIR``).

``accel`` is what the programs compute on: ``cpu``, ``cuda`` or ``metal`` (the word "backend"
names an engine such as llama.cpp or transformers, see ``llamaspec.engines``).
"""

from __future__ import annotations

import dataclasses
import json
import logging
import os
import re
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from llamaspec import atomic, host, paths
from llamaspec.errors import LlamaspecError
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
# GGML_RPC=ON only (``build.plan(rpc=True)``), under this role. Such a build has a latest pointer
# of its own (``latest-<commit>-<accel>-rpc``): it never stands in for the plain one by accident.
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
        "build_key": build.key,
    }


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


def pointer_name(build: Build) -> str:
    """The accelerator part of a build's latest pointer (``cpu``, or ``cpu-rpc`` for an RPC build)."""
    return build.accel + ("-rpc" if RPC_ROLE in build.programs else "")


def latest(accel: str, commit: str) -> Build | None:
    pointer = latest_pointer(accel, commit)
    found = load_build(Path(pointer.read_text().strip())) if pointer.is_file() else None
    if found is not None and found.commit == commit and Path(found.bin_dir).is_dir():
        return found
    return None


# --- which build a run uses ----------------------------------------------------------------------

def prebuilt(bin_dir: Path) -> Build:
    """A folder of llama.cpp programs someone else built (any generation)."""
    bin_dir = bin_dir.expanduser().resolve()
    if not bin_dir.is_dir():
        raise LlamaspecError(f"binaries folder not found: {bin_dir}", hint="pass the folder that holds llama-speculative")
    programs = {}
    for role, names in BINARIES.items():
        for name in names:
            if (bin_dir / name).is_file() and os.access(bin_dir / name, os.X_OK):
                programs[role] = name
                break
    if "speculative" not in programs:
        raise LlamaspecError(f"{bin_dir} holds no llama-speculative (or speculative) program",
                             hint="pass the folder of a llama.cpp build, e.g. build/bin")
    from llamaspec.llamacpp import flags

    version = flags.probe_version(bin_dir / programs["speculative"])
    return Build(bin_dir=str(bin_dir), commit=version.commit, accel="unknown", programs=programs,
                 source=f"bin:{bin_dir}", prebuilt=True)


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


def find(accel: str = "auto", bin_dir: Path | None = None, rpc: bool = False) -> Build:
    """The build a run uses: ``--bin-dir``/``LLAMASPEC_BIN_DIR``, else the last good build of the
    current source (of the pinned commit when there is no source tree); GPU accelerators first
    with ``auto``. Cheap: no compiler or toolkit probes."""
    chosen_dir = bin_dir or (Path(os.environ["LLAMASPEC_BIN_DIR"]) if os.environ.get("LLAMASPEC_BIN_DIR") else None)
    if chosen_dir is not None:
        return prebuilt(chosen_dir)
    check_accel(accel)
    commit, no_source = wanted_commit()
    for candidate in (("metal", "cuda", "cpu") if accel == "auto" else (accel,)):
        found = latest(candidate + ("-rpc" if rpc else ""), commit)
        if found is None:
            continue
        if found.smoke_host != host.fingerprint():
            from llamaspec.llamacpp import smoke

            log.info("build %s was smoke-tested on another machine; testing it here", found.bin_dir)
            smoke.check(found)
            found = stamp_smoke_host(found)
        return found
    if no_source is not None:
        raise LlamaspecError(
            f"{no_source}, and no build of the pinned llama.cpp {commit} ({accel}{', with RPC' if rpc else ''}) in "
            f"{paths.builds_dir()}",
            hint=f"run `llamaspec build{' --rpc' if rpc else ''}` first (it fetches the pinned source), or pass --bin-dir "
                 "with your own binaries",
        )
    raise LlamaspecError(
        f"no llama.cpp build of {commit} ({accel}{', with RPC' if rpc else ''}) in {paths.builds_dir()}",
        hint=f"run `llamaspec build{' --rpc' if rpc else ''}` first (or pass --bin-dir with your own llama.cpp binaries)",
    )
