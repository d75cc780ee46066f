"""The cost of a round and of a baseline token, from measured timings (:class:`CostModel`), and what it takes.

The target's batches are used as measured (interpolated between measured sizes, made
non-decreasing), never fitted to a line; the draft's cost may be fitted to measured speedups
(:meth:`CostModel.fitted_to`). :func:`best_draft_length` answers what the costs allow at one α.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field

from llamaspec.base.errors import LlamaspecError
from llamaspec.theory.maths import (
    HINT_TIMES,
    count,
    expected_tokens_per_round,
    non_negative,
    positive,
)
from llamaspec.theory.observation import Observation
from llamaspec.theory.profiles import RoundProfile

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



def interpolate(points: Sequence[tuple[int, float]], x: float) -> float:
    """Piecewise-linear value at ``x`` through measured (size, ms) points, sorted by size;
    beyond the measured range, the line through the two nearest points (one point: proportional)."""
    if not points:
        raise LlamaspecError("no measured batch timings to interpolate", hint=HINT_TIMES)
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
        count(f"{name} batch size", size, minimum=1)
        positive(f"{name} batch ms ({size} tokens)", ms)
        out.append((int(size), float(ms)))
    out.sort()
    if len({s for s, _ in out}) != len(out):
        raise LlamaspecError(f"{name} batch timings repeat a batch size", hint=HINT_TIMES)
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
    profile: RoundProfile = field(kw_only=True)  # the program whose round the costs add up
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
        positive("target_ms_per_token", self.target_ms_per_token)
        if self.baseline_step_ms is not None:
            positive("baseline_step_ms", self.baseline_step_ms)
        non_negative("draft_ms_per_token", self.draft_ms_per_token)
        non_negative("target_sample_ms", self.target_sample_ms)
        non_negative("draft_sample_ms", self.draft_sample_ms)
        object.__setattr__(self, "verify_batches", _table("target", self.verify_batches))
        object.__setattr__(self, "draft_batches", _table("draft", self.draft_batches))

    @classmethod
    def from_bench(cls, target_batches: Mapping[int, float], draft_step_ms: float, profile: RoundProfile,
                   *, target_sample_ms: float = 0.0, draft_sample_ms: float = 0.0,
                   depth: int | None = None) -> CostModel:
        """The model from llama-bench timings at one depth: target batches of 1..K tokens (batch 1
        is the target's step, so every ratio comes from one program) and the draft's step.

        The batch costs are made non-decreasing in the batch size (:func:`monotone`) before they
        are interpolated; the points are otherwise used as measured."""
        if 1 not in target_batches:
            raise LlamaspecError("the target's batch timings lack batch size 1 (its single-token step)",
                                 hint="time the target with llama-bench -p 1,2,...,17 at the run's depth")
        table = monotone(_table("target", target_batches))
        return cls(target_ms_per_token=dict(table)[1], draft_ms_per_token=draft_step_ms, verify_batches=table,
                   profile=profile, target_sample_ms=target_sample_ms, draft_sample_ms=draft_sample_ms, depth=depth)

    @property
    def cost_ratio(self) -> float:
        """The paper's c: one draft step in target steps."""
        return self.draft_ms_per_token / self.target_ms_per_token

    @property
    def extra_draft_steps(self) -> int:
        return self.profile.extra_draft_steps

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

    def draft_ms(self, k: float) -> float:
        """The draft's share of a round: its single steps, its batch if the program runs one, its sampling."""
        ms = self.profile.draft_steps_per_round(k) * self.draft_ms_per_token + k * self.draft_sample_ms
        if self.profile.draft_processes_batch:
            # Without a measured draft batch, count it as one draft step (a lower bound).
            ms += interpolate(self.draft_batches, k + 1.0) if self.draft_batches else self.draft_ms_per_token
        return ms

    @property
    def loop_overhead_ms(self) -> float:
        """The engine's own loop beyond the timed step and its sampling, per round or per emitted
        token (``profile.loop_overhead``): the step the run's baselines measured less the timed one
        (at least 0); 0 when the program charges none or no baseline step is given."""
        if self.profile.loop_overhead == "none" or self.baseline_step_ms is None:
            return 0.0
        return max(self.baseline_step_ms - self.target_ms_per_token - self.target_sample_ms, 0.0)

    def call_ms(self, k: float, tokens: float = 1.0) -> float:
        """One round at draft length k emitting ``tokens`` tokens (sampled on the target, one each),
        with the engine's loop overhead where its program charges it."""
        loop = self.loop_overhead_ms * (tokens if self.profile.loop_overhead == "token" else 1.0)
        return self.draft_ms(k) + self.verify_ms(k) + tokens * self.target_sample_ms + loop

    def speedup(self, alpha: float, k: float) -> float:
        """Predicted decode speedup over the target alone at per-token acceptance α: :meth:`speedup_at`
        with the closed form's tokens per round."""
        return self.speedup_at(k, expected_tokens_per_round(alpha, k))

    def speedup_at(self, k: float, tokens: float, plain_share: float = 0.0) -> float:
        """Predicted decode speedup at draft length k when a round emits ``tokens`` on average
        (from α, or from acceptance by position): tokens · baseline ms per token / T_round(k).

        ``plain_share``: the share of the emitted tokens that come from steps that draft nothing
        (a server's n-gram mode finding no match, the last token of a request), each a round of
        length 0 emitting one token; the others come from rounds of length k. Time per token is
        then (1 - share) · T_round(k) / tokens + share · T_round(0)."""
        if not 0.0 <= plain_share <= 1.0:
            raise LlamaspecError(f"the share of tokens from steps that draft nothing must be in [0, 1], got {plain_share!r}")
        call = self.call_ms(k, tokens)
        per_token = (1.0 - plain_share) * call / tokens + (plain_share * self.call_ms(0.0, 1.0) if plain_share else 0.0)
        if per_token <= 0:
            return math.inf
        return self.baseline_ms_per_token / per_token

    def fitted_to(self, observations: Sequence[Observation], alpha: float,
                  tokens_at: Callable[[float], float] | None = None) -> CostModel:
        """This model with the draft's costs (its step, batch and sampling, scaled together) set to
        what best explains the measured speedups at ``alpha``; the target's costs stay as timed.

        Why: inside a round the draft's steps need not cost what the draft timed alone does, and
        one llama-bench timing of the draft's step is itself noisy (docs/method.md, "Limits", has
        the recorded figures), while the paired speedups are measured where it matters. One
        parameter, by least squares on 1/speedup (relative: each point weighted by its measured
        speedup squared), closed form since a round's time is linear in the draft's scale. Needs :data:`FIT_MIN_LENGTHS` draft
        lengths; fewer, or nothing drafted, returns this model unchanged. ``tokens_at``: the tokens a
        round of (mean) length k emits, where it is known better than α's closed form (acceptance by
        position); with it, one measured length is enough, since the acceptance at every other
        length is then measured rather than fitted."""
        drafted = [o for o in observations if o.n_drafted > 0]
        enough = 1 if tokens_at is not None else FIT_MIN_LENGTHS
        if len({o.draft_max for o in drafted}) < enough or self.draft_ms_per_token <= 0:
            return self
        num = den = 0.0
        for o in drafted:
            k = o.drafted_per_round
            tokens = tokens_at(k) if tokens_at is not None else expected_tokens_per_round(alpha, k)
            per = tokens * self.baseline_ms_per_token
            d = self.draft_ms(k) / per  # the draft's share of 1/speedup
            rest = (self.call_ms(k, tokens) - self.draft_ms(k)) / per  # verification, sampling, the engine's loop
            w = o.measured_speedup ** 2
            num += w * d * (1.0 / o.measured_speedup - rest)
            den += w * d * d
        scale = max(num / den, 0.0) if den > 0 else 1.0
        fitted = self.with_cost_ratio(scale * self.cost_ratio)
        timed = self.timed_cost_ratio if self.timed_cost_ratio is not None else self.cost_ratio  # a refit keeps what was timed
        return dataclasses.replace(fitted, timed_cost_ratio=timed)

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


