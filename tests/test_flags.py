"""Flag detection and command lines, on the recorded ``--help`` of two llama.cpp generations.

The recorded commands in the fixtures ran with exit status 0 on the real binaries, so a command
line equal to them is one that runs there.
"""

from __future__ import annotations

import json
import shlex
from dataclasses import replace
from pathlib import Path

import pytest

from llamaspec.base.errors import LlamaspecError
from llamaspec.llamacpp import counting, flags, parse, programhelp
from llamaspec.measure.settings import FIELDS, Settings

FIXTURES = Path(__file__).resolve().parent / "fixtures" / "llamacpp"
OLD = FIXTURES / "7841fc7"  # llama-cpp-python 0.3.8, Feb 2025: --draft-max
NEW = FIXTURES / "0c1e570"  # the pinned tree: --spec-draft-n-max, --spec-type


def caps(folder: Path, program: str) -> programhelp.HelpFlags:
    """Program flags as ``programhelp.program_flags`` reads them, from the recorded --help and --version."""
    help_text = (folder / f"{program}.help.txt").read_text()
    options, removed, spec_types = programhelp.parse_help(help_text)
    version = programhelp.parse_version((folder / f"{program}.version.txt").read_text())
    return programhelp.HelpFlags(f"/bin/{program}", options, removed, spec_types, version, help_text)


def recorded(folder: Path, case: str) -> list[str]:
    cases = json.loads((folder / "fixtures.json").read_text())["cases"]
    assert cases[case]["returncode"] == 0
    return shlex.split(cases[case]["command"])


def settings(draft: str | None = "/tmp/ls-models/smollm2-135m-q4_0.gguf",
             target: str = "/tmp/ls-models/smollm2-135m-f16.gguf", **changes: object) -> flags.Invocation:
    """The recorded runs' invocation; settings not given stay unset (no flag), as in the recordings."""
    base: dict[str, object] = dict(n_predict=64, seed=20, temperature=0.0, draft_max=8, threads=2, ctx_size=512, escape=True)
    base.update(changes)
    return flags.Invocation(target=target, settings=Settings(**base),  # type: ignore[arg-type]
                            draft=draft, prompt="# Quick-sort implementation in Python and sample usage:")


def pairs(argv: list[str]) -> set[tuple[str, str | None]]:
    """A command line as a set of (flag, value) pairs, ignoring order and the program path."""
    out: set[tuple[str, str | None]] = set()
    args = argv[1:]
    i = 0
    while i < len(args):
        if i + 1 < len(args) and not args[i + 1].startswith("-"):
            out.add((args[i], args[i + 1]))
            i += 2
        else:
            out.add((args[i], None))
            i += 1
    return out


# --- parse_help ---------------------------------------------------------------------------------


def test_current_help_offers_the_spec_flags_and_marks_the_old_ones_removed() -> None:
    options, removed, spec_types = programhelp.parse_help((NEW / "llama-speculative.help.txt").read_text())
    assert {"--spec-draft-n-max", "--spec-draft-n-min", "--spec-type", "-md", "-ngld", "-td", "-e"} <= options
    # "--draft, --draft-n, --draft-max N   the argument has been removed. use --spec-draft-n-max ..."
    assert removed == {"--draft", "--draft-n", "--draft-max", "--draft-min", "--draft-n-min"}
    assert {"--draft", "--draft-max"} <= options  # listed, so only the removed set keeps them out
    assert spec_types[:2] == ("none", "draft-simple")
    assert {"ngram-simple", "ngram-cache"} <= set(spec_types)


def test_2025_help_has_draft_max_and_nothing_removed() -> None:
    options, removed, spec_types = programhelp.parse_help((OLD / "llama-speculative.help.txt").read_text())
    assert {"--draft-max", "--draft", "--draft-n", "--draft-min", "--draft-p-min", "-md", "-ngld"} <= options
    assert "--spec-draft-n-max" not in options and "--spec-type" not in options
    assert removed == frozenset()
    assert spec_types == ()


