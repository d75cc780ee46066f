"""Where the llama.cpp source tree comes from, and which commit it is.

Sources, by spec string:
- ``pypi:llama-cpp-python==0.3.36`` (the default): the PyPI sdist, sha256-checked, whose
  ``vendor/llama.cpp`` is a complete llama.cpp tree.
- ``git:URL@COMMIT``: a git checkout, for users who reach GitHub.
- ``path:/some/llama.cpp``: a user's own tree, used in place.

The tree lands in ``vendor/llama.cpp`` with a ``.llamaspec-source.json`` marker saying what it is.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import shutil
import sys
import tarfile
from dataclasses import asdict, dataclass
from pathlib import Path

from llamaspec.base import atomic, paths, proc
from llamaspec.base.errors import LlamaspecError

log = logging.getLogger(__name__)

MARKER = ".llamaspec-source.json"
DEFAULT_SPEC = "pypi:llama-cpp-python==0.3.36"


@dataclass(frozen=True)
class PinnedSdist:
    version: str
    sha256: str
    commit: str  # the llama.cpp commit its vendor/llama.cpp was cut from
    date: str


# llama-cpp-python releases whose vendored llama.cpp we know. Add a row to pin another.
PINNED_SDISTS = {
    "0.3.36": PinnedSdist("0.3.36", "832db0699007f1be95a7e41ef12e88926b02ba836461e36a36372db2760c1a2e", "0c1e570", "2026-10-01"),
    "0.3.8": PinnedSdist("0.3.8", "31c91323b555c025a76a30923cead9f5695da103dd68c15cdbb4509b17f0ed77", "7841fc7", "2025-03-12"),
    # The 2023 generations (`speculative`/`main`/`quantize`, llama_print_timings; commits from each
    # sdist's CHANGELOG). Sep 2023 is the one of TinyLlama's speculative-decoding write-up: greedy
    # drafting whose length adapts during the run (+8 up to 30, -1 down to 2). Nov 2023 drafts trees
    # (--parallel) of a fixed length, stopping a branch early below --p-accept.
    "0.2.7": PinnedSdist("0.2.7", "2267d3e90bf461ee581dc78332007ea15d9b40e79471850455458b399e3f1887", "a98b163", "2023-09"),
    "0.2.20": PinnedSdist("0.2.20", "a0ada1cb800ba4da60ea6ac4f7264b687a35412374e5af2c92e5b22852cdbafb", "b38a16d", "2023-11"),
}


def pinned() -> PinnedSdist:
    """The pin behind DEFAULT_SPEC: what `llamaspec source fetch` gets, and whose cached build a
    checkout without a source tree uses."""
    return PINNED_SDISTS[DEFAULT_SPEC.partition("==")[2]]


@dataclass(frozen=True)
class SourceInfo:
    path: str
    commit: str
    kind: str  # pypi | git | path
    origin: str  # the spec it came from
    sha256: str | None = None

    @property
    def tree(self) -> Path:
        return Path(self.path)


REQUIRED = {
    "the CMake project": ["CMakeLists.txt"],
    "the speculative example": ["examples/speculative/speculative.cpp"],
    "the quantizer": ["tools/quantize/quantize.cpp", "examples/quantize/quantize.cpp"],
}


def check_tree(tree: Path) -> None:
    """Refuse a tree that cannot give us the programs we run."""
    if not tree.is_dir():
        raise LlamaspecError(f"llama.cpp source tree not found: {tree}", hint="run `llamaspec source fetch` first")
    for what, candidates in REQUIRED.items():
        if not any((tree / c).is_file() for c in candidates):
            raise LlamaspecError(
                f"{tree} is not a usable llama.cpp tree: {what} is missing ({candidates[0]})",
                hint="point --source at a complete llama.cpp checkout, or run `llamaspec source fetch` for the pinned one",
            )


def parse_spec(spec: str) -> tuple[str, str]:
    kind, sep, rest = spec.partition(":")
    if not sep or kind not in {"pypi", "git", "path"} or not rest:
        raise LlamaspecError(
            f"unknown llama.cpp source {spec!r}",
            hint="use pypi:llama-cpp-python==VERSION, git:URL@COMMIT or path:/your/llama.cpp",
        )
    return kind, rest


def current(tree: Path | None = None) -> SourceInfo:
    """The source in use: ``$LLAMASPEC_LLAMACPP`` (a user's tree), else ``vendor/llama.cpp``."""
    env_tree = os.environ.get("LLAMASPEC_LLAMACPP")
    if tree is None and env_tree:
        return describe_local_tree(Path(env_tree).expanduser().resolve())
    tree = tree or paths.vendor_dir()
    marker = tree / MARKER
    if not marker.is_file():
        if tree.is_dir() and any(tree.iterdir()):
            return describe_local_tree(tree)
        raise LlamaspecError(
            f"no llama.cpp source at {tree}",
            hint="run `llamaspec source fetch` (or `make setup`) to fetch the pinned tree",
        )
    info = SourceInfo(**json.loads(marker.read_text()))
    return SourceInfo(str(tree), info.commit, info.kind, info.origin, info.sha256)


def describe_local_tree(tree: Path) -> SourceInfo:
    check_tree(tree)
    if (tree / MARKER).is_file():  # a tree llamaspec fetched elsewhere knows its commit
        info = SourceInfo(**json.loads((tree / MARKER).read_text()))
        return SourceInfo(str(tree), info.commit, info.kind, info.origin, info.sha256)
    return SourceInfo(str(tree), tree_commit(tree), "path", f"path:{tree}")


def tree_commit(tree: Path) -> str:
    """The git commit of a tree, or a fingerprint of its sources when it is not a checkout."""
    if (tree / ".git").exists() and shutil.which("git"):
        done = proc.probe(["git", "-C", str(tree), "rev-parse", "--short=7", "HEAD"], timeout=60)
        if done is not None and done.returncode == 0 and not done.timed_out:
            dirty = proc.probe(["git", "-C", str(tree), "status", "--porcelain", "--untracked-files=no"], timeout=300)
            return done.stdout.strip() + ("-dirty" if dirty is None or dirty.stdout.strip() or dirty.timed_out else "")
    digest = hashlib.sha256()
    for sub in ("src", "ggml/src", "common", "examples/speculative", "tools"):
        for f in sorted((tree / sub).rglob("*")):
            if f.is_file():
                st = f.stat()
                digest.update(f"{f.relative_to(tree)}:{st.st_size}:{int(st.st_mtime)}\n".encode())
    return "local-" + digest.hexdigest()[:10]


def current_or_pinned() -> SourceInfo:
    """The source in use (:func:`current`), else the pinned one, fetched."""
    try:
        return current()
    except LlamaspecError:
        log.info("fetching the pinned llama.cpp source")
        return fetch(DEFAULT_SPEC)


def fetch(spec: str = DEFAULT_SPEC, dest: Path | None = None, force: bool = False) -> SourceInfo:
    """Fill ``dest`` (default ``vendor/llama.cpp``) from ``spec``; reuse it if already there."""
    dest = dest or paths.vendor_dir()
    kind, rest = parse_spec(spec)
    if kind == "path":
        return describe_local_tree(Path(rest).expanduser().resolve())
    if not force and (dest / MARKER).is_file():
        have = current(dest)
        if have.origin == spec:
            log.info("llama.cpp source already in place: %s (commit %s)", dest, have.commit)
            return have
        raise LlamaspecError(
            f"{dest} holds {have.origin}, not {spec}",
            hint="pass --force to replace it, or choose another --dest",
        )
    if dest.exists() and not (dest / MARKER).is_file() and any(dest.iterdir()) and not force:
        raise LlamaspecError(
            f"{dest} exists but was not filled by llamaspec",
            hint="move it away, pass --force, or use it as is with `--source path:" + str(dest) + "`",
        )
    info = _fetch_sdist(rest, dest) if kind == "pypi" else _fetch_git(rest, dest)
    log.info("llama.cpp source ready: %s (commit %s, from %s)", dest, info.commit, info.origin)
    return info


def _fetch_sdist(requirement: str, dest: Path) -> SourceInfo:
    name, sep, version = requirement.partition("==")
    if name != "llama-cpp-python" or not sep:
        raise LlamaspecError(f"unsupported PyPI source {requirement!r}", hint="use pypi:llama-cpp-python==VERSION")
    pin = PINNED_SDISTS.get(version)
    if pin is None:
        raise LlamaspecError(
            f"llama-cpp-python {version} is not pinned (no known sha256 or llama.cpp commit)",
            hint=f"pinned versions: {', '.join(sorted(PINNED_SDISTS))}; add a row to PINNED_SDISTS in {__name__}",
        )
    archive = download_sdist(version)
    got = atomic.sha256_file(archive)
    if got != pin.sha256:
        archive.unlink()
        raise LlamaspecError(
            f"checksum mismatch for {archive.name}: sha256 {got}, expected {pin.sha256}",
            hint="the download was corrupted or tampered with; it was deleted, run the command again",
        )
    paths.ensure_free_space(dest.parent, 600 * 2**20, "the llama.cpp source")
    prefix = f"llama_cpp_python-{version}/vendor/llama.cpp/"
    with atomic.atomic_path(dest) as tmp:
        try:
            with tarfile.open(archive) as tar:
                members = [m for m in tar.getmembers() if m.name.startswith(prefix)]
                for m in members:
                    m.name = m.name[len(prefix):]
                # `.git` there is a submodule pointer into the sdist author's checkout: outside it,
                # it dangles, and older trees' CMake then depend on a `.git/index` that is not there.
                keep = [m for m in members if m.name and m.name != ".git" and not m.name.startswith(".git/")]
                tar.extractall(tmp, members=keep, filter="data")
        except (tarfile.TarError, EOFError, OSError) as exc:
            raise LlamaspecError(f"cannot extract {archive}: {exc}", hint="delete it and run the command again") from exc
        check_tree(tmp)
        info = SourceInfo(str(dest), pin.commit, "pypi", f"pypi:llama-cpp-python=={version}", pin.sha256)
        atomic.write_json(tmp / MARKER, asdict(info))
    return info


def download_sdist(version: str) -> Path:
    """``pip download`` the sdist into the download cache (reused when present), through the user's
    own pip configuration (index, proxy, certificates).

    ``--no-binary llama-cpp-python``, not ``:all:``: pip prepares an sdist's metadata, which
    installs its build dependencies first, and ``:all:`` made it build those from source too
    (scikit-build-core and its own dependencies): over 7 minutes on a fresh machine, 13 s this way."""
    folder = paths.downloads_dir() / "sdists"
    archive = folder / f"llama_cpp_python-{version}.tar.gz"
    if archive.is_file():
        return archive
    paths.ensure_free_space(folder.parent, 200 * 2**20, "the llama.cpp sdist")
    with atomic.atomic_path(folder / f"pip-{version}") as tmp:
        tmp.mkdir(parents=True)
        proc.run(
            [sys.executable, "-m", "pip", "download", "--no-deps", "--no-binary", "llama-cpp-python",
             "--disable-pip-version-check", f"llama-cpp-python=={version}", "-d", str(tmp)],
            what="pip download of the llama.cpp sdist",
            hint="check that PyPI is reachable (pip config list), or fetch a tree with --source git:... / path:...",
            timeout=1800,
        )
        got = list(tmp.glob("llama_cpp_python-*.tar.gz"))
        if not got:
            raise LlamaspecError("pip downloaded no llama-cpp-python sdist", hint="check your pip index settings")
        os.replace(got[0], archive)
    return archive


def _fetch_git(rest: str, dest: Path) -> SourceInfo:
    url, sep, commit = rest.rpartition("@")
    if not sep or not url or not commit:
        raise LlamaspecError(f"git source needs URL@COMMIT, got {rest!r}", hint="e.g. git:https://github.com/ggml-org/llama.cpp@b4000")
    if not shutil.which("git"):
        raise LlamaspecError("git is not installed", hint="install git, or use the default PyPI source")
    with atomic.atomic_path(dest) as tmp:
        proc.run(["git", "clone", "--filter=blob:none", "--no-checkout", url, str(tmp)], what="git clone", timeout=3600)
        proc.run(["git", "-C", str(tmp), "checkout", "--detach", commit], what="git checkout", timeout=600)
        check_tree(tmp)
        info = SourceInfo(str(dest), tree_commit(tmp), "git", f"git:{rest}")
        atomic.write_json(tmp / MARKER, asdict(info))
    return info
