"""Which CPU measured a run: its name, its kind (vendor and family/model/stepping, or Arm's
implementer, part and revision) and the instruction sets that move llama.cpp's speed on it.

A VM may call a Zen 3 and a Zen 4 both "AMD EPYC", and the same model pair gains on one and not
on the other (issue 38): every run records ``CpuInfo`` with its hardware (``host.hardware``), and
``report``, a sweep's header and ``doctor`` show it. The parsers are pure, tested on recorded
``/proc/cpuinfo`` and ``sysctl`` samples (tests/fixtures/host/).
"""

from __future__ import annotations

import platform
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from llamaspec.base import proc

# The CPU features that move llama.cpp's speed on the CPU (which of ggml-cpu's kernels run: AVX2 or
# AVX-512 matmuls, VNNI and BF16 dot products, AMX tiles; NEON, dot-product, int8 matmul and SVE on
# Arm), each by the names the OS reports it under: /proc/cpuinfo's flags (x86) or Features (Arm),
# and on macOS sysctl's hw.optional keys and machdep.cpu feature words. Two runs that differ here
# can differ in speed on the same model pair.
SPEED_FLAGS: dict[str, tuple[str, ...]] = {
    "avx": ("avx", "avx1.0", "hw.optional.avx1_0"),
    "avx2": ("avx2", "hw.optional.avx2_0"),
    "fma": ("fma",),
    "f16c": ("f16c",),
    "avx_vnni": ("avx_vnni",),
    "avx512f": ("avx512f", "hw.optional.avx512f"),
    "avx512bw": ("avx512bw", "hw.optional.avx512bw"),
    "avx512_vnni": ("avx512_vnni", "avx512vnni", "hw.optional.avx512vnni"),
    "avx512_bf16": ("avx512_bf16",),
    "amx_tile": ("amx_tile",),
    "amx_int8": ("amx_int8",),
    "amx_bf16": ("amx_bf16",),
    "neon": ("asimd", "neon", "hw.optional.neon", "hw.optional.advsimd"),
    "fp16": ("asimdhp", "hw.optional.arm.feat_fp16"),
    "dotprod": ("asimddp", "hw.optional.arm.feat_dotprod"),
    "i8mm": ("i8mm", "hw.optional.arm.feat_i8mm"),
    "bf16": ("bf16", "hw.optional.arm.feat_bf16"),
    "sve": ("sve", "hw.optional.arm.feat_sve"),
    "sve2": ("sve2", "hw.optional.arm.feat_sve2"),
}
# Arm's "CPU implementer" codes (the Arm ARM's MIDR_EL1 table), for a vendor in words.
ARM_IMPLEMENTERS = {"0x41": "ARM", "0x42": "Broadcom", "0x43": "Cavium", "0x48": "HiSilicon", "0x4e": "NVIDIA",
                    "0x50": "APM", "0x51": "Qualcomm", "0x61": "Apple", "0x6d": "Microsoft", "0xc0": "Ampere"}


def speed_flags(reported: Sequence[str]) -> tuple[str, ...]:
    """The features of ``SPEED_FLAGS`` (its names, in its order) among the ones a CPU reports."""
    have = {f.lower() for f in reported}
    return tuple(name for name, aliases in SPEED_FLAGS.items() if have & set(aliases))