def test_removed_flags_are_never_picked() -> None:
    new = caps(NEW, "llama-speculative")
    assert not new.has("--draft-max") and not new.has("--draft")
    assert new.pick(("--draft-max", "--draft")) is None
    assert new.pick(flags.FLAG_TABLE["draft_max"].names) == "--spec-draft-n-max"
    assert new.pick(flags.FLAG_TABLE["draft_min"].names) == "--spec-draft-n-min"
    old = caps(OLD, "llama-speculative")
    assert old.pick(flags.FLAG_TABLE["draft_max"].names) == "--draft-max"
    assert old.pick(flags.FLAG_TABLE["draft_p_min"].names) == "--draft-p-min"


def test_a_removal_note_on_the_next_line_counts_too() -> None:
    text = (
        "--spec-some-very-long-option-name, --old-alias N\n"
        "                                        the argument has been removed. use --spec-x\n"
        "--kept N                                a flag that stays\n"
        "                                        (env: LLAMA_ARG_KEPT)\n"
    )
    options, removed, _ = programhelp.parse_help(text)
    assert removed == {"--spec-some-very-long-option-name", "--old-alias"}
    assert "--kept" in options and "--kept" not in removed


def test_generation_and_version() -> None:
    assert caps(NEW, "llama-speculative").generation == "2026"
    assert caps(OLD, "llama-speculative").generation == "2024"
    assert caps(NEW, "llama-speculative").version == programhelp.Version(0, "0c1e570")
    assert caps(OLD, "llama-speculative").version == programhelp.Version(1, "7841fc7")  # "version: 1 (7841fc7)"


def test_completion_programs_take_no_cnv() -> None:
    assert caps(NEW, "llama-completion").has("-no-cnv")
    assert caps(OLD, "llama-cli").has("-no-cnv")


# --- command lines ---------------------------------------------------------------------------------


def test_current_speculative_argv_matches_the_recorded_run() -> None:
    c = caps(NEW, "llama-speculative")
    argv = flags.speculative_argv(c, Path("/bin/llama-speculative"), settings(), "speculative")
    assert ("--spec-draft-n-max", "8") in pairs(argv)
    assert ("--spec-type", "draft-simple") in pairs(argv)
    assert not any(a in argv for a in ("--draft-max", "--draft", "--draft-n"))
    assert pairs(argv) == pairs(recorded(NEW, "speculative"))


def test_2025_speculative_argv_matches_the_recorded_run() -> None:
    c = caps(OLD, "llama-speculative")
    argv = flags.speculative_argv(c, Path("/bin/llama-speculative"), settings(), "speculative")
    assert ("--draft-max", "8") in pairs(argv)
    assert "--spec-type" not in argv and "--spec-draft-n-max" not in argv
    assert pairs(argv) == pairs(recorded(OLD, "speculative"))


@pytest.mark.parametrize("folder, program", [(NEW, "llama-completion"), (OLD, "llama-cli")])
def test_completion_argv_matches_the_recorded_run(folder: Path, program: str) -> None:
    argv = flags.completion_argv(caps(folder, program), Path(f"/bin/{program}"), settings(draft=None, draft_max=None))
    assert pairs(argv) == pairs(recorded(folder, "completion"))


def test_the_baseline_program_says_spec_type_none_only_where_its_help_offers_it() -> None:
    """The pinned llama-completion lists no --spec-type (the recorded run above has none, and it
    refuses an unknown flag); a baseline program whose --help lists it with none (llama-cli at
    0c1e570, whose option table it shares with llama-server) gets --spec-type none, said before the
    passed-through flags."""
    plain = caps(NEW, "llama-completion")
    assert not plain.has("--spec-type")
    assert "--spec-type" not in flags.completion_argv(plain, Path("/bin/llama-completion"), settings(draft=None))
    line = next(x for x in (NEW / "llama-server.help.txt").read_text().splitlines() if x.startswith("--spec-type"))
    text = plain.help_text + line + "\n"
    options, removed, spec_types = programhelp.parse_help(text)
    offering = programhelp.HelpFlags("/bin/llama-cli", options, removed, spec_types, plain.version, text)
    inv = settings(draft=None, extra_args=("--top-k", "1"))
    argv = flags.completion_argv(offering, Path("/bin/llama-cli"), inv)
    assert argv[-4:] == ["--spec-type", "none", "--top-k", "1"] and argv.count("--spec-type") == 1
    assert flags.no_speculation_argv(caps(NEW, "llama-speculative")) == ["--spec-type", "none"]
    assert flags.no_speculation_argv(caps(OLD, "llama-speculative")) == []  # 2025: no --spec-type at all


