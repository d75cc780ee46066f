"""The model fitted to measured points: their observations, the pooled α, the predictions and their errors.

:func:`analyze` pools α over the points (weighted by their rounds), fits the draft's cost where
enough lengths were measured, and predicts every draft length with the measured costs. Where every
point counts acceptance by draft position, the tokens a round emits at each length come from the
pooled curve (``llamaspec.theory.positions``), not from α; the one-α fit of the same points is kept
beside it (:attr:`Analysis.single_alpha`) so that the two models' errors can be compared.
"""

from __future__ import annotations

import statistics
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from llamaspec.base.errors import LlamaspecError
from llamaspec.base.stats import percent_text
from llamaspec.theory.cost import CostModel
from llamaspec.theory.maths import (
    acceptance,
    accepted_unchecked,
    ceiling_speedup,
    expected_accepted,
    expected_tokens_per_round,
    solve_increasing,
)
from llamaspec.theory.observation import Observation
from llamaspec.theory.positions import CONTRADICTION, PositionCurve
from llamaspec.theory.profiles import RoundProfile


@dataclass(frozen=True)
class PointFit:
    """One observation next to what the pooled model predicts for it."""

    draft_max: int
    acceptance: float | None  # llama.cpp's accept, as a fraction
    alpha: float | None  # this point's own α (None: nothing drafted)
    calls: int  # verification rounds
    calls_measured: bool  # False: derived from the counters by the program's loop
    drafted_per_round: float  # the k the prediction uses
    tokens_per_round: float
    mean_accepted: float  # accepted drafts per round = tokens_per_round - 1
    measured_speedup: float
    measured_call_ms: float  # ms per round the measured speed implies: tokens_per_round · 1000 / spec_decode_tps
    predicted_speedup: float | None  # pooled α and cost model at drafted_per_round
    predicted_call_ms: float | None
    implied_cost_ratio: float | None  # the c that would make the prediction match the measurement
    drafted_rounds: int | None = None  # rounds that drafted, where the engine counts them apart (llama-server)

    @property
    def rel_error(self) -> float | None:
        """(predicted - measured) / measured speedup."""
        if self.predicted_speedup is None:
            return None
        return (self.predicted_speedup - self.measured_speedup) / self.measured_speedup


@dataclass(frozen=True)
class Prediction:
    draft_max: int
    tokens_per_round: float
    acceptance: float  # what llama.cpp would print as accept, as a fraction
    call_steps: float  # cost of one round in baseline tokens' time
    speedup: float


@dataclass(frozen=True)
class Analysis:
    """The model fitted to a set of observations (one model pair, one target setting)."""

    alpha: float  # pooled per-token acceptance rate
    points: tuple[PointFit, ...]
    cost: CostModel | None  # None without measured costs: no speedup predictions
    curve: tuple[Prediction, ...]  # k = 1..max_draft; empty without a cost model
    profile: RoundProfile = field(kw_only=True)  # the program the fit models (its points')
    # Acceptance by draft position pooled over the points, where every point counted it: the tokens
    # per round of every prediction come from it (None: from α).
    positions: PositionCurve | None = None
    single_alpha: Analysis | None = None  # the same points fitted with one α, when positions are used
    contradictions: tuple[str, ...] = ()  # points whose acceptance the other points' curve does not predict

    def tokens_at(self, k: float) -> float:
        """Tokens a round of (mean) length k emits, by this fit's acceptance model."""
        return tokens_model(self.alpha, self.positions)(k)

    def speedup_at(self, k: float) -> float | None:
        """The predicted speedup at (mean) draft length k; None without measured costs."""
        return None if self.cost is None else self.cost.speedup_at(k, self.tokens_at(k))

    @property
    def acceptance_model(self) -> str:
        """What the tokens per round come from, as the output names it."""
        return "acceptance by position" if self.positions is not None else "one alpha"

    @property
    def ceiling_speedup(self) -> float:
        """1/(1 - α): the speedup with a free draft (c → 0) and k → ∞."""
        return ceiling_speedup(self.alpha)

    @property
    def best(self) -> Prediction | None:
        """The predicted best draft length (smallest k on ties)."""
        if not self.curve:
            return None
        best = self.curve[0]
        for p in self.curve[1:]:
            if p.speedup > best.speedup * (1 + 1e-12):
                best = p
        return best

    @property
    def speedup_curve(self) -> tuple[tuple[int, float], ...]:
        return tuple((p.draft_max, p.speedup) for p in self.curve)

    @property
    def accept_curve(self) -> tuple[tuple[int, float], ...]:
        """Predicted llama.cpp ``accept`` (fraction) per draft length, from the pooled α."""
        return tuple((p.draft_max, p.acceptance) for p in self.curve)

    @property
    def max_draft(self) -> int:
        return len(self.curve)

    @property
    def median_abs_error(self) -> float | None:
        """Median |predicted - measured| / measured over the points: the fit's quality."""
        errors = [abs(p.rel_error) for p in self.points if p.rel_error is not None]
        return statistics.median(errors) if errors else None


