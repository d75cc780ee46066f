"""A pasted llama.cpp command read into llamaspec's terms (``llamaspec.llamacpp.command``).

The command lines are the real ones recorded with the fixtures of four llama.cpp generations
(``tests/fixtures/llamacpp/*/fixtures.json``: each ran with exit status 0), and the flag spellings
are checked against the recorded ``--help`` of each program.
"""

from __future__ import annotations

import glob
import json
import shlex
from pathlib import Path

import pytest
from test_flags import caps, pairs

from llamaspec.base.errors import LlamaspecError
from llamaspec.llamacpp import command, flags, programhelp
from llamaspec.measure.settings import DEFAULTS, Settings

FIXTURES = Path(__file__).resolve().parent / "fixtures" / "llamacpp"
PROMPT = "# Quick-sort implementation in Python and sample usage:"


def recorded(folder: str, case: str) -> list[str]:
    cases = json.loads((FIXTURES / folder / "fixtures.json").read_text())["cases"]
    assert cases[case]["returncode"] == 0
    return shlex.split(cases[case]["command"])


# --- three generations of real command lines ------------------------------------------------------

@pytest.mark.parametrize(("folder", "case", "program", "draft_flag"), [
    ("0c1e570", "speculative", "llama-speculative", "--spec-draft-n-max"),  # 2026
    ("0c1e570", "speculative-simple", "llama-speculative-simple", "--spec-draft-n-max"),
    ("7841fc7", "speculative", "llama-speculative", "--draft-max"),  # 2024-2025
    ("7841fc7", "speculative-simple", "llama-speculative-simple", "--draft-max"),
    ("b38a16d", "speculative", "speculative", "--draft"),  # Nov 2023
    ("a98b163", "speculative", "speculative", "--draft"),  # Sep 2023
])
def test_recorded_commands_read_into_settings(folder: str, case: str, program: str, draft_flag: str) -> None:
    argv = recorded(folder, case)
    got = command.parse(argv)
    assert got.program == program and got.engine == "llama.cpp"
    assert got.settings.program == ("speculative-simple" if "simple" in program else "speculative")
    assert got.target == command.ModelArg(argv[argv.index("-m") + 1], "path", "-m")
    assert got.draft == command.ModelArg(argv[argv.index("-md") + 1], "path", "-md")
    assert got.prompt == PROMPT and got.prompt_file is None
    s = got.settings
    assert s.draft_max == int(argv[argv.index(draft_flag) + 1])
    assert (s.n_predict, s.seed, s.temperature, s.ctx_size, s.escape) == (int(argv[argv.index("-n") + 1]), 20, 0.0, 512, True)
    assert s.threads == int(argv[argv.index("-t") + 1])
    # 2023's runs set the repeat penalty llamaspec has no setting for: passed through, to both sides
    assert got.passed_through == (("--repeat-penalty", "1.0") if folder in ("b38a16d", "a98b163") else ())
    assert not got.sampled
    assert got.bin_dir == Path(argv[0]).parent


@pytest.mark.parametrize(("folder", "case", "role", "help_name"), [
    ("0c1e570", "speculative", "speculative", "llama-speculative"),
    ("0c1e570", "speculative-simple", "speculative-simple", "llama-speculative-simple"),
    ("7841fc7", "speculative", "speculative", "llama-speculative"),
    ("7841fc7", "speculative-simple", "speculative-simple", "llama-speculative-simple"),
])
def test_recorded_command_rebuilt_by_the_flag_table(folder: str, case: str, role: str, help_name: str) -> None:
    """What llamaspec reads from a command, written back by the flag table for that build, is the
    command itself: nothing read is lost or changed on the way (order aside)."""
    argv = recorded(folder, case)
    got = command.parse(argv)
    program_caps = caps(FIXTURES / folder, help_name)
    inv = flags.Invocation(target=got.target.value, settings=got.settings, draft=got.draft.value if got.draft else None,
                           prompt=got.prompt)
    rebuilt = flags.speculative_argv(program_caps, Path(argv[0]), inv, role)
    assert pairs(rebuilt) == pairs(argv)


