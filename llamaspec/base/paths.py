"""Where llamaspec keeps things. Every location can be moved with an environment variable.

- ``LLAMASPEC_ROOT``: a project folder holding ``vendor/``, ``models/`` and ``experiments/``
  (default: the git clone this package runs from; an installed llamaspec has none).
- Shipped files (the model catalog ``models/catalog.yaml``, the experiments ``experiments/*.yaml``
  and prompt sets ``experiments/prompts/``): read from the project folder, else from the copy an
  installed wheel carries as package data (``llamaspec/_shipped``, the same files).
- ``LLAMASPEC_MODELS``: the model files (default ``models/`` in the project folder; an installed
  llamaspec: ``models`` in the data folder). A ``catalog.yaml`` there is used instead of the shipped one.
- ``LLAMASPEC_CACHE``: builds and downloads shared by every clone (default ``~/.cache/llamaspec``);
  without a project folder the pinned llama.cpp source is fetched there too (``source/llama.cpp``).
- ``LLAMASPEC_DATA``: the results store, run logs and plots (default ``~/.local/share/llamaspec``).
- ``LLAMASPEC_CONFIG``: the user's own experiments are looked up by name in the current folder,
  then in ``experiments/`` here (default ``~/.config/llamaspec``, or ``$XDG_CONFIG_HOME/llamaspec``),
  then among the shipped ones.
- ``LLAMASPEC_LOCK``: the lock file that lets one measurement run at a time (default
  ``measure.lock`` in the cache folder: one per user and machine; point every user at one file in a
  folder all of them can write to queue their measurements on a shared machine).
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path

from llamaspec.base.errors import LlamaspecError

# Where a built wheel carries the shipped files (llamaspec's build_py copies them there); a clone
# reads the same files from its top-level experiments/ and models/.
SHIPPED_PACKAGE_DIR = "_shipped"
CATALOG_FILE = "catalog.yaml"


def checkout() -> Path | None:
    """The git clone this package runs from (an editable install, or the source on PYTHONPATH);
    None for an installed llamaspec."""
    here = Path(__file__).resolve().parents[2]  # llamaspec/base/paths.py -> the clone
    if (here / "pyproject.toml").is_file() and (here / "experiments").is_dir() and (here / "llamaspec").is_dir():
        return here
    return None


def project_root() -> Path | None:
    """``LLAMASPEC_ROOT``, else the clone llamaspec runs from; None for an installed llamaspec
    (never the current folder: a tool started in some folder must not read or write there)."""
    env = os.environ.get("LLAMASPEC_ROOT")
    if env:
        return Path(env).expanduser().resolve()
    return checkout()


def package_data_dir() -> Path:
    """The shipped files inside an installed wheel (absent in a clone)."""
    return Path(__file__).resolve().parents[1] / SHIPPED_PACKAGE_DIR  # llamaspec/_shipped


def shipped_root() -> Path:
    """The folder whose ``experiments/`` and ``models/catalog.yaml`` are the shipped ones: the
    project folder, else the installed wheel's package data."""
    root = project_root()
    if root is not None:
        return root
    data = package_data_dir()
    if data.is_dir():
        return data
    raise LlamaspecError(f"llamaspec's shipped files (catalog, experiments) are missing: no {data}",
                         hint="reinstall llamaspec (pip install --force-reinstall llamaspec), or set LLAMASPEC_ROOT to a clone")


def shipped_catalog() -> Path:
    return shipped_root() / "models" / CATALOG_FILE


def _user_dir(var: str, xdg: str, default: str) -> Path:
    """``$var``, else ``$xdg/llamaspec``, else ``~/default/llamaspec``."""
    env = os.environ.get(var)
    if env:
        return Path(env).expanduser().resolve()
    base = os.environ.get(xdg)
    return ((Path(base).expanduser() if base else Path.home() / default) / "llamaspec").resolve()


def config_dir() -> Path:
    """The user's own experiments (``experiments/``): ``LLAMASPEC_CONFIG``, else
    ``$XDG_CONFIG_HOME/llamaspec`` (``~/.config/llamaspec``)."""
    return _user_dir("LLAMASPEC_CONFIG", "XDG_CONFIG_HOME", ".config")


def cache_dir() -> Path:
    return _user_dir("LLAMASPEC_CACHE", "XDG_CACHE_HOME", ".cache")


def data_dir() -> Path:
    return _user_dir("LLAMASPEC_DATA", "XDG_DATA_HOME", ".local/share")


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
    """The llama.cpp source tree: ``vendor/llama.cpp`` in the project folder; without one (an
    installed llamaspec), ``source/llama.cpp`` in the cache."""
    root = project_root()
    return root / "vendor" / "llama.cpp" if root is not None else cache_dir() / "source" / "llama.cpp"


def models_dir() -> Path:
    """The model files: ``LLAMASPEC_MODELS``, else ``models/`` in the project folder, else (an
    installed llamaspec) ``models`` in the data folder."""
    env = os.environ.get("LLAMASPEC_MODELS")
    if env:
        return Path(env).expanduser().resolve()
    root = project_root()
    return root / "models" if root is not None else data_dir() / "models"


def catalog_path() -> Path:
    """The model catalog: a ``catalog.yaml`` in the models folder (a clone's own, or a user's),
    else the shipped one."""
    own = models_dir() / CATALOG_FILE
    return own if own.is_file() else shipped_catalog()


def relative_base() -> Path:
    """What a relative ``path:`` in the catalog is relative to: the project folder, else the
    catalog's own folder."""
    return project_root() or catalog_path().parent


def experiments_dir() -> Path:
    """The shipped experiments (and their prompt sets in ``prompts/``)."""
    return shipped_root() / "experiments"


def experiment_dirs() -> list[tuple[str, Path]]:
    """Where experiments are looked up by name, nearest first, each with how it is called."""
    return [("current folder", Path.cwd()), ("your experiments", config_dir() / "experiments"),
            ("shipped", experiments_dir())]


def builds_dir() -> Path:
    return cache_dir() / "builds"


def downloads_dir() -> Path:
    return cache_dir() / "downloads"


def lock_path() -> Path:
    """The measurement lock (``llamaspec.base.lock``). Beware a cache folder on a network home shared
    by several machines: they would then queue behind each other; set LLAMASPEC_LOCK per machine."""
    env = os.environ.get("LLAMASPEC_LOCK")
    return Path(env).expanduser().resolve() if env else cache_dir() / "measure.lock"


def results_db() -> Path:
    return data_dir() / "results.sqlite"


def runs_dir() -> Path:
    return data_dir() / "runs"


def plots_dir() -> Path:
    return data_dir() / "plots"


def existing(path: Path) -> Path:
    """``path``, else the nearest folder above it that exists: the disk it will be made on."""
    while not path.exists():
        path = path.parent
    return path


def ensure_free_space(path: Path, needed_bytes: int, what: str) -> None:
    """Refuse to start work that would fill the disk half-way through."""
    probe = existing(path)
    free = shutil.disk_usage(probe).free
    if free < needed_bytes:
        raise LlamaspecError(
            f"not enough free disk for {what}: {free / 2**30:.1f} GiB free under {probe}, "
            f"{needed_bytes / 2**30:.1f} GiB needed",
            hint="free some space, or point LLAMASPEC_CACHE / LLAMASPEC_ROOT at a larger disk",
        )
