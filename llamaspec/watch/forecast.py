"""What a window of real traffic says about the server's setting (:func:`forecast`): the speedup
model's prediction at every draft length up to the running one, with intervals from the window's
counts, and a verdict: keep the running length, change it, or serve without speculation.

**Tokens a step emits.** ``/metrics`` counts, per draft position i, the verification steps accepted
through i (A_i of N steps). The share A_i / N is the chance that a step emits position i's token,
whatever the shape of the curve, so a step capped at k emits ``1 + sum_{i<=k} A_i / N`` tokens:
``theory.PositionCurve`` with every step counted as drafting every position (its stated assumption:
acceptance at position i measured in steps of length K stands for steps of length k < K). A server
without the per-position series gives the mean accepted length only: one α then
(``theory.maths``), labelled so. What a step drafts at length k (:func:`drafted_at`): every position
up to k, less the ``K·N - D`` tokens the window's steps drafted short of K (D drafted), taken from
the top positions down (a step cut short, by a request's end or an n-gram's match, misses the last
positions), each position missing in at most one step per request and never in a step accepted
through it; at K that is exactly D / N.

**Steps that draft nothing** (an n-gram mode that finds no match, a request's last token) emit one
token at one target step's cost; their share of the tokens (the window's rounds less its
verification steps, ``Window.plain_steps``) stays as measured at every length
(``CostModel.speedup_at(..., plain_share)``).

**Costs** come with the pair (``watch.costs``); one of them is then set so that the model meets
the window's measured decode speed at the running length (:func:`calibrate`).

**Intervals** resample the window's verification steps (how many accepted exactly n tokens, n =
0..K, follows from the counts) ``BOOTSTRAP`` times and predict again: 95 % percentile intervals,
and for each length the share of resamples in which it beats the running one. They carry the
window's sampling error only, taken as independent steps; the costs are taken as exact.

**The verdict** (:data:`VERDICTS`) is the decision rule's (``decision.decide.decide`` over the
lengths, each interval widened by the model's own error, ``speedup_model.PREDICTION_ERROR``), then
``decide.for_running``'s for a running setting (docs/watch.md, "What it predicts").
"""

from __future__ import annotations

import dataclasses
import math
import random
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from llamaspec.base.errors import LlamaspecError
from llamaspec.base.stats import Spread
from llamaspec.decision import decide
from llamaspec.decision.speedup_model import PREDICTION_ERROR
from llamaspec.theory import CostModel, PositionCurve, alpha_from_tokens_per_round, expected_tokens_per_round
from llamaspec.watch.window import Window

BOOTSTRAP = 200
VERDICTS = ("keep", "change", "no draft", "undecided")
BY_POSITION = "acceptance by position"
ONE_ALPHA = "one alpha (the server counts no positions: mean accepted length only)"


@dataclass(frozen=True)
class LengthForecast:
    """The prediction at one draft length."""

    draft_max: int
    tokens_per_step: float  # tokens a verification step would emit at this length
    speedup: float  # over the target alone
    low: float  # 95 % interval from the window's counts
    high: float
    beats_running: float | None  # share of resamples in which it beats the running length by more than the model's error (None: it is that one)


@dataclass(frozen=True)
class Forecast:
    """The model's answer for the window's traffic."""

    running: int
    lengths: tuple[LengthForecast, ...]  # draft lengths 1..running
    acceptance_model: str  # BY_POSITION or ONE_ALPHA
    plain_share: float  # share of the tokens from steps that drafted nothing
    plain_known: bool  # False: the window's requests are unknown, the share taken as 0
    cost: CostModel
    calibrated: str  # "none", "loop" or "draft": what the window's measured speed set (calibrate)
    measured_tps: float | None  # the window's decode speed a request, at the running length
    absolute: bool  # the costs are in milliseconds (timed), not a ratio given with --cost
    verdict: str  # of VERDICTS
    best: int
    reason: str
    resamples: int

    def at(self, k: int) -> LengthForecast:
        return self.lengths[k - 1]

    def predicted_tps(self, k: int | None) -> float | None:
        """Decode speed per request the model predicts at length k (None: the target alone), where
        the costs are in milliseconds (not a ratio given with --cost)."""
        if not self.absolute:
            return None
        base = 1000.0 / self.cost.baseline_ms_per_token
        return base if k is None else base * self.at(k).speedup


def _exactly(accepted: Sequence[int], steps: int) -> list[int]:
    """How many steps accepted exactly n tokens, n = 0..K, from the steps accepted through each position."""
    through = [steps, *accepted, 0]
    return [through[n] - through[n + 1] for n in range(len(accepted) + 1)]


