"""The speedup model of speculative decoding, fitted to measured llama.cpp counters and timings.

After Leviathan, Kalman & Matias (2023), "Fast Inference from Transformers via Speculative
Decoding". Each target call verifies a draft of ``k`` tokens. If every drafted token is accepted
independently with probability ``alpha`` (the paper's α) and acceptance stops at the first
rejection, one call yields

    E[accepted]      = α(1 - α^k) / (1 - α)            (mean accepted length)
    E[tokens / call] = (1 - α^(k+1)) / (1 - α)          (accepted + the target's own token)

and, with ``c`` the draft's cost per token in target steps, the paper's speedup is

    S(k) = (1 - α^(k+1)) / ((1 - α)(k·c + 1)).

Two measured refinements, both optional and used only when measured:

- **verification cost**: the paper assumes verifying ``k + 1`` tokens costs one target step. On
  CPUs a batch of ``k + 1`` costs more, so the call costs ``T_call(k) = (k + δ)·t_draft +
  t_verify(k)`` with ``t_verify(k) = a + b·k`` fitted to the measured points.
- **extra draft steps** ``δ``: llama-speculative also runs the draft on the target's last token
  each call (draft ``eval`` runs ≈ n_drafted + calls), a cost the paper does not count.

**llama.cpp's ``accept`` is not α.** llama-speculative prints ``accept = 100 * n_accept /
n_drafted``: the accepted share of *all drafted tokens*. Drafted tokens after the first rejection
are counted in n_drafted but can never be accepted, so with a fixed draft length ``k``

    accept = E[accepted] / k = α(1 - α^k) / ((1 - α)·k)  <  α   (for 0 < α < 1, k > 1).

E.g. α = 0.9 at k = 8 gives accept = 0.64. We solve this for α numerically
(:func:`alpha_from_accept_rate`), or, equivalently when the number of target calls is known, solve
tokens per call (:func:`alpha_from_tokens_per_call`). A fit (:func:`analyze`) uses the mean number
drafted per call, ``n_drafted / calls``, as ``k``: llama.cpp drafts fewer than ``--draft`` near
the end of generation, with ``--draft-p-min``, or (old builds) with an adaptive draft length.

Everything here is pure: frozen dataclasses in, frozen dataclasses out, LlamaspecError on bad input.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from llamaspec.errors import LlamaspecError

__all__ = [
    "Analysis",
    "CostModel",
    "Observation",
    "PointFit",
    "Prediction",
    "accept_rate",
    "alpha_from_accept_rate",
    "alpha_from_tokens_per_call",
    "analyze",
    "best_draft_length",
    "ceiling_speedup",
    "expected_accepted",
    "explain_shortfall",
    "max_cost_ratio",
    "paper_speedup",
    "required_alpha",
    "tokens_per_call",
]

_HINT_COUNTS = "check the counters parsed from llama-speculative's output (n_drafted, n_accept, n_predict)"
_HINT_TIMES = "check the timings parsed from llama.cpp's llama_perf/llama_print_timings blocks"
_BISECT_STEPS = 200


# ---------------------------------------------------------------------------------------------
# Closed forms
# ---------------------------------------------------------------------------------------------


def _check_alpha(alpha: float) -> None:
    if not (isinstance(alpha, (int, float)) and 0.0 <= alpha <= 1.0):
        raise LlamaspecError(f"acceptance rate alpha must be in [0, 1], got {alpha!r}")


def _check_k(k: float) -> None:
    if not (isinstance(k, (int, float)) and math.isfinite(k) and k >= 0):
        raise LlamaspecError(f"draft length must be a finite number >= 0, got {k!r}")


def expected_accepted(alpha: float, k: float) -> float:
    """Mean accepted draft tokens per target call: α(1 - α^k)/(1 - α); k at α = 1, 0 at α = 0.

    ``k`` may be fractional (a mean draft length); the formula is then an interpolation.
    """
    _check_alpha(alpha)
    _check_k(k)
    if alpha == 0.0 or k == 0:
        return 0.0
    if alpha == 1.0:
        return float(k)
    # -expm1(k log α) is 1 - α^k without cancellation when α is close to 1.
    return alpha * -math.expm1(k * math.log(alpha)) / (1.0 - alpha)


def tokens_per_call(alpha: float, k: float) -> float:
    """Mean tokens emitted per target call: (1 - α^(k+1))/(1 - α) = 1 + expected_accepted."""
    return 1.0 + expected_accepted(alpha, k)


def accept_rate(alpha: float, k: float) -> float:
    """What llama.cpp prints as ``accept`` (as a fraction) for per-token acceptance α at draft length k.

    n_accept / n_drafted = E[accepted] / k = α(1 - α^k)/((1 - α)k). Equals α only at k = 1.
    """
    _check_k(k)
    if k == 0:
        raise LlamaspecError("accept rate is undefined when nothing is drafted (k = 0)")
    return expected_accepted(alpha, k) / k


def _solve_increasing(f: Callable[[float], float], goal: float, lo: float, hi: float) -> float:
    """x in [lo, hi] with f(x) = goal, for f increasing (bisection; robust at the flat ends)."""
    for _ in range(_BISECT_STEPS):
        mid = 0.5 * (lo + hi)
        if mid in (lo, hi):
            break
        if f(mid) < goal:
            lo = mid
        else:
            hi = mid
    return 0.5 * (lo + hi)


def alpha_from_accept_rate(accept: float, k: float) -> float:
    """Invert :func:`accept_rate`: the α that makes n_accept/n_drafted = ``accept`` at draft length k.

    ``accept`` is a fraction (llama.cpp's percentage / 100). 0 gives 0, 1 gives 1.
    """
    _check_k(k)
    if k == 0:
        raise LlamaspecError("cannot infer alpha when nothing was drafted (k = 0)", hint=_HINT_COUNTS)
    if not (isinstance(accept, (int, float)) and 0.0 <= accept <= 1.0):
        raise LlamaspecError(f"accept rate must be a fraction in [0, 1], got {accept!r}", hint=_HINT_COUNTS)
    if accept in (0.0, 1.0):
        return float(accept)
    return _solve_increasing(lambda a: accept_rate(a, k), accept, 0.0, 1.0)


def alpha_from_tokens_per_call(tokens: float, k: float) -> float:
    """Invert :func:`tokens_per_call`: α from measured tokens per target call at draft length k.

    ``tokens`` must lie in [1, k + 1]: 1 means nothing accepted, k + 1 means everything.
    """
    _check_k(k)
    if k == 0:
        raise LlamaspecError("cannot infer alpha when nothing was drafted (k = 0)", hint=_HINT_COUNTS)
    if not (isinstance(tokens, (int, float)) and 1.0 <= tokens <= k + 1.0 + 1e-12):
        raise LlamaspecError(
            f"tokens per target call must be in [1, k + 1] = [1, {k + 1:g}], got {tokens!r}", hint=_HINT_COUNTS
        )
    if tokens <= 1.0:
        return 0.0
    if tokens >= k + 1.0:
        return 1.0
    return _solve_increasing(lambda a: tokens_per_call(a, k), tokens, 0.0, 1.0)


def paper_speedup(alpha: float, k: float, cost_ratio: float) -> float:
    """Leviathan et al.'s expected walltime improvement: (1 - α^(k+1)) / ((1 - α)(k·c + 1))."""
    if not (math.isfinite(cost_ratio) and cost_ratio >= 0):
        raise LlamaspecError(f"cost ratio c must be a finite number >= 0, got {cost_ratio!r}")
    return tokens_per_call(alpha, k) / (k * cost_ratio + 1.0)


def ceiling_speedup(alpha: float) -> float:
    """The k → ∞, c → 0 limit: 1/(1 - α) tokens per call, hence speedup (inf at α = 1)."""
    _check_alpha(alpha)
    return math.inf if alpha == 1.0 else 1.0 / (1.0 - alpha)


# ---------------------------------------------------------------------------------------------
# Cost model
# ---------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class CostModel:
    """Milliseconds per target call as a function of draft length k.

    ``T_call(k) = (k + extra_draft_steps)·draft_ms_per_token + verify_ms(k)``, where
    ``verify_ms(k) = verify_intercept_ms + verify_slope_ms·k`` when verification was measured, and one
    target step (the paper's assumption) when ``verify_intercept_ms`` is None.
    """

    target_ms_per_token: float
    draft_ms_per_token: float
    extra_draft_steps: float = 0.0
    verify_intercept_ms: float | None = None
    verify_slope_ms: float = 0.0

    def __post_init__(self) -> None:
        _positive("target_ms_per_token", self.target_ms_per_token)
        _non_negative("draft_ms_per_token", self.draft_ms_per_token)
        _non_negative("extra_draft_steps", self.extra_draft_steps)
        _non_negative("verify_slope_ms", self.verify_slope_ms)
        if self.verify_intercept_ms is not None:
            _non_negative("verify_intercept_ms", self.verify_intercept_ms)

    @property
    def cost_ratio(self) -> float:
        """The paper's c: one draft step in target steps."""
        return self.draft_ms_per_token / self.target_ms_per_token

    @property
    def verify_measured(self) -> bool:
        return self.verify_intercept_ms is not None

    def verify_ms(self, k: float) -> float:
        if self.verify_intercept_ms is None:
            return self.target_ms_per_token
        return self.verify_intercept_ms + self.verify_slope_ms * k

    def verify_steps(self, k: float) -> float:
        """Verification of k + 1 tokens, in target steps (1 in the paper)."""
        return self.verify_ms(k) / self.target_ms_per_token

    def call_ms(self, k: float) -> float:
        return (k + self.extra_draft_steps) * self.draft_ms_per_token + self.verify_ms(k)

    def speedup(self, alpha: float, k: float) -> float:
        """Predicted decode speedup over the target alone: tokens per call · t_target / T_call(k)."""
        call = self.call_ms(k)
        if call <= 0:
            return math.inf
        return tokens_per_call(alpha, k) * self.target_ms_per_token / call

    def with_cost_ratio(self, cost_ratio: float) -> CostModel:
        """The same model with the draft's per-token cost set to ``cost_ratio`` target steps."""
        return CostModel(
            target_ms_per_token=self.target_ms_per_token,
            draft_ms_per_token=cost_ratio * self.target_ms_per_token,
            extra_draft_steps=self.extra_draft_steps,
            verify_intercept_ms=self.verify_intercept_ms,
            verify_slope_ms=self.verify_slope_ms,
        )


def _check_target(target: float) -> None:
    if isinstance(target, bool) or not isinstance(target, (int, float)) or not (math.isfinite(target) and target > 0):
        raise LlamaspecError(f"target speedup must be a finite number > 0, got {target!r}")


def best_draft_length(alpha: float, cost: CostModel, max_draft: int = 16) -> tuple[int, float]:
    """The draft length in 1..max_draft with the highest predicted speedup (smallest k on ties)."""
    if max_draft < 1:
        raise LlamaspecError(f"max_draft must be >= 1, got {max_draft}")
    best_k, best_s = 1, cost.speedup(alpha, 1)
    for k in range(2, max_draft + 1):
        s = cost.speedup(alpha, k)
        if s > best_s * (1 + 1e-12):
            best_k, best_s = k, s
    return best_k, best_s


def required_alpha(cost: CostModel, target: float, max_draft: int = 16) -> float | None:
    """The smallest α at which some k in 1..max_draft reaches ``target``; None if even α = 1 cannot."""
    _check_target(target)
    if best_draft_length(1.0, cost, max_draft)[1] < target:
        return None
    if best_draft_length(0.0, cost, max_draft)[1] >= target:
        return 0.0
    return _solve_increasing(lambda a: best_draft_length(a, cost, max_draft)[1], target, 0.0, 1.0)


def max_cost_ratio(alpha: float, cost: CostModel, target: float, max_draft: int = 16) -> float | None:
    """The largest c (draft cost in target steps) at which α reaches ``target``; None if even c = 0 cannot."""

    def best_at(c: float) -> float:
        return best_draft_length(alpha, cost.with_cost_ratio(c), max_draft)[1]

    _check_target(target)
    if best_at(0.0) < target:
        return None
    hi = 1.0
    for _ in range(64):  # the speedup falls like 1/c, so a few doublings bracket it
        if best_at(hi) < target:
            break
        hi *= 2.0
    # best_at decreases in c: solve on -best_at, which increases.
    return _solve_increasing(lambda c: -best_at(c), -target, 0.0, hi)


# ---------------------------------------------------------------------------------------------
# Measured input
# ---------------------------------------------------------------------------------------------


def _positive(name: str, value: float) -> None:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) or value <= 0:
        raise LlamaspecError(f"{name} must be a finite number > 0, got {value!r}", hint=_HINT_TIMES)