def test_the_2023_flags_reach_the_2026_build_in_its_own_spelling() -> None:
    """A command pasted from 2023 (--draft) measured on the pinned build: the draft length is
    written as --spec-draft-n-max there (the 2023 spelling is listed as removed)."""
    got = command.parse(recorded("b38a16d", "speculative"))
    inv = flags.Invocation(target=got.target.value, settings=got.settings, draft=got.draft.value if got.draft else None,
                           prompt=got.prompt)
    argv = flags.speculative_argv(caps(FIXTURES / "0c1e570", "llama-speculative"), Path("llama-speculative"), inv, "speculative")
    assert ("--spec-draft-n-max", "8") in pairs(argv) and "--draft" not in argv
    assert argv[-2:] == ["--repeat-penalty", "1.0"]  # passed through, last and verbatim


def test_the_issue_server_line() -> None:
    got = command.parse(shlex.split("llama-server -m T.gguf -md D.gguf --spec-draft-n-max 8 -c 4096 -ngl 99"))
    assert (got.program, got.engine, got.settings.program) == ("llama-server", "llama-server", None)
    assert (got.target.value, got.draft.value if got.draft else None) == ("T.gguf", "D.gguf")
    s = got.settings
    assert (s.draft_max, s.ctx_size, s.gpu_layers) == (8, 4096, 99)
    assert got.given == ("draft_max", "ctx_size", "gpu_layers")
    assert got.passed_through == () and got.bin_dir is None
    # unset settings stay unset: llamaspec's defaults apply, and the description says so for sampling
    assert s.temperature is None and s.with_defaults().temperature == DEFAULTS.temperature == 0.0
    assert any("greedy" in line for line in got.describe())


def test_unknown_flags_pass_through_in_order_with_their_values() -> None:
    got = command.parse(shlex.split(
        "llama-server -m T.gguf --top-k 40 -md D.gguf --repeat-penalty 1.1 --mlock --override-kv a=int:1 "
        "--draft-max 6 --rope-freq-scale=0.5 --port 8081 --host 0.0.0.0 -fa on --seed -1"))
    assert got.passed_through == ("--top-k", "40", "--repeat-penalty", "1.1", "--mlock", "--override-kv", "a=int:1",
                                  "--rope-freq-scale=0.5")
    assert got.dropped == ("--port", "8081", "--host", "0.0.0.0")  # llamaspec serves on loopback at a port of its own
    assert (got.settings.draft_max, got.settings.flash_attn, got.settings.seed) == (6, "on", -1)
    lines = "\n".join(got.describe())
    assert "passed through to both sides: --top-k 40 --repeat-penalty 1.1" in lines
    assert "left out (llamaspec sets these to measure): --port 8081 --host 0.0.0.0" in lines


def test_passed_through_flags_reach_both_sides_of_the_server() -> None:
    from llamaspec.llamacpp import server
    from llamaspec.measure.contract import ModelPath, ResolvedCase

    got = command.parse(shlex.split("llama-server -m T.gguf -md D.gguf --spec-draft-n-max 4 --top-k 1 --mlock"))
    case = ResolvedCase("e", "c", ModelPath("t", "T.gguf"), ModelPath("d", "D.gguf"), "hi", None,
                        got.settings.with_defaults())
    server_caps = caps(FIXTURES / "0c1e570", "llama-server")
    for mode in ("baseline", "speculative"):
        argv = server.server_args(server_caps, "cpu", case, mode)
        assert argv[-3:] == ["--top-k", "1", "--mlock"], mode
    assert "-md" not in server.server_args(server_caps, "cpu", case, "baseline")


