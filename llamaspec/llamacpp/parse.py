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

Its size: the speculative and completion programs' logs in the three formats above, over one
line scanner and one set of result types, with the generated text cut out of them and the
acceptance by position derived from the statistics line. What changes for reasons of its own is
read beside it: the timing blocks (``timings.py``), the statistics line (``statsline.py``),
llama-bench's JSON (``bench.py``) and llama-server's ``/metrics`` text (``metrics.py``).
"""

from __future__ import annotations

import contextlib
import decimal
import json
import re
from dataclasses import asdict, dataclass, field
from typing import Any

from llamaspec.base.errors import LlamaspecError
from llamaspec.llamacpp.statsline import DraftStatistics, parse_statistics_line
from llamaspec.llamacpp.timings import _NUM, _TIMING, Timings, _Block, _format, _int, _number
from llamaspec.measure.contract import Positions, acceptance_by_position
from llamaspec.theory.drafted import by_position

# --- the result types -------------------------------------------------------------------------


class ParseError(LlamaspecError):
    """The text holds no (complete) statistics block."""


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
    # (llamaspec.llamacpp.counting.CountingProfile, llamaspec.theory.RoundProfile), once, onto the Measurement.

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


# --- lines ------------------------------------------------------------------------------------

_ANSI = re.compile(r"\x1b\[[0-9;]*[A-Za-z]")
# common/log.cpp: "%d.%02d.%03d.%03d " timestamp (with --log-timestamps) then "I " / "W " / "E " / "D ".
_PREFIX = re.compile(r"^(?:\d+\.\d{2}\.\d{3}\.\d{3} )?[IWED] (?=.)|^\d+\.\d{2}\.\d{3}\.\d{3} (?=.)")
_CODED = re.compile(rf"^(?P<what>encoded|decoded)\s+(?P<n>\d+) tokens in\s+(?P<s>{_NUM}) seconds, speed:\s+(?P<tps>{_NUM}) t/s", re.I)
_COUNTER = re.compile(rf"^(?P<name>n_draft|n_predict|n_drafted|n_accept)\s*=\s*(?P<v>{_NUM})\s*$")
_ACCEPT = re.compile(rf"^accept\s*=\s*(?P<v>{_NUM})\s*%\s*$", re.I)
_SECTION = re.compile(r"^(?P<name>draft|target):\s*$")
# common_speculative_print_stats, after the log prefix and "spec common_specu: ".
_STATISTICS = re.compile(r"(?:^|\s)statistics\s+(?P<impl>[\w-]+):\s*(?P<rest>#calls.*)$")
# An implementation's parameters, at trace level when it is set up: "- n_max=4, n_min=0, p_min=0.000000"
# (draft-simple), "- n_match=24, n_max=64, n_min=48" (ngram-mod), "- n_draft=8, cache_static=none, ..."
# (ngram-cache); ngram-simple and the ngram-map modes print none.
_IMPL_PARAMS = re.compile(r"^(?:spec \S+: )?- (?P<params>[a-z_]+=\S+(?:, [a-z_]+=\S+)*)\s*$")
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


def _fraction(percent: str) -> float | None:
    """A printed percentage as a fraction, divided in decimal so that it reads as written ("10.001"
    is 0.10001, where float division gives 0.10000999999999999); None for nan."""
    value = _number(percent)
    return None if value is None else float(decimal.Decimal(percent.split("(")[0]) / 100)


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