def _non_negative(name: str, value: float) -> None:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) or value < 0:
        raise LlamaspecError(f"{name} must be a finite number >= 0, got {value!r}", hint=_HINT_TIMES)


def _count(name: str, value: int, minimum: int = 0) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        raise LlamaspecError(f"{name} must be an integer >= {minimum}, got {value!r}", hint=_HINT_COUNTS)


@dataclass(frozen=True)
class Observation:
    """One measured speculative run (or the pooled counters of its repeats) and its baseline.

    Where each field comes from in llama.cpp's output:

    - ``draft_max``: the requested draft length, ``--draft`` / ``--draft-max`` (k).
    - ``n_drafted``, ``n_accept``: llama-speculative's ``n_drafted =`` and ``n_accept =`` lines.
      Its ``accept = x%`` line is ``100 * n_accept / n_drafted`` (see :attr:`accept_rate`).
    - ``n_generated``: ``n_predict =`` (equal to the count in ``decoded N tokens in ...``).
    - ``spec_decode_tps``: the speculative run's ``decoded N tokens in T seconds, speed: X t/s``.
    - ``baseline_decode_tps``: decode t/s of the target alone on the same prompt and settings.
    - ``target_ms_per_token``: the baseline's target ``eval time = ... ms / N runs (X ms per token``;
      None falls back to ``1000 / baseline_decode_tps``.
    - ``draft_ms_per_token``: the draft block's ``eval time = ... (X ms per token``: one draft step.
      None means no cost can be modelled; acceptance is still fitted.
    - ``draft_runs``: N in the draft block's ``eval time = ... / N runs``. With the target-call
      count it gives the draft steps per call beyond the drafted tokens (llama-speculative also
      runs the draft on the target's token each call).
    - ``n_target_calls``: verification calls, if counted. llama.cpp does not print it, but every call
      emits its accepted drafts plus one target token, so None derives it as
      ``n_generated - n_accept`` (exact for llama-speculative-simple; llama-speculative counts the
      first token, sampled from the prompt, as one more call).
    - ``verify_ms_per_call``: target time spent verifying, per call. llama-speculative runs the
      target's verification batches through its ``prompt eval`` counters (single-token calls land in
      ``eval``): (target prompt eval ms - prompt encoding ms + target eval ms) / calls. None assumes
      the paper's one target step.
    """

    draft_max: int
    n_drafted: int
    n_accept: int
    n_generated: int
    spec_decode_tps: float
    baseline_decode_tps: float
    target_ms_per_token: float | None = None
    draft_ms_per_token: float | None = None
    draft_runs: int | None = None
    n_target_calls: int | None = None
    verify_ms_per_call: float | None = None

    def __post_init__(self) -> None:
        _count("draft_max", self.draft_max, minimum=1)
        _count("n_drafted", self.n_drafted)
        _count("n_accept", self.n_accept)
        _count("n_generated", self.n_generated, minimum=1)
        if self.n_accept > self.n_drafted:
            raise LlamaspecError(
                f"n_accept ({self.n_accept}) exceeds n_drafted ({self.n_drafted}): only drafted tokens can be accepted",
                hint=_HINT_COUNTS,
            )
        if self.n_accept >= self.n_generated:
            raise LlamaspecError(
                f"n_accept ({self.n_accept}) must be below n_generated ({self.n_generated}): "
                "every target call adds a token of its own",
                hint=_HINT_COUNTS,
            )
        if self.n_target_calls is not None:
            _count("n_target_calls", self.n_target_calls, minimum=1)
            if self.n_target_calls > self.n_generated:
                raise LlamaspecError(
                    f"n_target_calls ({self.n_target_calls}) exceeds n_generated ({self.n_generated})",
                    hint=_HINT_COUNTS,
                )
        if self.draft_runs is not None:
            _count("draft_runs", self.draft_runs)
        _positive("spec_decode_tps", self.spec_decode_tps)
        _positive("baseline_decode_tps", self.baseline_decode_tps)
        for name in ("target_ms_per_token", "draft_ms_per_token", "verify_ms_per_call"):
            value = getattr(self, name)
            if value is not None:
                _positive(name, value)

    @property
    def accept_rate(self) -> float | None:
        """llama.cpp's ``accept`` as a fraction (n_accept / n_drafted); None if nothing was drafted."""
        return self.n_accept / self.n_drafted if self.n_drafted else None

    @property
    def calls(self) -> int:
        """Target verification calls: counted, or derived as n_generated - n_accept."""
        return self.n_target_calls if self.n_target_calls is not None else self.n_generated - self.n_accept

    @property
    def drafted_per_call(self) -> float:
        """Mean tokens actually drafted per call (≤ draft_max unless the build adapts it)."""
        return self.n_drafted / self.calls

    @property
    def tokens_per_call(self) -> float:
        return self.n_generated / self.calls

    @property
    def target_ms(self) -> float:
        return self.target_ms_per_token if self.target_ms_per_token is not None else 1000.0 / self.baseline_decode_tps

    @property
    def measured_speedup(self) -> float:
        return self.spec_decode_tps / self.baseline_decode_tps

    @property
    def alpha(self) -> float | None:
        """This point's own α, from tokens per call at its mean drafted length; None if nothing drafted."""
        if self.n_drafted == 0:
            return None
        k = self.drafted_per_call
        return alpha_from_tokens_per_call(min(self.tokens_per_call, k + 1.0), k)


