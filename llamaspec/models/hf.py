"""Hugging Face downloads. The Hugging Face cache is the store: huggingface_hub does the downloading
(resumable, with its own progress bars); we choose the files, pin the revision, record the commit,
and turn its exceptions into one line with a hint.

``HF_HUB_OFFLINE=1`` and the cache location (``HF_HUB_CACHE`` / ``HF_HOME``) are read at call time,
so they can be changed after huggingface_hub was imported.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from llamaspec import paths
from llamaspec.errors import LlamaspecError

log = logging.getLogger(__name__)

# What convert_hf_to_gguf.py reads besides the weights.
CONFIG_PATTERNS = (
    "config.json", "generation_config.json", "tokenizer.model", "tokenizer.json", "tokenizer_config.json",
    "special_tokens_map.json", "added_tokens.json", "vocab.json", "merges.txt", "*.tiktoken",
)
SAFETENSORS_PATTERNS = ("*.safetensors", "*.safetensors.index.json")
PYTORCH_PATTERNS = ("pytorch_model*.bin", "pytorch_model*.bin.index.json")


@dataclass(frozen=True)
class Snapshot:
    repo: str
    revision: str
    commit: str
    path: Path


def offline() -> bool:
    return os.environ.get("HF_HUB_OFFLINE", "").strip().upper() in {"1", "ON", "YES", "TRUE"}


def cache_dir() -> Path:
    if os.environ.get("HF_HUB_CACHE"):
        return Path(os.environ["HF_HUB_CACHE"]).expanduser()
    if os.environ.get("HF_HOME"):
        return Path(os.environ["HF_HOME"]).expanduser() / "hub"
    return Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache")).expanduser() / "huggingface" / "hub"


def _endpoint() -> str:
    from huggingface_hub import constants

    return str(constants.ENDPOINT)


def _commit_of(snapshot_file: Path) -> str:
    """The commit folder a path in the cache's ``snapshots/<commit>/...`` lies under."""
    parts = snapshot_file.parts
    return parts[parts.index("snapshots") + 1] if "snapshots" in parts else "unknown"


def _translate(exc: BaseException, repo: str, revision: str, what: str) -> LlamaspecError:
    from huggingface_hub import errors

    where = f"{repo}@{revision}"
    if isinstance(exc, errors.GatedRepoError):
        return LlamaspecError(f"{where} is gated: you must accept its license on Hugging Face",
                              hint=f"accept it at https://huggingface.co/{repo}, then run `hf auth login`")
    if isinstance(exc, errors.RepositoryNotFoundError):
        return LlamaspecError(f"Hugging Face repo {repo} not found (or private)",
                              hint="check the repo id in models/catalog.yaml; for a private repo run `hf auth login`")
    if isinstance(exc, errors.RevisionNotFoundError):
        return LlamaspecError(f"revision {revision!r} not found in {repo}",
                              hint="check `revision:` in models/catalog.yaml (a branch, tag or commit)")
    if isinstance(exc, errors.LocalEntryNotFoundError):
        if offline():
            return LlamaspecError(f"{what} {where} is not in the Hugging Face cache ({cache_dir()}) and HF_HUB_OFFLINE is set",
                                  hint="unset HF_HUB_OFFLINE to download it, or fill the cache on a machine with internet")
        return LlamaspecError(f"cannot reach Hugging Face to download {what} {where}, and it is not in the cache ({cache_dir()})",
                              hint="check your internet connection (or HF_ENDPOINT / proxy settings), then run the command again")
    import requests

    if isinstance(exc, (requests.ConnectionError, requests.Timeout)):
        return LlamaspecError(f"cannot reach Hugging Face ({_endpoint()}) to download {what} {where}",
                              hint="check your internet connection (or HF_ENDPOINT / proxy settings); "
                                   "with the files already in the cache, set HF_HUB_OFFLINE=1")
    if isinstance(exc, errors.EntryNotFoundError):
        return LlamaspecError(f"{what} not found in {where}", hint="check the file name in models/catalog.yaml")
    if isinstance(exc, errors.HFValidationError):
        return LlamaspecError(f"invalid Hugging Face repo id {repo!r}: {exc}".splitlines()[0],
                              hint="a repo id looks like org/name")
    first_line = (str(exc).strip().splitlines() or [type(exc).__name__])[0]
    return LlamaspecError(f"download of {what} {where} failed: {first_line}",
                          hint="run the command again (downloads resume); set HF_DEBUG=1 for details")


def _hub_errors() -> tuple[type[BaseException], ...]:
    import requests
    from huggingface_hub import errors

    return (errors.HfHubHTTPError, errors.LocalEntryNotFoundError, errors.HFValidationError, requests.RequestException, OSError)


