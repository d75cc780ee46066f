"""The one decision rule: which setting to recommend, how sure that is, and what to measure next.

Studies, sweeps and runs all end here. Pure: measured intervals (and, where a speedup model
was fitted, its predicted band) in, a frozen :class:`Decision` out; no I/O, no engine.

The rule, in order:

1. **Shown faster, or not at all.** A setting is *shown faster* when its chance of a gain is at
   least :data:`GAIN_CHANCE` (92.5 % over prompts, 97.5 % over one prompt's pairs): the chance
   that its speedup on prompts like these is above 1.0, read from its 95 % interval as a normal
   on the log scale (:func:`chance_of_loss`; at 97.5 % it is the interval lying above 1.0). A setting not shown faster is never recommended while another
   one is. When none is: "no draft" (nothing could be a gain worth having: every interval ends
   below ``1 +`` :data:`TOLERANCE`, or is already narrow) or "undecided" (some interval is too wide to
   tell), naming the settings to measure next; either way the best bet is named with its chance
   of a loss and, undecided, the prompts (pairs) in all that would show its gain
   (:attr:`Decision.prompts_to_settle`).
2. **Ranked by what was measured.** Each candidate's estimate is its own measured median; the
   speedup model (fitted to every point, its band from a bootstrap over pairs) says where to
   measure next and what an unmeasured or once-measured setting could reach. Pooling the two
   (:func:`estimate` with ``pooled``) would narrow the interval, but its 95 % interval held the
   recorded truth too rarely (docs/method.md, "the decision"), so the rule does not decide on it.
   Where a measurement and the model disagree beyond the model's error, the decision says so.
3. **Cheaper only when as good.** Among the settings shown faster, the cheapest one (shorter
   draft, smaller draft file) shown within :data:`TOLERANCE` (2 %) of the best estimate wins: its gap
   plus one standard error of the difference is within it. Overlapping intervals alone never make
   a setting "as good", nor do two close medians that are each uncertain by more than the gap.
4. **Settled, or what next.** The decision is settled when the chosen setting's interval is within
   :data:`HALF_WIDTH` (+-5 %) and no other setting (measured, or unmeasured where the model points)
   could beat it by more than the tolerance. Otherwise :attr:`Decision.requests` names the
   contenders and how many more pairs each needs.

Its size: the rule's four steps and its types, each reading the one before it. The replays that
set its constants are in docs/method.md and docs/results.md (benchmarks/decide.py).
"""

from __future__ import annotations

import dataclasses
import math
import statistics
from collections.abc import Hashable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from llamaspec.base import stats
from llamaspec.base.stats import Z975, Spread, percent_text
from llamaspec.measure import estimators

TOLERANCE = 0.02  # a cheaper setting wins only within 2 % of the best estimate
HALF_WIDTH = 0.05  # settled: the chosen setting's interval within +-5 %
STEP = 3  # at most this many more pairs per request (then decide again)
# Settled needs this many pairs at the chosen setting: the bootstrap interval of a median of 2 or 3
# ratios is about their range, which two close ratios make look sure (1.22x [1.22-1.23] from 2 pairs,
# seen on the demo's sweep); of 5 it covers the median about 94 % of the time.
SETTLE_PAIRS = 5
MAX_REQUESTS = 3  # contenders measured per step
# Shown faster: a chance of a gain of at least this, by what an interval's n counts: over prompts as
# the built-in workload's replays set it (docs/method.md); over pairs (one prompt), the interval
# lying above 1.0.
GAIN_CHANCE = {"prompts": 0.925, "pairs": 0.975}
SETTLE_ODDS = 0.8  # Decision.prompts_to_settle: the prompts in all for these odds of showing the best bet's gain
_Z = 1.96  # a 95 % interval spans about 2 x 1.96 standard errors
MAD_TO_SD = 1.4826
VERDICTS = ("recommend", "no draft", "undecided", "nothing")