def test_extra_args_are_part_of_the_baseline_key() -> None:
    """A baseline with other passed-through flags is another baseline (never shared across them);
    another draft length keeps the baseline (the control)."""
    from dataclasses import replace

    from fakes import FakeEngine

    from llamaspec.measure.contract import ModelPath, ResolvedCase
    from llamaspec.studies.run import baseline_key

    case = ResolvedCase("e", "c", ModelPath("t", "T.gguf"), ModelPath("d", "D.gguf"), "hi", None,
                        Settings(draft_max=4).with_defaults())
    engine = FakeEngine()
    key = baseline_key(engine, case)
    assert baseline_key(engine, replace(case, settings=replace(case.settings, draft_max=8))) == key
    assert baseline_key(engine, replace(case, settings=replace(case.settings, extra_args=("--top-k", "1")))) != key


def test_flag_spellings_of_every_generation() -> None:
    """Each spelling a recorded --help gives for a setting llamaspec maps is read as that setting
    (every alias of -n, --temp, -ngl, the draft length ...), whichever generation it comes from."""
    known = command._setting_flags()
    checked = 0
    for path in glob.glob(str(FIXTURES / "*" / "*.help.txt")):
        for line in Path(path).read_text().splitlines():
            m = programhelp._OPTION_LINE.match(line)
            if not m:
                continue
            names = [n.strip() for n in m.group(1).split(",")]
            mapped = {known[n] for n in names if n in known}
            if len(mapped) == 1 and "argument has been removed" not in line:
                setting = mapped.pop()
                assert all(known.get(n) == setting for n in names), (path, names)
                checked += 1
    assert checked > 40


def test_every_draft_side_flag_of_every_generation_is_known_as_such() -> None:
    """A flag of the draft side must never reach the baseline: every spelling of every option
    whose names say draft or --spec- in a recorded --help is classified as draft side."""
    for path in glob.glob(str(FIXTURES / "*" / "*.help.txt")):
        for line in Path(path).read_text().splitlines():
            m = programhelp._OPTION_LINE.match(line)
            if m:
                names = [n.strip() for n in m.group(1).split(",")]
                if any("draft" in n or n.startswith("--spec-") for n in names):
                    assert all(command._draft_side(n) for n in names), (path, names)
    assert not command._draft_side("--special") and not command._draft_side("-sp")


def test_every_flag_table_row_has_a_reader() -> None:
    assert set(command.VALUE) == set(flags.FLAG_TABLE)


def test_spec_type_and_ngram_modes() -> None:
    got = command.parse(shlex.split("llama-server -m T.gguf --spec-type ngram-simple --spec-ngram-simple-size-n 3"))
    assert (got.settings.spec_type, got.settings.ngram_size_n, got.draft) == ("ngram-simple", 3, None)
    assert command.parse(shlex.split("llama-server -m T.gguf -md D.gguf --spec-type draft-simple")).settings.spec_type == "draft"
    with pytest.raises(LlamaspecError, match="sets ngram size n of ngram-map-k but speculates with ngram-simple"):
        command.parse(shlex.split("llama-server -m T.gguf --spec-type ngram-simple --spec-ngram-map-k-size-n 3"))
    with pytest.raises(LlamaspecError, match="one speculative type at a time"):
        command.parse(shlex.split("llama-server -m T.gguf -md D.gguf --spec-type draft-simple,ngram-mod"))
    with pytest.raises(LlamaspecError, match="also loads -md D.gguf"):
        command.parse(shlex.split("llama-server -m T.gguf -md D.gguf --spec-type ngram-mod"))


def test_flash_attention_as_switch_and_as_value() -> None:
    assert command.parse(shlex.split("llama-speculative -m T -md D -fa -n 8")).settings.flash_attn == "on"
    assert command.parse(shlex.split("llama-speculative -m T -md D -fa off")).settings.flash_attn == "off"
    assert command.parse(shlex.split("llama-speculative -m T -md D --flash-attn=auto")).settings.flash_attn == "auto"