def _through(exactly: Sequence[int]) -> tuple[int, ...]:
    """The inverse of :func:`_exactly`: steps accepted through positions 1..K."""
    out, total = [], 0
    for n in range(len(exactly) - 1, 0, -1):
        total += exactly[n]
        out.append(total)
    return tuple(reversed(out))


def _binomial(rng: random.Random, n: int, p: float) -> int:
    """A binomial draw: by inversion where few successes are expected, else the normal approximation."""
    if n <= 0 or p <= 0.0:
        return 0
    if p >= 1.0:
        return n
    if p > 0.5:
        return n - _binomial(rng, n, 1.0 - p)
    if n * p < 30:
        u, k = rng.random(), 0
        q = (1.0 - p) ** n
        cdf = q
        while u > cdf and k < n:
            q *= (n - k) / (k + 1) * p / (1.0 - p)
            k += 1
            cdf += q
        return k
    draw = round(rng.gauss(n * p, math.sqrt(n * p * (1.0 - p))))
    return min(max(draw, 0), n)


def _resample(rng: random.Random, exactly: Sequence[int]) -> list[int]:
    """A multinomial draw of as many steps, each accepting n tokens with the window's share."""
    left, mass, out = sum(exactly), float(sum(exactly)), []
    for count in exactly[:-1]:
        draw = _binomial(rng, left, count / mass) if mass > 0 else 0
        out.append(draw)
        left -= draw
        mass -= count
    return [*out, left]


def _tokens_model(window: Window, exactly: Sequence[int] | None) -> Callable[[float], float]:
    """Tokens a step of length k emits: from the per-position counts (``exactly`` resampled, or the
    window's own), else from one α fitted to the mean accepted length."""
    steps = window.steps
    if window.accepted_by_position is not None:
        accepted = _through(exactly) if exactly is not None else window.accepted_by_position
        curve = PositionCurve((steps,) * len(accepted), tuple(accepted))
        return lambda k: curve.tokens_per_round(k, 0.0)
    drafted = window.drafted_per_step or 1.0
    mean = (sum(n * c for n, c in enumerate(exactly)) / steps) if exactly is not None else (window.mean_accepted or 0.0)
    alpha = alpha_from_tokens_per_round(min(max(1.0 + mean, 1.0), drafted + 1.0), drafted)
    return lambda k: expected_tokens_per_round(alpha, k)


def _alpha_exactly(window: Window) -> list[int]:
    """Steps by accepted count under one α (for the resamples of a window without per-position counts)."""
    drafted = window.drafted_per_step or 1.0
    k = max(1, round(drafted))
    alpha = alpha_from_tokens_per_round(min(max(window.tokens_per_step or 1.0, 1.0), drafted + 1.0), drafted)
    shares = [alpha ** n * (1.0 - alpha) for n in range(k)] + [alpha ** k]
    counts = [round(s * window.steps) for s in shares]
    counts[0] += window.steps - sum(counts)
    return counts


def drafted_at(window: Window, running: int) -> list[float]:
    """Draft tokens a step proposes at lengths 1..running (see the module's docstring)."""
    steps = window.steps
    accepted = list(window.accepted_by_position or ())[:running]
    accepted += [0] * (running - len(accepted))
    short = max(running * steps - window.drafted, 0)
    missing = [0] * running
    for width in ((window.requests or steps), steps):  # one step per request first, then any
        for i in range(running - 1, -1, -1):
            room = min(width, steps - accepted[i]) - missing[i]
            take = min(max(room, 0), short)
            missing[i] += take
            short -= take
    out, total = [], 0.0
    for i in range(running):
        total += (steps - missing[i]) / steps
        out.append(total)
    return out


def speedups(window: Window, cost: CostModel, plain_share: float, drafted: Sequence[float],
             exactly: Sequence[int] | None = None) -> list[float]:
    """The predicted speedup at draft lengths 1..len(``drafted``) (:func:`drafted_at`; ``exactly``:
    a resample of the steps)."""
    tokens_at = _tokens_model(window, exactly)
    return [cost.speedup_at(d, tokens_at(k), plain_share) for k, d in enumerate(drafted, 1)]


def _ms_per_token(cost: CostModel, window: Window, running: int, plain_share: float) -> float:
    """The model's time per emitted token at the running length, on the window's own acceptance."""
    tokens = _tokens_model(window, None)(running)
    return cost.baseline_ms_per_token / cost.speedup_at(drafted_at(window, running)[-1], tokens, plain_share)


