"""The speedup estimators: one per kind of study, each defined here once and named in every output
that reports it (``Summary.estimator``, a prompt set's ``definitions``, a cluster study's figures).

- **point** (a run, a sweep or tune point, one prompt, one case on one machine of a cluster study):
  the median of paired ratios. Each speculative run's decode speed over the baseline's of its own
  pair (measured next to it, ABBA; pairs made by index, :func:`llamaspec.measure.pairs.whole_pairs`), the
  median over the pairs, with a 95 % bootstrap interval. The median, because one run disturbed by
  the machine moves it least; paired, because drift between runs measured apart is not speedup.
- **block** (a workload study's cells): a prompt is measured in blocks, B S1..Sk B, the setups in
  an order shuffled block by block; each speculative run over the geometric mean of the two
  baselines of its own block, measured around it (:data:`BLOCK`); the median of those ratios. Every
  ratio's baseline is measured beside its run, whatever else the study measured before or after.
- **workload** (the prompts are the whole workload, ``--whole-workload``): the geometric mean of the prompts' point speedups, with a 95 %
  bootstrap interval that resamples each prompt's pairs (the prompts are the workload, not a sample
  of one; :func:`workload`). The geometric mean, because ratios average on a log scale (2x on one
  prompt and 0.5x on another is no gain, not 1.25x), and every prompt weighs the same whatever its
  length. Every decision over a workload is made on this estimator
  (:mod:`llamaspec.decision.workload`).
- **over prompts** (the default for a workload study: the built-in workload, a prompt file, which
  are samples of the user's traffic): the same geometric mean, taken per category and weighed by
  each category's share of the workload's prompts, with a 95 % bootstrap interval that resamples
  the prompts within each category as well as the pairs within each prompt (:func:`over_prompts`),
  so that it speaks for the next prompts of the same kinds, not only for those measured. Its
  ``n`` is the prompts it rests on. A category with one measured prompt has no spread of its own:
  its prompt is spread by the between-prompt noise of the categories that have two or more
  (:func:`between_prompts`).
- **over machines** (a cluster study): never a ratio across machines. Per machine, the same
  estimator as on one machine: a case's pairs on that machine (its items pooled by pair index)
  give the point estimator; a workload's prompts on that machine give the workload estimator.
  So one study measured locally and over the cluster reports the same figures.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from llamaspec.base import stats

POINT = "median of paired ratios (speculative over the baseline of its own pair), 95 % bootstrap interval"
BLOCK = ("median of the ratios, each speculative run over the geometric mean of the two baselines measured around it "
         "in its block on its prompt (B S1..Sk B, the setups' order shuffled)")
WORKLOAD = ("geometric mean of the prompts' speedups (each the median of its paired ratios), 95 % bootstrap "
            "interval resampling each prompt's pairs (a prompt with one pair: its ratio spread by the pooled "
            "pair-to-pair noise of the study's prompts)")
OVER_PROMPTS = ("geometric mean of the prompts' speedups (each the median of its paired ratios) per category, the "
                "categories weighed by their share of the workload's prompts; 95 % bootstrap interval resampling the "
                "prompts within each category and the pairs within each prompt (it speaks for other prompts of the same "
                "kinds)")
OVER_MACHINES = "per machine, as on one machine: " + POINT + " per case; " + WORKLOAD + " per workload"



def point(ratios: Sequence[float]) -> stats.Spread | None:
    """The point estimator over a point's pair (or block) ratios."""
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
    import numpy as np

    rng = np.random.default_rng(seed)
    draws = np.mean([_resampled_logs(r, noise, rng, samples) for r in clean], axis=0)
    low, high = _percentiles(draws, level)
    return stats.Spread(median=value, low=min(low, value), high=max(high, value), n=pairs, min=min(medians),
                        max=max(medians), cv=stats.cv(medians), values=tuple(medians))


def _resampled_logs(r: Sequence[float], noise: float | None, rng: Any, samples: int) -> Any:
    """``samples`` bootstrap replicates of one prompt's log median: its pairs drawn with replacement;
    a prompt of one pair, its ratio spread by ``noise`` (log scale)."""
    import numpy as np

    values = np.log(np.asarray(r, dtype=float))
    if len(values) == 1:
        return values[0] + rng.normal(0.0, noise or 0.0, samples)
    return np.median(values[rng.integers(0, len(values), (samples, len(values)))], axis=1)


def _percentiles(draws: Any, level: float) -> tuple[float, float]:
    """The percentile interval of bootstrap replicates on the log scale, as ratios."""
    import numpy as np

    ordered = np.sort(draws)
    tail = (1 - level) / 2
    n = len(ordered)
    return float(np.exp(ordered[int(tail * (n - 1))])), float(np.exp(ordered[int(math.ceil((1 - tail) * (n - 1)))]))


def prompt_set(ratios: Sequence[Sequence[float]]) -> stats.Spread | None:
    """The workload estimator over a set's counted prompts (each its paired ratios), the set's own
    pair-to-pair noise spreading the prompts it measured once."""
    return workload(ratios, pooled_log_sd(ratios))