# ---------------------------------------------------------------------------------------------
# Fit
# ---------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class PointFit:
    """One observation next to what the pooled model predicts for it."""

    draft_max: int
    accept_rate: float | None  # llama.cpp's accept, as a fraction
    alpha: float | None  # this point's own α (None: nothing drafted)
    calls: int
    calls_measured: bool  # False: derived as n_generated - n_accept
    drafted_per_call: float  # the k the prediction uses
    tokens_per_call: float
    mean_accepted: float  # accepted drafts per call = tokens_per_call - 1
    measured_speedup: float
    measured_call_ms: float  # 1000 * tokens_per_call / spec_decode_tps
    predicted_speedup: float | None  # pooled α and cost model at drafted_per_call
    predicted_call_ms: float | None
    implied_cost_ratio: float | None  # the c that would make the prediction match the measurement

    @property
    def abs_error(self) -> float | None:
        """predicted - measured speedup."""
        return None if self.predicted_speedup is None else self.predicted_speedup - self.measured_speedup

    @property
    def rel_error(self) -> float | None:
        """(predicted - measured) / measured."""
        err = self.abs_error
        return None if err is None else err / self.measured_speedup


@dataclass(frozen=True)
class Prediction:
    draft_max: int
    tokens_per_call: float
    accept_rate: float  # what llama.cpp would print as accept, as a fraction
    call_steps: float  # cost of one call in target steps
    speedup: float


