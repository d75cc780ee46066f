"""Hugging Face downloads. The Hugging Face cache is the store: huggingface_hub does the downloading
(resumable, with its own progress bars); we choose the files, pin the revision, record the commit,
and turn its exceptions into one line with a hint.

``HF_HUB_OFFLINE=1`` and the cache location (``HF_HUB_CACHE`` / ``HF_HOME``) are read at call time,
so they can be changed after huggingface_hub was imported.
"""

from __future__ import annotations

import functools
import logging
import os
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from llamaspec.base import atomic, paths
from llamaspec.base.errors import LlamaspecError

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
    hub = os.environ.get("HF_HUB_CACHE") or os.environ.get("HUGGINGFACE_HUB_CACHE")
    if hub:
        return Path(hub).expanduser()
    if os.environ.get("HF_HOME"):
        return Path(os.environ["HF_HOME"]).expanduser() / "hub"
    return Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache")).expanduser() / "huggingface" / "hub"


def repo_folder(repo: str, cache: Path | None = None) -> Path:
    """A model repo's folder in the Hugging Face cache (``cache``, default :func:`cache_dir`)."""
    return (cache or cache_dir()) / f"models--{repo.replace('/', '--')}"


def _endpoint() -> str:
    from huggingface_hub import constants

    return str(constants.ENDPOINT)


@dataclass(frozen=True)
class _Where:
    """What was being downloaded when huggingface_hub raised: the context of every error line."""

    repo: str
    revision: str
    what: str

    @property
    def at(self) -> str:
        return f"{self.repo}@{self.revision}"


def _timeout() -> float:
    """Seconds huggingface_hub waits for the hub to answer (its HF_HUB_ETAG_TIMEOUT, read at call time)."""
    try:
        return float(os.environ.get("HF_HUB_ETAG_TIMEOUT") or 10)
    except ValueError:
        return 10.0


def _first_line(exc: BaseException) -> str:
    return (str(exc).strip().splitlines() or [type(exc).__name__])[0]


_RETRY = "run the command again (downloads resume where they stopped)"
_LOGIN = "run `hf auth login` (or set HF_TOKEN)"


def _gated(exc: BaseException, w: _Where) -> LlamaspecError:
    return LlamaspecError(f"{w.at} is gated: the hub refused the download without an account that accepted its license",
                          hint=f"accept it at https://huggingface.co/{w.repo}, then {_LOGIN}")


def _repo_missing(exc: BaseException, w: _Where) -> LlamaspecError:
    return LlamaspecError(f"Hugging Face repo {w.repo} not found (or private)",
                          hint=f"check the repo id in models/catalog.yaml; for a private repo {_LOGIN}")


def _revision_missing(exc: BaseException, w: _Where) -> LlamaspecError:
    return LlamaspecError(f"revision {w.revision!r} not found in {w.repo}",
                          hint="check `revision:` in models/catalog.yaml; for a commit pinned in models/catalog.lock that the "
                               "hub no longer has, `llamaspec models fetch --update NAME` pins the current one")


def _not_cached(exc: BaseException, w: _Where) -> LlamaspecError:
    if offline():
        return LlamaspecError(f"{w.what} {w.at} is not in the Hugging Face cache ({cache_dir()}) and HF_HUB_OFFLINE is set",
                              hint="unset HF_HUB_OFFLINE to download it, or fill the cache on a machine with internet")
    return LlamaspecError(f"cannot reach Hugging Face to download {w.what} {w.at}, and it is not in the cache ({cache_dir()})",
                          hint="check your internet connection (or HF_ENDPOINT / proxy settings), then run the command again")


def _entry_missing(exc: BaseException, w: _Where) -> LlamaspecError:
    return LlamaspecError(f"{w.what} not found in {w.at}", hint="check the file name in models/catalog.yaml")


def _invalid_id(exc: BaseException, w: _Where) -> LlamaspecError:
    return LlamaspecError(f"invalid Hugging Face repo id {w.repo!r}: {_first_line(exc)}", hint="a repo id looks like org/name")


