"""Disk and time, up front: before a Hugging Face checkpoint is downloaded, what it and the variants
made from it will take (from the hub's file sizes), the free space where each lands, and a rough
time; a disk that cannot hold it all is refused with the shortfall, before the first byte.

The time is an estimate from assumed rates, and says so: ``LLAMASPEC_DOWNLOAD_MBPS`` (default 40)
for the link, ``WRITE_MBPS`` for conversion and quantization (what a laptop SSD and one CPU
sustain for convert_hf_to_gguf.py's f16 output, order of magnitude).
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from llamaspec.base import paths
from llamaspec.base.errors import LlamaspecError
from llamaspec.base.progress import duration
from llamaspec.models import hf, quantize

WEIGHT_PATTERNS = ("*.safetensors", "*.bin", "*.pt")
DEFAULT_DOWNLOAD_MBPS = 40.0
WRITE_MBPS = 100.0


@dataclass(frozen=True)
class Plan:
    name: str
    repo: str
    commit: str
    files: int
    total: int  # bytes of the files asked for
    to_download: int  # of those, bytes not yet in the Hugging Face cache
    outputs: tuple[tuple[str, int], ...]  # (variant, estimated bytes) to be written under out_dir
    cache_dir: Path
    out_dir: Path
    download_mbps: float

    @property
    def written(self) -> int:
        return sum(size for _, size in self.outputs)

    def needs(self) -> dict[Path, int]:
        """Bytes needed per filesystem (keyed by the existing folder that stands for it)."""
        need: dict[Path, int] = {}
        for folder, size in ((self.cache_dir, int(self.to_download * 1.05)), (self.out_dir, self.written)):
            probe = paths.existing(folder)
            key = next((k for k in need if _same_disk(k, probe)), probe)
            need[key] = need.get(key, 0) + size
        return need

    def seconds(self) -> float:
        return self.to_download / (self.download_mbps * 1e6) + self.written / (WRITE_MBPS * 1e6)

    def lines(self) -> list[str]:
        cached = self.total - self.to_download
        out = [f"{self.name}: {self.repo}@{self.commit[:12]}: {_gb(self.total)} in {self.files} files"
               + (f" ({_gb(cached)} already in the cache, {_gb(self.to_download)} to download)" if cached else "")]
        if self.outputs:
            out.append(f"{self.name}: then writes {', '.join(f'{v} ~{_gb(s)}' for v, s in self.outputs)}")
        for folder, size in self.needs().items():
            out.append(f"{self.name}: needs {_gb(size)} on the disk of {folder}, {_gb(shutil.disk_usage(folder).free)} free")
        out.append(f"{self.name}: about {duration(max(self.seconds(), 1))} (estimate: {self.download_mbps:g} MB/s download, "
                   f"{WRITE_MBPS:g} MB/s written; set LLAMASPEC_DOWNLOAD_MBPS to your link's speed)")
        return out

    def check(self) -> None:
        for folder, size in self.needs().items():
            free = shutil.disk_usage(folder).free
            if free < size:
                raise LlamaspecError(
                    f"not enough free disk for {self.name}: {_gb(size)} needed on the disk of {folder} "
                    f"({_gb(self.to_download)} to download, {_gb(self.written)} to write), {_gb(free)} free: {_gb(size - free)} short",
                    hint="free some space, or point HF_HOME (downloads) / LLAMASPEC_ROOT (models) at a larger disk")


def make(name: str, listing: hf.Remote, patterns: Sequence[str], outputs: Sequence[str], cache_dir: Path,
         out_dir: Path) -> Plan:
    """The plan for downloading ``listing``'s files matching ``patterns`` and making ``outputs`` from them."""
    from fnmatch import fnmatch

    files = listing.matching(patterns)
    blobs = hf.repo_folder(listing.repo, cache_dir) / "blobs"
    to_download = 0
    for f in files:
        blob = blobs / (f.sha256 or "")
        if not (f.sha256 and blob.is_file() and blob.stat().st_size == f.size):
            to_download += f.size
    weights = sum(f.size for f in files if any(fnmatch(f.name, p) for p in WEIGHT_PATTERNS))
    parameters = weights // 2  # checkpoints store 16-bit weights (a 32-bit one is overestimated: generous)
    made = tuple((v, quantize.estimated_bytes(parameters, v)) for v in outputs)
    try:
        mbps = float(os.environ.get("LLAMASPEC_DOWNLOAD_MBPS") or DEFAULT_DOWNLOAD_MBPS)
    except ValueError:
        mbps = DEFAULT_DOWNLOAD_MBPS
    return Plan(name, listing.repo, listing.commit, len(files), sum(f.size for f in files), to_download, made,
                cache_dir, out_dir, mbps if mbps > 0 else DEFAULT_DOWNLOAD_MBPS)


def _same_disk(a: Path, b: Path) -> bool:
    return os.stat(a).st_dev == os.stat(b).st_dev


def _gb(size: float) -> str:
    return f"{size / 1e9:.1f} GB" if size >= 1e8 else f"{size / 1e6:.1f} MB"