def test_measured_programs_run_without_the_environments_llama_arg_variables() -> None:
    """llama.cpp reads every option from LLAMA_ARG_<NAME> too, before its command line, and at
    0c1e570 --spec-type none cannot take out a type LLAMA_ARG_SPEC_TYPE put in: the measured
    programs get none of them (nor LLAMA_API_KEY), and the rest of the environment as it is."""
    env = {"LLAMA_ARG_SPEC_TYPE": "ngram-mod", "LLAMA_ARG_NO_MMAP": "1", "LLAMA_API_KEY": "k", "HOME": "/h",
           "LLAMA_CACHE": "/c"}
    assert flags.measured_env(env) == {"LLAMA_API_KEY": None, "LLAMA_ARG_NO_MMAP": None, "LLAMA_ARG_SPEC_TYPE": None}
    assert flags.measured_env({"HOME": "/h"}) == {}


def test_draft_free_modes_are_refused_by_the_speculative_program() -> None:
    # llama-speculative lists the n-gram modes in --spec-type but stops with "--model-draft is required".
    s = settings(draft=None, draft_max=None, spec_type="ngram-simple")
    with pytest.raises(LlamaspecError, match="llama-speculative cannot run --spec-type ngram-simple") as err:
        flags.speculative_argv(caps(NEW, "llama-speculative"), Path("/bin/llama-speculative"), s, "speculative")
    assert "--program speculative-simple" in (err.value.hint or "") and "llama-server" in (err.value.hint or "")
    with pytest.raises(LlamaspecError, match=r"llama-speculative \(7841fc7\) has no --spec-type") as err:
        flags.speculative_argv(caps(OLD, "llama-speculative"), Path("/bin/llama-speculative"), s, "speculative")
    with_draft = settings(spec_type="draft")
    assert ("--spec-type", "draft-simple") in pairs(
        flags.speculative_argv(caps(NEW, "llama-speculative"), Path("/bin/llama-speculative"), with_draft, "speculative"))
    with pytest.raises(LlamaspecError, match="does not know --spec-type"):
        flags.speculative_argv(caps(NEW, "llama-speculative"), Path("/bin/llama-speculative"),
                               settings(spec_type="ngram-nonsense"), "speculative")


def test_every_setting_reaches_llama_cpp_through_the_table_or_is_refused() -> None:
    """Adding a setting is its schema entry plus its flag-table row: nothing else knows about it. A
    setting of another engine (transformers' dtype, say) is not in the table, and the llama.cpp
    backends do not declare it, so the run core refuses it there (tests/test_run.py). What each
    backend honours is read from the table."""
    from llamaspec.llamacpp import server
    from llamaspec.llamacpp.runner import SETTINGS

    assert not set(flags.FLAG_TABLE) & set(flags.HANDLED_ELSEWHERE)
    rows = {**flags.FLAG_TABLE, **flags.HANDLED_ELSEWHERE}
    assert set(FIELDS) >= set(rows)
    command_line = {n for n, r in flags.FLAG_TABLE.items() if r.programs & flags.COMMAND_LINE}
    assert command_line | {n for n, p in flags.HANDLED_ELSEWHERE.items() if p & flags.COMMAND_LINE} == SETTINGS
    assert flags.takes("server") == server.HONOURED
    assert {n for n, r in flags.FLAG_TABLE.items() if "server" in r.programs} | {
        n for n, p in flags.HANDLED_ELSEWHERE.items() if "server" in p} == server.HONOURED
    others = set(FIELDS) - set(rows)
    assert all(FIELDS[name].metadata["engine"] == "transformers" for name in others), others
    for name in set(FIELDS) - SETTINGS:  # llama-server's own (slots, n-gram sizes) or another engine's
        assert FIELDS[name].metadata["engine"] in ("transformers", "llama-server"), name


# One value of each row's setting that differs from its default, to see it reach each program.
SAMPLES: dict[str, object] = {
    "n_predict": 7, "seed": 3, "temperature": 0.5, "threads": 1, "gpu_layers": 5, "ctx_size": 256,
    "batch_size": 64, "flash_attn": "on", "parallel": 3, "rpc": ("127.0.0.1:50052",), "draft_max": 4,
    "draft_min": 2, "draft_p_min": 0.5, "threads_draft": 1, "draft_gpu_layers": 3,
}
PROGRAM_HELP = {"speculative": "llama-speculative", "speculative-simple": "llama-speculative-simple",
                "completion": "llama-completion", "server": "llama-server"}


