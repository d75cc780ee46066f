"""The speedup estimators: one per kind of study, each defined here once and named in every output
that reports it (``Summary.estimator``, a prompt set's ``definitions``, a cluster study's figures).

- **point** (a run, a sweep or tune point, one prompt, one case on one machine of a cluster study):
  the median of paired ratios. Each speculative run's decode speed over the baseline's of its own
  pair (measured next to it, ABBA; pairs made by index, :func:`llamaspec.pairs.whole_pairs`), the
  median over the pairs, with a 95 % bootstrap interval. The median, because one run disturbed by
  the machine moves it least; paired, because drift between runs measured apart is not speedup.
- **shared baseline** (an explicit cost saver, labelled ``paired: false``): each speculative run
  over the shared baseline's median; the point's median of those ratios.
- **prompt set** (a set of prompts, or one category of it): the geometric mean of the prompts'
  point speedups, with a 95 % bootstrap interval over prompts. The geometric mean, because ratios
  average on a log scale (2x on one prompt and 0.5x on another is no gain, not 1.25x), and every
  prompt weighs the same whatever its length; a total-token speedup (every token over all the
  time, long prompts weighing most) is shown beside it, named as such. Recommendations decide on
  this estimator (:data:`PROMPT_SET_METRIC`).
- **over machines** (a cluster study): never a ratio across machines. Per machine, the same
  estimator as on one machine: a case's pairs on that machine (its items pooled by pair index)
  give the point estimator; a prompt set's prompts on that machine give the prompt-set estimator.
  So one study measured locally and over the cluster reports the same figures.
"""

from __future__ import annotations

from collections.abc import Sequence

from llamaspec import stats

POINT = "median of paired ratios (speculative over the baseline of its own pair), 95 % bootstrap interval"
SHARED_BASELINE = "median of each speculative run over the shared baseline's median (not paired)"
PROMPT_SET = ("geometric mean of the prompts' speedups (each the median of its paired ratios), "
              "95 % bootstrap interval over prompts")
OVER_MACHINES = "per machine, as on one machine: " + POINT + " per case; " + PROMPT_SET + " per prompt set"

PROMPT_SET_METRIC = "geomean_speedup"  # the GroupFigures field that holds the prompt-set estimator

DEFINITIONS = {"point": POINT, "shared_baseline": SHARED_BASELINE, "prompt_set": PROMPT_SET,
               "over_machines": OVER_MACHINES}


def point(ratios: Sequence[float]) -> stats.Spread | None:
    """The point estimator over a point's pair ratios (or shared-baseline ratios)."""
    return stats.spread(ratios)


def prompt_set(speedups: Sequence[float]) -> stats.Spread | None:
    """The prompt-set estimator over the counted prompts' point speedups."""
    return stats.mean_spread(speedups, geometric=True)
