"""The statistics every figure goes through: medians with 95 % bootstrap intervals, spreads.

The speedup estimators built on these (one per kind of study) are defined in
:mod:`llamaspec.measure.estimators`: a setting's speedup is the median of its paired ratios (speculative
speed over the baseline of its own pair), with a percentile bootstrap interval of that median.
Bootstraps are seeded, so the same measurements always give the same interval.
"""

from __future__ import annotations

import functools
import math
import statistics
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

BOOTSTRAP_SAMPLES = 2000
LEVEL = 0.95


@dataclass(frozen=True)
class Spread:
    """A sample summarised: median with its 95 % interval, extremes and coefficient of variation."""

    median: float
    low: float  # the interval of the median (bootstrap, 95 %); equal to median for one value
    high: float
    n: int
    min: float
    max: float
    cv: float | None  # standard deviation over mean; None below two values
    values: tuple[float, ...] = field(default=(), repr=False)

    @property
    def half_width(self) -> float:
        """Half the interval's width, relative to the median (0.03 = +-3 %)."""
        return (self.high - self.low) / 2 / self.median if self.median else math.inf

    def overlaps(self, other: Spread) -> bool:
        return self.low <= other.high and other.low <= self.high

    def text(self, fmt: str = "{:.2f}", suffix: str = "") -> str:
        """``1.38x [1.31-1.44]`` (the interval only when there is one)."""
        main = fmt.format(self.median) + suffix
        if self.n < 2:
            return main
        return f"{main} [{fmt.format(self.low)}-{fmt.format(self.high)}]"

    def percent_text(self, digits: int = 1) -> str:
        """A spread of fractions (acceptance) in percent: ``40.9% [40.5-41.0]``, each figure rounded by
        :func:`percent` as :func:`percent_text` rounds one (every figure is kept as a fraction)."""
        return Spread(percent(self.median), percent(self.low), percent(self.high), self.n, self.min, self.max,
                      self.cv).text(f"{{:.{digits}f}}", "%")

    def to_dict(self) -> dict[str, Any]:
        return {"median": self.median, "low": self.low, "high": self.high, "n": self.n, "min": self.min,
                "max": self.max, "cv": self.cv, "values": list(self.values)}

    @classmethod
    def from_dict(cls, data: dict[str, Any] | None) -> Spread | None:
        if not data or data.get("median") is None:
            return None
        return cls(median=data["median"], low=data.get("low", data["median"]), high=data.get("high", data["median"]),
                   n=data.get("n", 1), min=data.get("min", data["median"]), max=data.get("max", data["median"]),
                   cv=data.get("cv"), values=tuple(data.get("values") or ()))


# Student's t at 97.5 % (a 95 % two-sided interval) by degrees of freedom; the normal's 1.96 beyond 30.
_T975 = (12.706, 4.303, 3.182, 2.776, 2.571, 2.447, 2.365, 2.306, 2.262, 2.228, 2.201, 2.179, 2.160, 2.145, 2.131,
         2.120, 2.110, 2.101, 2.093, 2.086, 2.080, 2.074, 2.069, 2.064, 2.060, 2.056, 2.052, 2.048, 2.045, 2.042)
Z975 = 1.959964


def t975(dof: int) -> float:
    """Student's t quantile for a 95 % two-sided interval at ``dof`` degrees of freedom (at least 1)."""
    return _T975[max(1, dof) - 1] if dof <= len(_T975) else Z975


def percent(fraction: float) -> float:
    """A fraction as a percentage, for printed text only (a plot's axis; text goes through
    :func:`percent_text`). Rounded to 9 decimals so that a percentage an engine printed with 3 decimals,
    kept divided by 100, prints as it was printed (100 * 0.4085 is 40.849999999999994, which one decimal
    would print as 40.8, not 40.9; Python's own percent format prints 40.8% too)."""
    return round(100.0 * fraction, 9)


def percent_text(fraction: float | None, digits: int = 0, *, sign: bool = False) -> str:
    """How every percentage is shown to a user: ``percent_text(0.4085, 1)`` is ``40.9%``, ``-`` for None;
    ``sign``: ``+3%``/``-3%`` (a relative error). The one place a fraction becomes text in percent."""
    if fraction is None:
        return "-"
    return f"{percent(fraction):{'+' if sign else ''}.{digits}f}%"


def cv(values: Sequence[float]) -> float | None:
    if len(values) < 2:
        return None
    mean = statistics.fmean(values)
    return statistics.stdev(values) / mean if mean else None


def bootstrap(values: Sequence[float], samples: int = BOOTSTRAP_SAMPLES, level: float = LEVEL,
              seed: int = 0) -> tuple[float, float]:
    """Percentile bootstrap interval of the median of ``values`` (seeded: reproducible), the
    resamples drawn and their medians taken at once (numpy): a study forms thousands of these."""
    import numpy as np

    if not values:
        raise ValueError("no values")
    if len(values) == 1:
        return values[0], values[0]
    data = np.asarray(values, dtype=float)
    draws = np.random.default_rng(seed).integers(0, len(data), size=(samples, len(data)))
    medians = np.sort(np.median(data[draws], axis=1))
    tail = (1 - level) / 2
    return float(medians[int(tail * (samples - 1))]), float(medians[int(math.ceil((1 - tail) * (samples - 1)))])


def spread(values: Sequence[float | None]) -> Spread | None:
    """Median, 95 % bootstrap interval of the median, extremes and CV; None for no values."""
    clean = tuple(float(v) for v in values if v is not None)
    return _spread(clean) if clean else None


@functools.lru_cache(maxsize=8192)
def _spread(clean: tuple[float, ...]) -> Spread:
    # Cached: the bootstrap is seeded, so the same values always give the same Spread (frozen), and a
    # study asks for its cells' spreads again at every step of its decision.
    low, high = bootstrap(clean)
    return Spread(median=statistics.median(clean), low=low, high=high, n=len(clean), min=min(clean), max=max(clean),
                  cv=cv(clean), values=clean)


def geometric_mean(values: Sequence[float]) -> float:
    return math.exp(statistics.fmean(math.log(v) for v in values))


def interval_reached(s: Spread | None, half_width: float) -> bool:
    """Whether an interval is already narrow enough (for ``--repeats auto``)."""
    return s is not None and s.n >= 3 and s.half_width <= half_width