def _pooled_alpha(observations: Sequence[Observation]) -> float:
    """α with Σ rounds_i·E[accepted](α, k_i) = Σ n_accept_i over the points that drafted anything."""
    drafted = [o for o in observations if o.n_drafted > 0]
    if not drafted:
        raise LlamaspecError(
            "nothing was drafted in any run, so the acceptance rate is unknown",
            hint="check that the draft model loaded and that --draft-p-min is not so high that every draft is dropped",
        )
    goal = float(sum(o.n_accept for o in drafted))
    total_drafted = sum(o.n_drafted for o in drafted)
    if goal == 0:
        return 0.0
    if goal == total_drafted:
        return 1.0

    for o in drafted:
        expected_accepted(0.5, o.drafted_per_round)  # each length checked once, not at every bisection step
    rounds = [(o.calls, o.drafted_per_round) for o in drafted]

    def accepted(a: float) -> float:
        return sum(calls * accepted_unchecked(a, k) for calls, k in rounds)

    return solve_increasing(accepted, goal, 0.0, 1.0)


def pooled_positions(observations: Sequence[Observation]) -> PositionCurve | None:
    """Acceptance by position summed over the points that drafted, or None unless every one of them
    counted it (a curve from some points and α from the others would mix two models)."""
    drafted = [o for o in observations if o.n_drafted > 0]
    if not drafted or any(o.positions is None for o in drafted):
        return None
    return PositionCurve.pooled([o.positions for o in drafted if o.positions is not None])


def tokens_model(alpha: float, positions: PositionCurve | None) -> Callable[[float], float]:
    """Tokens a round of (mean) length k emits: from the curve where known, else α's closed form."""
    if positions is None:
        return lambda k: expected_tokens_per_round(alpha, k)
    return lambda k: positions.tokens_per_round(k, alpha)


def contradictions(observations: Sequence[Observation], alpha: float,
                   within: float = CONTRADICTION) -> tuple[tuple[Observation, float, float], ...]:
    """The points whose measured tokens per round differ by more than ``within`` from what the
    acceptance by position of the *other, longer* points predicts at their length: (point, measured,
    predicted). Where this is not empty, acceptance at a position depends on the draft length here,
    and one long run does not stand for the short ones."""
    out = []
    for o in observations:
        if o.positions is None or o.n_drafted == 0:
            continue
        longer = [p for p in observations if p is not o and p.positions is not None and p.n_drafted > 0
                  and p.positions.length >= o.drafted_per_round]
        curve = PositionCurve.pooled([p.positions for p in longer if p.positions is not None])
        if curve is None:
            continue
        predicted = curve.tokens_per_round(o.drafted_per_round, alpha)
        if abs(o.tokens_per_round - predicted) > within * predicted:
            out.append((o, o.tokens_per_round, predicted))
    return tuple(out)


def _contradiction_lines(found: Sequence[tuple[Observation, float, float]]) -> tuple[str, ...]:
    return tuple(
        f"draft {o.draft_max}: {measured:.2f} tokens a round measured, {predicted:.2f} predicted from the longer "
        f"lengths' acceptance by position ({percent_text(measured / predicted - 1, sign=True)}): here acceptance at a position "
        "depends on the draft length, so the short lengths' predictions from one long run are not to be trusted"
        for o, measured, predicted in found)