@pytest.mark.parametrize("setting", sorted(flags.FLAG_TABLE))
def test_each_row_reaches_the_programs_it_names_and_no_other(setting: str) -> None:
    """On the pinned build's recorded --help: a row's setting, set, puts its flag (or, on llama-server,
    its request field) into the command line of each program the row names, and into no other's."""
    from llamaspec.llamacpp import server
    from llamaspec.measure.contract import ModelPath, ResolvedCase

    assert set(SAMPLES) == set(flags.FLAG_TABLE), "give the new row a sample value"
    row = flags.FLAG_TABLE[setting]
    value = SAMPLES[setting]
    for program, help_name in PROGRAM_HELP.items():
        c = caps(NEW, help_name)
        flag = c.pick(row.names)
        s = Settings(**{setting: value})  # type: ignore[arg-type]
        if program == "server":
            rc = ResolvedCase("e", "c", ModelPath("t", "/m/t.gguf"), ModelPath("d", "/m/d.gguf"), "p", None,
                              s.with_defaults())
            argv = server.server_args(c, "cuda", rc, "speculative")
            if row.request:
                assert flags.request_fields(rc.settings)[row.request] == value
                assert flag not in argv
                continue
        else:
            inv = flags.Invocation("/m/t.gguf", s.with_defaults(), draft=None if program == "completion" else "/m/d.gguf",
                                   prompt="p", accel="cuda")
            argv = (flags.completion_argv(c, Path("/bin/x"), inv) if program == "completion"
                    else flags.speculative_argv(c, Path("/bin/x"), inv, program))
        taken = program in row.programs
        assert flag is not None or not taken, (setting, program)  # a program that takes it lists it
        assert (flag in argv) == taken, (setting, program, argv)
        assert (setting in flags.takes(program)) == taken


@pytest.mark.parametrize("folder, flag", [(NEW, "--spec-draft-n-min"), (OLD, "--draft-min")])
def test_draft_min_reaches_speculative_simple_by_each_generations_name(folder: Path, flag: str) -> None:
    """--spec-draft-n-min on the pinned build (where --draft-min and --draft-n-min are listed as removed),
    --draft-min on 2024 to early-2026 builds; llama-speculative never gets it (it never reads n_min)."""
    inv = settings(draft_min=3)
    simple = flags.speculative_argv(caps(folder, "llama-speculative-simple"), Path("/bin/x"), inv, "speculative-simple")
    assert (flag, "3") in pairs(simple)
    assert not {"--draft-min", "--draft-n-min", "--spec-draft-n-min"} - {flag} & set(simple)
    spec = flags.speculative_argv(caps(folder, "llama-speculative"), Path("/bin/x"), inv, "speculative")
    assert flag not in spec
    assert "draft_min" in flags.takes("speculative-simple") and "draft_min" not in flags.takes("speculative")


def test_draft_min_is_a_sweep_axis() -> None:
    from llamaspec.studies import grid

    assert grid.parse_values("draft_min", "0,2") == (0, 2)
    assert grid.parse_values("draft_min", "1..3") == (1, 2, 3)
    with pytest.raises(LlamaspecError, match="must not be negative"):
        grid.parse_values("draft_min", "-1")


def test_the_speculative_programs_read_draft_p_min_as_their_profiles_say() -> None:
    for profile in counting.COUNTING_PROFILES.values():
        assert profile.reads_p_min == ("draft_p_min" in flags.FLAG_TABLE and
                                       profile.role in flags.FLAG_TABLE["draft_p_min"].programs)
    assert counting.profile("speculative-simple", "2026").reads_p_min
    assert not counting.profile("speculative", "2026").reads_p_min


