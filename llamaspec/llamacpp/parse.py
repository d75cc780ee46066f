"""Read what llama.cpp's speculative and completion programs print: pure functions, text in, typed results out.

Everything is keyed on labels (``n_accept  =``, ``eval time =``), never on line numbers, and
lines the parser does not know are skipped, so new log lines in a later llama.cpp do no harm.

The formats this understands, by llama.cpp generation (the ``format`` of a result):

- ``llama_print_timings`` (2023 to Sep 2024): ``llama_print_timings:        eval time = ...``,
  with a ``sample time`` line inside each block. Stats on stderr, generated text on stdout
  (the prompt on stderr, too, in 2023).
- ``llama_perf`` (Sep 2024 to Nov 2025): ``llama_perf_context_print:`` for the context and
  ``llama_perf_sampler_print:    sampling time = ... / N runs`` for the sampler.
- ``common_perf`` (Nov 2025 on): ``common_perf_print:`` with ``sampling time`` (total),
  ``samplers time``, ``unaccounted time`` and ``graphs reused``. Current builds also put a
  log prefix before every stderr line (``0.22.466.241 I `` = minutes.seconds.ms.us since start
  and the level I/W/E/D; set by common_init(), off with ``--no-log-prefix``), and drop
  libllama's own INFO lines at the default verbosity, so the draft block of
  ``llama-speculative`` stays empty unless it runs with ``-lv 4``.

Since the common/log.h rewrite of late 2024 (``LOG`` for output, ``LOG_INF`` for logs) the
generated text goes to stdout and every log line to stderr. Both streams can be given separately or as one combined text
(``2>&1``; pass it as ``stdout`` with ``stderr`` empty).

``accept`` as printed is ``100 * n_accept / n_drafted`` rounded to 3 decimals (``-nan`` or
``nan`` when nothing was drafted): it is read as a fraction, ``acceptance`` (the printed
percentage over 100; None when nothing was drafted), the unit every figure of llamaspec is kept in.

What the speeds cover differs between the programs (llama.cpp's source, 2023 to now):

- llama-speculative ``decoded N tokens in S seconds``: wall time from the end of the prompt to
  the end of generation (``t_dec_start`` .. ``t_dec_end``), all of it: target verification
  batches, every draft-model decode, sampling of both models, detokenising and printing.
  N is n_predict, which can overshoot ``-n`` by up to the draft length (the whole last round
  counts). ``encoded`` covers the prompt on the target *and* the draft model.
- llama-completion / llama-cli / main ``eval time``: the summed llama_decode compute of the
  single-token batches only (from the first queued batch to the backend synchronisation); no
  sampling, no printing. One run per generated token except the last (sampled, never decoded).

So ``SpeculativeStats.decode_tps`` is an end-to-end rate and ``CompletionStats.decode_tps`` a
compute-only rate: their ratio flatters the baseline by its sampling and bookkeeping (1 to 3 %
in the recorded runs). The target's own ``eval`` line inside a speculative run says nothing
about speed: verification batches hold several tokens and count as ``prompt eval``, and builds
since at least early 2025 queue decodes without synchronising, so even the single-token ones
land there (``eval time = 0.00 ms / 1 runs``).

Its size: the three log formats above, read for each program (speculative, completion, the
statistics line with its acceptance by position), llama-bench's JSON and llama-server's
``/metrics`` text (Prometheus: one series, the per-position acceptance, the counters' change), over one line scanner
and one set of result dataclasses; each reader is short, their number makes the module long.
"""

from __future__ import annotations

import contextlib
import decimal
import json
import math
import re
from dataclasses import asdict, dataclass, field
from typing import Any

from llamaspec.base.errors import LlamaspecError
from llamaspec.measure.contract import Positions, acceptance_by_position
from llamaspec.theory.drafted import by_position

# --- the result types -------------------------------------------------------------------------


class ParseError(LlamaspecError):
    """The text holds no (complete) statistics block."""


@dataclass(frozen=True)
class Timings:
    """One timing block (``llama_print_timings`` / ``llama_perf_*_print`` / ``common_perf_print``).

    Values are as printed; a value printed as ``inf`` or ``nan`` is None. ``eval`` counts only
    single-token decodes: llama.cpp adds every multi-token batch (the prompt, and the drafted
    tokens a target verifies) to ``prompt eval``.
    """

    sources: tuple[str, ...]  # the functions that printed it, in order, e.g. ("common_perf_print",)
    load_ms: float | None = None
    # The sampler: "sample time" (llama_print_timings), "sampling time" (llama_perf_sampler_print),
    # "samplers time" (common_perf_print): ms over that many sampled tokens.
    sample_ms: float | None = None
    sample_runs: int | None = None
    sample_ms_per_token: float | None = None
    sample_tps: float | None = None
    # common_perf_print's "sampling time": samplers plus common/sampling overhead, no count.
    sampling_total_ms: float | None = None
    prompt_eval_ms: float | None = None
    prompt_eval_tokens: int | None = None
    prompt_eval_ms_per_token: float | None = None
    prompt_eval_tps: float | None = None
    eval_ms: float | None = None
    eval_runs: int | None = None
    eval_ms_per_token: float | None = None
    eval_tps: float | None = None
    total_ms: float | None = None
    total_tokens: int | None = None  # from 2024 on: prompt eval tokens + eval runs
    unaccounted_ms: float | None = None
    unaccounted_pct: float | None = None
    graphs_reused: int | None = None
    other: dict[str, float | None] = field(default_factory=dict)  # labels this parser does not know

    @property
    def eval_tokens_per_s(self) -> float | None:
        """Single-token decode speed, computed from ms and runs (not the rounded printed value)."""
        return _rate(self.eval_runs, self.eval_ms)

    @property
    def prompt_tokens_per_s(self) -> float | None:
        return _rate(self.prompt_eval_tokens, self.prompt_eval_ms)


