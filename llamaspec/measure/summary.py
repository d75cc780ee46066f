"""What a run, sweep point or tune point measured, summarised once: the frozen :class:`Summary`.

The console table, the Markdown report, the plots, ``results list`` and ``--json`` all render this
one object, so they cannot disagree. It is built by :func:`summarize` from the measurements of one
point (and the baselines of the blocks its runs were measured in), and stored as JSON with the run.

- **speed**: every backend reports ``decode_tps`` on one definition (``backend.SPEED_DEFINITION``);
  each measurement says how it got there (``speed_basis``).
- **speedup**: the point estimator (:mod:`llamaspec.measure.estimators`, named in ``estimator``): the median
  of paired ratios (each speculative run over the baseline of its own pair, pairs made by index)
  with a 95 % bootstrap interval; in a workload study's blocks (B S1..Sk B on one prompt), each
  speculative run over the baselines measured around it in its block.
- **lossless**: greedy output with a draft must equal greedy output without one, on the generated
  part only, token ids where the engine gives them; a shorter speculative output differs. A sampled
  run (temperature above 0) is "not applicable: sampled": neither lossless nor differing.
- **counters**: rounds, mean accepted length and drafted-per-round come from the engine's own
  per-program formula; the drafted length is checked against the requested one.

Its size: the lossless verdict, the drafted-length check and the summary's dataclass with its one
builder and its JSON round trip; every view reads them, so they stay together.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field, replace
from typing import Any

from llamaspec.base import stats
from llamaspec.base.host import NoiseSample
from llamaspec.base.stats import Spread, percent_text
from llamaspec.measure import estimators, spectypes, timed
from llamaspec.measure.contract import (
    SPEED_DEFINITION,
    Measurement,
    Positions,
    ResolvedCase,
    acceptance_by_position,
    sum_positions,
)
from llamaspec.measure.timed import Loop


@dataclass(frozen=True)
class Reference:
    """Figures someone reported for this case, to compare against."""

    source: str = ""
    hardware: str = ""
    encode_tps: float | None = None
    decode_tps: float | None = None
    n_predict: int | None = None
    n_drafted: int | None = None
    n_accept: int | None = None
    acceptance: float | None = None  # a fraction, as every acceptance is kept (the write-up's 61.514% is 0.61514)
    speedup: float | None = None
    seconds: float | None = None  # wall time of the speculative generation (write-ups that timed the whole call)
    baseline_seconds: float | None = None  # the same without a draft

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Reference:
        """A stored reference; one stored before acceptance was a fraction says ``accept_pct`` (a percentage)."""
        data = dict(data)
        if "accept_pct" in data:
            pct = data.pop("accept_pct")
            data["acceptance"] = None if pct is None else pct / 100.0
        return cls(**data)


@dataclass(frozen=True)
class CaseResult:
    """What one case's run produced: its stored id, the case, its measurements and their summary."""

    run_id: int
    case: ResolvedCase
    reference: Reference | None
    measurements: tuple[Measurement, ...]
    summary: Summary
    engine: str = ""  # the engine that measured it
    engine_settings: frozenset[str] | None = None  # the settings that engine takes (Capabilities.settings)

    @property
    def status(self) -> str:
        return self.summary.status

    @property
    def error(self) -> str | None:
        return self.summary.error


# Warn when the machine's own run-to-run spread is this large against the effect measured.
NOISY_CV = 0.05


@dataclass(frozen=True)
class Lossless:
    """Whether greedy output is unchanged by speculation (the generated part only)."""

    verdict: str  # identical | differs | not checked | not applicable (sampled: outputs may differ by chance)
    unit: str = "tokens"  # tokens (ids) | chars (text)
    compared: int = 0  # tokens or characters compared, per pair (the smallest)
    pairs: int = 0
    first_difference: int | None = None
    reason: str | None = None  # why it differs or was not checked
    speculative_excerpt: str | None = None
    baseline_excerpt: str | None = None
    near_tie: float | None = None  # the target's top-two gap where a differing output diverges, when a near-tie (probe.py)
    probed: bool = False  # the probe read the target's top two where it diverges (near_tie None: not a near-tie)

    def text(self) -> str:
        if self.verdict == "identical":
            return f"identical over {self.compared} generated {self.unit} ({self.pairs}/{self.pairs} pairs)"
        if self.verdict == "differs":
            where = f" at {self.unit[:-1]} {self.first_difference}" if self.first_difference is not None else ""
            excerpts = (f": speculative continues {self.speculative_excerpt!r}, baseline {self.baseline_excerpt!r}"
                        if self.speculative_excerpt is not None or self.baseline_excerpt is not None else "")
            return f"DIFFERS{where} ({self.reason}){excerpts}"
        if self.verdict == NOT_APPLICABLE:
            return f"{NOT_APPLICABLE}: sampled" + (f" ({self.reason})" if self.reason else "")
        return f"not checked ({self.reason})" if self.reason else "not checked"