def test_flash_attention_takes_a_value_now_and_was_a_switch_before() -> None:
    new = flags.completion_argv(caps(NEW, "llama-completion"), Path("/bin/llama-completion"),
                                settings(draft=None, flash_attn="off"))
    assert ("-fa", "off") in pairs(new)
    old_caps = caps(OLD, "llama-cli")
    assert "-fa" in flags.completion_argv(old_caps, Path("/bin/llama-cli"), settings(draft=None, flash_attn="on"))
    assert "-fa" not in flags.completion_argv(old_caps, Path("/bin/llama-cli"), settings(draft=None, flash_attn="off"))
    with pytest.raises(LlamaspecError, match="only as an on switch"):
        flags.completion_argv(old_caps, Path("/bin/llama-cli"), settings(draft=None, flash_attn="auto"))


def _counters(folder: Path, name: str) -> parse.SpeculativeStats:
    return parse.parse_speculative((folder / f"{name}.stdout").read_text(), (folder / f"{name}.stderr").read_text())


@pytest.mark.parametrize("folder, generation", [(NEW, "2026"), (OLD, "2024")])
def test_rounds_follow_each_program(folder: Path, generation: str) -> None:
    """llama-speculative samples the first token from the prompt: rounds = n_predict - n_accept - 1 and it
    drafts exactly k per round; llama-speculative-simple emits accepted + 1 per round and drafts up to k."""
    spec = _counters(folder, "speculative")
    fixed = counting.profile("speculative", generation)
    assert fixed.draft_policy == "fixed" and not fixed.reads_p_min
    assert spec.n_drafted == spec.n_draft * fixed.rounds(spec.n_predict, spec.n_accept)  # 112 = 8 x 14
    simple = _counters(folder, "speculative-simple")
    capped = counting.profile("speculative-simple", generation)
    assert capped.draft_policy == "capped" and capped.reads_p_min
    rounds = capped.rounds(simple.n_predict, simple.n_accept)
    assert simple.n_drafted <= simple.n_draft * rounds
    assert fixed.draft_steps_per_round(8) == 9 and capped.draft_steps_per_round(8) == 8



# --- the 2023 generations (speculative / main / --draft; no --version) ------------------------------

SEP2023 = FIXTURES / "a98b163"  # llama-cpp-python 0.2.7, Sep 2023: the write-up's generation
NOV2023 = FIXTURES / "b38a16d"  # llama-cpp-python 0.2.20, Nov 2023


@pytest.mark.parametrize("folder", [SEP2023, NOV2023], ids=["a98b163", "b38a16d"])
def test_2023_argv_matches_the_recorded_run(folder: Path) -> None:
    c = caps(folder, "speculative")
    assert c.generation == "2023" and c.version.commit == "unknown"  # --version is not a flag yet: usage text
    variant = "untied" if folder == NOV2023 else "sep2023"
    s = settings(target=f"/tmp/ls-models/smollm2-135m-f32-{variant}.gguf",
                 draft=f"/tmp/ls-models/smollm2-135m-q4_1-{variant}.gguf", threads=1,
                 extra_args=("--repeat-penalty", "1.0"))
    argv = flags.speculative_argv(c, Path("/bin/speculative"), s, "speculative")
    assert ("--draft", "8") in pairs(argv) and "--draft-max" not in argv
    assert pairs(argv) == pairs(recorded(folder, "speculative"))
    main = flags.completion_argv(caps(folder, "main"), Path("/bin/main"), replace(s, draft=None, settings=replace(s.settings, draft_max=None)))
    assert "-no-cnv" not in main
    assert pairs(main) == pairs(recorded(folder, "completion"))


@pytest.mark.parametrize("commit, policy", [("a98b163", "adaptive"), ("b38a16d", "capped")])
def test_2023_programs_are_told_apart_by_their_help(commit: str, policy: str) -> None:
    """Sep 2023 adapts the draft length (n_draft prints the final one); Nov 2023 keeps it and stops a
    round early below --p-accept. Both sample the first token from the prompt."""
    folder = FIXTURES / commit
    c = caps(folder, "speculative")
    profile = counting.profile_for(c, "speculative")
    assert c.generation == "2023" and profile.draft_policy == policy
    spec = _counters(folder, "speculative")
    rounds = profile.rounds(spec.n_predict, spec.n_accept)
    assert rounds == spec.n_predict - spec.n_accept - 1
    if policy == "adaptive":
        assert spec.n_draft != 8  # asked for 8, ended elsewhere
    else:
        assert spec.n_draft == 8 and spec.n_drafted <= 8 * rounds