@dataclass(frozen=True)
class Candidate:
    """One measured setting: its paired speedup (median of per-pair ratios, 95 % interval; the
    ratios are ``speedup.values``) and its cost, compared as a tuple (smaller is cheaper: draft
    length, then draft file size)."""

    key: Hashable  # identifies the setting (a draft length, or (group, draft length))
    label: str  # how the output names it: "draft 4"
    speedup: Spread
    cost: tuple[float, ...] = ()


@dataclass(frozen=True)
class Band:
    """The speedup model's prediction at one setting, with its bootstrap interval over pairs."""

    key: Hashable
    label: str
    predicted: float
    low: float
    high: float
    cost: tuple[float, ...] = ()


@dataclass(frozen=True)
class ModelView:
    """What the speedup model says about a group of settings: its band at every setting it can
    predict (measured or not), its best setting with the range of best settings over the
    bootstrap, and its own error (median |predicted - measured| / measured over the points)."""

    bands: tuple[Band, ...]
    best: Hashable
    best_range: tuple[Hashable, ...]  # the best setting of each bootstrap refit, distinct, in order
    error: float

    def band(self, key: Hashable) -> Band | None:
        return next((b for b in self.bands if b.key == key), None)


@dataclass(frozen=True)
class Estimate:
    """A candidate ranked: its measured interval, the model's band there, the combined estimate."""

    key: Hashable
    label: str
    measured: Spread
    cost: tuple[float, ...]
    estimate: float
    band: Band | None = None
    disagrees: bool = False  # measured and predicted differ beyond the model's own error
    upper: float | None = None  # the estimate's own 95 % upper bound (None: the measured interval's)
    gain_chance: float = GAIN_CHANCE["pairs"]  # the rule's bar: shown faster at this chance of a gain or more

    @property
    def high(self) -> float:
        """How fast this setting could plausibly be, by everything known about it: unbounded for a
        setting measured once that the model does not bound (one prompt, or one pair, says nothing of
        how far the next may lie)."""
        if self.upper is not None:
            return self.upper
        return self.measured.high if self.measured.n >= 2 else math.inf

    @property
    def sd(self) -> float:
        """The estimate's standard error (from its own 95 % bound, or the measured interval)."""
        if self.upper is not None:
            return (self.upper - self.estimate) / _Z
        return _sd(self.measured.low, self.measured.high) if self.measured.n >= 2 else math.inf

    @property
    def chance_of_loss(self) -> float | None:
        """The chance that this setting is a loss on prompts like these (:func:`chance_of_loss`)."""
        return chance_of_loss(self.measured)

    @property
    def shown_faster(self) -> bool:
        loss = self.chance_of_loss
        return loss is not None and 1.0 - loss >= self.gain_chance

    def to_dict(self) -> dict[str, Any]:
        return {"key": _jsonable(self.key), "label": self.label, "measured": self.measured.to_dict(),
                "cost": list(self.cost), "estimate": self.estimate, "could_reach": None if math.isinf(self.high) else self.high,
                "shown_faster": self.shown_faster, "chance_of_loss": self.chance_of_loss,
                "predicted": {"median": self.band.predicted, "low": self.band.low, "high": self.band.high}
                if self.band else None, "disagrees": self.disagrees}


@dataclass(frozen=True)
class Request:
    """Measure ``pairs`` more of this setting (it may not have been measured yet): pairs, or, where
    the estimate rests on prompts (``unit`` "prompts"), prompts."""

    key: Hashable
    label: str
    pairs: int
    why: str
    unit: str = "pairs"

    def text(self) -> str:
        return f"{self.label}: {self.pairs} more {_unit(self.unit, self.pairs)} ({self.why})"

    def to_dict(self) -> dict[str, Any]:
        return {"key": _jsonable(self.key), "label": self.label, "pairs": self.pairs, "unit": self.unit, "why": self.why}


