"""The speedup model of speculative decoding, fed with costs measured on the run's own footing.

After Leviathan, Kalman & Matias (2023), "Fast Inference from Transformers via Speculative
Decoding". Each round the draft proposes ``k`` tokens and the target verifies them in one batch.
If every drafted token is accepted independently with probability ``alpha`` (the paper's α) and
acceptance stops at the first rejection, one round yields

    E[accepted]       = α(1 - α^k) / (1 - α)            (mean accepted length)
    E[tokens / round] = (1 - α^(k+1)) / (1 - α)          (accepted + the target's own token)

and, with ``c`` the draft's cost per token in target steps, the paper's speedup is

    S(k) = (1 - α^(k+1)) / ((1 - α)(k·c + 1)).

What a real program spends per round is not the paper's ``k·c + 1`` target steps
(:class:`CostModel`, :class:`Program`):

- **draft steps**: the pinned ``llama-speculative`` decodes ``k + 1`` single tokens on the draft
  each round (the target's own token, then each drafted token, the last one included);
  ``llama-speculative-simple`` (common/speculative, what llama-server runs) decodes ``k`` and
  also runs the draft on the verified batch. :meth:`Program.draft_steps_per_round`.
- **verification**: the target processes ``k + 1`` tokens in one batch, with logits for every one
  of them. On CPUs that costs more than one step; the cost is *measured* (llama-bench on the
  target at the run's context depth, every token an output) and used as measured, interpolated
  between measured batch sizes, never fitted to a line.
- **rounds**: the pinned ``llama-speculative`` samples the first token from the prompt's logits,
  so it verifies ``n_predict - n_accept - 1`` times; ``llama-speculative-simple`` holds the last
  prompt token back and verifies ``n_predict - n_accept`` times. :meth:`Program.rounds`.

Every engine that records a round profile's name with its runs (``Measurement.program``) and
times the two costs (``Capabilities.times_costs``) gets the model: llama.cpp's two programs and
llama-server (llama-bench on the same build), transformers' assisted generation (torch forward
passes timed by the engine). What a profile cannot see is said with its fit
(:attr:`Program.unmodelled`).

The target's single-token step comes from the same llama-bench data (batch 1 at the same depth),
so verify(k+1)/step and the draft's step/target step are ratios taken within one program. The
speed both sides are compared on is ``llamaspec.contract.SPEED_DEFINITION`` (tokens after the
first over the time from the first generated token to the last), so the predicted speedup is
tokens per round × (baseline time per token) / (time per round).

**llama.cpp's ``accept`` is not α.** llama-speculative prints ``accept = 100 * n_accept /
n_drafted``: the accepted share of *all drafted tokens*. Drafted tokens after the first rejection
are counted in n_drafted but can never be accepted, so with a fixed draft length ``k``

    accept = E[accepted] / k = α(1 - α^k) / ((1 - α)·k)  <  α   (for 0 < α < 1, k > 1).

E.g. α = 0.9 at k = 8 gives accept = 0.64. We solve this for α numerically
(:func:`alpha_from_accept_rate`), or, equivalently when the number of rounds is known, solve
tokens per round (:func:`alpha_from_tokens_per_round`). A fit (:func:`analyze`) uses the mean number
drafted per round, ``n_drafted / rounds``, as ``k``: programs draft fewer than ``--draft`` with
``--draft-p-min`` or near the end of generation, and 2023 builds adapted the length.

Everything here is pure: frozen dataclasses in, frozen dataclasses out, LlamaspecError on bad input.
"""

from __future__ import annotations

import dataclasses
import math
import statistics
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field

from llamaspec import contract
from llamaspec.errors import LlamaspecError

__all__ = [
    "LLAMA_SERVER",
    "LLAMA_SPECULATIVE",
    "PROGRAMS",
    "SPECULATIVE_SIMPLE",
    "TRANSFORMERS_ASSISTED",
    "TRANSFORMERS_PROMPT_LOOKUP",
    "VERIFY_BATCH_SIZES",
    "Analysis",
    "CostModel",
    "Observation",
    "PointFit",
    "Prediction",
    "Program",
    "accept_rate",
    "alpha_from_accept_rate",
    "alpha_from_tokens_per_round",
    "analyze",
    "best_draft_length",
    "bench_depth",
    "ceiling_speedup",
    "expected_accepted",
    "expected_tokens_per_round",
    "explain_shortfall",
    "interpolate",
    "max_cost_ratio",
    "monotone",
    "paper_speedup",
    "program",
    "required_alpha",
]

