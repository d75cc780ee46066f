"""The transformers experiment files: the write-up's guanaco table and the offline SmolLM2 one, and
(slow) the offline one measured for real on the SmolLM2 GGUF from PyPI."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest
import yaml

from llamaspec.measure import settings
from llamaspec.measure.contract import EngineOptions, ResolvedCase
from llamaspec.studies import experiment

ROOT = Path(__file__).resolve().parent.parent
FILES = ["guanaco-7b", "guanaco-13b", "guanaco-33b", "hf-smollm2-quicksort", "hf-gemma-smollm2"]
WRITE_UP = {"guanaco-7b": (69, 38), "guanaco-13b": (84, 45), "guanaco-33b": (109, 62)}


@pytest.mark.parametrize("name", FILES)
def test_settings_and_models_are_known(name: str) -> None:
    data = yaml.safe_load((ROOT / "experiments" / f"{name}.yaml").read_text())
    assert data["engine"] == "transformers"
    known = experiment.catalog_checker()
    for case in data["cases"]:
        for where in (data["settings"], case.get("settings") or {}):
            for key, value in where.items():
                settings.check(key, value)  # raises on an unknown key or a bad value
        for role in ("target", "draft"):
            if role in case:
                assert known(case[role]["model"], case[role]["variant"]) is None
    if name in WRITE_UP:
        case = data["cases"][0]
        assert case["target"] == {"model": name, "variant": "hf"}
        assert case["draft"] == {"model": "tinyllama-1.1b-chat", "variant": "hf"}
        assert case["prompt"] == "### Human: Give me detailed info about Jeo Biden. ### Assistant:"
        assert data["settings"]["n_predict"] == 512 and data["settings"]["load_in"] == "8bit"
        ref = case["reference"]
        assert (ref["baseline_seconds"], ref["seconds"]) == WRITE_UP[name]


@pytest.mark.parametrize("name", FILES)
def test_files_load_as_experiments(name: str) -> None:
    exp = experiment.load(name)
    assert exp.engine == "transformers" and exp.cases
    if name in WRITE_UP:
        ref = exp.cases[0].reference
        assert ref is not None and (ref.baseline_seconds, ref.seconds) == WRITE_UP[name]


@pytest.mark.hf
@pytest.mark.slow
def test_smollm2_gguf_assisted_by_itself_and_by_prompt_lookup(tmp_path: Path) -> None:
    """The real SmolLM2-135M Q4_1 file (PyPI wheel), loaded and dequantized by transformers."""
    pytest.importorskip("transformers")
    from llamaspec.hf.models import resolve_model
    from llamaspec.hf.runner import open_engine

    target = resolve_model("smollm2-135m", "q4_1")
    assert target.metadata["format"] == "gguf" and target.sha256
    backend = open_engine(EngineOptions(accel="cpu"))
    chosen = settings.Settings(n_predict=24, threads=2, draft_max=8, draft_p_min=0.0).with_defaults()
    prompt = "# Quick-sort implementation in Python and sample usage:"
    self_case = ResolvedCase("hf-smollm2-quicksort", "self", target, target, prompt, None, chosen)
    backend.check(self_case)
    base = backend.measure(self_case, "baseline", tmp_path / "b.log")
    spec = backend.measure(self_case, "speculative", tmp_path / "s.log")
    assert base.ok and spec.ok
    assert spec.tokens == base.tokens and "def quick" in base.text.replace("_", " ")
    assert spec.n_accept == spec.n_drafted and spec.acceptance == 1.0  # it agrees with itself
    assert spec.rounds == spec.stats["target_calls"] and spec.rounds < 24 / 4
    lookup = dataclasses.replace(self_case, case="prompt-lookup", draft=None,
                                 settings=dataclasses.replace(chosen, spec_type="prompt-lookup"))
    backend.check(lookup)
    found = backend.measure(lookup, "speculative", tmp_path / "p.log")
    assert found.ok and found.tokens[:24] == base.tokens and found.n_drafted
    backend.close()