def _unit(unit: str, n: int) -> str:
    """``pairs``/``prompts`` in the number ``n`` asks for."""
    return unit if n != 1 else unit.removesuffix("s")


@dataclass(frozen=True)
class Decision:
    verdict: str  # of VERDICTS
    chosen: Estimate | None  # the recommended setting (verdict "recommend"), else the best measured
    reason: str
    settled: bool
    contenders: tuple[Estimate, ...] = ()  # settings that could still be the answer (chosen first)
    requests: tuple[Request, ...] = ()
    estimates: tuple[Estimate, ...] = ()  # every candidate, best estimate first
    models: tuple[ModelView, ...] = ()
    notes: tuple[str, ...] = ()  # where the model and a measurement disagree
    tolerance: float = TOLERANCE
    half_width: float = HALF_WIDTH
    unit: str = "pairs"  # what an interval's n counts: pairs, or prompts (an estimate over prompts)

    @property
    def interval(self) -> Spread | None:
        return self.chosen.measured if self.chosen else None

    @property
    def sureness(self) -> str:
        """How sure the decision is, in a few words."""
        if self.verdict == "nothing":
            return "nothing measured to decide on"
        if self.settled:
            if self.verdict == "recommend":
                n = self.chosen.measured.n if self.chosen else 0
                return (f"settled: interval within +-{percent_text(self.half_width)} over {n} {_unit(self.unit, n)}, and no other "
                        f"setting can beat it by more than {percent_text(self.tolerance)}")
            return "settled: no setting can be a gain of more than " + percent_text(self.tolerance)
        return "not settled: " + "; ".join(r.text() for r in self.requests) if self.requests else "not settled"

    @property
    def best_bet(self) -> Estimate | None:
        """Where nothing is recommended: the setting with the best estimate, if it reads above 1.0."""
        c = self.chosen
        return c if self.verdict in ("undecided", "no draft") and c is not None and c.measured.median > 1.0 else None

    @property
    def chance_of_loss(self) -> float | None:
        """The chance that the recommended setting, or the best bet, is a loss on prompts like these."""
        return self.chosen.chance_of_loss if self.chosen is not None and self.verdict != "nothing" else None

    def prompts_to_show(self, odds: float) -> int | None:
        """Undecided: the prompts (pairs) in all that would give these ``odds`` of showing the best
        bet's gain, if its estimate and the spread between its prompts held (:func:`units_to_show`)."""
        c = self.chosen
        if self.verdict != "undecided" or c is None:
            return None
        return units_to_show(c.measured, odds, c.gain_chance, over_prompts=self.unit == "prompts")

    @property
    def prompts_to_settle(self) -> int | None:
        """Undecided: the prompts (pairs) in all for :data:`SETTLE_ODDS` of showing the best bet's gain."""
        return self.prompts_to_show(SETTLE_ODDS)

    @property
    def to_tell(self) -> str | None:
        """Undecided, the best reading above 1.0: about how many prompts (pairs) in all would show its
        gain at even odds and at :data:`SETTLE_ODDS`, if its estimate and spread held: what a budget
        would have to buy, said in numbers rather than "more"."""
        c = self.chosen
        even, settle = self.prompts_to_show(0.5), self.prompts_to_settle
        if c is None or even is None or settle is None:
            return None
        return (f"about {even} {_unit(self.unit, even)} in all (now {c.measured.n}) for even odds, {settle} for "
                f"{percent_text(SETTLE_ODDS)} odds, of showing {c.label}'s {c.measured.median:.2f}x a gain, if it and its "
                "spread held")

    def lines(self) -> list[str]:
        """The decision as the study reports print it."""
        c = self.chosen
        if self.verdict == "recommend" and c is not None:
            head = f"recommended: {c.label} -> {c.measured.text(suffix='x')}"
        elif self.verdict == "no draft":
            head = "recommended: no draft (measured no gain)"
        elif self.verdict == "undecided":
            head = "undecided: the intervals are too wide"
        else:
            head = "recommended: nothing"
        out = [head, f"  why: {self.reason}", f"  how sure: {self.sureness}"]
        bet, loss = self.best_bet, self.chance_of_loss
        if bet is not None and loss is not None:
            out.append(f"  best bet: {bet.label} {bet.measured.text(suffix='x')}, a loss on prompts like these with a "
                       f"chance of {chance_text(loss)}")
        out += [f"  to tell: {t}"] if (t := self.to_tell) else []
        out += [f"  note: {n}" for n in self.notes]
        for m in self.models:
            best = m.band(m.best)
            if best is not None:
                spread = (f" (bootstrap: {', '.join(b.label.replace('draft ', '') for b in m.bands if b.key in m.best_range)})"
                          if len(m.best_range) > 1 else "")
                # a band the bootstrap over pairs cannot widen (one pair a point) is not shown as an interval
                band = f" [{best.low:.2f}-{best.high:.2f}]" if f"{best.low:.2f}" != f"{best.high:.2f}" else ""
                out.append(f"  model: best {best.label} {best.predicted:.2f}x{band}{spread}, its median error {percent_text(m.error, 1)}")
        return out

    def to_dict(self) -> dict[str, Any]:
        return {
            "verdict": self.verdict, "chosen": self.chosen.to_dict() if self.chosen else None,
            "interval": self.interval.to_dict() if self.interval else None, "reason": self.reason,
            "settled": self.settled, "how_sure": self.sureness, "to_tell": self.to_tell, "chance_of_loss": self.chance_of_loss,
            "prompts_to_settle": self.prompts_to_settle, "prompts_for_even_odds": self.prompts_to_show(0.5),
            "tolerance": self.tolerance,
            "half_width": self.half_width, "unit": self.unit, "contenders": [e.label for e in self.contenders],
            "measure_next": [r.to_dict() for r in self.requests], "notes": list(self.notes),
            "estimates": [e.to_dict() for e in self.estimates],
            "models": [{"best": _jsonable(m.best), "best_range": [_jsonable(k) for k in m.best_range], "error": m.error,
                        "bands": [{"key": _jsonable(b.key), "label": b.label, "predicted": b.predicted, "low": b.low,
                                   "high": b.high} for b in m.bands]} for m in self.models],
        }