@dataclass(frozen=True)
class DraftStatistics:
    """One line of ``common_speculative_print_stats`` (common/speculative.cpp), which the pinned
    llama-speculative-simple calls at its end and logs at trace level (``-lv 4``)::

        spec common_specu: statistics     draft-simple: #calls(b,g,a) =    1     15     14, #gen drafts =     14,
            #acc drafts =    12, #gen tokens =    112, #acc tokens =    58, #mean acc len = 5.14,
            #acc rate/pos = (0.857, 0.786, ...)

    Each field, from the implementation's counters:

    - ``calls_begin/calls_draft/calls_accept`` (``#calls(b,g,a)``): begin, draft and accept calls;
      ``calls_accept`` is every verification round after the first draft (an empty draft still calls
      accept with 0), the denominator of ``#mean acc len`` and ``#acc rate/pos``;
    - ``gen_drafts`` / ``gen_tokens``: the rounds that drafted at least one token, and the tokens
      they drafted; ``acc_drafts`` / ``acc_tokens``: the rounds that had at least one accepted, and
      the accepted tokens;
    - ``mean_acc_len``: 1 + acc_tokens / calls_accept, as printed (2 decimals);
    - ``acc_rate_by_position`` (``#acc rate/pos``): per position i, the rounds accepted through i
      over ``calls_accept`` (3 decimals). Only the rates are printed, so the counts are derived:
      rate x calls_accept, rounded (exact while calls_accept < 1000, and checked against
      acc_drafts and acc_tokens); see :func:`positions`. The list is as long as the longest
      accepted run: positions beyond it had no token accepted.

    Printed only when the implementation was called to accept at least once; without a round the
    line ends after ``#acc tokens`` (mean and rates None).
    """

    implementation: str  # draft-simple, ngram-mod, ...
    calls_begin: int
    calls_draft: int
    calls_accept: int
    gen_drafts: int
    acc_drafts: int
    gen_tokens: int
    acc_tokens: int
    mean_acc_len: float | None = None
    acc_rate_by_position: tuple[float, ...] | None = None


@dataclass(frozen=True)
class SpeculativeStats:
    """What ``llama-speculative`` (or ``speculative``, ``llama-speculative-simple``) printed."""

    format: str  # llama_print_timings | llama_perf | common_perf | none (no timing lines at all)
    n_encoded: int  # "encoded N tokens": the prompt
    encode_s: float
    encode_tps: float | None
    n_decoded: int  # "decoded N tokens": equals n_predict
    decode_s: float
    decode_tps: float | None
    n_draft: int  # the draft length; in Sep 2023 builds the final value of an adaptive length (+8 / -1)
    n_predict: int  # tokens generated (may overshoot -n: the last round's accepted tokens all count)
    n_drafted: int
    n_accept: int
    acceptance: float | None  # the printed "accept = x%" as a fraction (x / 100); None when nothing was drafted
    draft: Timings | None  # None when the build printed no draft timings (current builds without -lv 4)
    target: Timings | None
    text: str | None  # stdout without the blank lines around it: prompt + generation since 2024
    log_prefix: bool = False  # lines carried llama.cpp's "M.SS.mmm.uuu L " prefix
    # common_speculative_print_stats' lines (llama-speculative-simple at -lv 4 and up), one per
    # speculative implementation; empty when the program prints none (llama-speculative never does).
    statistics: tuple[DraftStatistics, ...] = ()
    statistics_problem: str | None = None  # a statistics line that could not be read (cut off, malformed)
    # "- n_max=4, n_min=0, p_min=0.000000" (trace level, when the implementation is added): the
    # draft's p-min as the program applied it; None where not printed.
    p_min: float | None = None
    # The implementation's longest draft as that line prints it: draft-simple's and ngram-mod's n_max,
    # ngram-cache's n_draft (the draft-free modes do not use n_draft above); None where not printed.
    longest_draft: int | None = None

    # Printed counters only: rounds, tokens per round and the mean accepted length depend on how
    # each program of each generation counts a round, so the program's profile derives them
    # (llamaspec.llamacpp.flags.CountingProfile, llamaspec.theory.RoundProfile), once, onto the Measurement.

    def to_dict(self) -> dict[str, Any]:
        data = _with_derived(self, ())
        data.pop("derived")
        by = positions(self)
        data["by_position"] = {"drafted": by.drafted, "accepted": by.accepted, "note": by.note,
                               "acceptance": acceptance_by_position(by.accepted, by.drafted)}
        return data