def analyze(observations: Sequence[Observation], cost: CostModel | None = None, max_draft: int = 16,
            fit_draft: bool = True, use_positions: bool = True) -> Analysis:
    """Fit α to measured points and predict every draft length 1..K with measured costs.

    α is pooled over the points (weighted by their rounds); ``cost`` holds the costs measured for
    this setting (llama-bench at the run's depth, :meth:`CostModel.from_bench`); without it only α
    and the ceiling are known. ``fit_draft``: the draft's cost is fitted to the measured speedups
    (:meth:`CostModel.fitted_to`, over 3 or more draft lengths), the target's stays as timed. K is the larger of ``max_draft`` and the largest measured draft
    length. Each point's prediction uses the pooled α at the length that point drafted per round,
    or, where every point counted acceptance by position (and ``use_positions``), the pooled curve
    (:func:`pooled_positions`); then the one-α fit is made too (:attr:`Analysis.single_alpha`), and
    the draft's cost is fitted over any number of lengths.
    """
    obs = list(observations)
    if not obs:
        raise LlamaspecError("no measured points to fit", hint="run a speculative measurement first")
    if max_draft < 1:
        raise LlamaspecError(f"max_draft must be >= 1, got {max_draft}")
    programs = {o.profile for o in obs}
    if len(programs) > 1:
        raise LlamaspecError(f"the points come from different programs ({', '.join(sorted(p.name for p in programs))})",
                             hint="fit each program's points on their own")
    prog = obs[0].profile
    if cost is not None and cost.profile != prog:
        raise LlamaspecError(f"the costs are for {cost.profile.name} but the points for {prog.name}",
                             hint="build the cost model with the points' program")
    alpha = _pooled_alpha(obs)
    k_max = max(max_draft, *(o.draft_max for o in obs))
    positions = pooled_positions(obs) if use_positions else None
    tokens_at = tokens_model(alpha, positions)
    single = analyze(obs, cost, max_draft, fit_draft, use_positions=False) if positions is not None else None
    if cost is not None and fit_draft:
        cost = cost.fitted_to(obs, alpha, tokens_at if positions is not None else None)

    curve: tuple[Prediction, ...] = ()
    if cost is not None:
        curve = tuple(
            Prediction(
                draft_max=k,
                tokens_per_round=tokens_at(k),
                acceptance=(tokens_at(k) - 1.0) / k if positions is not None else acceptance(alpha, k),
                call_steps=cost.call_ms(k, tokens_at(k)) / cost.baseline_ms_per_token,
                speedup=cost.speedup_at(k, tokens_at(k)),
            )
            for k in range(1, k_max + 1)
        )

    points = []
    for o in obs:
        k = o.drafted_per_round
        predicted = predicted_ms = implied = None
        if cost is not None:
            predicted = cost.speedup_at(k, tokens_at(k))
            predicted_ms = cost.call_ms(k, tokens_at(k))
            steps = cost.profile.draft_steps_per_round(k)
            if steps > 0:
                # tokens · t_base / (steps·c·t_target + the rest) = measured, solved for c
                rest = predicted_ms - steps * cost.draft_ms_per_token
                implied = ((o.tokens_per_round * cost.baseline_ms_per_token / o.measured_speedup - rest)
                           / (steps * cost.target_ms_per_token))
        points.append(
            PointFit(
                draft_max=o.draft_max,
                acceptance=o.acceptance,
                alpha=o.alpha,
                calls=o.calls,
                calls_measured=o.rounds is not None,
                drafted_per_round=k,
                tokens_per_round=o.tokens_per_round,
                mean_accepted=o.tokens_per_round - 1.0,
                measured_speedup=o.measured_speedup,
                measured_call_ms=1000.0 * o.tokens_per_round / o.spec_decode_tps,
                predicted_speedup=predicted,
                predicted_call_ms=predicted_ms,
                implied_cost_ratio=implied,
                drafted_rounds=o.drafted_rounds,
            )
        )
    found = _contradiction_lines(contradictions(obs, alpha)) if positions is not None else ()
    return Analysis(alpha=alpha, points=tuple(points), cost=cost, curve=curve, profile=prog, positions=positions,
                    single_alpha=single, contradictions=found)

