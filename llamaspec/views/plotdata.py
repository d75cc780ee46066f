"""What the figures are drawn from: plain values, checked when made (``PlotPoint``: one draft length
of a sweep; ``PlotMeta``: what every title says; ``PositionLine``: acceptance by draft position;
``WorkloadRow``: one setup of a workload study; curves as ``(draft length, value)`` pairs). The
caller turns stored runs and :mod:`llamaspec.theory` results into them; ``plot.py`` draws them."""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

from llamaspec.base.errors import LlamaspecError

Curve = Sequence[tuple[float, float]]  # (draft length, value)
BandCurve = Sequence[tuple[float, float, float]]  # (draft length, low, high)


def _finite_positive(name: str, value: float) -> None:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) or value <= 0:
        raise LlamaspecError(f"plot point {name} must be a finite number > 0, got {value!r}")


@dataclass(frozen=True)
class PlotPoint:
    """One draft length of a sweep, as plotted.

    ``decode_tps`` is the median over repeats; ``decode_tps_min``/``decode_tps_max`` their spread
    (drawn as error bars). ``acceptance`` is llama.cpp's n_accept / n_drafted as a fraction.
    ``predicted_speedup`` is the model's prediction for this point, if any.
    """

    draft_max: int
    decode_tps: float
    baseline_tps: float
    acceptance: float | None = None  # a fraction (Measurement.acceptance), drawn in percent
    predicted_speedup: float | None = None
    decode_tps_min: float | None = None
    decode_tps_max: float | None = None
    # The speedup as measured: the median of paired ratios with its 95 % interval (the same figure
    # as every table). Without it the plot falls back to decode_tps / baseline_tps.
    speedup_median: float | None = None
    speedup_low: float | None = None
    speedup_high: float | None = None
    differs: bool = False  # the output with a draft differed from the target alone's: never "best"

    def __post_init__(self) -> None:
        if isinstance(self.draft_max, bool) or not isinstance(self.draft_max, int) or self.draft_max < 0:
            raise LlamaspecError(f"plot point draft_max must be an integer >= 0, got {self.draft_max!r}")
        _finite_positive("decode_tps", self.decode_tps)
        _finite_positive("baseline_tps", self.baseline_tps)
        for name in ("decode_tps_min", "decode_tps_max", "predicted_speedup"):
            value = getattr(self, name)
            if value is not None:
                _finite_positive(name, value)
        if self.acceptance is not None and not (isinstance(self.acceptance, (int, float)) and 0.0 <= self.acceptance <= 1.0):
            raise LlamaspecError(f"plot point acceptance must be a fraction in [0, 1], got {self.acceptance!r}")
        low = self.decode_tps_min if self.decode_tps_min is not None else self.decode_tps
        high = self.decode_tps_max if self.decode_tps_max is not None else self.decode_tps
        if not low <= self.decode_tps <= high:
            raise LlamaspecError(
                f"plot point at draft {self.draft_max}: decode t/s spread must satisfy min <= median <= max, "
                f"got {low} <= {self.decode_tps} <= {high}"
            )

    @property
    def speedup(self) -> float:
        return self.speedup_median if self.speedup_median is not None else self.decode_tps / self.baseline_tps

    @property
    def speedup_interval(self) -> tuple[float, float]:
        if self.speedup_median is not None:
            return (self.speedup_low if self.speedup_low is not None else self.speedup_median,
                    self.speedup_high if self.speedup_high is not None else self.speedup_median)
        return self.tps_low / self.baseline_tps, self.tps_high / self.baseline_tps

    @property
    def tps_low(self) -> float:
        return self.decode_tps if self.decode_tps_min is None else self.decode_tps_min

    @property
    def tps_high(self) -> float:
        return self.decode_tps if self.decode_tps_max is None else self.decode_tps_max


@dataclass(frozen=True)
class PlotMeta:
    """What every figure's title says: which models, on what, built how."""

    target_model: str
    draft_model: str
    hardware: str
    engine: str  # the accelerator of an engine built from source, or a library engine's identity
    build: str  # the source tree and commit it was built from ("llama.cpp 0c1e570"); "" for a library engine
    label: str | None = None  # e.g. the experiment or sweep name

    def title(self, what: str) -> str:
        head = f"{what} ({self.label})" if self.label else what
        return (f"{head}\ntarget {self.target_model} + draft {self.draft_model}\n"
                f"{self.hardware} · {self.engine}" + (f" · {self.build}" if self.build else ""))


@dataclass(frozen=True)
class PositionLine:
    """One run's or sweep point's acceptance by draft position: per position 1..n, the share of
    the rounds that drafted it whose draft was accepted through it (None: no round drafted it)."""

    label: str  # e.g. "draft 8"
    rates: tuple[float | None, ...]
    rounds: int | None = None  # the rounds that drafted position 1


@dataclass(frozen=True)
class WorkloadRow:
    """One setup of a workload study, as its figure shows it: the workload's speedup with its 95 %
    interval, and each prompt's own (prompt -> speedup)."""

    label: str
    speedup: float
    low: float
    high: float
    prompts: dict[str, float]
    chosen: bool = False