@dataclass(frozen=True)
class CompletionStats:
    """What the target-only baseline printed (``llama-completion -no-cnv``, ``llama-cli``, ``main``)."""

    format: str
    timings: Timings  # the context and sampler lines together
    text: str | None  # stdout: the echoed prompt and the generation, without " [end of text]"
    end_of_text: bool = False  # the model stopped on its own (" [end of text]")
    log_prefix: bool = False
    # Drafting where the target should run alone, as a speculative loop prints it: "n_drafted = N"
    # and "n_accept = N", else common_speculative_print_stats' "#gen tokens" and "#acc tokens" summed
    # over its implementations; None where the program printed neither (every target-only program
    # so far). A baseline that drafted is refused by the run core (contract.refuse_drafting_baseline).
    n_drafted: int | None = None
    n_accept: int | None = None

    @property
    def n_prompt(self) -> int | None:
        """Prompt tokens (the context's prompt eval count)."""
        return self.timings.prompt_eval_tokens

    @property
    def eval_runs(self) -> int | None:
        """Single-token decodes; the last generated token is sampled but never decoded."""
        return self.timings.eval_runs

    @property
    def n_decoded(self) -> int | None:
        """Tokens generated (sampled): one more than the decodes, the last being sampled only."""
        return self.timings.eval_runs + 1 if self.timings.eval_runs is not None else None

    @property
    def encode_tps(self) -> float | None:
        """Prompt speed: prompt tokens over prompt eval time."""
        return self.timings.prompt_tokens_per_s

    @property
    def decode_tps(self) -> float | None:
        """Decode speed, eval runs over eval time: llama_decode compute only (no sampling, no printing)."""
        return self.timings.eval_tokens_per_s

    @property
    def generation_tps(self) -> float | None:
        """Tokens after the first over the time from the first generated token to the last: the
        eval runs (one decode per token after the first) over eval time plus sampling time
        (``sampling time`` on current builds, the sampler's ``sample time`` before). Printing and
        detokenising are not timed by the program (well under 1 % here)."""
        t = self.timings
        sampling = t.sampling_total_ms if t.sampling_total_ms is not None else t.sample_ms
        if t.eval_runs is None or not t.eval_ms:
            return None
        return t.eval_runs / (t.eval_ms + (sampling or 0.0)) * 1e3

    def to_dict(self) -> dict[str, Any]:
        return _with_derived(self, ("n_prompt", "eval_runs", "n_decoded", "encode_tps", "decode_tps", "generation_tps"))


def _with_derived(obj: Any, names: tuple[str, ...]) -> dict[str, Any]:
    data = asdict(obj)
    data["derived"] = {n: getattr(obj, n) for n in names}
    for key in ("draft", "target", "timings"):
        sub = getattr(obj, key, None)
        if isinstance(sub, Timings):
            data[key]["derived"] = {"eval_tokens_per_s": sub.eval_tokens_per_s, "prompt_tokens_per_s": sub.prompt_tokens_per_s}
    return data


def _rate(count: int | None, ms: float | None) -> float | None:
    if count is None or not ms:
        return None
    return count / ms * 1e3


# --- lines ------------------------------------------------------------------------------------

_ANSI = re.compile(r"\x1b\[[0-9;]*[A-Za-z]")
# common/log.cpp: "%d.%02d.%03d.%03d " timestamp (with --log-timestamps) then "I " / "W " / "E " / "D ".
_PREFIX = re.compile(r"^(?:\d+\.\d{2}\.\d{3}\.\d{3} )?[IWED] (?=.)|^\d+\.\d{2}\.\d{3}\.\d{3} (?=.)")
_NUM = r"[-+]?(?:\d+(?:\.\d*)?|\.\d+)(?:[eE][-+]?\d+)?|[-+]?(?:nan|inf)(?:\(\w*\))?"
_CODED = re.compile(rf"^(?P<what>encoded|decoded)\s+(?P<n>\d+) tokens in\s+(?P<s>{_NUM}) seconds, speed:\s+(?P<tps>{_NUM}) t/s", re.I)
_COUNTER = re.compile(rf"^(?P<name>n_draft|n_predict|n_drafted|n_accept)\s*=\s*(?P<v>{_NUM})\s*$")
_ACCEPT = re.compile(rf"^accept\s*=\s*(?P<v>{_NUM})\s*%\s*$", re.I)
_SECTION = re.compile(r"^(?P<name>draft|target):\s*$")
_TIMING = re.compile(
    r"^(?P<src>llama_print_timings|llama_perf_context_print|llama_perf_sampler_print|common_perf_print):"
    rf"\s+(?P<label>[a-z][a-z ]*?)\s*=\s*(?P<v>{_NUM})\s*(?:ms)?"
    rf"(?:\s*/\s*(?P<n>{_NUM})\s*(?P<unit>runs|tokens|%))?"
    rf"(?:\s*\(\s*(?P<per>{_NUM}) ms per token,\s*(?P<tps>{_NUM}) tokens per second\))?",
    re.I,
)
# common_speculative_print_stats, after the log prefix and "spec common_specu: ".
_STATISTICS = re.compile(r"(?:^|\s)statistics\s+(?P<impl>[\w-]+):\s*(?P<rest>#calls.*)$")
# An implementation's parameters, at trace level when it is set up: "- n_max=4, n_min=0, p_min=0.000000"
# (draft-simple), "- n_match=24, n_max=64, n_min=48" (ngram-mod), "- n_draft=8, cache_static=none, ..."
# (ngram-cache); ngram-simple and the ngram-map modes print none.
_IMPL_PARAMS = re.compile(r"^(?:spec \S+: )?- (?P<params>[a-z_]+=\S+(?:, [a-z_]+=\S+)*)\s*$")
_STAT_FIELD = re.compile(r"#(?P<label>[a-z][a-z/(),]*(?: [a-z/]+)*)\s*=\s*(?P<value>\([^)]*\)?|[^,]*)")
_END_OF_TEXT = " [end of text]\n"