def test_hugging_face_models_and_escape() -> None:
    got = command.parse(shlex.split("llama-server -hf u/target-GGUF:Q8_0 -hfd u/draft-GGUF:Q4_0 --no-escape"))
    assert got.target == command.ModelArg("u/target-GGUF:Q8_0", "hf", "-hf")
    assert got.draft == command.ModelArg("u/draft-GGUF:Q4_0", "hf", "-hfd")
    assert got.settings.escape is False


# --- a sampled command ------------------------------------------------------------------------------

def test_a_sampled_command_is_read_as_sampled() -> None:
    got = command.parse(shlex.split("llama-speculative-simple -m T -md D --temp 0.7 --top-p 0.9"))
    assert got.sampled and got.settings.temperature == 0.7 and got.passed_through == ("--top-p", "0.9")
    assert any("sampled, so the lossless check does not apply" in line for line in got.describe())


# --- bad input ------------------------------------------------------------------------------------

@pytest.mark.parametrize(("argv", "message", "hint"), [
    ("llama-server -md D.gguf --spec-draft-n-max 8", "has no target model", "-m target.gguf"),
    ("llama-cli -m T.gguf -md D.gguf", "cannot measure llama-cli: llama-cli runs the target alone",
     "llama-server, llama-speculative-simple, llama-speculative"),
    ("/opt/bin/llama-bench -m T.gguf", "cannot measure /opt/bin/llama-bench", "it measures llama-server"),
    ("-m T.gguf -md D.gguf", "starts with the flag -m, not with a program", "program first"),
    ("llama-server -m T.gguf -c 4k -md D.gguf", "-c 4k: expected a whole number", "fix the value of -c"),
    ("llama-server -m T.gguf -md D.gguf --spec-draft-n-max 0", "--spec-draft-n-max: must be at least 1, got 0",
     "fix that value"),
    ("llama-server -m T.gguf -md D.gguf --temp warm", "--temp warm: expected a number", "--temp"),
    ("llama-server -m T.gguf -md D.gguf -ngl auto", "-ngl auto: 'auto' leaves the offload", "-ngl"),
    ("llama-server -m T.gguf -md D.gguf -fa maybe", "-fa: expected one of on, off, auto", "fix that value"),
    ("llama-server -m T.gguf -md", "-md needs a model file", "-md model.gguf"),
    ("llama-server -m T.gguf --spec-draft-n-max 8", "no draft model: nothing to compare llama-server against", "-md DRAFT.gguf"),
    ("llama-server -m T.gguf -md D.gguf --spec-type none", "does not speculate", "drop --spec-type none"),
    ("llama-server -m T.gguf -md D.gguf -cd 512", "does not know -cd, a flag of the draft side", "drop it"),
    ("llama-server -m T.gguf -md D.gguf --spec-draft-device CUDA1", "does not know --spec-draft-device", "drop it"),
    ("llama-speculative -m T.gguf -md D.gguf -cnv", "-cnv in the pasted command waits for typed input", "drop it"),
    ("llama-server -hf u/r -hfd u/d --hf-token hf_abc", "--hf-token in the pasted command would be stored", "HF_TOKEN"),
    ("llama-server -m T.gguf -md D.gguf oops", "'oops' in the pasted command follows no flag", "quoting"),
])
def test_bad_pasted_commands(argv: str, message: str, hint: str) -> None:
    with pytest.raises(LlamaspecError) as info:
        command.parse(shlex.split(argv))
    assert message in info.value.message
    assert info.value.hint and hint in info.value.hint


def test_a_command_pasted_as_one_quoted_word() -> None:
    line = "llama-server -m 'my models/T.gguf' -md D.gguf --spec-draft-n-max 4 --top-k 1"
    assert command.parse([line]) == command.parse(shlex.split(line))
    assert command.parse([line]).target.value == "my models/T.gguf"
    with pytest.raises(LlamaspecError, match="does not split into words"):
        command.parse(["llama-server -m 'T.gguf -md D.gguf"])


def test_nothing_pasted() -> None:
    with pytest.raises(LlamaspecError, match="nothing after --"):
        command.parse([])
