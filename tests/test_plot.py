"""Plots: real PNG and SVG files, titled with the provenance, written atomically."""

from __future__ import annotations

import statistics
import subprocess
import sys
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

from llamaspec.base.errors import LlamaspecError
from llamaspec.llamacpp.profiles import LLAMA_SPECULATIVE
from llamaspec.theory import CostModel, Observation, analyze
from llamaspec.views.plot import plot_all, plot_panel
from llamaspec.views.plotdata import PlotMeta, PlotPoint

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"
META = PlotMeta(
    target_model="SmolLM2-135M F16",
    draft_model="SmolLM2-135M Q4_0",
    hardware="2x vCPU x86_64",
    engine="cpu",
    build="llama.cpp 0c1e570",
    label="sweep smol",
)


def _sweep() -> tuple[list[PlotPoint], tuple[tuple[int, float], ...], tuple[tuple[int, float], ...]]:
    repeats = {1: [36.0, 35.1, 36.4], 2: [41.0, 41.9, 41.5], 4: [46.1, 44.0, 47.2], 8: [41.5, 41.0, 42.2]}
    accepted = {1: 85, 2: 175, 4: 330, 8: 560}
    obs = [
        Observation(
            draft_max=k,
            n_drafted=100 * k,
            n_accept=accepted[k],
            n_generated=accepted[k] + 100,
            spec_decode_tps=sorted(r)[1],
            baseline_decode_tps=39.2,
            profile=LLAMA_SPECULATIVE,
        )
        for k, r in repeats.items()
    ]
    an = analyze(obs, CostModel.from_bench({1: 25.5, 2: 31.0, 9: 59.0}, 9.0, LLAMA_SPECULATIVE), max_draft=12)
    points = [
        PlotPoint(o.draft_max, statistics.median(repeats[o.draft_max]), 39.2, acceptance=o.acceptance,
                  predicted_speedup=p.predicted_speedup, decode_tps_min=min(repeats[o.draft_max]),
                  decode_tps_max=max(repeats[o.draft_max]))
        for o, p in zip(obs, an.points, strict=True)
    ]
    return points, an.speedup_curve, an.accept_curve


@pytest.fixture(scope="module")
def written(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, list[Path]]:
    out = tmp_path_factory.mktemp("plots")
    points, speedup_curve, accept_curve = _sweep()
    return out, plot_all(points, META, out, predicted_speedup=speedup_curve, predicted_accept=accept_curve)


def test_plot_all_writes_every_plot_as_png_and_svg(written: tuple[Path, list[Path]]) -> None:
    out, paths = written
    names = sorted(p.name for p in paths)
    assert names == sorted(
        f"{stem}.{fmt}" for stem in ("decode_tps", "acceptance", "speedup", "dashboard") for fmt in ("png", "svg")
    )
    assert sorted(p.name for p in out.iterdir()) == names  # nothing else, no partial files


def test_pngs_are_valid_images(written: tuple[Path, list[Path]]) -> None:
    import matplotlib.image

    for path in written[1]:
        if path.suffix == ".png":
            assert path.read_bytes()[:8] == PNG_MAGIC
            image = matplotlib.image.imread(path)
            height, width = image.shape[:2]
            assert width >= 1000 and height >= 600
            assert image.std() > 0.01  # something was drawn


def test_svgs_are_valid_and_titled_with_the_provenance(written: tuple[Path, list[Path]]) -> None:
    for path in written[1]:
        if path.suffix == ".svg":
            root = ET.parse(path).getroot()
            assert root.tag.endswith("svg")
            text = " ".join(t.text or "" for t in root.iter() if t.tag.endswith("text"))
            for expected in (
                "SmolLM2-135M F16",
                "SmolLM2-135M Q4_0",
                "2x vCPU x86_64",
                "cpu",
                "llama.cpp 0c1e570",
                "sweep smol",
            ):
                assert expected in text, f"{path.name} lacks {expected!r}"


def test_speedup_plot_labels_the_series(written: tuple[Path, list[Path]]) -> None:
    root = ET.parse(written[0] / "speedup.svg").getroot()
    text = " ".join(t.text or "" for t in root.iter() if t.tag.endswith("text"))
    for expected in ("break-even (target alone)", "model prediction", "measured", "best measured: draft 4"):
        assert expected in text


def test_title_names_models_hardware_backend_and_commit() -> None:
    title = META.title("Speedup")
    for expected in (
        "Speedup (sweep smol)",
        "SmolLM2-135M F16",
        "SmolLM2-135M Q4_0",
        "2x vCPU x86_64",
        "cpu",
        "0c1e570",
    ):
        assert expected in title


def test_failed_render_leaves_the_old_file_and_no_partial(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from matplotlib.figure import Figure

    points = [PlotPoint(draft_max=4, decode_tps=30.0, baseline_tps=25.0, acceptance=0.8)]
    first, _svg = plot_panel("speedup", points, META, tmp_path)
    before = first.read_bytes()

    def broken(self: Figure, fname: object, **kwargs: object) -> None:
        Path(str(fname)).write_bytes(b"\x89PNG half")
        raise RuntimeError("disk full")

    monkeypatch.setattr(Figure, "savefig", broken)
    with pytest.raises(RuntimeError, match="disk full"):
        plot_panel("speedup", points, META, tmp_path)
    assert first.read_bytes() == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["speedup.png", "speedup.svg"]


@pytest.mark.parametrize(
    "kwargs",
    [
        {"draft_max": 4, "decode_tps": 0.0, "baseline_tps": 10.0},
        {"draft_max": 4, "decode_tps": 10.0, "baseline_tps": float("nan")},
        {"draft_max": -1, "decode_tps": 10.0, "baseline_tps": 10.0},
        {"draft_max": 4, "decode_tps": 10.0, "baseline_tps": 10.0, "acceptance": 61.5},  # a percentage, not a fraction
        {"draft_max": 4, "decode_tps": 10.0, "baseline_tps": 10.0, "decode_tps_min": 11.0},
    ],
)
def test_bad_points_are_refused(kwargs: dict[str, object]) -> None:
    with pytest.raises(LlamaspecError):
        PlotPoint(**kwargs)  # type: ignore[arg-type]


def test_nothing_to_plot_is_an_error(tmp_path: Path) -> None:
    with pytest.raises(LlamaspecError, match="nothing to plot"):
        plot_panel("speedup", [], META, tmp_path)
    assert list(tmp_path.iterdir()) == []
    assert list(tmp_path.iterdir()) == []


def test_importing_theory_and_plot_does_not_import_matplotlib() -> None:
    code = "import sys, llamaspec.views.plot, llamaspec.theory; sys.exit('matplotlib' in sys.modules)"
    root = Path(__file__).resolve().parent.parent
    assert subprocess.run([sys.executable, "-c", code], cwd=root).returncode == 0