_HINT_COUNTS = "check the counters parsed from the speculative program's output (n_drafted, n_accept, n_predict)"
_HINT_TIMES = "check the timings measured with llama-bench (target batches and the draft's step) for this run"
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
    """Mean accepted draft tokens per round (one target call): α(1 - α^k)/(1 - α); k at α = 1, 0 at α = 0.

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


def expected_tokens_per_round(alpha: float, k: float) -> float:
    """Mean tokens a round (one target call) emits, as the model expects them at per-token acceptance α
    and draft length k: (1 - α^(k+1))/(1 - α) = 1 + expected_accepted. (Measured from a run's counters:
    ``llamaspec.contract.tokens_per_round``.)"""
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


def alpha_from_tokens_per_round(tokens: float, k: float) -> float:
    """Invert :func:`expected_tokens_per_round`: α from measured tokens per round at draft length k.

    ``tokens`` must lie in [1, k + 1]: 1 means nothing accepted, k + 1 means everything.
    """
    _check_k(k)
    if k == 0:
        raise LlamaspecError("cannot infer alpha when nothing was drafted (k = 0)", hint=_HINT_COUNTS)
    if not (isinstance(tokens, (int, float)) and 1.0 <= tokens <= k + 1.0 + 1e-12):
        raise LlamaspecError(
            f"tokens per round must be in [1, k + 1] = [1, {k + 1:g}], got {tokens!r}", hint=_HINT_COUNTS
        )
    if tokens <= 1.0:
        return 0.0
    if tokens >= k + 1.0:
        return 1.0
    return _solve_increasing(lambda a: expected_tokens_per_round(a, k), tokens, 0.0, 1.0)


def paper_speedup(alpha: float, k: float, cost_ratio: float) -> float:
    """Leviathan et al.'s expected walltime improvement: (1 - α^(k+1)) / ((1 - α)(k·c + 1))."""
    if not (math.isfinite(cost_ratio) and cost_ratio >= 0):
        raise LlamaspecError(f"cost ratio c must be a finite number >= 0, got {cost_ratio!r}")
    return expected_tokens_per_round(alpha, k) / (k * cost_ratio + 1.0)


@dataclass(frozen=True)
class OnePointFit:
    """Leviathan et al.'s model put through one measured point (see :func:`fit_one_point`)."""

    alpha: float
    draft_len: float  # the drafted tokens per round the point measured
    cost_ratio: float  # c that makes the model meet the measured speedup there
    best_draft: int
    best_speedup: float


def fit_one_point(accept: float, draft_len: float, speedup: float, max_draft: int = 16) -> OnePointFit | None:
    """α from a point's acceptance (``accept``: accepted over drafted, at ``draft_len`` drafted
    tokens per round), the cost ratio c for which :func:`paper_speedup` equals the measured
    ``speedup`` there, and the draft length that model puts best. For figures measured at one
    draft length (a prompt set on llama-server, per category): a forecast, named as the paper's
    model (it takes verification to cost one target step whatever the batch). None when the
    point cannot carry a fit (nothing drafted, no gain figure)."""
    if not (draft_len > 0 and speedup > 0 and 0.0 <= accept <= 1.0):
        return None
    alpha = alpha_from_accept_rate(accept, draft_len)
    cost_ratio = max((expected_tokens_per_round(alpha, draft_len) / speedup - 1.0) / draft_len, 0.0)
    best = max(range(1, max_draft + 1), key=lambda k: paper_speedup(alpha, k, cost_ratio))
    return OnePointFit(alpha, draft_len, cost_ratio, best, paper_speedup(alpha, best, cost_ratio))


def ceiling_speedup(alpha: float) -> float:
    """The k → ∞, c → 0 limit: 1/(1 - α) tokens per round, hence speedup (inf at α = 1)."""
    _check_alpha(alpha)
    return math.inf if alpha == 1.0 else 1.0 / (1.0 - alpha)


# ---------------------------------------------------------------------------------------------
# Programs: how one round is spent
# ---------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Program:
    """How a speculative program spends a round and counts them (read from its source).

    - ``extra_draft_steps``: single-token draft decodes per round beyond the ``k`` drafted tokens.
    - ``first_token_from_prompt``: the first generated token is sampled from the prompt's logits,
      outside any round, so rounds = n_predict - n_accept - 1 (else n_predict - n_accept).
    - ``draft_processes_batch``: the draft also decodes the verified batch (k + 1 tokens) each round.
    - ``draft_policy``: of ``llamaspec.contract.DRAFT_POLICIES``.
    - ``loop_overhead``: where the engine's own loop spends time beyond the timed forward passes
      and sampling: ``"none"`` (nothing worth modelling: the costs are timed as the program spends
      them), or charged once per ``"round"`` or per emitted ``"token"``; it is then the step the
      run's baselines measured less the timed step (:attr:`CostModel.loop_overhead_ms`).
    - ``unmodelled``: what the model cannot see for this program, said next to its fit.
    """

    name: str
    extra_draft_steps: int
    first_token_from_prompt: bool
    draft_processes_batch: bool = False
    draft_policy: str = "fixed"
    loop_overhead: str = "none"
    unmodelled: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        if self.loop_overhead not in ("none", "round", "token"):
            raise LlamaspecError(f"loop_overhead must be 'none', 'round' or 'token', got {self.loop_overhead!r}")

    def draft_steps_per_round(self, k: float) -> float:
        """Single-token draft decodes per round at draft length k."""
        return k + self.extra_draft_steps

    def rounds(self, n_predict: int, n_accept: int) -> int:
        """Verification rounds (target calls after the prompt) from the printed counters, by this
        program's own loop."""
        return n_predict - n_accept - (1 if self.first_token_from_prompt else 0)