def _cut(exc: BaseException, w: _Where) -> LlamaspecError:
    return LlamaspecError(f"the download of {w.what} {w.at} was cut off: {_first_line(exc)}",
                          hint=f"{_RETRY}; nothing half-downloaded is used")


def _slow(exc: BaseException, w: _Where) -> LlamaspecError:
    return LlamaspecError(f"Hugging Face ({_endpoint()}) did not answer within {_timeout():g} s while downloading {w.what} {w.at}",
                          hint="check your connection; on a slow link raise HF_HUB_ETAG_TIMEOUT and HF_HUB_DOWNLOAD_TIMEOUT "
                               f"(seconds), then {_RETRY}")


def _unreachable(exc: BaseException, w: _Where) -> LlamaspecError:
    return LlamaspecError(f"cannot reach Hugging Face ({_endpoint()}) to download {w.what} {w.at}",
                          hint="check your internet connection (or HF_ENDPOINT / proxy settings); "
                               "with the files already in the cache, set HF_HUB_OFFLINE=1")


def _http(exc: BaseException, w: _Where) -> LlamaspecError:
    status = getattr(getattr(exc, "response", None), "status_code", None)
    if status in (401, 403):
        return LlamaspecError(f"Hugging Face refused {w.what} {w.at} (HTTP {status})",
                              hint=f"{_LOGIN} with an account that may read the repo")
    return LlamaspecError(f"download of {w.what} {w.at} failed: {_first_line(exc)}", hint=f"{_RETRY}; set HF_DEBUG=1 for details")


def _os(exc: BaseException, w: _Where) -> LlamaspecError:
    return LlamaspecError(f"download of {w.what} {w.at} failed: {_first_line(exc)}", hint=_RETRY)


_Mapping = tuple[type[BaseException], Callable[[BaseException, _Where], LlamaspecError]]


def _transport_errors() -> list[_Mapping]:
    """The HTTP library's exceptions, for each library huggingface_hub may use: requests below 1.0,
    httpx from 1.0, httpx2 later. Only those installed are imported. The most specific kind of
    every library comes before any library's broader one: a cut body, a timeout, a lost
    connection, an HTTP status."""
    import importlib

    libraries = []
    for name in ("requests", "httpx", "httpx2"):
        try:
            lib = importlib.import_module(name)
        except ImportError:
            continue
        libraries.append((lib.exceptions.ChunkedEncodingError, lib.Timeout, lib.ConnectionError, lib.HTTPError)
                         if name == "requests" else
                         (lib.RemoteProtocolError, lib.TimeoutException, lib.TransportError, lib.HTTPStatusError))
    return [(kinds[i], render) for i, render in enumerate((_cut, _slow, _unreachable, _http)) for kinds in libraries]


@functools.lru_cache(maxsize=1)
def _error_table() -> tuple[_Mapping, ...]:
    """huggingface_hub's (and its HTTP library's) exceptions -> one line and a hint, as
    huggingface_hub's own CLI_ERROR_MAPPINGS does. The first match wins, so subclasses come before
    their bases (GatedRepo is a RepositoryNotFound, LocalEntryNotFound an EntryNotFound, ConnectTimeout
    both a Timeout and a ConnectionError, every one of them an OSError)."""
    from huggingface_hub import errors

    return (
        (errors.GatedRepoError, _gated),
        (errors.RepositoryNotFoundError, _repo_missing),
        (errors.RevisionNotFoundError, _revision_missing),
        (errors.LocalEntryNotFoundError, _not_cached),
        (errors.EntryNotFoundError, _entry_missing),
        (errors.HFValidationError, _invalid_id),
        *_transport_errors(),
        (OSError, _os),
    )


def _hub_errors() -> tuple[type[BaseException], ...]:
    return tuple(kind for kind, _ in _error_table())


def _causes(exc: BaseException) -> list[BaseException]:
    chain: list[BaseException] = []
    current: BaseException | None = exc
    while current is not None and all(current is not c for c in chain):
        chain.append(current)
        current = current.__cause__ or current.__context__
    return chain


