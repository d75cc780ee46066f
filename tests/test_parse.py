"""The llama.cpp output parser, on real recorded output of three generations (no binaries needed)."""

from __future__ import annotations

import json
import re
from dataclasses import replace
from pathlib import Path

import pytest
from click.testing import CliRunner

from llamaspec.base.errors import LlamaspecError
from llamaspec.cli import main
from llamaspec.llamacpp import parse
from llamaspec.llamacpp.parse import ParseError, parse_completion, parse_speculative
from llamaspec.llamacpp.profiles import LLAMA_SPECULATIVE
from llamaspec.llamacpp.timings import Timings
from llamaspec.measure.contract import Measurement, tokens_per_round

FIXTURES = Path(__file__).resolve().parent / "fixtures" / "llamacpp"
WRITEUP = FIXTURES / "writeup-2023"
OLD = FIXTURES / "7841fc7"  # llama-cpp-python 0.3.8, Feb 2025
NEW = FIXTURES / "0c1e570"  # the pinned tree


def read(folder: Path, name: str) -> str:
    return (folder / name).read_text()


def pair(folder: Path, case: str) -> tuple[str, str]:
    return read(folder, f"{case}.stdout"), read(folder, f"{case}.stderr")


PROMPT = "# Quick-sort implementation in Python and sample usage:"


# --- the write-up (2023, llama_print_timings): every number printed there --------------------------

WRITEUP_EXPECTED = {
    "quicksort-python.log": dict(
        n_encoded=12, encode_s=0.247, encode_tps=48.638, n_decoded=265, decode_s=7.909, decode_tps=33.507,
        n_draft=16, n_predict=265, n_drafted=317, n_accept=195, acceptance=0.61514,
        draft=Timings(sources=("llama_print_timings",), load_ms=53.14,
                      sample_ms=652.62, sample_runs=1, sample_ms_per_token=652.62, sample_tps=1.53,
                      prompt_eval_ms=73.81, prompt_eval_tokens=12, prompt_eval_ms_per_token=6.15, prompt_eval_tps=162.58,
                      eval_ms=2247.77, eval_runs=378, eval_ms_per_token=5.95, eval_tps=168.17, total_ms=8154.92),
        target=Timings(sources=("llama_print_timings",), load_ms=534.47,
                       sample_ms=208.12, sample_runs=265, sample_ms_per_token=0.79, sample_tps=1273.32,
                       prompt_eval_ms=4210.38, prompt_eval_tokens=382, prompt_eval_ms_per_token=11.02, prompt_eval_tps=90.73,
                       eval_ms=682.80, eval_runs=16, eval_ms_per_token=42.68, eval_tps=23.43, total_ms=8214.11),
    ),
    "quicksort-c.log": dict(
        n_encoded=25, encode_s=0.278, encode_tps=89.900, n_decoded=258, decode_s=6.432, decode_tps=40.112,
        n_draft=28, n_predict=258, n_drafted=278, n_accept=200, acceptance=0.71942,
        draft=Timings(sources=("llama_print_timings",), load_ms=932.54,
                      sample_ms=583.50, sample_runs=1, sample_ms_per_token=583.50, sample_tps=1.71,
                      prompt_eval_ms=81.50, prompt_eval_tokens=25, prompt_eval_ms_per_token=3.26, prompt_eval_tps=306.73,
                      eval_ms=1834.67, eval_runs=329, eval_ms_per_token=5.58, eval_tps=179.32, total_ms=6710.30),
        target=Timings(sources=("llama_print_timings",), load_ms=18568.44,
                       sample_ms=208.78, sample_runs=258, sample_ms_per_token=0.81, sample_tps=1235.75,
                       prompt_eval_ms=3164.84, prompt_eval_tokens=342, prompt_eval_ms_per_token=9.25, prompt_eval_tps=108.06,
                       eval_ms=775.43, eval_runs=18, eval_ms_per_token=43.08, eval_tps=23.21, total_ms=7650.67),
    ),
}


