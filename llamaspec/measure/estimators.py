"""The speedup estimators: one per kind of study, each defined here once and named in every output
that reports it (``Summary.estimator``, a prompt set's ``definitions``, a cluster study's figures).

- **point** (a run, a sweep or tune point, one prompt, one case on one machine of a cluster study):
  the median of paired ratios. Each speculative run's decode speed over the baseline's of its own
  pair (measured next to it, ABBA; pairs made by index, :func:`llamaspec.measure.pairs.whole_pairs`), the
  median over the pairs, with a 95 % bootstrap interval. The median, because one run disturbed by
  the machine moves it least; paired, because drift between runs measured apart is not speedup.
- **shared baseline** (an explicit cost saver, labelled ``paired: false``): each speculative run
  over the shared baseline's median; the point's median of those ratios.
- **workload** (a set of prompts, or one category of it: the built-in workload, a prompt file, a
  prompt set on llama-server): the geometric mean of the prompts' point speedups, with a 95 %
  bootstrap interval that resamples each prompt's pairs (the prompts are the workload, not a sample
  of one; :func:`workload`). The geometric mean, because ratios average on a log scale (2x on one
  prompt and 0.5x on another is no gain, not 1.25x), and every prompt weighs the same whatever its
  length; a total-token speedup (every token over all the time, long prompts weighing most) is
  shown beside it, named as such. Every decision over a workload is made on this estimator
  (:mod:`llamaspec.decision.workload`; :data:`PROMPT_SET_METRIC` for prompt sets).
- **over machines** (a cluster study): never a ratio across machines. Per machine, the same
  estimator as on one machine: a case's pairs on that machine (its items pooled by pair index)
  give the point estimator; a workload's prompts on that machine give the workload estimator.
  So one study measured locally and over the cluster reports the same figures.
"""

from __future__ import annotations

import math
import random
import statistics
from collections.abc import Iterable, Sequence

from llamaspec.base import stats

POINT = "median of paired ratios (speculative over the baseline of its own pair), 95 % bootstrap interval"
SHARED_BASELINE = "median of each speculative run over the shared baseline's median (not paired)"
WORKLOAD = ("geometric mean of the prompts' speedups (each the median of its paired ratios), 95 % bootstrap "
            "interval resampling each prompt's pairs (a prompt with one pair: its ratio spread by the pooled "
            "pair-to-pair noise of the study's prompts)")
OVER_MACHINES = "per machine, as on one machine: " + POINT + " per case; " + WORKLOAD + " per workload"

PROMPT_SET_METRIC = "geomean_speedup"  # the GroupFigures field that holds the workload estimator

DEFINITIONS = {"point": POINT, "shared_baseline": SHARED_BASELINE, "workload": WORKLOAD,
               "over_machines": OVER_MACHINES}


def point(ratios: Sequence[float]) -> stats.Spread | None:
    """The point estimator over a point's pair ratios (or shared-baseline ratios)."""
    return stats.spread(ratios)


def pooled_log_sd(samples: Iterable[Sequence[float]]) -> float | None:
    """The pair-to-pair noise of a study: the pooled standard deviation of log ratios within each
    sample (one prompt at one setting) that has two pairs or more; None where none has."""
    num, dof = 0.0, 0
    for values in samples:
        logs = [math.log(v) for v in values if v > 0]
        if len(logs) >= 2:
            num += statistics.variance(logs) * (len(logs) - 1)
            dof += len(logs) - 1
    return math.sqrt(num / dof) if dof else None


def workload(ratios: Sequence[Sequence[float]], noise: float | None = None, *,
             samples: int = stats.BOOTSTRAP_SAMPLES, level: float = stats.LEVEL, seed: int = 0) -> stats.Spread | None:
    """The workload estimator over its prompts' paired ratios (one sequence per prompt; every prompt
    needs one ratio or more): the geometric mean of the prompts' medians, and a percentile bootstrap
    interval that resamples each prompt's own pairs. A prompt measured once has no pairs of its own
    to resample: its ratio is spread by ``noise`` (:func:`pooled_log_sd` over the study), and
    without it the interval is unknown: the Spread then has ``n`` 1, so no decision takes it as
    shown faster. Otherwise ``n`` is the pairs over every prompt (the width shrinks like 1/sqrt(n)),
    ``values`` the prompts' medians, ``min``/``max`` their extremes."""
    clean = [[float(v) for v in r if v is not None and v > 0] for r in ratios]
    if not clean or any(not r for r in clean):
        return None
    medians = [statistics.median(r) for r in clean]
    value = stats.geometric_mean(medians)
    pairs = sum(len(r) for r in clean)
    single = [i for i, r in enumerate(clean) if len(r) == 1]
    if (single and noise is None) or pairs < 2:
        return stats.Spread(median=value, low=value, high=value, n=1, min=min(medians), max=max(medians), cv=None,
                            values=tuple(medians))
    rng = random.Random(seed)
    estimates = []
    for _ in range(samples):
        total = 0.0
        for r in clean:
            n = len(r)
            if n == 1:
                total += math.log(r[0]) + rng.gauss(0.0, noise or 0.0)
            else:
                total += math.log(statistics.median([r[rng.randrange(n)] for _ in range(n)]))
        estimates.append(math.exp(total / len(clean)))
    estimates.sort()
    tail = (1 - level) / 2
    low, high = estimates[int(tail * (samples - 1))], estimates[int(math.ceil((1 - tail) * (samples - 1)))]
    return stats.Spread(median=value, low=min(low, value), high=max(high, value), n=pairs, min=min(medians),
                        max=max(medians), cv=stats.cv(medians), values=tuple(medians))


def prompt_set(ratios: Sequence[Sequence[float]]) -> stats.Spread | None:
    """The workload estimator over a set's counted prompts (each its paired ratios), the set's own
    pair-to-pair noise spreading the prompts it measured once."""
    return workload(ratios, pooled_log_sd(ratios))