def _jsonable(key: Hashable) -> Any:
    if dataclasses.is_dataclass(key) and not isinstance(key, type):
        return dataclasses.asdict(key)
    if isinstance(key, tuple):
        return [_jsonable(k) for k in key]
    return key if key is None or isinstance(key, (str, int, float, bool)) else str(key)


def _sd(low: float, high: float) -> float:
    return (high - low) / (2 * _Z)


def chance_of_loss(s: Spread) -> float | None:
    """The chance that the speedup ``s`` estimates is below 1.0, on prompts (pairs) like those it
    rests on: its 95 % interval read as a normal on the log scale, its standard error the lower
    half-width over 1.96 (the interval's own t, where it has one, stays in: a few prompts make it
    less sure). None without an interval (``n`` below 2)."""
    if s.n < 2 or s.median <= 0:
        return None
    gain = math.log(s.median)
    se = (gain - math.log(s.low)) / Z975 if 0 < s.low < s.median else 0.0
    if se <= 0:  # an interval with no width below its median (ratios that all agree): no doubt either way
        return 0.0 if gain > 0 else 1.0 if gain < 0 else 0.5
    return statistics.NormalDist().cdf(-gain / se)


def chance_text(p: float) -> str:
    """A chance in words: ``7.5%``, ``<0.1%``, ``>99.9%`` (a chance is never quite 0 or 1)."""
    return "<0.1%" if p < 0.0005 else ">99.9%" if p > 0.9995 else percent_text(p, 1)


_MOST_UNITS = 100_000  # a projection past this many prompts (pairs) says None: no budget buys it