# Lines that are llama.cpp's log, not generated text: for cutting the text out of a combined capture.
_LOG_LINE = re.compile(
    r"^(?:\d+\.\d{2}\.\d{3}\.\d{3} [IWED] "  # current builds' prefix
    r"|(?:llama|llm|ggml|gguf|clip|common|load|print_info|main|system_info|sampling|generate|build|log"
    r"|speculative|init|sched|graph)\w*:"  # "function: message", as llama.cpp logs before the text
    r"|sampler (?:seed|params|chain):"
    r"|\t(?:repeat_last_n|dry_|top_k|mirostat)"  # sampler params continuation lines
    r"|\.+\s*$"  # the loader's progress dots
    r"|\$ |# exit status "  # llamaspec's own run log (proc.run): header and footer
    r"|Log start)",
)


def _strip(line: str) -> tuple[str, bool]:
    """A line without colour codes and log prefix; whether it had a prefix."""
    line = _ANSI.sub("", line).rstrip("\r\n")
    m = _PREFIX.match(line)
    if m:
        return line[m.end():], True
    return line, False


def _number(text: str) -> float | None:
    value = float(text.split("(")[0])
    return value if math.isfinite(value) else None


def _fraction(percent: str) -> float | None:
    """A printed percentage as a fraction, divided in decimal so that it reads as written ("10.001"
    is 0.10001, where float division gives 0.10000999999999999); None for nan."""
    value = _number(percent)
    return None if value is None else float(decimal.Decimal(percent.split("(")[0]) / 100)


def _int(text: str) -> int | None:
    value = _number(text)
    return int(value) if value is not None else None


# --- timing blocks ------------------------------------------------------------------------------

_FIELDS = {
    "load": ("load_ms", None, None, None),
    "sample": ("sample_ms", "sample_runs", "sample_ms_per_token", "sample_tps"),
    "samplers": ("sample_ms", "sample_runs", "sample_ms_per_token", "sample_tps"),
    "prompt eval": ("prompt_eval_ms", "prompt_eval_tokens", "prompt_eval_ms_per_token", "prompt_eval_tps"),
    "eval": ("eval_ms", "eval_runs", "eval_ms_per_token", "eval_tps"),
    "total": ("total_ms", "total_tokens", None, None),
    "unaccounted": ("unaccounted_ms", "unaccounted_pct", None, None),
}
_INT_FIELDS = {"sample_runs", "prompt_eval_tokens", "eval_runs", "total_tokens", "graphs_reused"}


class _Block:
    def __init__(self) -> None:
        self.sources: list[str] = []
        self.values: dict[str, Any] = {}
        self.other: dict[str, float | None] = {}

    def add(self, m: re.Match[str]) -> None:
        src = m.group("src")
        if src not in self.sources:
            self.sources.append(src)
        label = re.sub(r"\s+", " ", m.group("label").strip().lower())
        label = label[:-5] if label.endswith(" time") else label
        if label == "graphs reused":
            self.values["graphs_reused"] = _int(m.group("v"))
            return
        if label == "sampling":
            # common_perf_print: the whole sampling time, no count; llama_perf_sampler_print: the sampler
            label = "sample" if m.group("n") is not None else "sampling total"
        if label == "sampling total":
            self.values["sampling_total_ms"] = _number(m.group("v"))
            return
        names = _FIELDS.get(label)
        if names is None:
            self.other[label] = _number(m.group("v"))
            return
        groups = ("v", "n", "per", "tps")
        for name, group in zip(names, groups, strict=True):
            if name is None or m.group(group) is None:
                continue
            self.values[name] = _int(m.group(group)) if name in _INT_FIELDS else _number(m.group(group))

    def timings(self) -> Timings | None:
        if not self.sources:
            return None
        return Timings(sources=tuple(self.sources), other=self.other, **self.values)


def _format(sources: set[str]) -> str:
    if "common_perf_print" in sources:
        return "common_perf"
    if sources & {"llama_perf_context_print", "llama_perf_sampler_print"}:
        return "llama_perf"
    if "llama_print_timings" in sources:
        return "llama_print_timings"
    return "none"


# --- scanning -------------------------------------------------------------------------------------


@dataclass
class _Scan:
    coded: dict[str, tuple[int, float, float | None]] = field(default_factory=dict)
    counters: dict[str, int] = field(default_factory=dict)
    accept_seen: bool = False
    acceptance: float | None = None
    blocks: dict[str, _Block] = field(default_factory=dict)
    sections: list[str] = field(default_factory=list)
    sources: set[str] = field(default_factory=set)
    prefixed: bool = False
    first_stats_offset: int | None = None  # character offset of the first stats line in the text
    statistics: list[DraftStatistics] = field(default_factory=list)
    statistics_problem: str | None = None
    p_min: float | None = None
    longest_draft: int | None = None

    @property
    def has_speculative(self) -> bool:
        return bool(self.coded) or bool(self.counters)

    @property
    def has_timings(self) -> bool:
        return bool(self.sources)


