"""The speedup estimators: one per kind of study, each defined here once and named in every output
that reports it (``Summary.estimator``, a prompt set's ``definitions``, a cluster study's figures).

- **point** (a run, a sweep or tune point, one prompt, one case on one machine of a cluster study):
  the median of paired ratios. Each speculative run's decode speed over the baseline's of its own
  pair (measured next to it, ABBA; pairs made by index, :func:`llamaspec.measure.pairs.whole_pairs`), the
  median over the pairs, with a 95 % bootstrap interval. The median, because one run disturbed by
  the machine moves it least; paired, because drift between runs measured apart is not speedup.
- **block** (a workload study's cells): a prompt is measured in blocks, B S1..Sk B, the setups in
  an order shuffled block by block; each speculative run over the two baselines of its own block,
  measured around it, interpolated at its place in the block on the log scale (:data:`BLOCK`);
  the median of those ratios. Every
  ratio's baseline is measured beside its run, whatever else the study measured before or after.
- **workload** (the prompts are the whole workload, ``--whole-workload``): the geometric mean of the prompts' point speedups, with a 95 %
  bootstrap interval that resamples each prompt's pairs (the prompts are the workload, not a sample
  of one; :func:`workload`). The geometric mean, because ratios average on a log scale (2x on one
  prompt and 0.5x on another is no gain, not 1.25x), and every prompt weighs the same whatever its
  length. Every decision over a workload is made on this estimator
  (:mod:`llamaspec.decision.workload`).
- **over prompts** (the default for a workload study: the built-in workload, a prompt file, which
  are samples of the user's traffic): the same geometric mean, taken per category and weighed by
  each category's share of the workload's prompts, with a 95 % interval over prompts: Student's t
  at the prompts less one over the spread between all timed prompts (:func:`prompt_spread`), no
  less than the study's between-prompt noise (:func:`between_prompts`) (:func:`over_prompts`), so
  that it speaks for the next prompts of the same kinds, not only for those measured. Its ``n``
  is the prompts it rests on.
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
BLOCK = ("median of the ratios, each speculative run over the two baselines measured around it in its block on its "
         "prompt (B S1..Sk B, the setups' order shuffled), interpolated at its place in the block")
WORKLOAD = ("geometric mean of the prompts' speedups (each the median of its paired ratios), 95 % bootstrap "
            "interval resampling each prompt's pairs (a prompt with one pair: its ratio spread by the pooled "
            "pair-to-pair noise of the study's prompts)")
OVER_PROMPTS = ("geometric mean of the prompts' speedups (each the median of its paired ratios) per category, the "
                "categories weighed by their share of the workload's prompts; 95 % interval of Student's t at the prompts "
                "less one over the spread between all timed prompts, drawn towards the recorded workloads' spread and no "
                "less than the study's between-prompt noise (it speaks for other prompts of the same kinds)")
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


# The F ratio (the spread between categories over that within them) past which the spread is taken within
# them: about the 0.1 % point at a dozen prompts in six categories (docs/method.md).
CATEGORIES_DIFFER = 10.0

# What the recorded chat workloads say of the spread between prompts (a log sd), as PRIOR_PROMPTS
# prompts' worth of evidence beside a study's own (:func:`over_prompts`): a dozen prompts often miss
# the few where an n-gram mode gains most, and read narrow. The recordings and replays behind both
# figures: docs/method.md ("A prior").
PRIOR_SPREAD, PRIOR_PROMPTS = 0.20, 4


def prompt_spread(logs: Mapping[str, Sequence[float]]) -> tuple[float, int] | None:
    """The spread between a setup's prompts (category -> its prompts' log speedups) and its degrees
    of freedom: the standard deviation about their mean over all of them, at the prompts less one;
    or, where the categories are shown to differ (their F ratio at least
    :data:`CATEGORIES_DIFFER`, two degrees of freedom within them at least), about each category's
    own mean, pooled, at the prompts less the categories (why: docs/method.md, "Degrees of freedom
    from prompts"). None below two prompts."""
    every = [x for v in logs.values() for x in v]
    if len(every) < 2:
        return None
    total = (statistics.stdev(every), len(every) - 1)
    dof = len(every) - len(logs)
    if dof < 2 or len(logs) < 2:
        return total
    within = sum(statistics.variance(v) * (len(v) - 1) for v in logs.values() if len(v) >= 2)
    mean = statistics.fmean(every)
    between = sum(len(v) * (statistics.fmean(v) - mean) ** 2 for v in logs.values())
    if within == 0 or (between / (len(logs) - 1)) / (within / dof) < CATEGORIES_DIFFER:
        return total
    return math.sqrt(within / dof), dof


def between_prompts(per_setup: Sequence[Mapping[str, Sequence[float]]]) -> float | None:
    """The between-prompt noise of a study: the largest spread between one setup's prompts
    (:func:`prompt_spread`; one mapping per setup, category -> its prompts' log medians) among the
    setups with three prompts or more and at least half as many as the most measured (else any
    with two); None where none has two.

    The largest, not the pooled: the setups are measured on the same prompts, so a sample that
    missed the few prompts where a right-skewed n-gram mode gains 1.6-3.5x reads every such mode
    low and narrow at once (the replays: docs/method.md, "A floor")."""
    spreads = [(sum(len(v) for v in logs.values()), got[0]) for logs in per_setup if (got := prompt_spread(logs))]
    if not spreads:
        return None
    # the setups measured on most of the prompts: one the study stopped measuring after its first few
    # prompts (it trailed) was measured on other prompts than the rest, and its spread is its own
    most = max(n for n, _sd in spreads)
    enough = [sd for n, sd in spreads if n >= 3 and 2 * n >= most] or [sd for _n, sd in spreads]
    return max(enough)


def over_prompts(ratios: Mapping[str, Sequence[Sequence[float]]], weights: Mapping[str, float] | None = None,
                 prompt_noise: float | None = None) -> stats.Spread | None:
    """The over-prompts estimator (:data:`OVER_PROMPTS`; why each step: docs/method.md) over
    ``ratios``: category -> its prompts' paired ratios (one sequence per prompt, each one ratio or more).

    - The estimate: each prompt's log median; per category their mean, weighed by ``weights``
      (category -> its share of the workload; None: equal), normalised over the categories given.
    - The spread: :func:`prompt_spread` of the prompts' log medians (a prompt's pair noise is in
      the spread of its median already); one below :data:`PRIOR_SPREAD` drawn towards it as by
      :data:`PRIOR_PROMPTS` more prompts (the pooled variance of the two, the prompts' degrees of
      freedom kept); and no less than ``prompt_noise``, the study's between-prompt noise
      (:func:`between_prompts`).
    - The interval: the estimate +- Student's t at the spread's degrees of freedom times its
      standard error, the spread times sqrt(sum over categories of weight^2 / prompts), on the log
      scale: for the next prompts of the same kinds, not only those measured.
    - Unknown (``n`` 1, never shown faster) with one prompt in all. Otherwise ``n`` is the number
      of prompts, ``values`` their medians."""
    clean = {c: [[float(v) for v in r if v is not None and v > 0] for r in rs] for c, rs in ratios.items()}
    clean = {c: rs for c, rs in clean.items() if rs}
    if not clean or any(not r for rs in clean.values() for r in rs):
        return None
    raw = {c: (weights or {}).get(c, 1.0) if weights else 1.0 for c in clean}
    total = sum(raw.values()) or 1.0
    w = {c: v / total for c, v in raw.items()}
    logs = {c: [math.log(statistics.median(r)) for r in rs] for c, rs in clean.items()}
    centre = sum(w[c] * statistics.fmean(v) for c, v in logs.items())
    value = math.exp(centre)
    every = [x for v in logs.values() for x in v]
    medians = [math.exp(x) for x in every]
    prompts = len(every)
    if prompts < 2:
        return stats.Spread(median=value, low=value, high=value, n=1, min=min(medians), max=max(medians), cv=None,
                            values=tuple(medians))
    own, dof = prompt_spread(logs) or (0.0, prompts - 1)
    # the prior only widens: a study whose prompts spread more than it keeps its own spread
    prior = math.sqrt((dof * own ** 2 + PRIOR_PROMPTS * PRIOR_SPREAD ** 2) / (dof + PRIOR_PROMPTS))
    sd = max(own, prior, prompt_noise or 0.0)
    half = stats.t975(dof) * sd * math.sqrt(sum(w[c] ** 2 / len(v) for c, v in logs.items()))
    return stats.Spread(median=value, low=math.exp(centre - half), high=math.exp(centre + half), n=prompts,
                        min=min(medians), max=max(medians), cv=stats.cv(medians), values=tuple(medians))


def log_standard_error(s: stats.Spread, over_prompts: bool = True) -> float | None:
    """The standard error on the log scale that an interval was made from: an over-prompts
    interval (:func:`over_prompts`) is the estimate +- Student's t at its prompts less one times
    it; any other (a bootstrap's percentiles) is taken as the normal's 1.96 times it, from its
    lower side. None where there is no interval (``n`` below 2, or no width)."""
    if s.n < 2 or not (0 < s.low < s.median):
        return None
    q = stats.t975(s.n - 1) if over_prompts else stats.Z975
    return (math.log(s.median) - math.log(s.low)) / q