def units_to_show(s: Spread, odds: float, gain_chance: float = GAIN_CHANCE["prompts"], *,
                  over_prompts: bool = True) -> int | None:
    """The prompts (pairs) in all at which the rule would show ``s``'s gain with these ``odds``,
    if its estimate held and so did the spread between its prompts (pairs): its standard error
    (:func:`llamaspec.measure.estimators.log_standard_error`) times sqrt(n) per prompt. At n'
    prompts the estimate falls about the truth with that spread over sqrt(n'), and the rule asks
    for it to clear ``gain_chance`` by the interval it would report there (Student's t at n' - 1
    over prompts); the odds are the chance it does. None where ``s`` reads no gain or has no
    interval, or past 100,000."""
    se = estimators.log_standard_error(s, over_prompts)
    if se is None or se <= 0 or s.median <= 1.0 or not 0 < odds < 1:
        return None
    gain, spread, normal = math.log(s.median), se * math.sqrt(s.n), statistics.NormalDist()
    bar, want = normal.inv_cdf(gain_chance), normal.inv_cdf(odds)

    def shows(n: int) -> bool:
        widen = stats.t975(n - 1) / Z975 if over_prompts else 1.0
        return gain / (spread / math.sqrt(n)) - bar * widen >= want

    n = max(2, math.ceil((max(0.0, bar + want) * spread / gain) ** 2))  # the normal's answer: no more than needed
    while not shows(n):
        n += 1
        if n > _MOST_UNITS:
            return None
    return n


def estimate(c: Candidate, models: Sequence[ModelView] = (), pooled: bool = False) -> Estimate:
    """The candidate's estimate: its measured median (a setting measured once could reach the
    model's band, widened by the model's error), or with ``pooled`` the
    median combined with the model's prediction (precision weighted); the measurement alone
    where the model has no band or disagrees with it."""
    band = next((b for m in models if (b := m.band(c.key)) is not None), None)
    m = c.speedup
    if band is None:
        return Estimate(c.key, c.label, m, c.cost, m.median)
    error = _error_of(c.key, models)
    # The model's own error widens its band before it is compared.
    p_low, p_high = band.low - error * band.predicted, band.high + error * band.predicted
    if m.n >= 2 and (m.high < p_low or m.low > p_high):
        return Estimate(c.key, c.label, m, c.cost, m.median, band, disagrees=True)
    if not pooled:
        return Estimate(c.key, c.label, m, c.cost, m.median, band,
                        upper=None if m.n >= 2 else max(p_high, m.median))
    # Weighed, the model counts with its band's spread and its typical miss: the median absolute
    # error is 0.67 standard deviations of a normal error.
    var_p = _sd(band.low, band.high) ** 2 + (MAD_TO_SD * error * band.predicted) ** 2
    var_m = _sd(m.low, m.high) ** 2 if m.n >= 2 else math.inf
    if var_m == 0:
        return Estimate(c.key, c.label, m, c.cost, m.median, band)
    if math.isinf(var_m):
        value, var = band.predicted, var_p
    elif var_p == 0:
        value, var = band.predicted, 0.0
    else:
        var = 1 / (1 / var_m + 1 / var_p)
        value = (m.median / var_m + band.predicted / var_p) * var
    return Estimate(c.key, c.label, m, c.cost, value, band, upper=value + _Z * math.sqrt(var))


def pairs_needed(s: Spread) -> int:
    """More pairs for this interval to reach +-:data:`HALF_WIDTH` (the width shrinks like 1/sqrt(n)),
    at least 1 and at most :data:`STEP` (then the decision is made again)."""
    if s.n < 2 or s.median <= 0:
        return STEP
    need = math.ceil(s.n * (s.half_width / HALF_WIDTH) ** 2) - s.n
    return max(1, min(STEP, need))