@dataclass(frozen=True)
class Analysis:
    """The model fitted to a set of observations (one model pair, one target setting)."""

    alpha: float  # pooled per-token acceptance rate
    points: tuple[PointFit, ...]
    cost: CostModel | None  # None without draft timings: no speedup predictions
    curve: tuple[Prediction, ...]  # k = 1..max_draft; empty without a cost model

    @property
    def tokens_per_call_ceiling(self) -> float:
        """1/(1 - α): tokens per call as k → ∞."""
        return ceiling_speedup(self.alpha)

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
    def best_measured(self) -> PointFit:
        return max(self.points, key=lambda p: p.measured_speedup)

    @property
    def speedup_curve(self) -> tuple[tuple[int, float], ...]:
        return tuple((p.draft_max, p.speedup) for p in self.curve)

    @property
    def accept_curve(self) -> tuple[tuple[int, float], ...]:
        """Predicted llama.cpp ``accept`` (fraction) per draft length, from the pooled α."""
        return tuple((p.draft_max, p.accept_rate) for p in self.curve)

    @property
    def max_draft(self) -> int:
        return len(self.curve)


def _pooled_alpha(observations: Sequence[Observation]) -> float:
    """α with Σ calls_i·E[accepted](α, k_i) = Σ n_accept_i over the points that drafted anything."""
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

    def accepted(a: float) -> float:
        return sum(o.calls * expected_accepted(a, o.drafted_per_call) for o in drafted)

    return _solve_increasing(accepted, goal, 0.0, 1.0)


