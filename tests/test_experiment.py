"""Experiment files: the shipped ones load, and bad ones fail with errors that point at the key."""

from __future__ import annotations

from pathlib import Path

import pytest

from llamaspec.base.errors import LlamaspecError
from llamaspec.studies import experiment
from llamaspec.studies.experiment import Settings

ROOT = Path(__file__).resolve().parent.parent


def known(model: str, variant: str) -> str | None:
    models = {"codellama-7b": {"f16"}, "tinyllama-1.1b-python": {"q4_0"}, "smollm2-135m": {"f16", "f32", "q4_0", "q4_1", "q8_0"},
              "tinyllama-1.1b-chat": {"hf"}, "guanaco-7b": {"hf"}, "guanaco-13b": {"hf"}, "guanaco-33b": {"hf"},
              "gemma-3-270m": {"q4_k_m"}}
    if model not in models:
        return f"unknown model {model!r}"
    if variant not in models[model]:
        return f"unknown variant {variant!r} of {model}"
    return None


def write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "exp.yaml"
    path.write_text(text)
    return path


GOOD = """
name: t
settings: {n_predict: 16, draft_max: 4}
cases:
  - name: a
    target: {model: smollm2-135m, variant: f16}
    draft: {model: smollm2-135m, variant: q4_0}
    prompt: hello
"""


def test_shipped_experiments_load() -> None:
    """Against the real catalog: every model and variant the shipped experiments name exists."""
    for path in sorted((ROOT / "experiments").glob("*.yaml")):
        exp = experiment.load(str(path))
        assert exp.cases, path


def test_quicksort_python_matches_the_writeup() -> None:
    exp = experiment.load(str(ROOT / "experiments" / "quicksort-python.yaml"), known)
    (case,) = exp.cases
    s = case.settings
    assert (s.n_predict, s.seed, s.temperature, s.draft_max, s.threads, s.gpu_layers) == (256, 20, 0.0, 8, 4, "all")
    assert case.prompt == "# Quick-sort implementation in Python and sample usage:"
    assert (case.target.model, case.target.variant) == ("codellama-7b", "f16")
    assert (case.draft.model, case.draft.variant) == ("tinyllama-1.1b-python", "q4_0")
    ref = case.reference
    assert (ref.decode_tps, ref.acceptance, ref.n_drafted, ref.n_accept, ref.n_predict) == (33.507, 0.61514, 317, 195, 265)


def test_quicksort_c_keeps_the_escaped_prompt() -> None:
    exp = experiment.load(str(ROOT / "experiments" / "quicksort-c.yaml"), known)
    assert exp.cases[0].prompt.endswith("sample usage:\\n\\n#include")
    assert exp.cases[0].settings.escape is True


def test_precedence_command_line_over_case_over_experiment(tmp_path: Path) -> None:
    text = GOOD.replace("    prompt: hello", "    prompt: hello\n    settings: {draft_max: 6}")
    exp = experiment.load(str(write(tmp_path, text)), known)
    assert exp.cases[0].settings.draft_max == 6  # case over experiment
    assert exp.cases[0].settings.n_predict == 16
    over = exp.with_overrides(Settings(draft_max=2), repeats=3, prompt="other")
    assert over.cases[0].settings.draft_max == 2 and over.repeats == 3 and over.cases[0].prompt == "other"
    assert over.cases[0].settings.n_predict == 16