def decide(candidates: Sequence[Candidate], models: Sequence[ModelView] = (), *, unit: str = "pairs",
           gain_chance: float | None = None) -> Decision:
    """The decision over these measured settings (see the module's docstring for the rule;
    ``gain_chance``: the chance of a gain that shows a setting faster, None: :data:`GAIN_CHANCE` for the unit).

    ``candidates``: the settings that may be recommended (finished, output unchanged); ``models``:
    the speedup model's view of each group of them, where one was fitted (its bands may name
    settings not measured yet: those can be requested); ``unit``: what the intervals' n count
    (pairs, or prompts for an estimate over prompts), in the requests and the text."""
    models = tuple(models)
    gain_chance = GAIN_CHANCE.get(unit, GAIN_CHANCE["pairs"]) if gain_chance is None else gain_chance
    if not candidates:
        return Decision("nothing", None, "no setting finished with an unchanged output", settled=False,
                        models=models, unit=unit)
    ranked = tuple(sorted((dataclasses.replace(estimate(c, models), gain_chance=gain_chance) for c in candidates),
                          key=lambda e: (-e.estimate, e.cost)))
    notes = tuple(f"{e.label} measured {e.measured.text(suffix='x')}, the model predicts {e.band.predicted:.2f}x "
                  f"[{e.band.low:.2f}-{e.band.high:.2f}] (its median error {percent_text(_error_of(e.key, models))}): the measurement "
                  "is trusted" for e in ranked if e.disagrees and e.band is not None)
    common: dict[str, Any] = {"estimates": ranked, "models": models, "notes": notes, "unit": unit}
    faster = [e for e in ranked if e.shown_faster]
    if not faster:
        return _no_gain(ranked, models, common)

    best = max(faster, key=lambda e: e.estimate)
    near = [e for e in faster if _as_good(e, best)]
    chosen = min(near, key=lambda e: (e.cost, -e.estimate))
    bar = chosen.estimate * (1 + TOLERANCE)
    # Settings that might still beat the chosen one by more than the tolerance: measured ones whose
    # interval reaches past it, unmeasured ones the model predicts past it.
    rivals = [e for e in ranked if e is not chosen and e.high > bar]
    measured_keys = {e.key for e in ranked}
    unmeasured = [b for m in models for b in m.bands if b.key not in measured_keys and b.predicted > bar]
    unmeasured.sort(key=lambda b: -b.predicted)
    enough = chosen.measured.n >= SETTLE_PAIRS
    narrow = enough and chosen.measured.half_width <= HALF_WIDTH
    settled = narrow and not rivals and not unmeasured

    requests: list[Request] = []
    if not narrow:
        pairs = max(pairs_needed(chosen.measured), min(STEP, SETTLE_PAIRS - chosen.measured.n))
        why = (f"its interval is +-{percent_text(chosen.measured.half_width)}, settled at +-{percent_text(HALF_WIDTH)}"
               if enough else f"{chosen.measured.n} {_unit(unit, chosen.measured.n)}: settled needs "
               f"{SETTLE_PAIRS} at the chosen setting")
        requests.append(Request(chosen.key, chosen.label, pairs, why, unit))
    # The model's best unmeasured setting gets a place before the measured rivals: they can be
    # measured again any time, while a length never measured cannot win at all.
    for b in unmeasured[:1]:
        requests.append(Request(b.key, b.label, STEP, f"not measured; the model predicts {b.predicted:.2f}x", unit))
    for e in sorted(rivals, key=lambda e: -e.high)[:max(0, MAX_REQUESTS - len(requests))]:
        requests.append(Request(e.key, e.label, pairs_needed(e.measured),
                                (f"measured once, {e.measured.median:.2f}x" if math.isinf(e.high) else
                                 f"could be up to {e.high:.2f}x") + f", past {chosen.label}'s {chosen.estimate:.2f}x", unit))
    for b in unmeasured[1:1 + max(0, MAX_REQUESTS - len(requests))]:
        requests.append(Request(b.key, b.label, STEP, f"not measured; the model predicts {b.predicted:.2f}x", unit))

    if len(faster) == 1:
        why = (f"the only setting shown faster than the target alone (a chance of a gain of "
               f"{chance_text(1.0 - (chosen.chance_of_loss or 0.0))}, at least {chance_text(gain_chance)} needed)")
    elif chosen is best:
        why = f"the best estimate of {len(faster)} settings shown faster than the target alone"
    else:
        why = (f"the cheapest setting shown within {percent_text(TOLERANCE)} of the best estimate ({best.label}: "
               f"{best.estimate:.2f}x against {chosen.estimate:.2f}x)")
    why += f"; estimate {chosen.estimate:.2f}x (as measured)"  # shown faster: measured twice or more, never pooled
    slower = [e for e in ranked if not e.shown_faster]
    if slower and any(e.measured.median > chosen.measured.median for e in slower):
        higher = ", ".join(e.label for e in slower if e.measured.median > chosen.measured.median)
        why += f"; {higher} measured higher medians but a chance of a gain below {chance_text(gain_chance)}"
    contenders = (chosen, *sorted(rivals, key=lambda e: -e.estimate))
    return Decision("recommend", chosen, why, settled, contenders, tuple(requests), **common)