def _fit_verify(observations: Sequence[Observation], target_ms: float) -> tuple[float | None, float]:
    """(intercept, slope) of verify ms per call against drafted tokens per call.

    Least squares when at least two distinct draft lengths were measured; with one, a line through it
    and (0, one target step), since verifying one token is an ordinary decode step. A negative slope
    (noise) falls back to the mean; a negative intercept to a line through the origin.
    """
    pts = [(o.drafted_per_call, o.verify_ms_per_call) for o in observations if o.verify_ms_per_call is not None]
    if not pts:
        return None, 0.0
    xs = [x for x, _ in pts]
    ys = [y for _, y in pts]
    if len({round(x, 9) for x in xs}) < 2:
        x, y = statistics.fmean(xs), statistics.fmean(ys)
        slope = (y - target_ms) / x if x > 0 else 0.0
        return (target_ms, slope) if slope >= 0 else (y, 0.0)
    mx, my = statistics.fmean(xs), statistics.fmean(ys)
    slope = sum((x - mx) * (y - my) for x, y in pts) / sum((x - mx) ** 2 for x in xs)
    intercept = my - slope * mx
    if slope < 0:
        return my, 0.0
    if intercept < 0:
        return 0.0, sum(x * y for x, y in pts) / sum(x * x for x in xs)
    return intercept, slope