NOT_APPLICABLE = "not applicable"


def compare_outputs(spec: Measurement, base: Measurement) -> Lossless:
    """One speculative output against its baseline, generated part only.

    The speculative side may overshoot n_predict (the last round's accepted tokens all count), so
    it is compared over the baseline's length; a speculative output *shorter* than the baseline's
    differs (a truncated run must not pass as identical), and so does a longer one when the
    baseline stopped at end of text and the speculative run did not.
    """
    if spec.tokens is not None and base.tokens is not None:
        a: Sequence[Any] = spec.tokens
        b: Sequence[Any] = base.tokens
        unit = "tokens"
    elif spec.text is not None and base.text is not None:
        a, b, unit = spec.text, base.text, "chars"
    else:
        return Lossless("not checked", reason="an output is missing")
    first = next((i for i in range(min(len(a), len(b))) if a[i] != b[i]), None)
    if first is None and len(a) < len(b):
        return Lossless("differs", unit, len(a), 1, len(a), f"the speculative output is shorter: {len(a)} {unit} "
                        f"against the baseline's {len(b)}", _excerpt(a, len(a)), _excerpt(b, len(a)))
    if first is None and len(a) > len(b) and base.end_of_text and not spec.end_of_text:
        # Overshoot is only the last round's extra tokens when the baseline was cut at n_predict;
        # a baseline that stopped on its own says the speculative run went on past end of text.
        return Lossless("differs", unit, len(b), 1, len(b), f"the baseline stopped at end of text after {len(b)} "
                        f"{unit}; the speculative output goes on", _excerpt(a, len(b)), "")
    if first is None and not b and not base.end_of_text:
        return Lossless("not checked", unit, reason="the baseline generated nothing")
    if first is not None:
        return Lossless("differs", unit, first, 1, first, "the outputs diverge", _excerpt(a, first), _excerpt(b, first))
    return Lossless("identical", unit, len(b), 1)


def _excerpt(seq: Sequence[Any], at: int) -> str:
    part = seq[at:at + 40]
    return part if isinstance(part, str) else " ".join(str(t) for t in part)


def merge_lossless(verdicts: Sequence[Lossless]) -> Lossless:
    if not verdicts:
        return Lossless("not checked", reason="no speculative run had a baseline to compare with")
    differs = [v for v in verdicts if v.verdict == "differs"]
    if differs:
        return replace(differs[0], pairs=len(verdicts))
    if any(v.verdict == "not checked" for v in verdicts):
        missing = next(v for v in verdicts if v.verdict == "not checked")
        return replace(missing, pairs=len(verdicts))
    return Lossless("identical", verdicts[0].unit, min(v.compared for v in verdicts), len(verdicts))


@dataclass(frozen=True)
class DraftCheck:
    """The draft length asked for against what the program reports having drafted."""

    requested: int | None
    reported: int | None  # the program's own n_draft (the final length, if adaptive)
    policy: str | None  # fixed | capped | adaptive | none
    drafted_per_round: float | None
    problem: str | None = None  # set when the program did not draft what was asked

    @property
    def label(self) -> str:
        if self.policy == "adaptive" and self.reported is not None:
            return f"{self.requested} (adaptive, ended at {self.reported})"
        return str(self.requested) if self.requested is not None else "-"


