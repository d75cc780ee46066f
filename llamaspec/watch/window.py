"""A window of a running llama-server's traffic: the differences of its counters between two
readings of one server lifetime (:class:`Window`), and the readings kept for it (:class:`Tracker`).

The counters count finished requests only (``llamacpp.live``), so a window holds the requests that
finished in it. A counter that goes down means the server restarted: the tracker then starts a new
window from the new server's start, and says so.

Every figure per step is defined once, by ``llamaspec.measure.contract`` (acceptance, mean accepted length,
acceptance by position) and by the server's round profile (``llamacpp.profiles.LLAMA_SERVER``:
every target call after a request's first token is a round; ``/metrics`` counts apart the
verification steps, the rounds that drafted).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

from llamaspec.llamacpp import live
from llamaspec.measure import contract


@dataclass(frozen=True)
class Window:
    """What the server did between two readings: counts of the requests that finished in it."""

    start: float | None  # time.time() of the first reading; None: since the server started
    end: float
    tokens: int  # generated tokens, each request's first included (tokens_predicted_total)
    generation_seconds: float  # each request's time from its first generated token to its last, summed
    prompt_tokens: int
    steps: int  # verification steps: the rounds that drafted something (spec_decode_num_drafts_total)
    drafted: int  # draft tokens proposed (spec_decode_num_draft_tokens_total)
    accepted: int  # of them accepted (spec_decode_num_accepted_tokens_total)
    # Per draft position i (index i-1): the verification steps accepted through it; None where the
    # server has no per-position series (older than it), or has verified no draft yet.
    accepted_by_position: tuple[int, ...] | None
    requests: int | None  # requests finished in it (llamacpp.live.finished_requests); None: unknown
    speculative_counters: bool = True  # False: a server too old to count speculative decoding
    rounded: tuple[str, ...] = ()  # counters printed by the server with fewer digits than whole units
    longest: int | None = None  # the longest sequence a request of the server's lifetime reached (n_tokens_max)

    @property
    def acceptance(self) -> float | None:
        """Accepted over drafted tokens."""
        return contract.acceptance(self.accepted, self.drafted)

    @property
    def mean_accepted(self) -> float | None:
        """Accepted tokens per verification step (llama.cpp's "mean len" is one more: the target's own token)."""
        return contract.mean_accepted(self.accepted, self.steps)

    @property
    def tokens_per_step(self) -> float | None:
        """Tokens a verification step emits: its accepted drafts and the target's token (llama.cpp's mean len)."""
        return contract.tokens_per_round(self.accepted, self.steps)

    @property
    def drafted_per_step(self) -> float | None:
        return contract.drafted_per_round(self.drafted, self.steps)

    @property
    def by_position(self) -> tuple[float | None, ...] | None:
        """Per draft position, the share of the verification steps accepted through it (as
        llama-server's own log line "acc per pos" divides it: by every verification step)."""
        if self.accepted_by_position is None or not self.steps:
            return None
        return contract.acceptance_by_position(self.accepted_by_position, (self.steps,) * len(self.accepted_by_position))

    @property
    def rounds(self) -> int | None:
        """Every target call after each request's first token (the server's round, LLAMA_SERVER):
        n_predict - n_accept - 1 per request, summed; None while the requests are unknown."""
        return None if self.requests is None else self.tokens - self.accepted - self.requests

    @property
    def plain_steps(self) -> int | None:
        """Rounds that drafted nothing (an n-gram mode without a match, a request's last token)."""
        rounds = self.rounds
        return None if rounds is None else max(rounds - self.steps, 0)

    @property
    def decode_tps(self) -> float | None:
        """Decode speed per request on llamaspec's definition (tokens after each request's first,
        over the time from its first token to its last), the requests pooled; None while unknown."""
        if self.requests is None or self.generation_seconds <= 0:
            return None
        return (self.tokens - self.requests) / self.generation_seconds

    @property
    def throughput(self) -> float | None:
        """Generated tokens over the window's clock time (every slot together; None: since the server
        started, at an unknown time)."""
        return self.tokens / (self.end - self.start) if self.start is not None and self.end != self.start else None

    @property
    def depth(self) -> int | None:
        """The mean context depth of the window's requests (``theory.bench_depth``: a request's prompt
        and half its generation); without the requests, half the longest sequence the server saw."""
        from llamaspec.theory import bench_depth

        if self.requests:
            return bench_depth(round(self.prompt_tokens / self.requests), round(self.tokens / self.requests))
        return self.longest // 2 if self.longest else None

    @property
    def speculated(self) -> bool:
        """Some request of the window drafted (a verification step happened)."""
        return self.steps > 0


def _count(reading: live.MetricsReading | None, name: str) -> float:
    return (reading.get(name) if reading is not None else 0.0) or 0.0


def difference(first: live.Reading | None, last: live.Reading, requests: int | None) -> Window:
    """The window between two readings of one server lifetime (``first`` None: since it started)."""
    a, b = (first.metrics if first else None), last.metrics

    def delta(name: str) -> float:
        return _count(b, name) - _count(a, name)

    by_position = None
    if b.accepted_by_position is not None:
        before = a.accepted_by_position if a is not None and a.accepted_by_position is not None else ()
        padded = tuple(before) + (0,) * (len(b.accepted_by_position) - len(before))
        by_position = tuple(y - x for x, y in zip(padded, b.accepted_by_position, strict=True))
    rounded = tuple(name for name in live.COUNTERS if name != "tokens_predicted_seconds_total"
                    and live.resolution(_count(b, name)) > 0.5)
    return Window(start=first.at if first else None, end=last.at, tokens=round(delta("tokens_predicted_total")),
                  generation_seconds=max(delta("tokens_predicted_seconds_total"), 0.0),
                  prompt_tokens=round(delta("prompt_tokens_total") + delta("prompt_tokens_cached_total")),
                  steps=round(delta("spec_decode_num_drafts_total")), drafted=round(delta("spec_decode_num_draft_tokens_total")),
                  accepted=round(delta("spec_decode_num_accepted_tokens_total")), accepted_by_position=by_position,
                  requests=requests, speculative_counters=b.speculative_counters, rounded=rounded, longest=b.longest)


def restarted(before: live.Reading, after: live.Reading) -> str | None:
    """Why ``after`` belongs to another server lifetime than ``before`` (None: the same one): a
    counter went down, or the server now serves another model or build."""
    down = live.went_down(before.metrics, after.metrics)
    if down:
        return f"its counters went down ({down})"
    for what, x, y in (("model", before.props.model_path, after.props.model_path),
                       ("build", before.props.build_info, after.props.build_info)):
        if x and y and x != y:
            return f"it now serves {what} {y} (was {x})"
    return None


@dataclass
class Tracker:
    """The readings of the current window: the newest, and the older ones within ``span`` seconds
    of it (None: every reading since the watch began, or since the server started where the
    window began there); the requests finished between each two."""

    span: float | None
    readings: list[live.Reading] = field(default_factory=list)
    # requests[i]: finished between readings[i - 1] and readings[i] (i = 0: since the server started
    # where the window began there, else unused)
    requests: list[int | None] = field(default_factory=list)
    from_start: bool = False  # the window began when the server started (its counters from zero)

    def start_from_zero(self, reading: live.Reading) -> None:
        """Begin a window at the server's start: its counters since then are in it."""
        self.readings, self.requests, self.from_start = [reading], [live.finished_requests(None, reading.metrics)], True

    def add(self, reading: live.Reading) -> str | None:
        """Add the newest reading; returns why a new window began (a restart), else None."""
        if self.readings:
            why = restarted(self.readings[-1], reading)
            if why is not None:
                self.start_from_zero(reading)
                return why
        self.requests.append(live.finished_requests(self.readings[-1].metrics, reading.metrics) if self.readings else None)
        self.readings.append(reading)
        while self.span is not None and len(self.readings) > 2 and self.readings[1].at <= reading.at - self.span:
            self.readings.pop(0)
            self.requests.pop(0)
            self.from_start = False
        return None

    def window(self) -> Window | None:
        """The window so far (None: one reading and not from the server's start)."""
        if self.from_start:
            first, between = None, self.requests
        elif len(self.readings) >= 2:
            first, between = self.readings[0], self.requests[1:]
        else:
            return None
        return difference(first, self.readings[-1], _total(between))


def _total(counts: Sequence[int | None]) -> int | None:
    return None if any(c is None for c in counts) else sum(c for c in counts if c is not None)