def between_prompts(log_medians: Mapping[str, Sequence[float]]) -> float | None:
    """The between-prompt noise of a workload: the pooled standard deviation of the prompts' log
    speedups within each category that has two prompts or more (category -> its prompts' log
    medians); None where none has."""
    num, dof = 0.0, 0
    for values in log_medians.values():
        if len(values) >= 2:
            num += statistics.variance(values) * (len(values) - 1)
            dof += len(values) - 1
    return math.sqrt(num / dof) if dof else None


def over_prompts(ratios: Mapping[str, Sequence[Sequence[float]]], weights: Mapping[str, float] | None = None,
                 noise: float | None = None, prompt_noise: float | None = None, *,
                 samples: int = stats.BOOTSTRAP_SAMPLES, level: float = stats.LEVEL, seed: int = 0) -> stats.Spread | None:
    """The over-prompts estimator (:data:`OVER_PROMPTS`) over ``ratios``: category -> its prompts'
    paired ratios (one sequence per prompt, each one ratio or more).

    - The estimate: per category the mean of its prompts' log medians, weighed by ``weights``
      (category -> its share of the workload; None: equal), normalised over the categories given.
    - The interval: a percentile bootstrap. Each replicate draws, per category, as many prompts as
      it has, with replacement, and each drawn prompt's pairs with replacement (a prompt with one
      pair: its ratio spread by ``noise``, the pair-to-pair noise, where known). A category's replicate mean is
      scaled about its own mean by sqrt(n/(n-1)) (the plug-in bootstrap of n values understates the
      variance of their mean by (n-1)/n, much at the 2-4 prompts a category a study measures). A
      category with one prompt is spread by ``prompt_noise`` (:func:`between_prompts`), and one of
      two or more by no less than it (two prompts that happen to agree do not make a category
      narrow: the variance they fall short of it by is drawn from the normal). The
      replicates' spread about the estimate is then widened by Student's t over the normal's at the
      prompts' degrees of freedom (the prompts less the categories with two or more; with none, the
      prompts less one): a few prompts estimate their own spread poorly.
    - Unknown (``n`` 1, never shown faster) where a category has one prompt and ``prompt_noise`` is
      None, or there is one prompt in all. Otherwise ``n`` is the number of prompts, ``values``
      their medians."""
    clean = {c: [[float(v) for v in r if v is not None and v > 0] for r in rs] for c, rs in ratios.items()}
    clean = {c: rs for c, rs in clean.items() if rs}
    if not clean or any(not r for rs in clean.values() for r in rs):
        return None
    raw = {c: (weights or {}).get(c, 1.0) if weights else 1.0 for c in clean}
    total = sum(raw.values()) or 1.0
    w = {c: v / total for c, v in raw.items()}
    logs = {c: [math.log(statistics.median(r)) for r in rs] for c, rs in clean.items()}
    value = math.exp(sum(w[c] * statistics.fmean(v) for c, v in logs.items()))
    medians = [math.exp(x) for v in logs.values() for x in v]
    prompts = len(medians)
    # A prompt of one pair needs no pair noise of its own here: the spread between prompts (resampled,
    # or prompt_noise) already holds each prompt's pair noise.
    unknown = (any(len(rs) == 1 for rs in clean.values()) and prompt_noise is None) or prompts < 2
    if unknown:
        return stats.Spread(median=value, low=value, high=value, n=1, min=min(medians), max=max(medians), cv=None,
                            values=tuple(medians))
    import numpy as np

    rng = np.random.default_rng(seed)
    sums = np.zeros(samples)
    for c, rs in clean.items():
        k = len(rs)
        per_prompt = np.stack([_resampled_logs(r, noise, rng, samples) for r in rs])  # (k, samples)
        if k == 1:
            mean = per_prompt[0] + rng.normal(0.0, prompt_noise or 0.0, samples)
        else:
            drawn = per_prompt[rng.integers(0, k, (samples, k)), np.arange(samples)[:, None]].mean(axis=1)
            centre = statistics.fmean(logs[c])
            mean = centre + (drawn - centre) * math.sqrt(k / (k - 1))
            # a few prompts that happen to agree say little of their category's spread: it is taken
            # as no less than ``prompt_noise`` (the rest drawn from the normal)
            short = (prompt_noise or 0.0) ** 2 - statistics.variance(logs[c])
            if short > 0:
                mean = mean + rng.normal(0.0, math.sqrt(short / k), samples)
        sums += w[c] * mean
    # A handful of prompts a category estimates their spread poorly: the replicates' spread about the
    # estimate is widened by Student's t over the normal's at the prompts' degrees of freedom (the
    # prompts less the categories that have two or more; with none, the prompts less one).
    several = [len(rs) for rs in clean.values() if len(rs) >= 2]
    dof = sum(k - 1 for k in several) if several else prompts - 1
    centre_log = math.log(value)
    sums = centre_log + (sums - centre_log) * (stats.t975(dof) / stats.Z975)
    low, high = _percentiles(sums, level)
    return stats.Spread(median=value, low=min(low, value), high=max(high, value), n=prompts, min=min(medians),
                        max=max(medians), cv=stats.cv(medians), values=tuple(medians))