def deploys_alone(speedup: Spread | None) -> str | None:
    """Why one measured setting (``run``'s case) deploys as the target alone: the rule's "no draft"
    on it alone; None: it deploys with its draft (or nothing was measured)."""
    d = decide([Candidate("setting", "the draft", speedup)]) if speedup is not None else None
    return d.reason if d is not None and d.verdict == "no draft" else None


SWITCH_SHOWN = 0.95  # a serving setting gives way only to one faster in this share of paired resamples


def for_running(decision: Decision, running: Hashable, beats: Mapping[Hashable, float]) -> tuple[str, str]:
    """The rule's answer for a setting already serving (``watch``), as a verdict and its reason.

    "no draft" and "undecided" are the decision's own. The running setting is given the lowest cost,
    so "cheaper only when as good" keeps it where it is shown within the tolerance of the best:
    "keep". A recommendation of another setting is "change" only where that one was faster than the
    running one in :data:`SWITCH_SHOWN` of paired resamples (``beats``: the share for each setting,
    its margin the caller's), else "keep", saying the gain is not shown."""
    chosen = decision.chosen
    if chosen is None:
        return "undecided", decision.reason
    said = f"{chosen.label}, {chosen.measured.text(suffix='x')}"
    if decision.verdict == "no draft":
        return "no draft", f"no setting can be a gain of more than {percent_text(decision.tolerance)} (best: {said})"
    if decision.verdict == "undecided":
        loss = chance_text(chosen.chance_of_loss) if chosen.chance_of_loss is not None else "unknown"
        return "undecided", f"no setting is shown faster than the target alone (best bet: {said}, a chance of a loss of {loss})"
    if chosen.key == running:
        return "keep", f"the running setting is the one the rule recommends: {said}"
    shown = beats.get(chosen.key, 0.0)
    if shown >= SWITCH_SHOWN:
        return "change", f"the rule recommends {said}, faster than the running one in {percent_text(shown)} of the resamples"
    return "keep", (f"the rule recommends {said}, but it is faster than the running one in only {percent_text(shown)} "
                    f"of the resamples ({percent_text(SWITCH_SHOWN)} needed): watch longer")


def _as_good(e: Estimate, best: Estimate) -> bool:
    """Whether ``e`` is shown to be within :data:`TOLERANCE` of the best estimate: its gap plus one
    standard error of the difference. Two noisy estimates 1 % apart are not "as good" by that
    alone: on a machine whose pairs vary by 8 %, the cheaper of two close medians is often the
    truly slower one by more than the tolerance (benchmarks/decide.py counts how often)."""
    if e is best:
        return True
    gap = (best.estimate - e.estimate) / best.estimate
    return gap + math.hypot(e.sd, best.sd) / best.estimate <= TOLERANCE