def _fit_cost(observations: Sequence[Observation]) -> CostModel | None:
    draft_ms = [o.draft_ms_per_token for o in observations if o.draft_ms_per_token is not None]
    if not draft_ms:
        return None
    target_ms = statistics.median(o.target_ms for o in observations)
    extra = [max(0.0, o.draft_runs / o.calls - o.drafted_per_call) for o in observations if o.draft_runs is not None]
    intercept, slope = _fit_verify(observations, target_ms)
    return CostModel(
        target_ms_per_token=target_ms,
        draft_ms_per_token=statistics.median(draft_ms),
        extra_draft_steps=statistics.median(extra) if extra else 0.0,
        verify_intercept_ms=intercept,
        verify_slope_ms=slope,
    )


def analyze(observations: Sequence[Observation], max_draft: int = 16) -> Analysis:
    """Fit α and the cost model to measured points; predict every draft length 1..K.

    K is the larger of ``max_draft`` and the largest measured draft length. The pooled α weights
    points by their calls; timings are pooled by median (one model pair, one target setting: mix
    settings and the fit means nothing). Each point's prediction uses the pooled model at the
    draft length that point actually drafted per call, so the curve and the points are compared
    like for like.
    """
    obs = list(observations)
    if not obs:
        raise LlamaspecError("no measured points to fit", hint="run a speculative measurement first")
    if max_draft < 1:
        raise LlamaspecError(f"max_draft must be >= 1, got {max_draft}")
    alpha = _pooled_alpha(obs)
    cost = _fit_cost(obs)
    k_max = max(max_draft, *(o.draft_max for o in obs))

    curve: tuple[Prediction, ...] = ()
    if cost is not None:
        curve = tuple(
            Prediction(
                draft_max=k,
                tokens_per_call=tokens_per_call(alpha, k),
                accept_rate=accept_rate(alpha, k),
                call_steps=cost.call_ms(k) / cost.target_ms_per_token,
                speedup=cost.speedup(alpha, k),
            )
            for k in range(1, k_max + 1)
        )

    points = []
    for o in obs:
        k = o.drafted_per_call
        predicted = predicted_ms = implied = None
        if cost is not None:
            predicted = cost.speedup(alpha, k)
            predicted_ms = cost.call_ms(k)
            draft_steps = k + cost.extra_draft_steps
            if draft_steps > 0:
                # tokens·t_target / ((k + δ)·c·t_target + t_verify) = measured, solved for c
                implied = (o.tokens_per_call / o.measured_speedup - cost.verify_steps(k)) / draft_steps
        points.append(
            PointFit(
                draft_max=o.draft_max,
                accept_rate=o.accept_rate,
                alpha=o.alpha,
                calls=o.calls,
                calls_measured=o.n_target_calls is not None,
                drafted_per_call=k,
                tokens_per_call=o.tokens_per_call,
                mean_accepted=o.tokens_per_call - 1.0,
                measured_speedup=o.measured_speedup,
                measured_call_ms=1000.0 * o.tokens_per_call / o.spec_decode_tps,
                predicted_speedup=predicted,
                predicted_call_ms=predicted_ms,
                implied_cost_ratio=implied,
            )
        )
    return Analysis(alpha=alpha, points=tuple(points), cost=cost, curve=curve)