def _not_found(exc: BaseException) -> bool:
    from huggingface_hub import errors

    return isinstance(exc, (errors.RepositoryNotFoundError, errors.LocalEntryNotFoundError)) and not isinstance(
        exc, errors.GatedRepoError)


def _file_sizes(repo: str, revision: str) -> tuple[str, dict[str, int]]:
    """The commit a revision points at, and the size of each file there (online only)."""
    from huggingface_hub import HfApi

    info = HfApi().model_info(repo, revision=revision, files_metadata=True)
    return str(info.sha), {s.rfilename: int(s.size or 0) for s in (info.siblings or [])}


def _matches(name: str, patterns: Sequence[str]) -> bool:
    from fnmatch import fnmatch

    return any(fnmatch(name, p) for p in patterns)


def snapshot(repo: str, revision: str = "main", aliases: Sequence[str] = (), allow_patterns: Sequence[str] | None = None,
             what: str = "checkpoint", required: str = "config.json") -> Snapshot:
    """Download (or find in the cache) what conversion needs from a model repo.

    Tries ``repo``, then each of ``aliases`` (older names of the same repo) when it is not found.
    Without ``allow_patterns``, takes the config and tokenizer files plus the safetensors weights,
    or the PyTorch ``.bin`` weights when the repo has no safetensors. ``required``: the file that
    makes the download what was asked for (``adapter_config.json`` for a PEFT adapter).
    """
    failure: BaseException | None = None
    for candidate in (repo, *aliases):
        try:
            return _snapshot(candidate, revision, allow_patterns, what, required)
        except _hub_errors() as exc:
            if not _not_found(exc):
                raise _translate(exc, candidate, revision, what) from None
            if candidate != repo:
                log.debug("alias %s not found either", candidate)
            failure = failure or exc
            if aliases:
                log.info("%s not found%s", candidate, "; trying its other names" if candidate == repo else "")
    assert failure is not None
    raise _translate(failure, repo, revision, what) from None


def _snapshot(repo: str, revision: str, allow_patterns: Sequence[str] | None, what: str,
              required: str = "config.json") -> Snapshot:
    from huggingface_hub import snapshot_download

    patterns = list(allow_patterns) if allow_patterns else None
    pinned = revision
    if not offline():
        commit, sizes = _file_sizes(repo, revision)
        pinned = commit  # both calls must see the same commit even if the branch moves meanwhile
        if patterns is None:
            weights = SAFETENSORS_PATTERNS if any(_matches(f, SAFETENSORS_PATTERNS) for f in sizes) else PYTORCH_PATTERNS
            patterns = [*CONFIG_PATTERNS, *weights]
        needed = sum(size for name, size in sizes.items() if _matches(name, patterns))
        paths.ensure_free_space(cache_dir(), int(needed * 1.05) + 2**20, f"{repo} ({needed / 2**30:.1f} GiB)")
        log.info("downloading %s@%s (%s, %.2f GiB) into %s", repo, commit[:12], what, needed / 2**30, cache_dir())
    if patterns is None:
        patterns = [*CONFIG_PATTERNS, *SAFETENSORS_PATTERNS, *PYTORCH_PATTERNS]
    folder = Path(snapshot_download(repo, revision=pinned, cache_dir=cache_dir(), allow_patterns=patterns,
                                    local_files_only=offline()))
    if not (folder / required).is_file():
        raise LlamaspecError(f"{repo}@{revision} ({folder}) has no {required}: not a Hugging Face {what}",
                             hint="check the repo id, or its allow_patterns in models/catalog.yaml")
    return Snapshot(repo, revision, folder.name, folder)


def file(repo: str, filename: str, revision: str = "main") -> Snapshot:
    """Download (or find in the cache) one file of a repo, e.g. a prebuilt GGUF. ``path`` is the file."""
    from huggingface_hub import hf_hub_download

    try:
        if not offline():
            commit, sizes = _file_sizes(repo, revision)
            if filename not in sizes:
                raise LlamaspecError(f"{filename} not found in {repo}@{revision}",
                                     hint=f"files there: {', '.join(sorted(sizes)[:12])}")
            paths.ensure_free_space(cache_dir(), int(sizes[filename] * 1.05) + 2**20, f"{repo}/{filename}")
            revision_used = commit
        else:
            revision_used = revision
        got = Path(hf_hub_download(repo, filename, revision=revision_used, cache_dir=cache_dir(),
                                   local_files_only=offline()))
    except _hub_errors() as exc:
        raise _translate(exc, repo, revision, filename) from None
    return Snapshot(repo, revision, _commit_of(got), got)