@pytest.mark.parametrize("name", sorted(WRITEUP_EXPECTED))
def test_writeup_outputs_parse_to_exactly_the_printed_numbers(name: str) -> None:
    stats = parse_speculative(read(WRITEUP, name))
    for key, want in WRITEUP_EXPECTED[name].items():
        assert getattr(stats, key) == want, key
    assert stats.format == "llama_print_timings"
    assert stats.log_prefix is False
    assert stats.text is None  # the write-up shows only the statistics


@pytest.mark.parametrize("name", sorted(WRITEUP_EXPECTED))
def test_writeup_rounds_account_for_every_target_token(name: str) -> None:
    """Each round ends with one token the target picked, and every round but the last sends the target
    one batch of (1 + drafted) tokens: the target's own token counts must agree."""
    s = parse_speculative(read(WRITEUP, name))
    assert s.target is not None
    rounds = LLAMA_SPECULATIVE.rounds(s.n_predict, s.n_accept)  # the program's own count: one batch a round
    assert s.target.prompt_eval_tokens + s.target.eval_runs == s.n_encoded + rounds + s.n_drafted
    assert s.acceptance == round(s.n_accept / s.n_drafted, 5)  # the printed percentage (3 decimals), as a fraction


def test_writeup_derived_quantities() -> None:
    """Rounds and what derives from them come from the program's profile, not from the parse
    (which keeps the printed counters only): one definition, on the Measurement."""
    s = parse_speculative(read(WRITEUP, "quicksort-python.log"))
    assert "rounds" not in s.to_dict() and "tokens_per_round" not in s.to_dict()
    rounds = LLAMA_SPECULATIVE.rounds(s.n_predict, s.n_accept)
    assert rounds == 265 - 195 - 1 == 69  # the first token is sampled from the prompt, outside any round
    m = Measurement(mode="speculative", ok=True, error=None, argv=(), exit_code=0, wall_seconds=1.0, peak_rss_bytes=None,
                    n_predict=s.n_predict, n_drafted=s.n_drafted, n_accept=s.n_accept, rounds=rounds)
    assert m.tokens_per_round == pytest.approx((195 + 69) / 69)
    assert m.mean_accepted == pytest.approx(195 / 69)
    assert m.acceptance == pytest.approx(195 / 317)


# --- the pinned tree (0c1e570, common_perf_print, log prefixes) -------------------------------------


def test_current_speculative_separate_streams() -> None:
    s = parse_speculative(*pair(NEW, "speculative"))
    assert (s.n_encoded, s.encode_s, s.encode_tps) == (11, 2.563, 4.293)
    assert (s.n_decoded, s.decode_s, s.decode_tps) == (72, 14.513, 4.961)
    assert (s.n_draft, s.n_predict, s.n_drafted, s.n_accept, s.acceptance) == (8, 72, 112, 57, 0.50893)
    assert s.format == "common_perf" and s.log_prefix
    assert s.draft is None  # libllama's INFO lines are below the default verbosity now
    assert s.target == Timings(
        sources=("common_perf_print",), load_ms=4117.97, sample_ms=2.02, sample_runs=72, sampling_total_ms=18.09,
        prompt_eval_ms=9472.45, prompt_eval_tokens=137, prompt_eval_ms_per_token=69.14, prompt_eval_tps=14.46,
        eval_ms=0.0, eval_runs=1, eval_ms_per_token=0.0, eval_tps=None,  # printed "inf tokens per second"
        total_ms=17847.72, total_tokens=138, unaccounted_ms=8357.18, unaccounted_pct=46.8, graphs_reused=13,
    )
    assert s.text is not None
    assert s.text.startswith(PROMPT + "\n\n```python\nimport random\n")
    assert s.text.endswith("        return quick_sort_")  # the framing blank lines are gone, the indent is not
    # 14 verification rounds (the first token comes from the prompt): their batches of 1 + drafted
    # tokens all count as the target's prompt eval
    rounds = LLAMA_SPECULATIVE.rounds(s.n_predict, s.n_accept)
    assert rounds == 14 and s.n_drafted == 8 * rounds
    assert s.target.prompt_eval_tokens == s.n_encoded + rounds + s.n_drafted