def check_draft(m: Measurement, requested: int | None) -> DraftCheck:
    per_round = m.drafted_per_round
    check = DraftCheck(requested, m.draft_len, m.draft_policy, per_round)
    if requested is None or m.draft_policy in (None, "none", "adaptive") or m.n_drafted is None:
        return check
    if m.draft_policy == "fixed":
        if m.draft_len is not None and m.draft_len != requested:
            return replace(check, problem=f"asked for draft length {requested}, the program reports n_draft = {m.draft_len}")
        if m.rounds and m.n_drafted != requested * m.rounds:
            return replace(check, problem=f"asked for {requested} drafted tokens per round, but {m.n_drafted} were drafted "
                                          f"in {m.rounds} rounds ({per_round:.2f} per round)")
    if m.draft_policy == "capped":
        if m.draft_len is not None and m.draft_len != requested:
            return replace(check, problem=f"asked for up to {requested} drafted tokens per round, the program reports "
                                          f"n_draft = {m.draft_len}")
        if m.rounds and m.n_drafted > requested * m.rounds:
            return replace(check, problem=f"asked for at most {requested} drafted tokens per round, but {m.n_drafted} "
                                          f"were drafted in {m.rounds} rounds")
    return check


# The statuses of a run (and of its summary) that finished with figures: "differs" is a run whose
# output changed, its speed figures standing; "failed" and "interrupted" have none to show.
FINISHED = ("ok", "differs")


@dataclass(frozen=True)
class Summary:
    status: str  # ok | differs | failed | interrupted
    pairs: int  # speculative runs with a baseline
    paired: bool  # each speculative run divided by the baseline(s) measured next to it: its pair's or its block's
    speedup: Spread | None
    decode_tps: Spread | None  # speculative, on SPEED_DEFINITION
    baseline_decode_tps: Spread | None
    encode_tps: Spread | None
    acceptance: Spread | None  # accepted over drafted, as fractions (Measurement.acceptance)
    lossless: Lossless
    draft: DraftCheck
    n_prompt: int | None = None
    n_predict: int | None = None
    n_drafted: int | None = None
    n_accept: int | None = None
    rounds: int | None = None  # every target call after the prompt (Measurement.rounds)
    drafted_rounds: int | None = None  # the rounds that drafted something, where the engine counts them apart
    mean_accepted: float | None = None  # accepted draft tokens per round
    tokens_per_round: float | None = None  # Spec-Bench's tau: accepted drafts plus the target's own token, per round
    drafted_per_round: float | None = None
    draft_steps: int | None = None  # draft-model decode steps in the run (for the speedup model)
    program: str | None = None  # the speculative program's profile (how it counts and spends a round)
    sample_ms_per_token: float | None = None  # the baseline's sampling cost per token (speedup model)
    cost_depth: int | None = None  # the context depth the costs were timed at
    draft_decode_tps: Spread | None = None  # the draft model alone (speedup model)
    batch_ms: dict[int, float] | None = None  # the target on batches of n tokens (speedup model)
    peak_rss_bytes: int | None = None
    baseline_peak_rss_bytes: int | None = None
    speed_basis: dict[str, str] = field(default_factory=dict)  # mode -> how decode_tps was derived
    baseline_key: str | None = None
    warnings: tuple[str, ...] = ()
    error: str | None = None
    speed_definition: str = SPEED_DEFINITION
    noise: NoiseSample | None = None  # the machine during this point's own measurements (steal, other load)
    estimator: str = estimators.POINT  # how ``speedup`` was computed (llamaspec.measure.estimators)
    # Acceptance by draft position, counts summed over the point's speculative measurements
    # (contract.sum_positions); None with a note where they are not known.
    drafted_by_position: tuple[int, ...] | None = None
    accepted_by_position: tuple[int, ...] | None = None
    positions_note: str | None = None
    # What the pairs timed (llamaspec.measure.timed): the target alone's tokens after the first (the
    # median over its runs: the decode speed's count), and the span its output repeats to the end.
    timed_tokens: int | None = None
    loop: Loop | None = None
    # End to end (prompt processing included, where the engine times it: llama-server): the point's
    # estimator over the same pairs' end-to-end speeds; shown beside the decode speedup, never decided on.
    end_to_end: Spread | None = None

    @property
    def acceptance_by_position(self) -> tuple[float | None, ...] | None:
        return acceptance_by_position(self.accepted_by_position, self.drafted_by_position)

    def positions_text(self) -> str | None:
        """``accepted at position 1..k: 97 %, 93 %, ...`` (the note, where positions are missing)."""
        rates = self.acceptance_by_position
        if not rates:
            return f"acceptance by position: not known ({self.positions_note})" if self.positions_note else None
        shown = ", ".join(percent_text(r) for r in rates)
        runs = self.drafted_by_position[0] if self.drafted_by_position else 0
        text = f"accepted at position 1..{len(rates)}: {shown} (of {runs} drafting rounds)"
        return text + (f"; {self.positions_note}" if self.positions_note else "")

    @property
    def output_differs(self) -> bool:
        """Its output differs from the target alone's other than at a greedy near-tie (``probe.py``):
        a wrong output, not batched verification's rounding."""
        return self.status == "differs" and self.lossless.near_tie is None

    @property
    def own_baselines(self) -> bool:
        """Every ratio is over a baseline of its own: its pair's, or its block's."""
        return self.paired

    @property
    def recommendable(self) -> bool:
        return self.status == "ok" and self.speedup is not None

    def to_dict(self) -> dict[str, Any]:
        data = asdict(self)
        for key in ("speedup", "decode_tps", "baseline_decode_tps", "encode_tps", "acceptance", "draft_decode_tps",
                    "end_to_end"):
            value = getattr(self, key)
            data[key] = value.to_dict() if value is not None else None
        data["batch_ms"] = {str(k): v for k, v in self.batch_ms.items()} if self.batch_ms else None
        data["warnings"] = list(self.warnings)
        data["noise"] = self.noise.to_dict() if self.noise is not None else None
        data["acceptance_by_position"] = self.acceptance_by_position  # derived: for readers of --json
        data["loop"] = self.loop.to_dict() if self.loop is not None else None
        return data

    @classmethod
    def from_dict(cls, data: dict[str, Any] | None) -> Summary:
        data = dict(data or {})
        data.pop("acceptance_by_position", None)  # derived from the counts
        if "lossless" not in data or "draft" not in data or "pairs" not in data:
            return empty(data.get("status", "failed"), data.get("error"))
        spreads = {k: Spread.from_dict(data.get(k)) for k in
                   ("speedup", "decode_tps", "baseline_decode_tps", "encode_tps", "acceptance", "draft_decode_tps",
                    "end_to_end")}
        batch = data.get("batch_ms")
        return cls(**{**data, **spreads, "lossless": Lossless(**data["lossless"]), "draft": DraftCheck(**data["draft"]),
                      "batch_ms": {int(k): v for k, v in batch.items()} if batch else None,
                      "warnings": tuple(data.get("warnings") or ()), "speed_basis": dict(data.get("speed_basis") or {}),
                      "noise": NoiseSample.from_dict(data.get("noise")), "loop": Loop.from_dict(data.get("loop")),
                      **{k: tuple(data[k]) if data.get(k) is not None else None
                         for k in ("drafted_by_position", "accepted_by_position")}})