@pytest.mark.parametrize(
    ("text", "message"),
    [
        (GOOD.replace("name: t", "name: t\nbogus: 1"), "bogus: unknown key"),
        (GOOD.replace("n_predict: 16", "n_predikt: 16"), "settings.n_predikt: unknown key (did you mean 'n_predict'?)"),
        (GOOD.replace("n_predict: 16", "n_predict: many"), "settings.n_predict: expected int, got str 'many'"),
        (GOOD.replace("n_predict: 16", "n_predict: -3"), "settings.n_predict: must be at least 1, got -3"),
        (GOOD.replace("draft_max: 4", "draft_max: 4, threads: 0"), "settings.threads: must be at least 1, got 0"),
        (GOOD.replace("draft_max: 4", "draft_max: 4, timeout: 0"), "settings.timeout: must be more than 0, got 0"),
        (GOOD.replace("n_predict: 16", "n_predict: true"), "settings.n_predict: expected int, got a boolean"),
        (GOOD.replace("draft: {model: smollm2-135m, variant: q4_0}", "draft: {model: x, variant: q4_0}"),
         "cases[0].draft.model: unknown model 'x'"),
        (GOOD.replace("variant: q4_0", "variant: q3_k"), "cases[0].draft.variant: unknown variant 'q3_k'"),
        (GOOD.replace("    prompt: hello\n", ""), "cases[0]: give exactly one of prompt and prompt_file"),
        (GOOD.replace("cases:", "cases: []\nx:").split("  - name")[0], "x: unknown key"),
        ("name: t\ncases: []\n", "cases: needs at least one case"),
        ("cases: [1]\n", "name: missing"),
        ("name: t\ncases:\n  - 3\n", "cases[0]: expected a mapping, got int"),
        (GOOD.replace("name: t", "name: t\nbackend: vllm"), "backend: unknown engine 'vllm'"),
        (GOOD.replace("name: t", "name: t\nengine: vllm"), "engine: unknown engine 'vllm'"),
        (GOOD.replace("name: t", "name: t\nengine: llama.cpp\nbackend: llama.cpp"), "backend: give the engine once"),
        (GOOD.replace("name: t", "name: t\nrepeats: 0"), "repeats: must be at least 1"),
        (GOOD.replace("draft_max: 4", "draft_max: 4, gpu_layers: some"), "settings.gpu_layers: expected 'all', 'none' or a layer count"),
        (GOOD.replace("draft_max: 4", "draft_max: 4, draft_p_min: 1.5"), "settings.draft_p_min: must be between 0 and 1"),
        (GOOD.replace("    prompt: hello", "    prompt: hello\n    prompt_file: nope.txt"), "cases[0].prompt_file: file not found"),
        (GOOD.replace("    draft: {model: smollm2-135m, variant: q4_0}\n", ""), "cases[0].draft: missing"),
        ("- just\n- a list\n", "expected a mapping, got list"),
        (GOOD.replace("    prompt: hello", "    prompt: hello\n    reference: {accept_pct: 61.514}"),
         "cases[0].reference.accept_pct: renamed: write acceptance as a fraction (acceptance: 0.61514)"),
        (GOOD.replace("    prompt: hello", "    prompt: hello\n    reference: {acceptance: 61.514}"),
         "cases[0].reference.acceptance: 61.514 is not a fraction"),
        # each key's type from its schema table (CASE_KEYS, REFERENCE_KEYS, a history turn's)
        (GOOD.replace("    prompt: hello", "    prompt: hello\n    chat: yes-please"), "cases[0].chat: expected bool, got str"),
        (GOOD.replace("    prompt: hello", "    prompt: 5"), "cases[0].prompt: expected str, got int 5"),
        (GOOD.replace("    prompt: hello", "    prompt: hello\n    reference: {n_predict: 1.5}"),
         "cases[0].reference.n_predict: expected int, got float 1.5"),
        (GOOD.replace("    prompt: hello", "    prompt: hello\n    chat: true\n    history: [{role: 1, content: x}]"),
         "cases[0].history[0].role: expected str, got int 1"),
    ],
)
def test_bad_experiments_point_at_the_key(tmp_path: Path, text: str, message: str) -> None:
    with pytest.raises(LlamaspecError) as err:
        experiment.load(str(write(tmp_path, text)), known)
    assert message in err.value.message
    assert str(tmp_path / "exp.yaml") in err.value.message


@pytest.mark.parametrize("key", ["engine", "backend"])
def test_the_engine_is_named_by_engine_or_by_its_older_key(tmp_path: Path, key: str) -> None:
    exp = experiment.load(str(write(tmp_path, GOOD.replace("name: t", f"name: t\n{key}: llama-server"))), known)
    assert exp.engine == "llama-server"
    assert experiment.load(str(write(tmp_path, GOOD)), known).engine == "llama.cpp"  # the default


def test_malformed_yaml_names_the_line(tmp_path: Path) -> None:
    with pytest.raises(LlamaspecError, match=r"malformed YAML at line 5") as err:
        experiment.load(str(write(tmp_path, "name: t\ncases:\n  - name: a\n    target: {model: x\n    prompt: p\n")), known)
    assert err.value.hint


def test_draft_free_case_needs_no_draft(tmp_path: Path) -> None:
    text = GOOD.replace("    draft: {model: smollm2-135m, variant: q4_0}\n", "").replace("draft_max: 4", "draft_max: 4, spec_type: ngram-simple")
    exp = experiment.load(str(write(tmp_path, text)), known)
    assert exp.cases[0].draft is None


def test_a_chat_case_keeps_its_earlier_turns(tmp_path: Path) -> None:
    text = GOOD.replace("    prompt: hello\n", "    prompt: And in C?\n    chat: true\n    history:\n"
                        "      - {role: user, content: Sort a list.}\n      - {role: assistant, content: sorted(xs)}\n")
    (case,) = experiment.load(str(write(tmp_path, text)), known).cases
    assert case.chat and case.history == (("user", "Sort a list."), ("assistant", "sorted(xs)"))
    bad = text.replace("{role: assistant, content: sorted(xs)}", "{role: assistant}")
    with pytest.raises(LlamaspecError, match=r"cases\[0\]\.history\[1\]\.content: missing"):
        experiment.load(str(write(tmp_path, bad)), known)


def test_unknown_experiment_lists_known_ones() -> None:
    with pytest.raises(LlamaspecError, match="unknown experiment 'nope'") as err:
        experiment.locate("nope")
    assert "quicksort-python" in (err.value.hint or "")


def test_missing_experiment_file() -> None:
    with pytest.raises(LlamaspecError, match="experiment file not found"):
        experiment.locate("does/not/exist.yaml")