def test_current_speculative_verbose_has_the_draft_block() -> None:
    s = parse_speculative(*pair(NEW, "speculative-verbose"))
    assert s.draft == Timings(
        sources=("llama_perf_context_print",), load_ms=880.40,
        prompt_eval_ms=25575.62, prompt_eval_tokens=38, prompt_eval_ms_per_token=673.04, prompt_eval_tps=1.49,
        eval_ms=21007.83, eval_runs=98, eval_ms_per_token=214.37, eval_tps=4.66,
        total_ms=49277.65, total_tokens=136, graphs_reused=126,
    )
    assert s.target is not None and s.target.unaccounted_pct == 74.3
    assert (s.n_predict, s.n_drafted, s.n_accept) == (72, 112, 57)
    # hundreds of loader lines on stderr do not leak into the text
    assert s.text == parse_speculative(*pair(NEW, "speculative")).text


@pytest.mark.parametrize("folder", [NEW, OLD], ids=["0c1e570", "7841fc7"])
def test_nothing_drafted_gives_no_acceptance(folder: Path) -> None:
    s = parse_speculative(*pair(folder, "speculative-no-draft"))
    assert "accept    = -nan%" in read(folder, "speculative-no-draft.stderr")
    assert (s.n_draft, s.n_drafted, s.n_accept, s.n_predict) == (0, 0, 0, 17)
    assert s.acceptance is None
    assert tokens_per_round(s.n_accept, LLAMA_SPECULATIVE.rounds(s.n_predict, s.n_accept)) == 1.0


@pytest.mark.parametrize("folder", [NEW, OLD], ids=["0c1e570", "7841fc7"])
def test_combined_capture_gives_the_same_stats_and_the_text(folder: Path) -> None:
    s = parse_speculative(read(folder, "speculative-combined.log"))
    assert s.n_draft == 4 and s.n_drafted == 32
    assert s.text is not None and s.text.startswith(PROMPT)
    assert "llama_" not in s.text and "I cmn" not in s.text
    # greedy decoding: the speculative text is a prefix of the longer run's
    longer = parse_speculative(*pair(folder, "speculative")).text
    assert longer is not None and longer.startswith(s.text)


def test_combined_capture_of_the_current_build() -> None:
    s = parse_speculative(read(NEW, "speculative-combined.log"))
    assert (s.n_predict, s.n_drafted, s.n_accept, s.acceptance) == (34, 32, 25, 0.78125)
    assert s.text == PROMPT + "\n\n```python\nimport random\n\ndef quick_sort(arr):\n    if len(arr) <= 1:\n" \
                              "        return arr\n    else:\n        left"


@pytest.mark.parametrize("folder", [NEW, OLD], ids=["0c1e570", "7841fc7"])
def test_killed_run_is_a_parse_error_with_a_hint(folder: Path) -> None:
    out, err = pair(folder, "speculative-killed")
    assert out  # it died mid-generation: text, but no statistics
    with pytest.raises(ParseError) as info:
        parse_speculative(out, err)
    assert "no speculative decoding statistics" in info.value.message
    assert info.value.hint and "cut short" in info.value.hint
    assert isinstance(info.value, LlamaspecError)
    with pytest.raises(ParseError, match="neither"):
        parse.parse(out, err)


@pytest.mark.parametrize("folder", [NEW, OLD], ids=["0c1e570", "7841fc7"])
@pytest.mark.parametrize("cut_before, missing", [
    ("n_drafted =", "n_drafted, n_accept, accept"),
    ("decoded ", "decoded, n_draft"),
    ("accept    =", "accept"),
])
def test_output_cut_in_the_counters_names_what_is_missing(folder: Path, cut_before: str, missing: str) -> None:
    out, err = pair(folder, "speculative")
    cut = err[: err.index(cut_before)]
    with pytest.raises(ParseError, match=f"cut off: no {missing}"):
        parse_speculative(out, cut)