# examples/speculative/speculative.cpp at 0c1e570: the first token is sampled from the prompt's
# logits before the loop; each round decodes the target's token on the draft, then drafts k
# tokens, decoding every one of them (the last included), then verifies k + 1 on the target.
# n_drafted = k · rounds exactly (recorded: 112 = 8 × 14 with n_predict 72, n_accept 57).
LLAMA_SPECULATIVE = Program("llama-speculative", extra_draft_steps=1, first_token_from_prompt=True)
# examples/speculative-simple + common/speculative.cpp (draft-simple): the last prompt token is held
# back and verified in the first round; the draft decodes id_last and each drafted token but the last
# (k decodes), stops early below --spec-draft-p-min, and decodes the verified batch (process()).
SPECULATIVE_SIMPLE = Program("llama-speculative-simple", extra_draft_steps=0, first_token_from_prompt=False,
                             draft_processes_batch=True, draft_policy="capped",
                             unmodelled=("the draft's pass over each verified batch is counted as one draft step "
                                         "(not timed)",))
# tools/server/server-context.cpp at 0c1e570, with the same common/speculative draft-simple: the
# prompt is processed and the first token sampled from its logits (n_gen 1 starts predicted_ms);
# each later step drafts up to min(k, n_remaining - 1) tokens from the last sampled one (k draft
# decodes, stopping below p-min) and verifies draft + 1 on the target; a step whose draft is
# empty (the last token, p-min, n-min) decodes one token. The draft then processes every batch
# the target decoded. /metrics' spec_decode_num_drafts_total (n_draft_verif_steps) grows only in
# steps that drafted: every target call is n_predict - n_accept - 1 (recorded: predicted_n 16,
# draft_n 16 at k 8, 12 accepted: 3 calls, 2 of them drafted rounds). llama-server reports no
# sampling time: its baselines' step beyond llama-bench's is charged per emitted token (its sampler
# chain runs per verified position). On the recorded server sweep (tests/fixtures/llamacpp/0c1e570/
# sweep-server/q4_1: baselines at 55.6 ms a token against llama-bench's 26.4 ms step) the median
# error is 4.3 % that way; 11.2 % with llama-bench's step alone, 61.6 % with the excess charged per round.
LLAMA_SERVER = Program("llama-server", extra_draft_steps=0, first_token_from_prompt=True, draft_processes_batch=True,
                       draft_policy="capped", loop_overhead="token",
                       unmodelled=("sampling and the server's loop: not reported by llama-server; charged per emitted "
                                   "token as the baselines' step beyond llama-bench's",
                                   "the draft's pass over each verified batch is counted as one draft step (not timed)"))
# transformers 4.57 _assisted_decoding: every round the assistant's generate() drafts up to
# num_assistant_tokens (one forward per drafted token, the first over the tokens it has not seen)
# and the target runs one forward over the last token and the candidates (k + 1, logits for
# each); the first round is fused with the prompt's forward, so every token comes from a round
# (rounds = n_predict - n_accept) and the counting hook counts them all. generate()'s own loop
# (logits processors, stopping criteria, cache bookkeeping) runs once per round on the target
# side: the baselines' step beyond the timed forward pass, charged per round.
TRANSFORMERS_ASSISTED = Program("transformers-assisted", extra_draft_steps=0, first_token_from_prompt=False,
                                draft_policy="capped", loop_overhead="round",
                                unmodelled=("generate()'s loop: charged once per round as the baselines' step beyond "
                                            "the timed forward pass",
                                            "the assistant's generate() set-up each round is not timed",
                                            "the first round (fused with the prompt) is in the counters, not in the "
                                            "speed"))
# transformers' prompt lookup: the same loop with n-grams of the context as candidates (no draft
# model, nothing to time on a draft side: alpha and the ceiling only).
TRANSFORMERS_PROMPT_LOOKUP = Program("transformers-prompt-lookup", extra_draft_steps=0, first_token_from_prompt=False,
                                     draft_policy="capped", loop_overhead="round")
PROGRAMS: dict[str, Program] = {p.name: p for p in (LLAMA_SPECULATIVE, SPECULATIVE_SIMPLE, LLAMA_SERVER,
                                                    TRANSFORMERS_ASSISTED, TRANSFORMERS_PROMPT_LOOKUP)}