@dataclass(frozen=True)
class CpuInfo:
    """Which CPU measured a run: its name, what tells two kinds with one name apart (vendor,
    family/model/stepping; on Arm implementer, part and revision), and its ``SPEED_FLAGS``.

    A VM may name its CPU by brand alone ("AMD EPYC" on a Zen 3 and a Zen 4 guest alike): the
    family and model, and the flags, still tell them apart."""

    name: str
    vendor: str | None = None
    family: str | None = None
    model: str | None = None
    stepping: str | None = None
    flags: tuple[str, ...] | None = None  # None: not recorded (a run stored before they were)

    @property
    def ident(self) -> str:
        """"AuthenticAMD family 25 model 17 stepping 1" (the parts known)."""
        parts = [self.vendor or ""] + [f"{k} {v}" for k, v in (("family", self.family), ("model", self.model),
                                                                ("stepping", self.stepping)) if v]
        return " ".join(p for p in parts if p)

    def short(self) -> str:
        """The name and the kind: "AMD EPYC (AuthenticAMD family 25 model 17 stepping 1)"."""
        return f"{self.name} ({self.ident})" if self.ident else self.name

    def text(self) -> str:
        """The name, the kind and the speed flags, as a report's and a sweep's header show them."""
        if self.flags is None:
            return self.short()
        inside = "; ".join(p for p in (self.ident, " ".join(self.flags) or "none of " + "/".join(SPEED_FLAGS)) if p)
        return f"{self.name} ({inside})"

    def to_dict(self) -> dict[str, Any]:
        return {**asdict(self), "flags": list(self.flags) if self.flags is not None else None}

    @classmethod
    def from_hardware(cls, hw: dict[str, Any]) -> CpuInfo:
        """The CPU of a stored run's ``hardware`` (``hardware()``); a run stored before the CPU's
        kind was recorded has its name alone."""
        data = hw.get("cpu_info")
        if not isinstance(data, dict):
            return cls(str(hw.get("cpu") or "?"))
        flags = data.get("flags")
        return cls(str(data.get("name") or hw.get("cpu") or "?"), data.get("vendor"), data.get("family"),
                   data.get("model"), data.get("stepping"), tuple(flags) if flags is not None else None)


def _fields(block: str) -> dict[str, str]:
    out: dict[str, str] = {}
    for line in block.splitlines():
        key, sep, value = line.partition(":")
        if sep:
            out.setdefault(key.strip().lower(), value.strip())
    return out


def parse_cpuinfo(text: str) -> CpuInfo:
    """Linux's ``/proc/cpuinfo`` (x86 or Arm), its first processor's block (pure: tested on recorded
    ones). x86 names its model; Arm gives implementer, part, variant and revision instead."""
    first = next((b for b in text.split("\n\n") if b.strip()), "")
    f = _fields(first)
    flags = (f.get("flags") or f.get("features") or "").split()
    if "cpu implementer" in f and "vendor_id" not in f:
        implementer = f["cpu implementer"].lower()
        vendor = ARM_IMPLEMENTERS.get(implementer, f"implementer {implementer}")
        part = f.get("cpu part")
        name = f.get("model name") or f"{vendor} part {part or '?'}"
        variant, revision = f.get("cpu variant"), f.get("cpu revision")
        stepping = f"r{int(variant, 16)}p{revision}" if variant and revision and variant.lower().startswith("0x") else None
        return CpuInfo(name, vendor, None, part, stepping, speed_flags(flags))
    return CpuInfo(f.get("model name") or f.get("cpu model") or "unknown CPU", f.get("vendor_id"),
                   f.get("cpu family"), f.get("model"), f.get("stepping"), speed_flags(flags))


def parse_sysctl(text: str) -> CpuInfo:
    """``sysctl machdep.cpu hw.optional hw.cpufamily`` on macOS ("name: value" lines; pure). An
    Intel Mac names family, model and stepping under machdep.cpu; Apple silicon has hw.cpufamily."""
    f = _fields(text)
    reported = [k for k, v in f.items() if k.startswith("hw.optional.") and v == "1"]
    for key in ("machdep.cpu.features", "machdep.cpu.leaf7_features"):
        reported += f.get(key, "").lower().split()
    vendor = f.get("machdep.cpu.vendor") or ("Apple" if "hw.cpufamily" in f else None)
    family = f.get("machdep.cpu.family") or f.get("hw.cpufamily")
    return CpuInfo(f.get("machdep.cpu.brand_string") or "?", vendor, family, f.get("machdep.cpu.model"),
                   f.get("machdep.cpu.stepping"), speed_flags(reported))


def cpu_info() -> CpuInfo:
    """This machine's CPU: ``/proc/cpuinfo`` on Linux, ``sysctl`` on macOS, else the platform's words."""
    try:
        return parse_cpuinfo(Path("/proc/cpuinfo").read_text())
    except OSError:
        pass
    if platform.system() == "Darwin":
        done = proc.probe(["sysctl", "machdep.cpu", "hw.optional", "hw.cpufamily"], timeout=30.0)
        if done is not None and not done.timed_out and done.stdout.strip():  # a key this Mac lacks fails alone; the others print
            return parse_sysctl(done.stdout)
    return CpuInfo(platform.processor() or platform.machine())