@pytest.mark.parametrize("folder", [NEW, OLD], ids=["0c1e570", "7841fc7"])
def test_output_cut_in_the_target_block(folder: Path) -> None:
    out, err = pair(folder, "speculative")
    lines = err.splitlines(keepends=True)
    last_load = max(i for i, line in enumerate(lines) if "load time" in line)
    with pytest.raises(ParseError, match="target timing block is cut off"):
        parse_speculative(out, "".join(lines[: last_load + 2]))


def test_llamaspec_run_log_parses() -> None:
    """The log proc.run keeps beside a run ('$ command', both streams, '# exit status')."""
    s = parse_speculative(read(NEW, "speculative-proc-run.log"))
    assert (s.n_draft, s.n_predict, s.n_drafted, s.n_accept, s.acceptance) == (4, 17, 44, 5, 0.11364)
    assert s.text == "hello-good-by-all-rounders.\n\nThe original sentence is a"


# --- the early-2025 generation (7841fc7: llama_perf_*_print, no prefixes) ---------------------------


def test_2025_speculative() -> None:
    s = parse_speculative(*pair(OLD, "speculative"))
    assert s.format == "llama_perf" and not s.log_prefix
    assert (s.n_encoded, s.encode_s, s.encode_tps) == (11, 5.289, 2.080)
    assert (s.n_decoded, s.decode_s, s.decode_tps) == (72, 20.364, 3.536)
    assert (s.n_draft, s.n_predict, s.n_drafted, s.n_accept, s.acceptance) == (8, 72, 112, 57, 0.50893)
    assert s.draft == Timings(
        sources=("llama_perf_context_print",), load_ms=3101.57,
        prompt_eval_ms=12309.72, prompt_eval_tokens=38, prompt_eval_ms_per_token=323.94, prompt_eval_tps=3.09,
        eval_ms=8079.87, eval_runs=98, eval_ms_per_token=82.45, eval_tps=12.13, total_ms=25654.47, total_tokens=136,
    )
    assert s.target == Timings(
        sources=("llama_perf_sampler_print", "llama_perf_context_print"), load_ms=2592.64,
        sample_ms=6.25, sample_runs=72, sample_ms_per_token=0.09, sample_tps=11516.31,
        prompt_eval_ms=14511.28, prompt_eval_tokens=137, prompt_eval_ms_per_token=105.92, prompt_eval_tps=9.44,
        eval_ms=0.0, eval_runs=1, eval_ms_per_token=0.0, eval_tps=None, total_ms=28756.17, total_tokens=138,
    )
    # the same greedy run as on the current build: same counters, same text
    new = parse_speculative(*pair(NEW, "speculative"))
    assert s.text == new.text
    assert (s.n_predict, s.n_drafted, s.n_accept) == (new.n_predict, new.n_drafted, new.n_accept)


def test_speculative_simple_parses_too() -> None:
    old = parse_speculative(*pair(OLD, "speculative-simple"))
    assert (old.n_draft, old.n_predict, old.n_drafted, old.n_accept, old.acceptance) == (8, 67, 62, 47, 0.75806)
    new = parse_speculative(*pair(NEW, "speculative-simple"))
    assert (new.n_draft, new.n_predict, new.n_drafted, new.n_accept, new.acceptance) == (8, 72, 112, 58, 0.51786)
    assert new.draft is None  # it prints its draft statistics at trace level only


# --- the target-only baseline ---------------------------------------------------------------------


