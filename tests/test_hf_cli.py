"""The transformers backend through the command line, on the tiny Llama pair made here (real
transformers generation on the CPU): run, sweep, report and plot store and render what was
measured, the sweep's settings reach transformers, and each bad input is one error line with a
hint and a non-zero exit."""

from __future__ import annotations

import shutil
import sys
from pathlib import Path

import pytest
import yaml
from click.testing import CliRunner
from models_factory import write_catalog

from llamaspec.cli import main
from llamaspec.measure.summary import Summary
from llamaspec.store.results import Store

pytest.importorskip("transformers")
pytestmark = pytest.mark.hf

NAME = "hf-tiny-cli"


@pytest.fixture(scope="module")
def pairs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """The pair, a pair whose assistant has another tokenizer, and a target with truncated weights."""
    import hf_factory

    root = tmp_path_factory.mktemp("pairs")
    target, assistant = hf_factory.pair(root / "same")
    _, other = hf_factory.pair(root / "other", other_tokenizer=True)
    broken = root / "broken"
    shutil.copytree(target, broken)
    weights = broken / "model.safetensors"
    weights.write_bytes(weights.read_bytes()[: weights.stat().st_size // 3])
    return {"tiny-target": target, "tiny-assistant": assistant, "tiny-other": other, "tiny-broken": broken}


@pytest.fixture
def catalog(pairs: dict[str, Path], tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A models folder whose catalog names the tiny checkpoints (path sources, variant hf)."""
    folder = tmp_path / "models"
    monkeypatch.setenv("LLAMASPEC_MODELS", str(folder))
    write_catalog(folder, {name: {"source": {"kind": "path", "path": str(path)}, "variants": ["hf"]}
                           for name, path in pairs.items()})
    return folder


def experiment(folder: Path, draft: str = "tiny-assistant", target: str = "tiny-target", **settings) -> Path:
    body = {
        "name": NAME, "description": "the tiny pair", "backend": "transformers", "repeats": 2,
        "settings": {"n_predict": 32, "draft_max": 4, "draft_p_min": 0, "threads": 1, "device": "cpu", **settings},
        "cases": [{"name": "pair", "target": {"model": target, "variant": "hf"},
                   "draft": {"model": draft, "variant": "hf"}, "prompt": "def quick sort the list"}],
    }
    path = folder / f"{NAME}.yaml"
    path.write_text(yaml.safe_dump(body, sort_keys=False))
    return path


def invoke(*args: str):
    return CliRunner().invoke(main, list(args), catch_exceptions=False)


@pytest.mark.slow
def test_run_sweep_report_plot(catalog: Path, tmp_path: Path) -> None:
    path = experiment(tmp_path)
    ran = invoke("run", str(path))
    assert ran.exit_code == 0, ran.output
    store = Store.open()
    (run,) = store.runs(experiment=NAME)
    assert run["engine"] == "transformers" and run["engine_version"] and run["status"] == "ok"
    s = Summary.from_dict(run["summary"])
    assert s.pairs == 2 and s.speedup is not None and s.speedup.n == 2 and s.speedup.low <= s.speedup.median <= s.speedup.high
    assert s.lossless.verdict == "identical" and s.lossless.compared == 32 and s.lossless.unit == "tokens"
    assert s.n_drafted and s.n_accept and 0 < s.n_accept < s.n_drafted and s.rounds
    assert s.acceptance is not None and s.acceptance.median == pytest.approx(s.n_accept / s.n_drafted, abs=1e-4)
    assert s.draft.policy == "capped" and s.draft.problem is None
    # the console table: the stored speedup, the lossless verdict, the wall times of generate()
    assert s.speedup.text(suffix="x") in ran.output
    assert "lossless: identical over 32 generated tokens (2/2 pairs)" in ran.output
    assert "seconds (speculative; generate() call)" in ran.output and "speedup in wall time" in ran.output
    assert ", transformers]" in ran.output and "program speculative" not in ran.output  # the engine, not llama.cpp's setting

    # Every length measured (--fixed-grid): transformers counts acceptance by position, so the adaptive
    # sweep would start at the longest lengths and skip one the model does not put among its contenders.
    before = {r["id"] for r in store.runs(experiment=NAME)}
    swept = invoke("sweep", str(path), "--draft", "2,4,8", "--repeats", "1", "--fixed-grid", "--no-plot")
    assert swept.exit_code == 0, swept.output
    points = [r for r in store.runs(experiment=NAME, kind="sweep") if r["id"] not in before
              and (r.get("settings") or {}).get("spec_type") in (None, "draft")]  # the sweep's draft setups (not its n-gram mode)
    assert sorted(r["draft_max"] for r in points) == [2, 4, 8] and all(r["status"] == "ok" for r in points)
    per_round = {}
    for r in points:
        k = r["draft_max"]
        specs = [m for m in store.measurements(r["id"]) if m["mode"] == "speculative"]
        assert specs
        for spec in specs:
            # what transformers was set to, and what it did: no round drafted more than k, and the
            # rounds with room left drafted exactly k (threshold 0)
            assert spec["stats"]["assistant"]["start"]["num_assistant_tokens"] == k
            drafted = [d for d, _ in spec["stats"]["per_round"]]
            assert max(drafted) == k and drafted[0] == k
        per_round[k] = Summary.from_dict(r["summary"]).drafted_per_round
    assert per_round[2] < per_round[4] < per_round[8]
    # the speedup model: the engine's own cost timings (the assistant alone, the target's forward
    # passes) once per sweep, and the fit with what it leaves out
    costs = [m["mode"] for r in points for m in store.measurements(r["id"]) if m["mode"] in ("draft", "batch")]
    assert sorted(costs) == ["batch", "draft"]
    assert "  model: best draft " in swept.output and "its median error" in swept.output  # the fit, as the decision prints it
    import transformers

    engine = f"transformers {transformers.__version__} torch "
    assert "llama.cpp ?" not in swept.output and engine in swept.output

    reported = invoke("report", NAME, "--no-plot")
    assert reported.exit_code == 0, reported.output
    md = reported.output
    assert md.startswith(f"# {NAME}") and "## Runs" in md and "## Latest sweep" in md
    assert s.speedup.text(suffix="x") in md and "identical over 32 generated tokens" in md
    assert "llama.cpp None" not in md and engine in md

    plotted = invoke("plot", NAME)
    assert plotted.exit_code == 0, plotted.output
    pngs = [Path(line.split("plot: ", 1)[1]) for line in plotted.output.splitlines() if line.strip().startswith("plot: ")]
    assert {p.stem for p in pngs if p.suffix == ".png"} == {"workload", "decode_tps", "acceptance", "speedup", "dashboard",
                                                               "acceptance_by_position"}  # transformers counts positions
    # the study's answer, as the sweep printed it (after the sweep's log lines, which also start "study ")
    answer = plotted.output.split("\n\n", 1)[0]
    assert answer.startswith("study ") and answer.splitlines()[0].endswith(f": {NAME}") and answer in swept.output
    assert all(p.read_bytes().startswith(b"\x89PNG") for p in pngs if p.suffix == ".png")

    compared = invoke("report", NAME, "--compare", "engine", "--no-plot")
    assert compared.exit_code == 0 and "## Compared by engine" in compared.output
    assert "measured by transformers only" in compared.output


def _refused(result, *lines: str) -> None:
    assert result.exit_code != 0, result.output
    errors = [line for line in result.output.splitlines() if line.startswith("Error: ")]
    assert len(errors) == 1, result.output
    assert any(line.startswith("Hint: ") for line in result.output.splitlines()), result.output
    for line in lines:
        assert line in result.output, result.output


def test_missing_extra(catalog: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "transformers", None)  # what an environment without the extra gives
    _refused(invoke("run", str(experiment(tmp_path))),
             "Error: the transformers backend needs torch and transformers (transformers is not installed)",
             "Hint: pip install 'llamaspec[hf]'")
    assert Store.open().runs() == []


def test_model_that_does_not_load(catalog: Path, tmp_path: Path) -> None:
    _refused(invoke("run", str(experiment(tmp_path, target="tiny-broken"))),
             "Error: cannot load tiny-broken:hf", "Hint: the files may be incomplete or corrupt")
    assert Store.open().runs() == []  # refused before anything was measured


def test_eight_bit_without_a_gpu(catalog: Path, tmp_path: Path) -> None:
    _refused(invoke("run", str(experiment(tmp_path, load_in="8bit"))),
             "Error: load_in: 8bit needs a CUDA GPU (bitsandbytes), and torch sees none here",
             "Hint: drop load_in")


def test_other_tokenizer_without_universal_mode(catalog: Path, tmp_path: Path) -> None:
    _refused(invoke("run", str(experiment(tmp_path, draft="tiny-other"))),
             "have different tokenizers (300 vs 280 tokens)", "Hint: set universal_assisted: true")