def empty(status: str, error: str | None = None) -> Summary:
    return Summary(status, 0, False, None, None, None, None, None, Lossless("not checked", reason="nothing measured"),
                   DraftCheck(None, None, None, None), error=error)


def requested_draft(case: ResolvedCase) -> int | None:
    """The draft length a case's drafted counts are checked against: the setting that bounds its
    type's draft (``spectypes``: draft_max with a draft model, an n-gram mode's m-gram length), None
    for the target alone and where the mode sizes its drafts itself."""
    if case.draft is None and spectypes.needs_draft(case.settings.spec_type):
        return None
    return spectypes.requested_length(case.settings)


# The counters a summary reads off its median speculative run (the one its draft check reads).
_COUNTERS = ("n_prompt", "n_predict", "n_drafted", "n_accept", "rounds", "drafted_rounds", "mean_accepted",
             "tokens_per_round", "drafted_per_round", "draft_steps", "program")


def summarize(measured: Sequence[Measurement], shared: Sequence[Measurement] = (), *,
              requested_draft: int | None = None, status: str = "ok", error: str | None = None,
              baseline_key: str | None = None, threads_hint: bool = False, temperature: float | None = None) -> Summary:
    """The one summary of a point: its own measurements, and ``shared`` ones measured for it
    elsewhere (the baselines of the blocks its speculative runs were measured in, the cost timings).

    The point's estimator: where its speculative runs were measured in blocks (a workload study's
    B S1..Sk B on one prompt, :data:`llamaspec.measure.estimators.BLOCK`), each run over its own
    block's two baselines, interpolated at its place in the block; otherwise (:data:`llamaspec.measure.estimators.POINT`) each
    speculative run over the baseline of its own pair (:func:`llamaspec.measure.pairs.whole_pairs`).
    Either way the median of the ratios. A half pair (a side failed or was interrupted), or a run whose
    block has no baseline, is in no ratio: its measurements are kept out of every figure that
    compares the two modes; no ratio of runs measured apart is ever reported. ``temperature`` above
    0: a sampled point, whose outputs are not compared (``Lossless`` "not applicable: sampled")."""
    from llamaspec.measure.pairs import whole_pairs

    ok_spec = [m for m in measured if m.mode == "speculative" and m.ok]
    in_blocks = [m for m in ok_spec if m.block is not None]
    pairs: list[tuple[Measurement, Measurement]]  # (speculative, a baseline it is compared with), for the outputs
    if in_blocks:
        around: dict[str, list[Measurement]] = {}
        for b in (*shared, *measured):
            if b.mode == "baseline" and b.ok and b.block is not None:
                around.setdefault(b.block, []).append(b)
        blocked = [(m, around[m.block]) for m in in_blocks if m.block in around]
        spec = [m for m, _b in blocked]
        base = list({id(b): b for _m, bs in blocked for b in bs}.values())
        pairs = [(m, bs[0]) for m, bs in blocked]
        ratios = _block_ratios(blocked)
        end_to_end = estimators.point(_block_ratios(blocked, lambda m: m.end_to_end_tps))
        paired, estimator = bool(blocked), estimators.BLOCK
    else:
        # The speeds' spreads hold the pairs that have a ratio, in pair order, as the speedup's does
        # (analysis reads them side by side); every whole pair is compared for losslessness.
        whole = whole_pairs(measured)
        rated = [p for p in whole if p.ratio is not None]
        spec, base = [p.speculative for p in rated], [p.baseline for p in rated]
        pairs = [(p.speculative, p.baseline) for p in whole]
        timed_pairs = [(p.speculative, p.baseline) for p in rated]
        ratios = _ratios(timed_pairs)
        end_to_end = estimators.point(_ratios(timed_pairs, lambda m: m.end_to_end_tps))
        paired, estimator = bool(whole), estimators.POINT
        if not paired:
            spec, base = ok_spec, [m for m in measured if m.mode == "baseline" and m.ok]
    speedup = estimators.point(ratios)
    if temperature is not None and temperature > 0.0:  # sampled: outputs may differ by sampling alone
        lossless = Lossless(NOT_APPLICABLE, pairs=len(pairs), reason=f"temperature {temperature:g}")
    else:
        lossless = merge_lossless([compare_outputs(s, b) for s, b in pairs])
    mid_spec = sorted(spec, key=lambda m: m.decode_tps or 0)[len(spec) // 2] if spec else None
    draft = check_draft(mid_spec, requested_draft) if mid_spec else DraftCheck(requested_draft, None, None, None)
    problems = [p for p in (check_draft(m, requested_draft).problem for m in ok_spec) if p]
    if problems:
        draft = replace(draft, problem=problems[0])
    if status == "ok" and problems:
        status, error = "failed", f"drafted length check: {problems[0]}"
    if status == "ok" and lossless.verdict == "differs":
        status = "differs"
    if status == "ok" and spec and not base:
        status, error = "failed", "no baseline was measured"
    elif status == "ok" and spec and not ratios and not paired:
        status, error = "failed", "no speculative run has a baseline of its own pair or block"
    base_spread = stats.spread([b.decode_tps for b in base])
    noise = NoiseSample.combine([m.noise for m in measured if m.mode in ("baseline", "speculative")])
    warnings = _warnings(base_spread, speedup, threads_hint, noise)
    if mid_spec is not None and mid_spec.n_drafted == 0:
        warnings.append("nothing was drafted: the speculative run is the target alone plus overhead")
    basis = {m.mode: m.speed_basis for m in (*spec[:1], *base[:1]) if m.speed_basis}
    draft_runs = [m for m in (*measured, *shared) if m.mode == "draft" and m.ok]
    batches = [m for m in (*measured, *shared) if m.mode == "batch" and m.ok and m.stats]
    by = sum_positions(spec) if spec else Positions()
    return Summary(
        status=status, pairs=len(ratios), paired=paired, speedup=speedup,
        decode_tps=stats.spread([m.decode_tps for m in spec]), baseline_decode_tps=base_spread,
        encode_tps=stats.spread([m.encode_tps for m in spec]), acceptance=stats.spread([m.acceptance for m in spec]),
        lossless=lossless, draft=draft, **({k: getattr(mid_spec, k) for k in _COUNTERS} if mid_spec else {}),
        sample_ms_per_token=statistics.median(v) if (v := [b.sample_ms_per_token for b in base if b.sample_ms_per_token]) else None,
        cost_depth=batches[0].stats.get("depth") if batches and batches[0].stats else None,
        draft_decode_tps=stats.spread([m.decode_tps for m in draft_runs]),
        batch_ms={int(k): v for k, v in batches[0].stats["batch_ms"].items()} if batches and batches[0].stats else None,
        peak_rss_bytes=max((m.peak_rss_bytes or 0) for m in spec) or None if spec else None,
        baseline_peak_rss_bytes=max((m.peak_rss_bytes or 0) for m in base) or None if base else None,
        speed_basis=basis, baseline_key=baseline_key, warnings=tuple(warnings), error=error, noise=noise,
        estimator=estimator,
        drafted_by_position=by.drafted, accepted_by_position=by.accepted, positions_note=by.note,
        timed_tokens=round(statistics.median(n)) if (n := [b.n_predict - 1 for b in base if b.n_predict]) else None,
        loop=next((timed.loop_of(b.text) for b in base if b.text is not None), None),
        end_to_end=end_to_end,
    )


def _ratios(pairs: Sequence[tuple[Measurement, Measurement]],
            speed: Callable[[Measurement], float | None] = lambda m: m.decode_tps) -> list[float]:
    """Each pair's speculative over baseline ``speed`` (decode by default), where both sides have one."""
    return [s / b for sp, bp in pairs if (s := speed(sp)) and (b := speed(bp))]


def _block_ratios(blocked: Sequence[tuple[Measurement, Sequence[Measurement]]],
                  speed: Callable[[Measurement], float | None] = lambda m: m.decode_tps) -> list[float]:
    """Each speculative run's ``speed`` over its block's baselines' (the two measured around it),
    interpolated at its place in the block on the log scale (a run at place i of k between baselines
    at places 0 and k + 1: a machine that drifts steadily cancels out); over the one baseline where
    the other failed."""
    out = []
    for m, bases in blocked:
        s = speed(m)
        got = sorted((b.pair or 0, math.log(v)) for b in bases if (v := speed(b)))
        if not s or not got or len(got) != len(bases):
            continue
        (p0, b0), (p1, b1) = got[0], got[-1]
        t = (((m.pair or 0) - p0) / (p1 - p0)) if p1 > p0 else 0.5
        out.append(s / math.exp(b0 + min(1.0, max(0.0, t)) * (b1 - b0)))
    return out


def _warnings(base: Spread | None, speedup: Spread | None, threads_hint: bool,
              noise: NoiseSample | None = None) -> list[str]:
    out: list[str] = []
    # What else the machine did, next to the baseline's CV: the measured cause of an unsteady baseline.
    meanwhile = f"; meanwhile {noise.text()}" if noise is not None else ""
    if base is not None and base.cv is not None and base.cv > NOISY_CV:
        effect = abs(speedup.median - 1.0) if speedup else 0.0
        hint = " (using every core makes llama.cpp's speed bimodal here: try fewer threads, e.g. -t 1)" if threads_hint else ""
        if base.cv > effect / 2:
            out.append(f"the machine is too unsteady for this effect: the baseline varies by {percent_text(base.cv)} (CV) run to run "
                       f"against a {percent_text(effect)} effect{hint}{meanwhile}")
        else:
            out.append(f"the baseline varies by {percent_text(base.cv)} (CV) run to run{hint}{meanwhile}")
    elif noise is not None and noise.noisy:
        out.append(f"the machine was busy: {noise.text()}")
    if speedup is not None and speedup.n >= 2 and speedup.low <= 1.0 <= speedup.high:
        out.append("the speedup's interval includes 1.0x: no measurable difference from the target alone")
    return out
