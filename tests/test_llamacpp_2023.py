"""The 2023 generations of llama.cpp, built from their pinned sdists, on the offline SmolLM2 pair.

Sep 2023 (llama-cpp-python 0.2.7, a98b163) is the write-up's: its draft length adapts during the
run. Nov 2023 (0.2.20, b38a16d) drafts a fixed length. Each runs ``speculative`` and ``main``
through llamaspec's runner on a binaries folder (``--bin-dir``), on the catalog copies that
generation can load (``-sep2023`` / ``-untied``).
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import llamacpp_builds
import pytest

from llamaspec import models
from llamaspec.llamacpp import build, modeltools
from llamaspec.llamacpp.runner import LlamaCppEngine
from llamaspec.measure.contract import ModelPath, ResolvedCase
from llamaspec.measure.settings import DEFAULTS
from llamaspec.studies import experiment

pytestmark = [pytest.mark.llamacpp, pytest.mark.slow]

GENERATIONS = {  # the versions of llamacpp_builds.GENERATIONS_2023
    # sdist version: (experiment, commit, adaptive draft length)
    "0.2.7": ("smollm2-quicksort-sep2023", "a98b163", True),
    "0.2.20": ("smollm2-quicksort-2023", "b38a16d", False),
}


def _model(ref: experiment.ModelRef, request: pytest.FixtureRequest) -> ModelPath:
    from llamaspec.models import catalog, store

    plain = catalog.split_variant(ref.variant)[0]
    # The pinned build's llama-quantize makes the plain variant when it is missing (F32 from the Q4_1).
    quantizer = None if store.finished(ref.model, plain) else request.getfixturevalue("llama_build")
    got = models.resolve(ref.model, ref.variant, tools=modeltools.tools(quantizer))
    return ModelPath(label=f"{ref.model}:{ref.variant}", path=str(got.path), sha256=got.sha256)


@pytest.mark.parametrize("version", list(GENERATIONS))
def test_2023_speculative_and_main_through_the_runner(version: str, request: pytest.FixtureRequest, tmp_path: Path,
                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    name, commit, adaptive = GENERATIONS[version]
    assert version in llamacpp_builds.GENERATIONS_2023  # what make test builds beforehand
    built = llamacpp_builds.older(version)  # cached after the first time
    assert built.commit == commit and built.programs["speculative"] == "speculative" and built.programs["completion"] == "main"
    backend = LlamaCppEngine(build.prebuilt(Path(built.bin_dir)))  # as --bin-dir gives it
    assert backend.caps("speculative").generation == "2023"

    exp = experiment.load(name)
    case = exp.cases[0]
    assert case.draft is not None and case.prompt is not None
    settings = replace(case.settings.over(DEFAULTS), n_predict=48, threads=1)
    resolved = ResolvedCase(exp.name, case.name, _model(case.target, request), _model(case.draft, request),
                            case.prompt, None, settings)
    (tmp_path / "cwd").mkdir()
    monkeypatch.chdir(tmp_path / "cwd")  # not where 2023 trace logs go: beside the run logs
    spec = backend.measure(resolved, "speculative", tmp_path / "speculative.log")
    base = backend.measure(resolved, "baseline", tmp_path / "baseline.log")
    assert spec.ok, spec.error
    assert base.ok, base.error
    assert list((tmp_path / "cwd").iterdir()) == []
    # each program's trace log (speculative[.<pid>].log, main[.<pid>].log) in a folder beside its run log
    assert [p.name.split(".")[0] for p in (tmp_path / "speculative.trace").iterdir()] == ["speculative"]
    assert [p.name.split(".")[0] for p in (tmp_path / "baseline.trace").iterdir()] == ["main"]

    stats = spec.stats
    assert stats is not None and stats["format"] == "llama_print_timings"
    assert spec.n_drafted is not None and spec.n_accept is not None and 0 < spec.n_accept <= spec.n_drafted
    assert spec.n_predict is not None and spec.n_predict > 48  # the last round's tokens all count
    # The rounds formula: every target token is the prompt, or one of the n_predict - n_accept - 1
    # verification batches (the round's own token plus its draft).
    target = stats["target"]
    assert stats["n_encoded"] + (spec.n_predict - spec.n_accept - 1) + spec.n_drafted == \
        target["prompt_eval_tokens"] + target["eval_runs"]
    requested, final = settings.draft_max, stats["n_draft"]
    assert requested == 8
    if adaptive:
        assert final != requested and 2 <= final <= 30  # +8 / -1 during the run; the final one is printed
    else:
        assert final == requested

    # Greedy with and without a draft: the same text (main echoes the prompt; speculative does not).
    assert spec.text is not None and base.text is not None
    generated = base.text[len(case.prompt):] if base.text.startswith(case.prompt) else base.text
    n = min(len(spec.text), len(generated))
    assert n > 50 and spec.text[:n] == generated[:n]
