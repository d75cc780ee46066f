"""Why no configuration reaches a target speedup, in the model's terms (:func:`explain_shortfall`)."""

from __future__ import annotations

import math
import statistics

from llamaspec.theory.cost import check_target, max_cost_ratio, required_alpha
from llamaspec.theory.fit import Analysis


def explain_shortfall(analysis: Analysis, target: float = 1.2) -> str | None:
    """Why no configuration reaches ``target``× speedup, in the model's terms; None if a point did.

    Names the draft's cost c, the verification and extra draft costs when measured, the best k the
    model predicts at the fitted α, and what it would take (the largest c at this α, the smallest α
    at this c). When the model predicts the target but no measurement reached it, says so and
    points at the unmodelled overhead (the implied c).
    """
    check_target(target)
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