def calibrate(cost: CostModel, window: Window, running: int, plain_share: float,
              draft_ok: bool = False) -> tuple[CostModel, str]:
    """The cost model set so that it meets the window's measured decode speed at the running length,
    by one parameter, and which:

    - ``"loop"``: without a measured target-alone step (``baseline_step_ms``), the server's own loop
      per emitted token (``RoundProfile.loop_overhead``), charged alike to the target alone: the
      measured time per token less the model's (never below 0);
    - ``"draft"`` (``draft_ok``: the target alone was timed here with the costs): the draft's cost,
      scaled as ``CostModel.fitted_to`` scales it (inside a round a draft step need not cost what it
      does timed alone); the time per token is linear in it;
    - ``"none"``: the window's speed is unknown, or nothing to set."""
    if not window.decode_tps:
        return cost, "none"
    measured = 1000.0 / window.decode_tps
    if cost.baseline_step_ms is None:
        if cost.profile.loop_overhead != "token":
            return cost, "none"
        loop = measured - _ms_per_token(cost, window, running, plain_share)
        if loop <= 0:  # the model is already slower than the server was: nothing to add (the report shows both)
            return cost, "none"
        return dataclasses.replace(cost, baseline_step_ms=cost.target_ms_per_token + cost.target_sample_ms + loop), "loop"
    if not draft_ok or cost.draft_ms_per_token <= 0:
        return cost, "none"
    free = _ms_per_token(cost.with_cost_ratio(0.0), window, running, plain_share)
    timed = _ms_per_token(cost, window, running, plain_share)
    if timed <= free:
        return cost, "none"
    ratio = max((measured - free) / (timed - free), 0.0) * cost.cost_ratio
    return dataclasses.replace(cost.with_cost_ratio(ratio), timed_cost_ratio=cost.cost_ratio), "draft"


def forecast(window: Window, cost: CostModel, running: int, *, absolute: bool = True, fit: bool = True,
             fit_draft: bool = False, refits: int = BOOTSTRAP, seed: int = 0) -> Forecast:
    """The prediction and verdict for ``window`` at draft lengths 1..``running`` (the server's).
    ``absolute``: the costs are in milliseconds; ``fit``: the window's measured speed may set one
    parameter of the costs (:func:`calibrate`; one slot, costs in milliseconds); ``fit_draft``: that
    parameter may be the draft's cost (the target alone was timed with the costs)."""
    if not window.speculated:
        raise LlamaspecError("no speculative request finished in this window yet: nothing to predict from",
                             hint="wait for traffic (the counters count finished requests)")
    if running < 1:
        raise LlamaspecError(f"the server's draft length must be >= 1, got {running}")
    plain = window.plain_steps
    emitted = window.tokens - (window.requests or 0)  # the tokens steps emitted (each request's first is not)
    plain_share = plain / emitted if plain is not None and emitted > 0 else 0.0
    plain_share = min(max(plain_share, 0.0), 1.0)
    cost, calibrated = calibrate(cost, window, running, plain_share, fit_draft) if fit and absolute else (cost, "none")
    drafted = drafted_at(window, running)
    point = speedups(window, cost, plain_share, drafted)
    rng = random.Random(seed)
    exact = (_exactly(window.accepted_by_position, window.steps) if window.accepted_by_position is not None
             else _alpha_exactly(window))
    samples = [speedups(window, cost, plain_share, drafted, _resample(rng, exact)) for _ in range(refits)]
    lengths = []
    margin = 1.0 + PREDICTION_ERROR  # faster than the running length beyond the model's own error
    for i, s in enumerate(point):
        values = sorted(sample[i] for sample in samples)
        lo = values[int(0.025 * (len(values) - 1))] if values else s
        hi = values[int(math.ceil(0.975 * (len(values) - 1)))] if values else s
        beats = None if i + 1 == running else (sum(1 for v in samples if v[i] > v[running - 1] * margin) / len(samples)
                                               if samples else float(s > point[running - 1] * margin))
        lengths.append(LengthForecast(i + 1, _tokens_model(window, None)(i + 1), s, min(lo, s), max(hi, s), beats))
    decision = decide.decide([_candidate(p, running, window.steps) for p in lengths])
    verdict, reason = decide.for_running(decision, running, {p.draft_max: p.beats_running or 0.0 for p in lengths})
    chosen = decision.chosen.key if decision.chosen is not None else None
    best = next((p.draft_max for p in lengths if p.draft_max == chosen), running)
    return Forecast(running, tuple(lengths), BY_POSITION if window.accepted_by_position is not None else ONE_ALPHA,
                    plain_share, plain is not None, cost, calibrated, window.decode_tps, absolute, verdict, best,
                    reason, refits)


def _candidate(p: LengthForecast, running: int, steps: int) -> decide.Candidate:
    """One length for the decision rule: its interval widened by the model's own error, the running
    length the cheapest (keeping it costs no restart), then the shorter."""
    widened = Spread(p.speedup, p.low / (1 + PREDICTION_ERROR), p.high * (1 + PREDICTION_ERROR), steps, p.low, p.high, None)
    return decide.Candidate(p.draft_max, f"draft {p.draft_max}", widened, (float(p.draft_max != running), p.draft_max))