def _translate(exc: BaseException, repo: str, revision: str, what: str) -> LlamaspecError:
    """The one place a download error becomes a LlamaspecError (see ``_error_table``)."""
    from huggingface_hub import errors

    chosen = exc
    if isinstance(exc, errors.LocalEntryNotFoundError) and not offline():
        # huggingface_hub falls back to the cache when the hub fails and then says only that the
        # cache lacks the file: the hub's own failure (a timeout, a refusal) is the one to name
        chosen = next((c for c in _causes(exc)[1:] if isinstance(c, _hub_errors())
                       and not isinstance(c, errors.LocalEntryNotFoundError)), exc)
    for kind, render in _error_table():
        if isinstance(chosen, kind):
            return render(chosen, _Where(repo, revision, what))
    return _os(chosen, _Where(repo, revision, what))


def _listing(repo: str, revision: str, repo_type: str) -> Remote:
    """The hub's model (or dataset) info with files metadata; raises huggingface_hub's errors."""
    from huggingface_hub import HfApi

    api = HfApi()
    get = api.dataset_info if repo_type == "dataset" else api.model_info
    info: Any = get(repo, revision=revision, files_metadata=True, timeout=_timeout())
    files = {s.rfilename: RemoteFile(s.rfilename, int(s.size or 0), s.lfs.sha256 if s.lfs else None)
             for s in (info.siblings or [])}
    return Remote(repo, str(info.sha), files)


@dataclass(frozen=True)
class RemoteFile:
    name: str
    size: int
    sha256: str | None  # LFS files (weights, parquet): the hub's checksum of the content


@dataclass(frozen=True)
class Remote:
    """A repo at one commit, as the hub lists it (model info with files metadata)."""

    repo: str
    commit: str
    files: dict[str, RemoteFile]

    def matching(self, patterns: Sequence[str]) -> list[RemoteFile]:
        return [f for name, f in sorted(self.files.items()) if _matches(name, patterns)]


def remote(repo: str, revision: str, aliases: Sequence[str] = (), what: str = "checkpoint") -> Remote:
    """The commit ``revision`` points at now, and its files with sizes and checksums (online only),
    of the model repo ``repo`` or of the first of ``aliases`` (older names) the hub knows."""
    return _first_found(repo, aliases, revision, what, lambda name: _listing(name, revision, "model"))


def _first_found(repo: str, aliases: Sequence[str], revision: str, what: str, attempt: Callable[[str], Any]) -> Any:
    """``attempt(repo)``, else ``attempt`` of the first of ``aliases`` that is not "not found"; a
    hub error becomes one LlamaspecError (for a name none knows: the one of ``repo``)."""
    failure: BaseException | None = None
    for candidate in (repo, *aliases):
        try:
            return attempt(candidate)
        except _hub_errors() as exc:
            if not _not_found(exc):
                raise _translate(exc, candidate, revision, what) from None
            failure = failure or exc
            if aliases:
                log.info("%s not found%s", candidate, "; trying its other names" if candidate == repo else "")
    assert failure is not None
    raise _translate(failure, repo, revision, what) from None


def _matches(name: str, patterns: Sequence[str]) -> bool:
    from fnmatch import fnmatch

    return any(fnmatch(name, p) for p in patterns)


def default_patterns(listing: Remote | None) -> list[str]:
    """Config and tokenizer files plus the safetensors weights, or the ``.bin`` ones when there are none."""
    if listing is None:
        return [*CONFIG_PATTERNS, *SAFETENSORS_PATTERNS, *PYTORCH_PATTERNS]
    weights = SAFETENSORS_PATTERNS if any(_matches(f, SAFETENSORS_PATTERNS) for f in listing.files) else PYTORCH_PATTERNS
    return [*CONFIG_PATTERNS, *weights]