def _scan(text: str) -> _Scan:
    scan = _Scan()
    section = "main"
    offset = 0
    for raw in text.splitlines(keepends=True):
        start = offset
        offset += len(raw)
        line, prefixed = _strip(raw)
        scan.prefixed = scan.prefixed or prefixed
        line = line.strip()
        if not line:
            continue
        stats = True
        if m := _CODED.match(line):
            scan.coded[m.group("what").lower()] = (int(m.group("n")), _number(m.group("s")) or 0.0, _number(m.group("tps")))
        elif m := _COUNTER.match(line):
            scan.counters[m.group("name")] = _int(m.group("v")) or 0
        elif m := _ACCEPT.match(line):
            scan.accept_seen = True
            scan.acceptance = _fraction(m.group("v"))
        elif m := _SECTION.match(line):
            section = m.group("name")
            scan.sections.append(section)
        elif m := _TIMING.match(line):
            scan.sources.add(m.group("src"))
            scan.blocks.setdefault(section, _Block()).add(m)
        elif m := _IMPL_PARAMS.match(line):
            params = dict(p.split("=", 1) for p in m.group("params").split(", "))
            with contextlib.suppress(ValueError):
                if "p_min" in params:
                    scan.p_min = _number(params["p_min"])
                longest = params.get("n_max", params.get("n_draft"))
                if longest is not None:
                    scan.longest_draft = int(longest)
            stats = False
        elif m := _STATISTICS.search(line):
            try:
                scan.statistics.append(parse_statistics_line(m.group("impl"), m.group("rest")))
            except ValueError as exc:
                scan.statistics_problem = f"{m.group('impl')}: {exc}"
            stats = False  # printed after the counters: not where the generated text ends
        else:
            stats = False
        if stats and scan.first_stats_offset is None:
            scan.first_stats_offset = start
    return scan


# --- text ----------------------------------------------------------------------------------------


def _text_from_stdout(stdout: str, fmt: str, speculative: bool) -> str:
    """stdout of a run whose logs went to stderr: the generation, without llama.cpp's framing."""
    text = stdout
    if speculative and fmt != "llama_print_timings" and text.startswith("\n\n"):
        text = text[2:]  # LOG("\n\n") before the prompt
    for tail in ("\n\n\n\n", "\n\n") if speculative else ("\n\n",):
        if text.endswith(tail):
            text = text[: -len(tail)]  # LOG("\n\n") after the generation (and once more at exit)
            break
    return text


def _text_from_combined(before_stats: str) -> str | None:
    """The generation in a combined capture: after the last log line before the stats, minus framing."""
    lines = before_stats.splitlines(keepends=True)
    last_log = -1
    for i, raw in enumerate(lines):
        if _LOG_LINE.match(_ANSI.sub("", raw)):
            last_log = i
    text = "".join(lines[last_log + 1:]).lstrip("\n")
    if not text.strip():
        return None
    return text[:-2] if text.endswith("\n\n") else text


def _split_end_of_text(text: str) -> tuple[str, bool]:
    if text.endswith(_END_OF_TEXT):
        return text[: -len(_END_OF_TEXT)], True
    if text.endswith(_END_OF_TEXT.rstrip("\n")):
        return text[: -len(_END_OF_TEXT.rstrip("\n"))], True
    return text, False


def _tail_hint(text: str) -> str:
    lines = [ln for ln in (_strip(x)[0].strip() for x in text.splitlines()) if ln]
    return f" (last line: {lines[-1][:120]!r})" if lines else " (the output is empty)"


# --- acceptance by position ------------------------------------------------------------------------

_STAT_INTS = {"gen drafts": "gen_drafts", "acc drafts": "acc_drafts", "gen tokens": "gen_tokens",
              "acc tokens": "acc_tokens"}


def parse_statistics_line(implementation: str, rest: str) -> DraftStatistics:
    """The fields of one ``statistics <impl>: #calls(b,g,a) = ...`` line (``rest`` from ``#calls``
    on), keyed on labels; ValueError naming what is missing or unreadable."""
    values: dict[str, Any] = {}
    for m in _STAT_FIELD.finditer(rest):
        label, value = m.group("label").strip(), m.group("value").strip()
        if label == "calls(b,g,a)":
            parts = value.split()
            if len(parts) != 3 or not all(p.isdigit() for p in parts):
                raise ValueError(f"#calls(b,g,a) is not three counts: {value!r}")
            values["calls_begin"], values["calls_draft"], values["calls_accept"] = (int(p) for p in parts)
        elif label in _STAT_INTS:
            if not value.isdigit():
                raise ValueError(f"#{label} is not a count: {value!r}")
            values[_STAT_INTS[label]] = int(value)
        elif label == "mean acc len":
            try:
                values["mean_acc_len"] = float(value)
            except ValueError:
                raise ValueError(f"#mean acc len is not a number: {value!r}") from None
        elif label == "acc rate/pos":
            if not (value.startswith("(") and value.endswith(")")):
                raise ValueError("the #acc rate/pos list is cut off (no closing parenthesis)")
            try:
                rates = tuple(float(x) for x in value[1:-1].split(",") if x.strip())
            except ValueError:
                raise ValueError(f"#acc rate/pos holds something other than numbers: {value[:80]!r}") from None
            if any(not (0.0 <= r <= 1.0) for r in rates):
                raise ValueError(f"#acc rate/pos holds a rate outside 0..1: {value[:80]!r}")
            values["acc_rate_by_position"] = rates
    missing = [n for n in ("calls_accept", *_STAT_INTS.values()) if n not in values]
    if missing:
        raise ValueError(f"the line is cut off or malformed: no {', '.join(missing)}")
    if values["calls_accept"] > 0 and "acc_rate_by_position" not in values:
        raise ValueError("the line is cut off: no #acc rate/pos after its rounds")
    return DraftStatistics(implementation=implementation, **values)