def program(name: str) -> Program:
    """The profile of a speculative program by its binary name (``speculative`` = llama-speculative)."""
    key = {"speculative": "llama-speculative", "speculative-simple": "llama-speculative-simple"}.get(name, name)
    try:
        return PROGRAMS[key]
    except KeyError:
        raise LlamaspecError(f"no round profile for program {name!r}",
                             hint=f"known programs: {', '.join(PROGRAMS)}") from None


# The target's batches the model interpolates a verification's cost in: a draft of up to 16 tokens
# plus one (batch 1 is the target's own step). Every engine that times costs times these.
VERIFY_BATCH_SIZES = tuple(range(1, 18))

# The draft's cost is fitted to measured speedups only over at least this many draft lengths: with
# fewer, one parameter would match the points by construction and its error would say nothing.
FIT_MIN_LENGTHS = 3


def bench_depth(n_prompt: int, n_predict: int) -> int:
    """The context depth at which a run's costs are timed: its prompt plus half its generation
    (the mean depth of the rounds, attention cost being linear in depth)."""
    if n_prompt < 0 or n_predict < 0:
        raise LlamaspecError(f"prompt and generation lengths must be >= 0, got {n_prompt}, {n_predict}")
    return n_prompt + n_predict // 2


# ---------------------------------------------------------------------------------------------
# Cost model
# ---------------------------------------------------------------------------------------------


def interpolate(points: Sequence[tuple[int, float]], x: float) -> float:
    """Piecewise-linear value at ``x`` through measured (size, ms) points, sorted by size;
    beyond the measured range, the line through the two nearest points (one point: proportional)."""
    if not points:
        raise LlamaspecError("no measured batch timings to interpolate", hint=_HINT_TIMES)
    if len(points) == 1:
        size, ms = points[0]
        return ms * x / size
    i = 1
    while i < len(points) - 1 and points[i][0] < x:
        i += 1
    (x0, y0), (x1, y1) = points[i - 1], points[i]
    return y0 + (y1 - y0) * (x - x0) / (x1 - x0)


def monotone(points: Sequence[tuple[int, float]]) -> tuple[tuple[int, float], ...]:
    """The closest non-decreasing sequence to measured (size, ms) points (pool-adjacent-violators,
    equal weights): a batch never costs less than a smaller one, so a dip is noise (a busy machine
    slowed one size's repetitions), and it is averaged with its neighbours rather than kept."""
    blocks: list[tuple[float, int]] = []  # (mean, count)
    for _, ms in sorted(points):
        mean, count = ms, 1
        while blocks and blocks[-1][0] > mean:
            prev_mean, prev_count = blocks.pop()
            mean = (prev_mean * prev_count + mean * count) / (prev_count + count)
            count += prev_count
        blocks.append((mean, count))
    values = [mean for mean, count in blocks for _ in range(count)]
    return tuple((size, value) for (size, _), value in zip(sorted(points), values, strict=True))


def _table(name: str, table: Mapping[int, float] | Sequence[tuple[int, float]]) -> tuple[tuple[int, float], ...]:
    items = table.items() if isinstance(table, Mapping) else table
    out = []
    for size, ms in items:
        _count(f"{name} batch size", size, minimum=1)
        _positive(f"{name} batch ms ({size} tokens)", ms)
        out.append((int(size), float(ms)))
    out.sort()
    if len({s for s, _ in out}) != len(out):
        raise LlamaspecError(f"{name} batch timings repeat a batch size", hint=_HINT_TIMES)
    return tuple(out)