def test_current_completion() -> None:
    c = parse_completion(*pair(NEW, "completion"))
    assert c.format == "common_perf" and c.log_prefix
    assert c.timings == Timings(
        sources=("common_perf_print",), load_ms=1053.33, sample_ms=10.13, sample_runs=75, sampling_total_ms=13.70,
        prompt_eval_ms=48.57, prompt_eval_tokens=11, prompt_eval_ms_per_token=4.42, prompt_eval_tps=226.49,
        eval_ms=2949.75, eval_runs=63, eval_ms_per_token=46.82, eval_tps=21.36,
        total_ms=3090.47, total_tokens=74, unaccounted_ms=78.46, unaccounted_pct=2.5, graphs_reused=62,
    )
    assert (c.n_prompt, c.eval_runs, c.n_decoded) == (11, 63, 64)  # -n 64: the last token is never decoded
    assert c.decode_tps == pytest.approx(63 / 2.94975)
    assert c.encode_tps == pytest.approx(11 / 0.04857)
    assert c.text is not None and c.text.startswith(PROMPT) and c.text.endswith("quick_sort_right(left,")
    assert not c.end_of_text


def test_2025_completion_is_llama_cli() -> None:
    c = parse_completion(*pair(OLD, "completion"))
    assert c.format == "llama_perf" and not c.log_prefix
    assert c.timings == Timings(
        sources=("llama_perf_sampler_print", "llama_perf_context_print"), load_ms=106.79,
        sample_ms=3.29, sample_runs=75, sample_ms_per_token=0.04, sample_tps=22761.76,
        prompt_eval_ms=30.93, prompt_eval_tokens=11, prompt_eval_ms_per_token=2.81, prompt_eval_tps=355.68,
        eval_ms=697.88, eval_runs=63, eval_ms_per_token=11.08, eval_tps=90.27, total_ms=740.80, total_tokens=74,
    )
    assert c.n_decoded == 64
    assert c.text == parse_completion(*pair(NEW, "completion")).text


@pytest.mark.parametrize("folder", [NEW, OLD], ids=["0c1e570", "7841fc7"])
def test_completion_combined_capture(folder: Path) -> None:
    c = parse_completion(read(folder, "completion-combined.log"))
    assert c.eval_runs == 31 and c.n_decoded == 32
    assert c.text == PROMPT + "\n\n```python\nimport random\n\ndef quick_sort(arr):\n    if len(arr) <= 1:\n" \
                              "        return arr\n    else:"


@pytest.mark.parametrize("folder", [NEW, OLD], ids=["0c1e570", "7841fc7"])
def test_lossless_on_recorded_runs(folder: Path) -> None:
    """Greedy: the speculative run and the target alone produced the same text (as far as both went)."""
    spec = parse_speculative(*pair(folder, "speculative")).text
    base = parse_completion(*pair(folder, "completion")).text
    assert spec is not None and base is not None
    assert spec.startswith(base)


def test_end_of_text_marker_is_split_off() -> None:
    out, err = pair(NEW, "completion")
    out = out[: -len("\n\n")] + " [end of text]\n\n\n"
    c = parse_completion(out, err)
    assert c.end_of_text and c.text is not None and c.text.endswith("quick_sort_right(left,")


def test_a_target_only_run_that_printed_drafting_says_how_much() -> None:
    """A baseline that printed a speculative loop's counters or its statistics lines drafted: the
    parser reports how much (the run core then refuses it); every recorded baseline drafted nothing
    it printed."""
    for folder, program in ((NEW, "completion"), (OLD, "completion")):
        c = parse_completion(*pair(folder, program))
        assert (c.n_drafted, c.n_accept) == (None, None)
    out, err = pair(NEW, "completion")
    ngram = read(NEW, "speculative-simple-ngram-simple.stderr").splitlines(keepends=True)
    statistics = "".join(line for line in ngram if " statistics " in line)  # #gen tokens 67, #acc tokens 59
    assert (parse_completion(out, err + statistics).n_drafted, parse_completion(out, err + statistics).n_accept) == (67, 59)
    counters = "".join(line for line in ngram if re.search(r"\bn_(drafted|accept)\s*=", line))  # 67 and 59 too
    both = parse_completion(out, err + counters.replace("= 67", "= 70") + statistics)
    assert (both.n_drafted, both.n_accept) == (70, 59)  # the counters first
    assert parse_completion(out + statistics, err).n_drafted is None  # stdout holds the text, not the statistics