# Rates are printed with 3 decimals: rate x rounds is within 0.0005 x rounds of the count, so the
# nearest integer is the count while rounds stay below this.
EXACT_RATE_ROUNDS = 1000


def positions(stats: SpeculativeStats, n_predict: int | None = None, draft_len: int | None = None) -> Positions:
    """Acceptance by draft position from llama-speculative-simple's statistics line, or a labelled gap.

    Counts: accepted through position i = rate_i x ``#calls`` accept, rounded (checked: position 1's
    count is ``#acc drafts`` and their sum ``#acc tokens``). Drafted at position i: the line gives
    only the drafting rounds D (``#gen drafts``) and their tokens T (``#gen tokens``), not each
    round's length: ``theory.drafted.by_position`` derives the counts from D, T and the length k where they are
    certain (with the printed p-min 0, the rounds cut short are the last ones, each shorter than the
    one before) and leaves the other positions out, with a note saying so. ``n_predict``: the -n
    the program ran with, where known: a run that went past it had no end of text among its cut
    rounds, so the last of them left no budget for another (which narrows down their lengths).
    ``draft_len``: the run's longest draft where the caller knows it (a draft-free n-gram mode sizes
    its drafts itself: the printed ``n_draft`` is then the unused draft model's); default ``n_draft``.
    """
    k = stats.n_draft if draft_len is None else draft_len
    if stats.statistics_problem:
        return Positions(note=f"the statistics line is unreadable ({stats.statistics_problem})")
    if not stats.statistics:
        return Positions(note="no statistics line (llama-speculative prints none; llama-speculative-simple "
                              "prints it at -lv 4 and up)")
    drafting = [s for s in stats.statistics if s.gen_drafts > 0]
    if len(drafting) > 1:
        return Positions(note="more than one speculative implementation drafted: the line does not split them")
    if not drafting:
        return Positions(note="nothing was drafted")
    s = drafting[0]
    rates = s.acc_rate_by_position or ()
    n = s.calls_accept
    if n >= EXACT_RATE_ROUNDS:
        return Positions(note=f"{n} rounds: rates printed to 3 decimals no longer give exact counts")
    if len(rates) > k:
        return Positions(note=f"#acc rate/pos has {len(rates)} positions with a draft length of {k}")
    accepted = tuple(round(r * n) for r in rates)
    if any(abs(r * n - c) > 0.0005 * n + 1e-9 for r, c in zip(rates, accepted, strict=True)):
        return Positions(note="#acc rate/pos is not a count over the rounds (#calls accept)")
    if (accepted[0] if accepted else 0) != s.acc_drafts or sum(accepted) != s.acc_tokens:
        return Positions(note=f"#acc rate/pos disagrees with the counts (position 1: {accepted[:1]} vs #acc drafts "
                              f"{s.acc_drafts}; sum {sum(accepted)} vs #acc tokens {s.acc_tokens})")
    # p-min 0 as printed: only the context and the -n budget cut a draft (see by_position)
    ran_out = n_predict is not None and stats.n_predict > n_predict
    return by_position(accepted, s.gen_drafts, s.gen_tokens, k, shrinking=stats.p_min == 0.0,
                       ran_out=ran_out)


# --- the parsers ------------------------------------------------------------------------------------


def parse_speculative(stdout: str, stderr: str = "") -> SpeculativeStats:
    """Parse a speculative run from its stdout and stderr (or one combined text as ``stdout``)."""
    err_scan = _scan(stderr) if stderr else _Scan()
    out_scan = _scan(stdout)
    combined = not err_scan.has_speculative and out_scan.has_speculative
    scan = out_scan if combined else err_scan
    if not scan.has_speculative:
        raise ParseError(
            "no speculative decoding statistics in the output (no 'encoded ... tokens' / 'n_accept =' lines)"
            + _tail_hint(stderr or stdout),
            hint="the run was cut short (crash, kill or timeout) or this is not llama-speculative output; "
                 "read the log's last lines",
        )
    missing = [k for k in ("encoded", "decoded") if k not in scan.coded]
    missing += [k for k in ("n_draft", "n_predict", "n_drafted", "n_accept") if k not in scan.counters]
    if not scan.accept_seen:
        missing.append("accept")
    if missing:
        raise ParseError(
            f"the speculative statistics are cut off: no {', '.join(missing)}" + _tail_hint(stderr or stdout),
            hint="the program stopped while printing its statistics (killed, or output truncated)",
        )
    blocks = {name: block.timings() for name, block in scan.blocks.items()}
    for name in ("draft", "target"):
        t = blocks.get(name)
        if t is not None and t.total_ms is None and (t.load_ms is not None or t.prompt_eval_ms is not None):
            raise ParseError(f"the {name} timing block is cut off (no 'total time' line)" + _tail_hint(stderr or stdout),
                             hint="the program stopped while printing its statistics (killed, or output truncated)")
    if combined:
        assert scan.first_stats_offset is not None
        text: str | None = _text_from_combined(stdout[: scan.first_stats_offset])
    else:
        text = _text_from_stdout(stdout, _format(scan.sources), speculative=True) if stdout else None
    n_in, enc_s, enc_tps = scan.coded["encoded"]
    n_dec, dec_s, dec_tps = scan.coded["decoded"]
    return SpeculativeStats(
        format=_format(scan.sources),
        n_encoded=n_in, encode_s=enc_s, encode_tps=enc_tps,
        n_decoded=n_dec, decode_s=dec_s, decode_tps=dec_tps,
        n_draft=scan.counters["n_draft"], n_predict=scan.counters["n_predict"],
        n_drafted=scan.counters["n_drafted"], n_accept=scan.counters["n_accept"],
        acceptance=scan.acceptance,
        draft=blocks.get("draft"), target=blocks.get("target"),
        text=text,
        log_prefix=out_scan.prefixed or err_scan.prefixed,
        statistics=tuple(scan.statistics),
        statistics_problem=scan.statistics_problem,
        p_min=scan.p_min,
        longest_draft=scan.longest_draft,
    )