def snapshot(repo: str, revision: str = "main", aliases: Sequence[str] = (), allow_patterns: Sequence[str] | None = None,
             what: str = "checkpoint", required: str = "config.json", *, commit: str | None = None,
             listing: Remote | None = None, repo_type: str = "model") -> Snapshot:
    """Download (or find in the cache) what conversion needs from a repo.

    ``commit``: download that commit (a pin) rather than what ``revision`` points at now;
    ``listing``: the hub's listing of it, when the caller has one. Tries ``repo``, then each of
    ``aliases`` (older names of the same repo) when it is not found. Without ``allow_patterns``,
    takes the config and tokenizer files plus the safetensors weights, or the PyTorch ``.bin``
    weights when the repo has no safetensors. ``required``: the file that makes the download what
    was asked for (``adapter_config.json`` for a PEFT adapter). Every file the hub gives a sha256
    for is checked against it after the download.
    """
    return _first_found(repo, aliases, commit or revision, what,
                        lambda name: _snapshot(name, revision, allow_patterns, what, required, commit, listing, repo_type))


def _not_found(exc: BaseException) -> bool:
    from huggingface_hub import errors

    return isinstance(exc, (errors.RepositoryNotFoundError, errors.LocalEntryNotFoundError)) and not isinstance(
        exc, errors.GatedRepoError)


def _snapshot(repo: str, revision: str, allow_patterns: Sequence[str] | None, what: str, required: str,
              commit: str | None, listing: Remote | None, repo_type: str) -> Snapshot:
    from huggingface_hub import snapshot_download

    patterns = list(allow_patterns) if allow_patterns else None
    wanted = commit or revision
    if not offline():
        if listing is None or listing.repo != repo:
            listing = _listing(repo, wanted, repo_type)
        wanted = listing.commit  # both calls must see the same commit even if the branch moves meanwhile
        if required and required not in listing.files:  # refused before a byte is downloaded
            raise LlamaspecError(f"{required} not found in {repo}@{revision}",
                                 hint=f"files there: {', '.join(sorted(listing.files)[:12])}")
        patterns = patterns or default_patterns(listing)
        needed = sum(f.size for f in listing.matching(patterns))
        paths.ensure_free_space(cache_dir(), int(needed * 1.05) + 2**20, f"{repo} ({needed / 2**30:.1f} GiB)")
        log.info("downloading %s@%s (%s, %.2f GiB) into %s", repo, wanted[:12], what, needed / 2**30, cache_dir())
    patterns = patterns or default_patterns(None)
    folder = Path(snapshot_download(repo, revision=wanted, repo_type=repo_type, cache_dir=cache_dir(),
                                    allow_patterns=patterns, local_files_only=offline(), etag_timeout=_timeout()))
    if listing is not None:
        _verify(folder, listing.matching(patterns), f"{repo}@{wanted[:12]}")
    if required and not (folder / required).is_file():
        if offline():
            raise _not_cached(LookupError(required), _Where(repo, revision, what))
        raise LlamaspecError(f"{repo}@{revision} ({folder}) has no {required}: not a Hugging Face {what}",
                             hint="check the repo id, or its allow_patterns in models/catalog.yaml")
    return Snapshot(repo, revision, folder.name, folder)


def _verify(folder: Path, files: Sequence[RemoteFile], where: str) -> None:
    """Each downloaded file the hub gives a sha256 for must have it; a file that does not is deleted
    from the cache (its blob and its link), so the next run downloads it again."""
    for f in files:
        path = folder / f.name
        if f.sha256 is None or not path.is_file():
            continue
        got = atomic.sha256_file(path, f.name)
        if got != f.sha256:
            blob = path.resolve()
            path.unlink(missing_ok=True)
            blob.unlink(missing_ok=True)
            raise LlamaspecError(f"{f.name} from {where} has sha256 {got}, the hub says {f.sha256}: deleted it from the cache",
                                 hint="run the command again to download it anew; if it repeats, a proxy or mirror "
                                      "(HF_ENDPOINT) serves a damaged file")


def file(repo: str, filename: str, revision: str = "main") -> Snapshot:
    """Download (or find in the cache) one file of a repo, e.g. a prebuilt GGUF. ``path`` is the file."""
    import glob

    snap = snapshot(repo, revision, allow_patterns=[glob.escape(filename)], what=filename, required=filename)
    return replace(snap, path=snap.path / filename)
