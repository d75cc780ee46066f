"""Pinned revisions: ``models/catalog.lock``, beside the catalog and tracked in git (an installed
llamaspec keeps it in its models folder: see ``lock_path``).

The catalog names a revision (``main``, a tag); the first fetch of a Hugging Face checkpoint
resolves it to a commit and writes it here, and every later fetch, on this machine or on a
colleague's with the same lock file, downloads that commit, whatever the branch points at now.
``llamaspec models fetch --update NAME`` moves a pin on purpose. A catalog revision that is
itself a commit needs no pin; a pin made for another repo or revision (the catalog was edited)
no longer applies and is replaced on the next fetch.
"""

from __future__ import annotations

import re
import time
from dataclasses import dataclass
from pathlib import Path

from llamaspec.base import atomic, paths
from llamaspec.base.errors import LlamaspecError

LOCK_FILE = "catalog.lock"
_COMMIT = re.compile(r"^[0-9a-f]{40}$")
_HEADER = """\
# Commits that llamaspec resolved the Hugging Face revisions of models/catalog.yaml to, on first fetch.
# Every fetch downloads the commit named here (so a reproduction in a year uses the same weights);
# `llamaspec models fetch --update NAME` moves a pin and says from what to what. Keep this file in git.
"""


@dataclass(frozen=True)
class Pin:
    name: str
    repo: str
    revision: str
    commit: str
    pinned_at: str = ""

    def applies_to(self, repo: str, revision: str, aliases: tuple[str, ...] = ()) -> bool:
        return self.revision == revision and self.repo in (repo, *aliases)


def is_commit(revision: str) -> bool:
    return bool(_COMMIT.match(revision))


def lock_path(catalog_path: Path) -> Path:
    """Beside the catalog; for the catalog an installed llamaspec ships (in site-packages, replaced
    on upgrade, perhaps read-only), in the models folder, where the models made from it are."""
    shipped = paths.package_data_dir()
    if catalog_path.resolve().is_relative_to(shipped):
        return paths.models_dir() / LOCK_FILE
    return catalog_path.with_name(LOCK_FILE)


def load(path: Path) -> dict[str, Pin]:
    import yaml

    try:
        raw = yaml.safe_load(path.read_text())
    except FileNotFoundError:
        return {}
    except yaml.YAMLError as exc:
        raise LlamaspecError(f"{path} is not valid YAML: {exc}".replace("\n", " "),
                             hint="restore it from git (git checkout -- models/catalog.lock)") from None
    pins = {}
    for name, body in ((raw or {}).get("pins") or {}).items():
        if not isinstance(body, dict) or not all(isinstance(body.get(k), str) for k in ("repo", "revision", "commit")):
            raise LlamaspecError(f"{path}: pin {name!r} needs repo, revision and commit",
                                 hint="restore it from git, or delete the entry to pin again on the next fetch")
        if not is_commit(body["commit"]):
            raise LlamaspecError(f"{path}: pin {name!r}: {body['commit']!r} is not a 40-digit commit",
                                 hint="restore it from git, or delete the entry to pin again on the next fetch")
        pins[str(name)] = Pin(str(name), body["repo"], body["revision"], body["commit"], str(body.get("pinned_at", "")))
    return pins


def save(path: Path, pin: Pin, header: str = _HEADER) -> None:
    """Write (or replace) one pin, keeping the others; atomic, so a reader never sees half a file.
    ``header``: the comment that says whose pins these are."""
    import yaml

    pins = load(path)
    pins[pin.name] = Pin(pin.name, pin.repo, pin.revision, pin.commit, pin.pinned_at or time.strftime("%Y-%m-%d"))
    body = {"pins": {n: {"repo": p.repo, "revision": p.revision, "commit": p.commit, "pinned_at": p.pinned_at}
                     for n, p in sorted(pins.items())}}
    atomic.write_text(path, header + yaml.safe_dump(body, sort_keys=False))