def parse_completion(stdout: str, stderr: str = "") -> CompletionStats:
    """Parse a target-only run (``llama-completion -no-cnv``, ``llama-cli``, ``main``)."""
    err_scan = _scan(stderr) if stderr else _Scan()
    out_scan = _scan(stdout)
    combined = not err_scan.has_timings and out_scan.has_timings
    scan = out_scan if combined else err_scan
    if not scan.has_timings:
        raise ParseError(
            "no timing statistics in the output (no 'eval time =' lines)" + _tail_hint(stderr or stdout),
            hint="the run was cut short (crash, kill or timeout), or the build logs below its verbosity; "
                 "read the log's last lines",
        )
    block = _Block()
    for b in scan.blocks.values():  # completion prints one block; merge in case a header sneaked in
        block.sources += [x for x in b.sources if x not in block.sources]
        block.values.update(b.values)
        block.other.update(b.other)
    timings = block.timings()
    assert timings is not None
    if timings.total_ms is None or timings.eval_ms is None:
        raise ParseError("the timing block is cut off (no 'eval time' or 'total time' line)" + _tail_hint(stderr or stdout),
                         hint="the program stopped while printing its statistics (killed, or output truncated)")
    if combined:
        assert scan.first_stats_offset is not None
        text: str | None = _text_from_combined(stdout[: scan.first_stats_offset])
    else:
        text = _text_from_stdout(stdout, _format(scan.sources), speculative=False) if stdout else None
    eot = False
    if text is not None:
        text, eot = _split_end_of_text(text)
    drafted, accepted = _drafting(scan)
    return CompletionStats(format=_format(scan.sources), timings=timings, text=text, end_of_text=eot,
                           log_prefix=out_scan.prefixed or err_scan.prefixed, n_drafted=drafted, n_accept=accepted)


def _drafting(scan: _Scan) -> tuple[int | None, int | None]:
    """Drafted and accepted tokens a run printed (its counters, else its statistics lines); None, None
    where it printed neither."""
    if "n_drafted" in scan.counters:
        return scan.counters["n_drafted"], scan.counters.get("n_accept")
    if scan.statistics:
        return sum(s.gen_tokens for s in scan.statistics), sum(s.acc_tokens for s in scan.statistics)
    return None, None


def detect_kind(stdout: str, stderr: str = "") -> str | None:
    """``speculative`` (the speculative counters), ``completion`` (timing lines only) or None (neither)."""
    scans = (_scan(stderr), _scan(stdout))
    if any(s.has_speculative for s in scans):
        return "speculative"
    if any(s.has_timings for s in scans):
        return "completion"
    return None


def parse(stdout: str, stderr: str = "", kind: str = "auto") -> SpeculativeStats | CompletionStats:
    """Parse either kind; ``auto`` tells them apart by the speculative counters."""
    if kind == "auto":
        found = detect_kind(stdout, stderr)
        if found is None:
            raise ParseError(
                "no llama.cpp statistics in the output (neither 'n_accept =' nor 'eval time =' lines)"
                + _tail_hint(stderr or stdout),
                hint="the run was cut short (crash, kill or timeout), or this is not llama.cpp output; "
                     "read the log's last lines",
            )
        kind = found
    if kind == "speculative":
        return parse_speculative(stdout, stderr)
    if kind == "completion":
        return parse_completion(stdout, stderr)
    raise LlamaspecError(f"unknown output kind {kind!r}", hint="use speculative, completion or auto")


def to_json(stats: SpeculativeStats | CompletionStats, indent: int | None = 2) -> str:
    return json.dumps({"kind": "speculative" if isinstance(stats, SpeculativeStats) else "completion", **stats.to_dict()},
                      indent=indent)


@dataclass(frozen=True)
class BatchTimings:
    """What one batch of n tokens costs (llama-bench ``-p n -n 0 [-d D]``), in milliseconds.

    A verification round processes the draft plus one token in one batch; on CPUs its cost grows
    with the batch, which the paper's model (verification = one target step) leaves out.
    ``ms_by_tokens`` holds llama-bench's mean per size; ``samples_ms`` every repetition, for
    medians and for pooling several llama-bench runs (:func:`pool_bench`). ``depth`` is the
    context depth (``-d``) the batches ran at."""

    ms_by_tokens: dict[int, float]
    samples_ms: dict[int, tuple[float, ...]] = field(default_factory=dict)
    depth: int = 0
    all_outputs: bool = False  # -embd 1: every token of the batch had its logits computed

    def ms(self, tokens: float) -> float:
        """Linear interpolation (and extrapolation from the last two points) over measured sizes."""
        sizes = sorted(self.ms_by_tokens)
        if not sizes:
            raise ParseError("no batch timings", hint="rerun the measurement")
        if len(sizes) == 1:
            return self.ms_by_tokens[sizes[0]] * tokens / sizes[0]
        lo = max([s for s in sizes if s <= tokens], default=sizes[0])
        hi = min([s for s in sizes if s >= tokens and s != lo], default=sizes[-1])
        if hi == lo:
            lo, hi = sizes[-2], sizes[-1]
        y0, y1 = self.ms_by_tokens[lo], self.ms_by_tokens[hi]
        return y0 + (y1 - y0) * (tokens - lo) / (hi - lo)

    @property
    def median_ms(self) -> dict[int, float]:
        """The median repetition per size (robust to a busy machine); the mean where no samples were kept."""
        import statistics

        return {n: statistics.median(self.samples_ms[n]) if self.samples_ms.get(n) else ms
                for n, ms in self.ms_by_tokens.items()}