def test_completion_without_timings_is_an_error() -> None:
    out, err = pair(NEW, "completion")
    with pytest.raises(ParseError, match="no timing statistics"):
        parse_completion(out, err[: err.index("common_perf_print")])
    with pytest.raises(ParseError, match="cut off"):
        parse_completion(out, err[: err.index("common_perf_print:        eval time")])


# --- prefixes, colours, unknown lines ----------------------------------------------------------------


def test_prefix_without_timestamps_and_colours_parse_the_same() -> None:
    out, err = pair(NEW, "speculative")
    plain = parse_speculative(out, err)
    no_timestamps = re.sub(r"^\d+\.\d{2}\.\d{3}\.\d{3} ", "", err, flags=re.M)  # --no-log-timestamps
    assert parse_speculative(out, no_timestamps) == plain
    coloured = re.sub(r"^(\S+) I ", "\x1b[34m\\1\x1b[0m \x1b[32mI \x1b[0m", err, flags=re.M)  # --log-colors
    assert parse_speculative(out, coloured) == plain
    no_prefix = re.sub(r"^\S+ I ", "", err, flags=re.M)  # --no-log-prefix
    assert parse_speculative(out, no_prefix) == replace(plain, log_prefix=False)


def test_unknown_lines_are_skipped() -> None:
    out, err = pair(OLD, "speculative")
    noisy = err.replace("n_draft   =", "some_new_line: whatever = 3\nn_draft   =").replace(
        "llama_perf_context_print:       total time", "llama_perf_context_print:     shiny time =  1.50 ms\n"
        "llama_perf_context_print:       total time")
    s = parse_speculative(out, noisy)
    assert s.n_draft == 8
    assert s.draft is not None and s.draft.other == {"shiny": 1.5}


def test_auto_kind() -> None:
    assert parse.detect_kind(*pair(NEW, "speculative")) == "speculative"
    assert parse.detect_kind(*pair(OLD, "completion")) == "completion"
    assert parse.detect_kind("hello", "world") is None
    assert isinstance(parse.parse(*pair(OLD, "completion")), parse.CompletionStats)
    assert isinstance(parse.parse(read(WRITEUP, "quicksort-c.log")), parse.SpeculativeStats)


def test_to_json_round_trips_and_has_derived_values() -> None:
    data = json.loads(parse.to_json(parse_speculative(*pair(NEW, "speculative-no-draft"))))
    assert data["kind"] == "speculative" and data["acceptance"] is None
    assert "derived" not in data  # rounds and the like belong to the program's profile, not to the parse
    assert data["target"]["derived"]["eval_tokens_per_s"] == pytest.approx(16 / 2.79108)


# --- the command -----------------------------------------------------------------------------------


def test_cli_parse_separate_streams(tmp_path: Path) -> None:
    result = CliRunner().invoke(main, ["parse", str(NEW / "speculative.stdout"), "--stderr", str(NEW / "speculative.stderr")])
    assert result.exit_code == 0, result.output
    data = json.loads(result.stdout)
    assert (data["kind"], data["n_accept"], data["acceptance"]) == ("speculative", 57, 0.50893)


def test_cli_parse_combined_and_kind(tmp_path: Path) -> None:
    result = CliRunner().invoke(main, ["parse", str(OLD / "completion-combined.log"), "--kind", "completion"])
    assert result.exit_code == 0, result.output
    assert json.loads(result.stdout)["timings"]["eval_runs"] == 31


def test_cli_parse_truncated_output_is_one_clear_error() -> None:
    result = CliRunner().invoke(main, ["parse", str(NEW / "speculative-killed.stdout"),
                                       "--stderr", str(NEW / "speculative-killed.stderr"), "--kind", "speculative"])
    assert result.exit_code == 1
    assert "Error: no speculative decoding statistics" in result.stderr
    assert "Hint:" in result.stderr
    assert result.stdout == ""


