"""The closed forms of Leviathan, Kalman & Matias's model (one per-token acceptance α) and their inverses.

Pure functions of α, the draft length ``k`` and the draft's cost ratio ``c``; the checks every part
of the model shares on its inputs (:func:`positive`, :func:`non_negative`, :func:`count`).
"""

from __future__ import annotations

import math
from collections.abc import Callable

from llamaspec.base.errors import LlamaspecError

HINT_COUNTS = "check the counters parsed from the speculative program's output (n_drafted, n_accept, n_predict)"
HINT_TIMES = "check the timings measured with llama-bench (target batches and the draft's step) for this run"
_BISECT_STEPS = 200



def _check_alpha(alpha: float) -> None:
    if not (isinstance(alpha, (int, float)) and 0.0 <= alpha <= 1.0):
        raise LlamaspecError(f"acceptance rate alpha must be in [0, 1], got {alpha!r}")


def _check_k(k: float) -> None:
    if not (isinstance(k, (int, float)) and math.isfinite(k) and k >= 0):
        raise LlamaspecError(f"draft length must be a finite number >= 0, got {k!r}")


def expected_accepted(alpha: float, k: float) -> float:
    """Mean accepted draft tokens per round (one target call): α(1 - α^k)/(1 - α); k at α = 1, 0 at α = 0.

    ``k`` may be fractional (a mean draft length); the formula is then an interpolation.
    """
    _check_alpha(alpha)
    _check_k(k)
    return accepted_unchecked(alpha, k)


def accepted_unchecked(alpha: float, k: float) -> float:
    """:func:`expected_accepted` for arguments already checked (a bisection asks it thousands of times)."""
    if alpha == 0.0 or k == 0:
        return 0.0
    if alpha == 1.0:
        return float(k)
    # -expm1(k log α) is 1 - α^k without cancellation when α is close to 1.
    return alpha * -math.expm1(k * math.log(alpha)) / (1.0 - alpha)


def expected_tokens_per_round(alpha: float, k: float) -> float:
    """Mean tokens a round (one target call) emits, as the model expects them at per-token acceptance α
    and draft length k: (1 - α^(k+1))/(1 - α) = 1 + expected_accepted. (Measured from a run's counters:
    ``llamaspec.measure.contract.tokens_per_round``.)"""
    return 1.0 + expected_accepted(alpha, k)


def acceptance(alpha: float, k: float) -> float:
    """What llama.cpp prints as ``accept`` (as a fraction) for per-token acceptance α at draft length k.

    n_accept / n_drafted = E[accepted] / k = α(1 - α^k)/((1 - α)k). Equals α only at k = 1.
    """
    _check_k(k)
    if k == 0:
        raise LlamaspecError("accept rate is undefined when nothing is drafted (k = 0)")
    return expected_accepted(alpha, k) / k


def solve_increasing(f: Callable[[float], float], goal: float, lo: float, hi: float) -> float:
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


def alpha_from_acceptance(accept: float, k: float) -> float:
    """Invert :func:`acceptance`: the α that makes n_accept/n_drafted = ``accept`` at draft length k.

    ``accept`` is a fraction (llama.cpp's percentage / 100). 0 gives 0, 1 gives 1.
    """
    _check_k(k)
    if k == 0:
        raise LlamaspecError("cannot infer alpha when nothing was drafted (k = 0)", hint=HINT_COUNTS)
    if not (isinstance(accept, (int, float)) and 0.0 <= accept <= 1.0):
        raise LlamaspecError(f"accept rate must be a fraction in [0, 1], got {accept!r}", hint=HINT_COUNTS)
    if accept in (0.0, 1.0):
        return float(accept)
    return solve_increasing(lambda a: acceptance(a, k), accept, 0.0, 1.0)


def alpha_from_tokens_per_round(tokens: float, k: float) -> float:
    """Invert :func:`expected_tokens_per_round`: α from measured tokens per round at draft length k.

    ``tokens`` must lie in [1, k + 1]: 1 means nothing accepted, k + 1 means everything.
    """
    _check_k(k)
    if k == 0:
        raise LlamaspecError("cannot infer alpha when nothing was drafted (k = 0)", hint=HINT_COUNTS)
    if not (isinstance(tokens, (int, float)) and 1.0 <= tokens <= k + 1.0 + 1e-12):
        raise LlamaspecError(
            f"tokens per round must be in [1, k + 1] = [1, {k + 1:g}], got {tokens!r}", hint=HINT_COUNTS
        )
    if tokens <= 1.0:
        return 0.0
    if tokens >= k + 1.0:
        return 1.0
    return solve_increasing(lambda a: 1.0 + accepted_unchecked(a, k), tokens, 0.0, 1.0)


def paper_speedup(alpha: float, k: float, cost_ratio: float) -> float:
    """Leviathan et al.'s expected walltime improvement: (1 - α^(k+1)) / ((1 - α)(k·c + 1))."""
    if not (math.isfinite(cost_ratio) and cost_ratio >= 0):
        raise LlamaspecError(f"cost ratio c must be a finite number >= 0, got {cost_ratio!r}")
    return expected_tokens_per_round(alpha, k) / (k * cost_ratio + 1.0)


def ceiling_speedup(alpha: float) -> float:
    """The k → ∞, c → 0 limit: 1/(1 - α) tokens per round, hence speedup (inf at α = 1)."""
    _check_alpha(alpha)
    return math.inf if alpha == 1.0 else 1.0 / (1.0 - alpha)



def positive(name: str, value: float) -> None:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) or value <= 0:
        raise LlamaspecError(f"{name} must be a finite number > 0, got {value!r}", hint=HINT_TIMES)



def non_negative(name: str, value: float) -> None:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) or value < 0:
        raise LlamaspecError(f"{name} must be a finite number >= 0, got {value!r}", hint=HINT_TIMES)



def count(name: str, value: int, minimum: int = 0) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        raise LlamaspecError(f"{name} must be an integer >= {minimum}, got {value!r}", hint=HINT_COUNTS)