def parse_bench_json(text: str) -> BatchTimings:
    """llama-bench ``-o json`` output: prompt-processing tests (n_gen 0) by batch size, at one depth."""
    try:
        records = json.loads(text[text.index("["):])
    except (ValueError, json.JSONDecodeError) as exc:
        raise ParseError("llama-bench printed no JSON result list", hint="run llama-bench with -o json yourself to see why") from exc
    pp = [r for r in records if isinstance(r, dict) and r.get("n_gen") == 0 and r.get("n_prompt") and r.get("avg_ns")]
    if not pp:
        raise ParseError("llama-bench's JSON has no prompt-processing results", hint="check its -p values")
    depths = {int(r.get("n_depth") or 0) for r in pp}
    if len(depths) > 1:
        raise ParseError(f"llama-bench's JSON mixes context depths {sorted(depths)}", hint="time one depth per run (-d D)")
    out = {int(r["n_prompt"]): float(r["avg_ns"]) / 1e6 for r in pp}
    samples = {int(r["n_prompt"]): tuple(float(x) / 1e6 for x in r.get("samples_ns") or ()) for r in pp}
    return BatchTimings(out, samples, depth=depths.pop(), all_outputs=all(bool(r.get("embeddings")) for r in pp))


def pool_bench(*timings: BatchTimings) -> BatchTimings:
    """Several llama-bench runs of the same model and depth as one: samples pooled, means recomputed."""
    if not timings:
        raise ParseError("no llama-bench runs to pool", hint="time the model first")
    if len({t.depth for t in timings}) > 1 or len({t.all_outputs for t in timings}) > 1:
        raise ParseError("cannot pool llama-bench runs at different depths or output settings", hint="pool like with like")
    samples: dict[int, list[float]] = {}
    means: dict[int, list[float]] = {}
    for t in timings:
        for n, ms in t.ms_by_tokens.items():
            means.setdefault(n, []).append(ms)
            samples.setdefault(n, []).extend(t.samples_ms.get(n, ()))
    return BatchTimings({n: sum(s) / len(s) if s else sum(means[n]) / len(means[n]) for n, s in samples.items()},
                        {n: tuple(s) for n, s in samples.items()}, depth=timings[0].depth,
                        all_outputs=timings[0].all_outputs)


# --- llama-server's /metrics (Prometheus text) -----------------------------------------------------

_METRIC_LINE = re.compile(r'^llamacpp:(?P<name>\w+)(?:\{(?P<labels>[^}]*)\})?\s+(?P<value>\S+)\s*$')
PER_POSITION = "spec_decode_num_accepted_tokens_per_pos_total"


def metric_value(text: str, name: str) -> float | None:
    """One unlabelled ``llamacpp:`` series from ``/metrics`` text, None when absent or unreadable."""
    for line in text.splitlines():
        m = _METRIC_LINE.match(line.strip())
        if m and m.group("name") == name and not m.group("labels"):
            with contextlib.suppress(ValueError):
                return float(m.group("value"))
    return None


def accepted_per_position(text: str) -> tuple[int, ...] | None:
    """``llamacpp:spec_decode_num_accepted_tokens_per_pos_total{position="i"}`` (i from 0: draft
    position i + 1), as a tuple indexed by position; None when the series is absent (a server from
    before it, or one that has verified no draft yet) or a position is missing or unreadable.

    What it counts (tools/server/server-context.cpp, pinned 0c1e570): each verification step adds
    one at positions 1..n where n tokens of its draft were accepted, so position i's count is the
    steps accepted through i; the vector is as long as the longest draft the server may make
    (``common_speculative_n_max``) and summed over finished requests. Its denominator is
    ``spec_decode_num_drafts_total`` (verification steps), as in the server's own log line."""
    found: dict[int, int] = {}
    for line in text.splitlines():
        m = _METRIC_LINE.match(line.strip())
        if not m or m.group("name") != PER_POSITION:
            continue
        label = re.search(r'position="(\d+)"', m.group("labels") or "")
        try:
            value = float(m.group("value"))
        except ValueError:
            return None
        if label is None or not math.isfinite(value) or value < 0 or value != int(value):
            return None
        found[int(label.group(1))] = int(value)
    if not found or sorted(found) != list(range(len(found))):
        return None
    return tuple(found[i] for i in range(len(found)))


def metrics_change(before: str | None, after: str | None) -> dict[str, float]:
    """How each unlabelled counter of ``/metrics`` grew between two readings (both present only)."""
    if before is None or after is None:
        return {}
    out: dict[str, float] = {}
    for name in ("spec_decode_num_drafts_total", "spec_decode_num_draft_tokens_total",
                 "spec_decode_num_accepted_tokens_total"):
        a, b = metric_value(before, name), metric_value(after, name)
        if a is not None and b is not None:
            out[name] = b - a
    return out