@dataclass(frozen=True)
class CostModel:
    """Milliseconds per round and per baseline token, from measured costs.

    ``T_round(k) = draft_steps(k)·draft_ms_per_token [+ draft batch of k+1] + verify_ms(k)
    [+ sampling]``, the baseline spending ``target_ms_per_token [+ target_sample_ms]`` per token.
    ``verify_ms(k)`` is the measured target batch of k + 1 tokens (interpolated between measured
    sizes); without measured batches it is one target step, the paper's assumption. The sampling
    terms are per emitted token (target) and per drafted token (draft); 0 leaves them out.
    """

    target_ms_per_token: float
    draft_ms_per_token: float
    verify_batches: tuple[tuple[int, float], ...] = ()  # (tokens, ms) of target batches; () = one step
    draft_batches: tuple[tuple[int, float], ...] = ()  # (tokens, ms) of draft batches, for draft_processes_batch
    program: Program = LLAMA_SPECULATIVE
    target_sample_ms: float = 0.0
    draft_sample_ms: float = 0.0
    depth: int | None = None  # the context depth the costs were timed at (documentation)
    # The target-alone step as the run's own baselines measured it (ms per token on SPEED_DEFINITION,
    # sampling included); None takes it from the timed step (target_ms_per_token + target_sample_ms).
    baseline_step_ms: float | None = None
    # The draft's c as timed alone, when draft_ms_per_token was fitted to measured speedups instead
    # (:meth:`fitted_to`); None: the draft's costs are as timed.
    timed_cost_ratio: float | None = None

    def __post_init__(self) -> None:
        _positive("target_ms_per_token", self.target_ms_per_token)
        if self.baseline_step_ms is not None:
            _positive("baseline_step_ms", self.baseline_step_ms)
        _non_negative("draft_ms_per_token", self.draft_ms_per_token)
        _non_negative("target_sample_ms", self.target_sample_ms)
        _non_negative("draft_sample_ms", self.draft_sample_ms)
        object.__setattr__(self, "verify_batches", _table("target", self.verify_batches))
        object.__setattr__(self, "draft_batches", _table("draft", self.draft_batches))

    @classmethod
    def from_bench(cls, target_batches: Mapping[int, float], draft_step_ms: float, program: Program = LLAMA_SPECULATIVE,
                   *, draft_batches: Mapping[int, float] | None = None, target_sample_ms: float = 0.0,
                   draft_sample_ms: float = 0.0, depth: int | None = None, smooth: bool = True) -> CostModel:
        """The model from llama-bench timings at one depth: target batches of 1..K tokens (batch 1
        is the target's step, so every ratio comes from one program) and the draft's step.

        ``smooth`` makes the batch costs non-decreasing in the batch size (:func:`monotone`) before
        they are interpolated; the points are otherwise used as measured."""
        if 1 not in target_batches:
            raise LlamaspecError("the target's batch timings lack batch size 1 (its single-token step)",
                                 hint="time the target with llama-bench -p 1,2,...,17 at the run's depth")
        table = _table("target", target_batches)
        if smooth:
            table = monotone(table)
        return cls(target_ms_per_token=dict(table)[1], draft_ms_per_token=draft_step_ms,
                   verify_batches=table,
                   draft_batches=tuple((draft_batches or {}).items()), program=program,
                   target_sample_ms=target_sample_ms, draft_sample_ms=draft_sample_ms, depth=depth)

    @property
    def cost_ratio(self) -> float:
        """The paper's c: one draft step in target steps."""
        return self.draft_ms_per_token / self.target_ms_per_token

    @property
    def extra_draft_steps(self) -> int:
        return self.program.extra_draft_steps

    @property
    def verify_measured(self) -> bool:
        return bool(self.verify_batches)

    @property
    def baseline_ms_per_token(self) -> float:
        """What the baseline spends per token: measured by the baselines themselves when given,
        else the timed step plus sampling."""
        if self.baseline_step_ms is not None:
            return self.baseline_step_ms
        return self.target_ms_per_token + self.target_sample_ms

    def verify_ms(self, k: float) -> float:
        """The target's batch of k + 1 tokens: measured (interpolated), or one step when not measured."""
        if not self.verify_batches:
            return self.target_ms_per_token
        return interpolate(self.verify_batches, k + 1.0)

    def verify_steps(self, k: float) -> float:
        """Verification of k + 1 tokens, in target steps (1 in the paper)."""
        return self.verify_ms(k) / self.target_ms_per_token

    def draft_ms(self, k: float) -> float:
        """The draft's share of a round: its single steps, its batch if the program runs one, its sampling."""
        ms = self.program.draft_steps_per_round(k) * self.draft_ms_per_token + k * self.draft_sample_ms
        if self.program.draft_processes_batch:
            # Without a measured draft batch, count it as one draft step (a lower bound).
            ms += interpolate(self.draft_batches, k + 1.0) if self.draft_batches else self.draft_ms_per_token
        return ms

    @property
    def loop_overhead_ms(self) -> float:
        """The engine's own loop beyond the timed step and its sampling, per round or per emitted
        token (``program.loop_overhead``): the step the run's baselines measured less the timed one
        (at least 0); 0 when the program charges none or no baseline step is given."""
        if self.program.loop_overhead == "none" or self.baseline_step_ms is None:
            return 0.0
        return max(self.baseline_step_ms - self.target_ms_per_token - self.target_sample_ms, 0.0)

    def call_ms(self, k: float, tokens: float = 1.0) -> float:
        """One round at draft length k emitting ``tokens`` tokens (sampled on the target, one each),
        with the engine's loop overhead where its program charges it."""
        loop = self.loop_overhead_ms * (tokens if self.program.loop_overhead == "token" else 1.0)
        return self.draft_ms(k) + self.verify_ms(k) + tokens * self.target_sample_ms + loop

    def speedup(self, alpha: float, k: float) -> float:
        """Predicted decode speedup over the target alone: tokens per round · baseline ms per token / T_round(k)."""
        tokens = expected_tokens_per_round(alpha, k)
        call = self.call_ms(k, tokens)
        if call <= 0:
            return math.inf
        return tokens * self.baseline_ms_per_token / call

    @property
    def draft_fitted(self) -> bool:
        return self.timed_cost_ratio is not None

    def fitted_to(self, observations: Sequence[Observation], alpha: float) -> CostModel:
        """This model with the draft's costs (its step, batch and sampling, scaled together) set to
        what best explains the measured speedups at ``alpha``; the target's costs stay as timed.

        Why: inside a round the draft's steps need not cost what the draft timed alone does, and
        one llama-bench timing of the draft's step is itself noisy: on the offline pair's
        acceptance recordings of 3 December the fitted step is 48 % above the timed one with the
        Q4_1 draft, 4 % below with Q4_0 and 52 % above with Q2_K (the model's median error 2.7,
        4.2 and 3.1 % fitted, 23.6, 3.3 and 19.9 % as timed; on those of 2 December it was 12 %
        below with Q4_1 and 25 % below with Q4_0), while the paired speedups are measured where it
        matters. One parameter, by least squares
        on 1/speedup (relative: each point weighted by its measured speedup squared), closed form
        since a round's time is linear in the draft's scale. Needs :data:`FIT_MIN_LENGTHS` draft
        lengths; fewer, or nothing drafted, returns this model unchanged."""
        drafted = [o for o in observations if o.n_drafted > 0]
        if len({o.draft_max for o in drafted}) < FIT_MIN_LENGTHS or self.draft_ms_per_token <= 0:
            return self
        num = den = 0.0
        for o in drafted:
            k = o.drafted_per_round
            tokens = expected_tokens_per_round(alpha, k)
            per = tokens * self.baseline_ms_per_token
            d = self.draft_ms(k) / per  # the draft's share of 1/speedup
            rest = (self.call_ms(k, tokens) - self.draft_ms(k)) / per  # verification, sampling, the engine's loop
            w = o.measured_speedup ** 2
            num += w * d * (1.0 / o.measured_speedup - rest)
            den += w * d * d
        scale = max(num / den, 0.0) if den > 0 else 1.0
        fitted = self.with_cost_ratio(scale * self.cost_ratio)
        return dataclasses.replace(fitted, timed_cost_ratio=self.timed_cost_ratio if self.draft_fitted else self.cost_ratio)

    def with_cost_ratio(self, cost_ratio: float) -> CostModel:
        """The same model with the draft's per-token cost set to ``cost_ratio`` target steps
        (its draft batches and sampling scaled alike; every other field kept)."""
        scale = cost_ratio / self.cost_ratio if self.cost_ratio > 0 else 0.0
        return dataclasses.replace(
            self,
            draft_ms_per_token=cost_ratio * self.target_ms_per_token,
            draft_batches=tuple((s, ms * scale) for s, ms in self.draft_batches) if scale > 0 else (),
            draft_sample_ms=self.draft_sample_ms * scale,
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
    """One measured speculative setting (its repeats pooled) and its baseline.

    - ``draft_max``: the requested draft length (k).
    - ``n_drafted``, ``n_accept``: the program's ``n_drafted =`` and ``n_accept =`` lines (summed over
      repeats). Its ``accept = x%`` line is ``100 * n_accept / n_drafted`` (see :attr:`accept_rate`).
    - ``n_generated``: ``n_predict =`` (summed over repeats).
    - ``spec_decode_tps``, ``baseline_decode_tps``: speeds on SPEED_DEFINITION (medians).
    - ``rounds``: every verification round (target call after the prompt), summed, as the
      measurements carry them (``Measurement.rounds``, one definition for every engine); None
      derives them from the counters by ``program``'s own loop (:meth:`Program.rounds`, per run:
      pass ``runs``).
    - ``drafted_rounds``: the rounds that drafted something, where the engine counts them apart
      (llama-server's /metrics: a step whose draft came back empty is a plain decode); None where
      every round drafts or the engine does not say.
    - ``speedup``: the measured speedup if known better than the ratio of the two medians (the median
      of paired ratios); None uses spec/baseline.
    - ``runs``: how many runs the counters sum over (the derived rounds subtract one per run).
    """

    draft_max: int
    n_drafted: int
    n_accept: int
    n_generated: int
    spec_decode_tps: float
    baseline_decode_tps: float
    rounds: int | None = None
    program: Program = LLAMA_SPECULATIVE
    speedup: float | None = None
    runs: int = 1
    drafted_rounds: int | None = None

    def __post_init__(self) -> None:
        _count("draft_max", self.draft_max, minimum=1)
        _count("n_drafted", self.n_drafted)
        _count("n_accept", self.n_accept)
        _count("n_generated", self.n_generated, minimum=1)
        _count("runs", self.runs, minimum=1)
        if self.n_accept > self.n_drafted:
            raise LlamaspecError(
                f"n_accept ({self.n_accept}) exceeds n_drafted ({self.n_drafted}): only drafted tokens can be accepted",
                hint=_HINT_COUNTS,
            )
        if self.rounds is not None:
            _count("rounds", self.rounds, minimum=1)
            if self.rounds + self.n_accept > self.n_generated:
                raise LlamaspecError(
                    f"rounds ({self.rounds}) + n_accept ({self.n_accept}) exceed n_generated ({self.n_generated}): "
                    "every round emits its accepted tokens plus one",
                    hint=_HINT_COUNTS,
                )
        if self.drafted_rounds is not None:
            _count("drafted_rounds", self.drafted_rounds)
            if self.drafted_rounds > self.calls:
                raise LlamaspecError(
                    f"{self.program.name} counted {self.drafted_rounds} rounds that drafted, more than its "
                    f"{self.calls} rounds (n_predict {self.n_generated}, n_accept {self.n_accept})", hint=_HINT_COUNTS)
        if self.rounds is None and self.derived_rounds < 1:
            raise LlamaspecError(
                f"n_accept ({self.n_accept}) leaves no verification round in {self.n_generated} generated tokens "
                f"({self.program.name}: rounds = n_predict - n_accept"
                f"{' - 1' if self.program.first_token_from_prompt else ''})",
                hint=_HINT_COUNTS,
            )
        _positive("spec_decode_tps", self.spec_decode_tps)
        _positive("baseline_decode_tps", self.baseline_decode_tps)
        if self.speedup is not None:
            _positive("speedup", self.speedup)

    @property
    def derived_rounds(self) -> int:
        per_run = 1 if self.program.first_token_from_prompt else 0
        return self.n_generated - self.n_accept - per_run * self.runs

    @property
    def accept_rate(self) -> float | None:
        """llama.cpp's ``accept`` as a fraction (n_accept / n_drafted); None if nothing was drafted."""
        return contract.acceptance(self.n_accept, self.n_drafted)

    @property
    def calls(self) -> int:
        """Verification rounds: as measured, or derived from the counters by the program's loop."""
        return self.rounds if self.rounds is not None else self.derived_rounds

    @property
    def drafted_per_round(self) -> float:
        """Mean tokens actually drafted per round (≤ draft_max unless the build adapts it)."""
        value = contract.drafted_per_round(self.n_drafted, self.calls)
        assert value is not None  # calls >= 1, checked on construction
        return value

    @property
    def tokens_per_round(self) -> float:
        """Tokens emitted per round, measured: accepted + the target's own (Spec-Bench's tau)."""
        value = contract.tokens_per_round(self.n_accept, self.calls)
        assert value is not None  # calls >= 1, checked on construction
        return value

    @property
    def measured_speedup(self) -> float:
        return self.speedup if self.speedup is not None else self.spec_decode_tps / self.baseline_decode_tps

    @property
    def alpha(self) -> float | None:
        """This point's own α, from tokens per round at its mean drafted length; None if nothing drafted."""
        if self.n_drafted == 0:
            return None
        k = self.drafted_per_round
        return alpha_from_tokens_per_round(min(self.tokens_per_round, k + 1.0), k)


# ---------------------------------------------------------------------------------------------
# Fit
# ---------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class PointFit:
    """One observation next to what the pooled model predicts for it."""

    draft_max: int
    accept_rate: float | None  # llama.cpp's accept, as a fraction
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
    tokens_per_round: float
    accept_rate: float  # what llama.cpp would print as accept, as a fraction
    call_steps: float  # cost of one round in baseline tokens' time
    speedup: float


@dataclass(frozen=True)
class Analysis:
    """The model fitted to a set of observations (one model pair, one target setting)."""

    alpha: float  # pooled per-token acceptance rate
    points: tuple[PointFit, ...]
    cost: CostModel | None  # None without measured costs: no speedup predictions
    curve: tuple[Prediction, ...]  # k = 1..max_draft; empty without a cost model
    program: Program = field(default=LLAMA_SPECULATIVE)

    @property
    def tokens_per_round_ceiling(self) -> float:
        """1/(1 - α): tokens per round as k → ∞."""
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

    @property
    def rel_errors(self) -> tuple[float, ...]:
        return tuple(p.rel_error for p in self.points if p.rel_error is not None)

    @property
    def median_abs_error(self) -> float | None:
        """Median |predicted - measured| / measured over the points: the fit's quality."""
        errors = self.rel_errors
        return statistics.median(abs(e) for e in errors) if errors else None

    @property
    def max_abs_error(self) -> float | None:
        errors = self.rel_errors
        return max(abs(e) for e in errors) if errors else None

    def fit_quality(self) -> str:
        """One line: how well the model predicts the measured points."""
        if self.median_abs_error is None or self.max_abs_error is None:
            return "no speedup predictions (no measured costs): only alpha and the ceiling"
        bias = statistics.median(self.rel_errors)
        return (f"model vs measured over {len(self.rel_errors)} draft lengths: median |error| "
                f"{100 * self.median_abs_error:.1f}%, max {100 * self.max_abs_error:.1f}%, median bias {100 * bias:+.1f}%")

    def table(self) -> str:
        """The points and the model side by side, then the fit quality (for reports and logs)."""
        lines = [f"{'draft':>5} {'accept':>7} {'tok/round':>9} {'measured':>9} {'predicted':>9} {'error':>7}"]
        for p in sorted(self.points, key=lambda q: q.draft_max):
            pred = f"{p.predicted_speedup:.3f}x" if p.predicted_speedup is not None else "-"
            err = f"{100 * p.rel_error:+.1f}%" if p.rel_error is not None else "-"
            acc = f"{100 * p.accept_rate:.1f}%" if p.accept_rate is not None else "-"
            lines.append(f"{p.draft_max:>5} {acc:>7} {p.tokens_per_round:>9.2f} {p.measured_speedup:>8.3f}x {pred:>9} {err:>7}")
        lines.append(self.fit_quality())
        if self.best is not None and self.cost is not None:
            timed = f", timed alone {self.cost.timed_cost_ratio:.3f}" if self.cost.timed_cost_ratio is not None else ""
            lines.append(f"predicted best draft length {self.best.draft_max}: {self.best.speedup:.3f}x "
                         f"(alpha {self.alpha:.3f}, c {self.cost.cost_ratio:.3f}{timed})")
        return "\n".join(lines)


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

    def accepted(a: float) -> float:
        return sum(o.calls * expected_accepted(a, o.drafted_per_round) for o in drafted)

    return _solve_increasing(accepted, goal, 0.0, 1.0)


def analyze(observations: Sequence[Observation], cost: CostModel | None = None, max_draft: int = 16,
            fit_draft: bool = True) -> Analysis:
    """Fit α to measured points and predict every draft length 1..K with measured costs.

    α is pooled over the points (weighted by their rounds); ``cost`` holds the costs measured for
    this setting (llama-bench at the run's depth, :meth:`CostModel.from_bench`); without it only α
    and the ceiling are known. ``fit_draft``: the draft's cost is fitted to the measured speedups
    (:meth:`CostModel.fitted_to`, over 3 or more draft lengths), the target's stays as timed. K is the larger of ``max_draft`` and the largest measured draft
    length. Each point's prediction uses the pooled α at the length that point drafted per round.
    """
    obs = list(observations)
    if not obs:
        raise LlamaspecError("no measured points to fit", hint="run a speculative measurement first")
    if max_draft < 1:
        raise LlamaspecError(f"max_draft must be >= 1, got {max_draft}")
    programs = {o.program for o in obs}
    if len(programs) > 1:
        raise LlamaspecError(f"the points come from different programs ({', '.join(sorted(p.name for p in programs))})",
                             hint="fit each program's points on their own")
    prog = obs[0].program
    if cost is not None and cost.program != prog:
        raise LlamaspecError(f"the costs are for {cost.program.name} but the points for {prog.name}",
                             hint="build the cost model with the points' program")
    alpha = _pooled_alpha(obs)
    k_max = max(max_draft, *(o.draft_max for o in obs))
    if cost is not None and fit_draft:
        cost = cost.fitted_to(obs, alpha)

    curve: tuple[Prediction, ...] = ()
    if cost is not None:
        curve = tuple(
            Prediction(
                draft_max=k,
                tokens_per_round=expected_tokens_per_round(alpha, k),
                accept_rate=accept_rate(alpha, k),
                call_steps=cost.call_ms(k, expected_tokens_per_round(alpha, k)) / cost.baseline_ms_per_token,
                speedup=cost.speedup(alpha, k),
            )
            for k in range(1, k_max + 1)
        )

    points = []
    for o in obs:
        k = o.drafted_per_round
        predicted = predicted_ms = implied = None
        if cost is not None:
            predicted = cost.speedup(alpha, k)
            predicted_ms = cost.call_ms(k, expected_tokens_per_round(alpha, k))
            steps = cost.program.draft_steps_per_round(k)
            if steps > 0:
                # tokens · t_base / (steps·c·t_target + the rest) = measured, solved for c
                rest = predicted_ms - steps * cost.draft_ms_per_token
                implied = ((o.tokens_per_round * cost.baseline_ms_per_token / o.measured_speedup - rest)
                           / (steps * cost.target_ms_per_token))
        points.append(
            PointFit(
                draft_max=o.draft_max,
                accept_rate=o.accept_rate,
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
    return Analysis(alpha=alpha, points=tuple(points), cost=cost, curve=curve, program=prog)


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