def _error_of(key: Hashable, models: Sequence[ModelView]) -> float:
    """The error of the model that has a band at ``key`` (0.0: none has)."""
    return next((m.error for m in models if m.band(key) is not None), 0.0)


def best_bet(ranked: Sequence[Estimate]) -> Estimate:
    """Where none is shown faster, the setting nearest to it: the highest chance of a gain (the
    rule's own measure), the best estimate among equals; one with no interval only where none has
    one. Not simply the best estimate: a setting the study stopped after a few prompts (it trailed
    another on the prompts both were measured on) can read higher over its own few prompts than the
    setting it trailed over many, with an interval that is mostly doubt (the demo's study in
    docs/results.md)."""
    with_interval = [e for e in ranked if e.chance_of_loss is not None]
    if not with_interval:
        return ranked[0]
    return min(with_interval, key=lambda e: (e.chance_of_loss, -e.estimate))


def _no_gain(ranked: tuple[Estimate, ...], models: tuple[ModelView, ...], common: dict[str, Any]) -> Decision:
    """No setting is shown faster: "no draft" when none could be a gain worth having, else
    "undecided" with what to measure. Either way the best bet is the setting nearest to being
    shown faster (:func:`best_bet`)."""
    best = best_bet(ranked)
    gain = 1.0 + TOLERANCE
    # as with a recommendation, an interval is narrow enough to close the question only over
    # SETTLE_PAIRS pairs: the bootstrap interval of 2 or 3 ratios is about their range
    open_ = [e for e in ranked if e.high > gain
             and not (e.measured.n >= SETTLE_PAIRS and e.measured.half_width <= HALF_WIDTH)]
    measured_keys = {e.key for e in ranked}
    unmeasured = sorted((b for m in models for b in m.bands if b.key not in measured_keys and b.low > gain),
                        key=lambda b: -b.predicted)
    if not open_ and not unmeasured:
        intervals = [e for e in ranked if e.measured.n >= 2]
        if not intervals:
            why = (f"no estimate could reach past {gain:.2f}x (each measured once, combined with the speedup model "
                   "and its error)")
        elif all(e.measured.high <= 1.0 for e in intervals):
            why = "every interval lies at or below 1.0"
        else:
            why = f"no interval reaches past {gain:.2f}x, or those that do are within +-{percent_text(HALF_WIDTH)}"
        return Decision("no draft", best, f"{why} (best: {best.label} -> {best.measured.text(suffix='x')})",
                        settled=True, **common)
    unit = common["unit"]
    requests = [Request(e.key, e.label, pairs_needed(e.measured),
                        f"{e.measured.text(suffix='x')}: could be a gain or none", unit) for e in open_[:MAX_REQUESTS]]
    requests += [Request(b.key, b.label, STEP, f"not measured; the model predicts {b.predicted:.2f}x "
                         f"[{b.low:.2f}-{b.high:.2f}]", unit) for b in unmeasured[:max(0, MAX_REQUESTS - len(requests))]]
    could = [f"{len(open_)} measured" if open_ else "", f"{len(unmeasured)} not measured yet" if unmeasured else ""]
    why = (f"no setting is shown faster than the target alone, but {' and '.join(w for w in could if w)} could be "
           f"(best: {best.label} -> {best.measured.text(suffix='x')})")
    return Decision("undecided", best, why, settled=False, contenders=tuple(open_), requests=tuple(requests), **common)


# How a study's output says why it stopped measuring (StudyResult.stop).
STOP_WORDS = {"settled": "the decision is settled", "budget": "the budget is spent",
              "nothing to measure": "nothing left that the decision asks to measure"}


__all__ = ["HALF_WIDTH", "MAX_REQUESTS", "STEP", "STOP_WORDS", "TOLERANCE", "VERDICTS", "Band", "Candidate", "Decision", "Estimate", "ModelView",
           "Request", "decide", "estimate", "pairs_needed"]