def test_cli_parse_missing_file(tmp_path: Path) -> None:
    result = CliRunner().invoke(main, ["parse", str(tmp_path / "nope.log")])
    assert result.exit_code == 1
    assert "cannot read" in result.stderr


def test_cli_parse_help_ends_with_an_example() -> None:
    result = CliRunner().invoke(main, ["parse", "--help"])
    assert result.exit_code == 0
    description = result.output.split("Options:")[0].rstrip().splitlines()
    assert description[-1].strip().startswith("llamaspec parse ")
    assert description[-3].strip() == "Example:"


def test_llama_bench_batches_parse_and_interpolate() -> None:
    from llamaspec.llamacpp.bench import BatchTimings, parse_bench_json

    text = (FIXTURES / "0c1e570" / "llama-bench-batches.json").read_text()
    batches = parse_bench_json(text)
    assert sorted(batches.ms_by_tokens) == [1, 2, 4, 8, 17]
    records = {r["n_prompt"]: r["avg_ns"] / 1e6 for r in json.loads(text)}
    assert batches.ms(8) == pytest.approx(records[8])
    assert batches.ms(3) == pytest.approx((records[2] + records[4]) / 2)
    toy = BatchTimings({1: 10.0, 3: 14.0})
    assert toy.ms(2) == pytest.approx(12.0) and toy.ms(5) == pytest.approx(18.0)  # extrapolated from the last two
    with pytest.raises(ParseError, match="no JSON"):
        parse_bench_json("llama-bench: error: failed to load model")


# --- the 2023 generations on SmolLM2 (llama_print_timings; speculative / main) -----------------------
# a98b163 (llama-cpp-python 0.2.7, Sep 2023: the write-up's speculative example, greedy drafts whose
# length adapts) and b38a16d (0.2.20, Nov 2023: tree drafting, fixed length, early stop below
# --p-accept 0.5). Recorded with --repeat-penalty 1.0; see fixtures/llamacpp/README.md.

SEP2023 = FIXTURES / "a98b163"
NOV2023 = FIXTURES / "b38a16d"
GEN2023 = [SEP2023, NOV2023]
GEN2023_IDS = ["a98b163", "b38a16d"]


def test_sep2023_speculative_adapts_its_draft_length() -> None:
    s = parse_speculative(*pair(SEP2023, "speculative"))  # --draft 8
    assert s.format == "llama_print_timings" and not s.log_prefix
    assert (s.n_encoded, s.encode_s, s.encode_tps) == (20, 1.892, 10.573)  # BOS + 19: always a BOS there
    assert (s.n_decoded, s.decode_s, s.decode_tps) == (72, 18.737, 3.843)
    assert (s.n_draft, s.n_predict, s.n_drafted, s.n_accept, s.acceptance) == (23, 72, 107, 55, 0.51402)
    assert s.target == Timings(
        sources=("llama_print_timings",), load_ms=682.92,
        sample_ms=19.73, sample_runs=72, sample_ms_per_token=0.27, sample_tps=3648.53,
        prompt_eval_ms=8313.74, prompt_eval_tokens=140, prompt_eval_ms_per_token=59.38, prompt_eval_tps=16.84,
        eval_ms=633.44, eval_runs=3, eval_ms_per_token=211.15, eval_tps=4.74, total_ms=21116.15,
    )
    assert s.draft is not None and (s.draft.prompt_eval_tokens, s.draft.eval_runs) == (20, 121)
    assert s.text is not None and s.text.startswith("\n\n```python\ndef quick_sort(arr):")  # stdout: generation only
    # The final length, not the requested one: +8 (up to 30) after a fully accepted full-length
    # draft, -1 (down to 2) after a rejection. Even --draft 0 drafts: its first round adds 8.
    assert parse_speculative(*pair(SEP2023, "speculative-no-draft")).n_draft == 14
    assert parse_speculative(read(SEP2023, "speculative-combined.log")).n_draft == 19  # --draft 4


