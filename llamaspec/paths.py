"""Where llamaspec keeps things. Every location can be moved with an environment variable.

- ``LLAMASPEC_ROOT``: the project folder holding ``vendor/``, ``models/`` and ``experiments/``
  (default: the checkout this package lives in, else the current directory).
- ``LLAMASPEC_MODELS``: the model files (default ``models/`` in the project folder).
- ``LLAMASPEC_CACHE``: builds and downloads shared by every clone (default ``~/.cache/llamaspec``).
- ``LLAMASPEC_DATA``: the results store, run logs and plots (default ``~/.local/share/llamaspec``).
- ``LLAMASPEC_LOCK``: the lock file that lets one measurement run at a time (default
  ``measure.lock`` in the cache folder: one per user and machine; point every user at one file in a
  folder all of them can write to queue their measurements on a shared machine).
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path

from llamaspec.errors import LlamaspecError


def project_root() -> Path:
    env = os.environ.get("LLAMASPEC_ROOT")
    if env:
        return Path(env).expanduser().resolve()
    checkout = Path(__file__).resolve().parent.parent
    if (checkout / "pyproject.toml").is_file() and (checkout / "experiments").is_dir():
        return checkout
    return Path.cwd()


def cache_dir() -> Path:
    env = os.environ.get("LLAMASPEC_CACHE")
    base = Path(env).expanduser() if env else Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache")) / "llamaspec"
    return base.resolve()


def data_dir() -> Path:
    env = os.environ.get("LLAMASPEC_DATA")
    if env:
        return Path(env).expanduser().resolve()
    xdg = os.environ.get("XDG_DATA_HOME")
    return (Path(xdg) if xdg else Path.home() / ".local" / "share").resolve() / "llamaspec"


def writable_dir(path: Path) -> Path:
    """``path`` as a folder this process can write in (made if missing), or one error line naming
    it and the variable that moves it."""
    try:
        path.mkdir(parents=True, exist_ok=True)
        writable = os.access(path, os.W_OK | os.X_OK)
        why = "" if writable else "no permission to write in it"
    except OSError as exc:
        why = exc.strerror or type(exc).__name__
    if why:
        raise LlamaspecError(f"cannot write in {path}: {why}", hint=moved_by(path))
    return path


def moved_by(path: Path) -> str:
    """A hint for a place llamaspec cannot write: which variable moves it (or its permissions)."""
    for var, base in (("LLAMASPEC_DATA", data_dir()), ("LLAMASPEC_CACHE", cache_dir()), ("LLAMASPEC_MODELS", models_dir())):
        if path == base or base in path.parents:
            now = f" (now {os.environ[var]})" if os.environ.get(var) else ""
            return f"set {var}{now} to a folder you can write in, or fix the permissions of {base}"
    return f"fix the permissions of {path}, or point llamaspec elsewhere (LLAMASPEC_DATA, LLAMASPEC_CACHE)"


def vendor_dir() -> Path:
    return project_root() / "vendor" / "llama.cpp"


def models_dir() -> Path:
    env = os.environ.get("LLAMASPEC_MODELS")
    return Path(env).expanduser().resolve() if env else project_root() / "models"


def experiments_dir() -> Path:
    return project_root() / "experiments"


def builds_dir() -> Path:
    return cache_dir() / "builds"


def downloads_dir() -> Path:
    return cache_dir() / "downloads"


def lock_path() -> Path:
    """The measurement lock (``llamaspec.lock``). Beware a cache folder on a network home shared
    by several machines: they would then queue behind each other; set LLAMASPEC_LOCK per machine."""
    env = os.environ.get("LLAMASPEC_LOCK")
    return Path(env).expanduser().resolve() if env else cache_dir() / "measure.lock"


def results_db() -> Path:
    return data_dir() / "results.sqlite"


def runs_dir() -> Path:
    return data_dir() / "runs"


def plots_dir() -> Path:
    return data_dir() / "plots"


def ensure_free_space(path: Path, needed_bytes: int, what: str) -> None:
    """Refuse to start work that would fill the disk half-way through."""
    probe = path
    while not probe.exists():
        probe = probe.parent
    free = shutil.disk_usage(probe).free
    if free < needed_bytes:
        raise LlamaspecError(
            f"not enough free disk for {what}: {free / 2**30:.1f} GiB free under {probe}, "
            f"{needed_bytes / 2**30:.1f} GiB needed",
            hint="free some space, or point LLAMASPEC_CACHE / LLAMASPEC_ROOT at a larger disk",
        )