# ---------------------------------------------------------------------------------------------
# Explanation
# ---------------------------------------------------------------------------------------------


def explain_shortfall(analysis: Analysis, target: float = 1.2) -> str | None:
    """Why no configuration reaches ``target``× speedup, in the model's terms; None if a point did.

    Names the draft's cost c, the verification and extra draft costs when measured, the best k the
    model predicts at the fitted α, and what it would take (the largest c at this α, the smallest α
    at this c). When the model predicts the target but no measurement reached it, says so and
    points at the unmodelled overhead (the implied c).
    """
    _check_target(target)
    measured = analysis.best_measured
    if measured.measured_speedup >= target:
        return None
    a = analysis.alpha
    head = (
        f"Best measured: {measured.measured_speedup:.2f}× at draft {measured.draft_max} "
        f"(target {target:.2f}×; α={_alpha(a)}, accept {_pct(measured.accept_rate)})."
    )
    cost = analysis.cost
    best = analysis.best
    if cost is None or best is None:
        ceiling = analysis.ceiling_speedup
        if ceiling < target:
            return (
                f"{head} Even a free draft and unlimited draft length cannot reach {target:.2f}×: "
                f"at α={_alpha(a)} a call yields at most 1/(1-α) = {ceiling:.2f} tokens."
            )
        return (
            f"{head} Without draft timings the model can only bound it: a free draft would reach at most "
            f"{_times(ceiling)} (1/(1-α)); measure the draft's eval time to see what its cost allows."
        )

    c = cost.cost_ratio
    costs = f"the draft costs {c:.2f} of a target step"
    if cost.extra_draft_steps > 0.05:
        costs += f" and runs {cost.extra_draft_steps:.1f} extra step(s) per call"
    if cost.verify_measured:
        costs += f"; verifying {best.draft_max + 1} tokens costs {cost.verify_steps(best.draft_max):.2f} target steps"
    k_max = analysis.max_draft
    if best.speedup < target:
        text = f"{head} {costs[0].upper()}{costs[1:]}; even at α={_alpha(a)} the best k={best.draft_max} predicts {best.speedup:.2f}×."
        c_needed = max_cost_ratio(a, cost, target, k_max)
        a_needed = required_alpha(cost, target, k_max)
        if c_needed is not None and a_needed is not None:
            text += (
                f" Reaching {target:.2f}× would need a draft costing at most {c_needed:.2f} of a target step "
                f"at this α, or α ≥ {_alpha(a_needed)} at this cost."
            )
        elif c_needed is not None:
            text += (
                f" Reaching {target:.2f}× would need a draft costing at most {c_needed:.2f} of a target step; "
                "no acceptance rate is enough at this cost."
            )
        elif a_needed is not None:
            text += (
                f" Reaching {target:.2f}× would need α ≥ {_alpha(a_needed)}; not even a free draft is enough at this α."
            )
        else:
            text += (
                f" Neither a free draft (c=0) nor perfect acceptance (α=1) reaches {target:.2f}× "
                "with this verification cost."
            )
        return text

    text = (
        f"{head} The model predicts {best.speedup:.2f}× at k={best.draft_max} ({costs}), "
        f"but no measurement reached {target:.2f}×."
    )
    if not any(p.draft_max == best.draft_max for p in analysis.points):
        text += f" Draft length {best.draft_max} was not measured: measure it."
    implied = [p.implied_cost_ratio for p in analysis.points if p.implied_cost_ratio is not None]
    if implied:
        text += (
            f" The measurements behave as if the draft cost {statistics.median(implied):.2f} of a target step "
            f"instead of {c:.2f}: overhead the model does not see (sampling, draft batches, synchronisation)."
        )
    return text


def _alpha(alpha: float) -> str:
    # 0.996 must not print as 1.00: α = 1 means "every draft accepted", a different claim.
    if alpha < 0.99 or alpha == 1.0:
        return f"{alpha:.2f}"
    return f"{alpha:.4f}" if alpha < 0.99995 else "0.9999+"


def _pct(fraction: float | None) -> str:
    return "n/a" if fraction is None else f"{100 * fraction:.1f}%"


def _times(x: float) -> str:
    return "unbounded" if math.isinf(x) else f"{x:.2f}×"