def test_nov2023_speculative_keeps_its_draft_length() -> None:
    s = parse_speculative(*pair(NOV2023, "speculative"))  # --draft 8
    assert (s.n_encoded, s.n_decoded, s.decode_s) == (11, 66, 5.624)  # no BOS: the model says add_bos false
    assert (s.n_draft, s.n_predict, s.n_drafted, s.n_accept, s.acceptance) == (8, 66, 55, 55, 1.0)
    # every drafted token decoded on the draft model, plus the target's own token of each round
    rounds = s.n_predict - s.n_accept  # Nov 2023's loop: one round per token the target chose itself
    assert s.draft is not None and s.draft.eval_runs == rounds + s.n_drafted == 66
    none = parse_speculative(*pair(NOV2023, "speculative-no-draft"))
    assert (none.n_draft, none.n_drafted, none.acceptance) == (0, 0, None)  # "accept = -nan%"
    assert parse_speculative(read(NOV2023, "speculative-combined.log")).n_draft == 4


# (write-up, case) and the 2023 recordings: every target decode is the prompt, one batch per round
# but the last (the token the target chose plus that round's draft), or n_predict - n_accept - 1
# batches; llama_print_timings splits them into "prompt eval" (several tokens) and "eval" (one).
CASES_2023 = [(WRITEUP, "quicksort-python.log"), (WRITEUP, "quicksort-c.log")] + [
    (folder, case) for folder in GEN2023 for case in ("speculative", "speculative-no-draft", "speculative-default-penalty")]


@pytest.mark.parametrize(("folder", "case"), CASES_2023, ids=[f"{f.name}-{c}" for f, c in CASES_2023])
def test_2023_rounds_formula_accounts_for_every_target_token(folder: Path, case: str) -> None:
    s = parse_speculative(read(folder, case)) if case.endswith(".log") else parse_speculative(*pair(folder, case))
    assert s.target is not None and s.target.prompt_eval_tokens is not None and s.target.eval_runs is not None
    batches = LLAMA_SPECULATIVE.rounds(s.n_predict, s.n_accept)
    assert batches == s.n_predict - s.n_accept - 1
    assert s.n_encoded + batches + s.n_drafted == s.target.prompt_eval_tokens + s.target.eval_runs


@pytest.mark.parametrize("folder", GEN2023, ids=GEN2023_IDS)
def test_2023_main_and_lossless(folder: Path) -> None:
    c = parse_completion(*pair(folder, "completion"))
    assert c.format == "llama_print_timings" and c.n_decoded == 64 and c.eval_runs == 63
    assert c.text is not None and c.text.startswith(PROMPT + "\n\n```python\n")  # main echoes the prompt
    spec = parse_speculative(*pair(folder, "speculative")).text
    assert spec is not None and spec.startswith(c.text[len(PROMPT):])  # -n 64 vs 66 or 72 tokens
    combined = parse_completion(read(folder, "completion-combined.log"))
    assert combined.eval_runs == 31 and combined.text is not None and c.text.startswith(combined.text.rstrip("\n"))


@pytest.mark.parametrize("folder", GEN2023, ids=GEN2023_IDS)
def test_2023_default_repeat_penalty_parts_speculative_from_main(folder: Path) -> None:
    """Why the 2023 recordings pass --repeat-penalty 1.0: at the default 1.1 the outputs differ."""
    spec = parse_speculative(*pair(folder, "speculative-default-penalty")).text
    base = parse_completion(*pair(folder, "completion-default-penalty")).text
    assert spec is not None and base is not None
    generated = base[len(PROMPT):]
    n = min(len(spec), len(generated))
    assert spec[:n] != generated[:n]


def test_nov2023_writes_what_later_generations_write() -> None:
    assert parse_completion(*pair(NOV2023, "completion")).text == parse_completion(*pair(NEW, "completion")).text


@pytest.mark.parametrize("folder", GEN2023, ids=GEN2023_IDS)
def test_2023_killed_run_is_a_parse_error(folder: Path) -> None:
    with pytest.raises(ParseError, match="no speculative decoding statistics"):
        parse_speculative(*pair(folder, "speculative-killed"))
