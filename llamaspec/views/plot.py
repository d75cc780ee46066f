"""Plots of a draft-length sweep: decode speed, acceptance and speedup against draft length.

matplotlib is imported inside the functions, never when llamaspec is imported, so the CLI stays
instant. Figures are built with ``matplotlib.figure.Figure`` and rendered by the Agg (PNG) and SVG
canvases directly: no pyplot, no global figure registry, no GUI backend, nothing to close or leak.
Every file is written to a hidden temporary sibling and renamed into place, so a half-written
image never sits under its final name.

Inputs are plain values (``plotdata.py``: ``PlotPoint``, ``PlotMeta``, curves as ``(draft length,
value)`` pairs); the caller turns stored runs and :mod:`llamaspec.theory` results into them.

Its size: seven figures (speed, acceptance, acceptance by position, speedup, the dashboard, a watch,
a workload) share
one set of private drawing helpers (axis ranges, styling, interval bars, the atomic save); split
by figure, every module would import the others' privates.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from llamaspec.base import atomic
from llamaspec.base.errors import LlamaspecError
from llamaspec.views.plotdata import BandCurve, Curve, PlotMeta, PlotPoint, PositionLine, WorkloadRow

if TYPE_CHECKING:
    from matplotlib.axes import Axes
    from matplotlib.figure import Figure

__all__ = [
    "FORMATS",
    "plot_acceptance_by_position",
    "plot_all",
    "plot_dashboard",
    "plot_panel",
    "plot_watch",
    "plot_workload",
]

FORMATS = ("png", "svg")  # every figure is written in each

_DPI = 150
_SINGLE_SIZE = (7.5, 5.0)
_DASHBOARD_SIZE = (17.0, 5.6)


# ---------------------------------------------------------------------------------------------
# Public functions
# ---------------------------------------------------------------------------------------------


# The single figures, each a panel of the dashboard on its own: stem -> title.
_PANELS = {"decode_tps": "Decode speed vs draft length", "acceptance": "Draft acceptance vs draft length",
           "speedup": "Speedup vs draft length"}


def plot_panel(
    stem: str,
    points: Sequence[PlotPoint],
    meta: PlotMeta,
    out_dir: Path,
    *,
    predicted: Curve | None = None,
    band: BandCurve | None = None,
) -> list[Path]:
    """One panel of the dashboard as a figure of its own, by ``stem``: decode t/s against draft
    length with the target alone as a horizontal line; llama.cpp's accept (n_accept / n_drafted)
    with ``predicted`` dashed; or the measured speedup with the predicted curve (and its bootstrap
    ``band``) and the break-even line y = 1."""
    pts = _checked(points)
    fig, (ax,) = _figure(1, _SINGLE_SIZE)
    xr = _x_range(pts, predicted)
    if stem == "decode_tps":
        _draw_decode_tps(ax, pts, xr)
    elif stem == "acceptance":
        _draw_acceptance(ax, pts, predicted, xr)
    else:
        _draw_speedup(ax, pts, predicted, xr, band)
    ax.set_title(meta.title(_PANELS[stem]), fontsize=10)
    return _save(fig, out_dir, stem)


def plot_acceptance_by_position(
    lines: Sequence[PositionLine],
    meta: PlotMeta,
    out_dir: Path,
) -> list[Path]:
    """Acceptance by draft position, one line per run or sweep point."""
    drawn = [line for line in lines if any(r is not None for r in line.rates)]
    if not drawn:
        raise LlamaspecError("nothing to plot: no acceptance by position measured",
                             hint="measure with llama-server, llama-speculative-simple or transformers")
    fig, (ax,) = _figure(1, _SINGLE_SIZE)
    for i, line in enumerate(drawn):
        xs = [pos for pos, r in enumerate(line.rates, start=1) if r is not None]
        ys = [r for r in line.rates if r is not None]
        label = line.label + (f" ({line.rounds} rounds)" if line.rounds is not None else "")
        ax.plot(xs, ys, marker="o", markersize=3, color=f"C{i % 10}", label=label)
    _style_positions(ax, "rounds accepted through the position, of those that drafted it")
    ax.legend(loc="lower left", fontsize=8, ncol=2 if len(drawn) > 8 else 1)
    ax.set_title(meta.title("Acceptance by draft position"), fontsize=10)
    return _save(fig, out_dir, "acceptance_by_position")


def plot_dashboard(
    points: Sequence[PlotPoint],
    meta: PlotMeta,
    out_dir: Path,
    *,
    predicted_speedup: Curve | None = None,
    predicted_accept: Curve | None = None,
    band: BandCurve | None = None,
) -> list[Path]:
    """The three panels side by side in one figure, under one title."""
    pts = _checked(points)
    fig, (ax_tps, ax_acc, ax_speed) = _figure(3, _DASHBOARD_SIZE)
    xr = _x_range(pts, predicted_speedup, predicted_accept)
    _draw_decode_tps(ax_tps, pts, xr)
    _draw_acceptance(ax_acc, pts, predicted_accept, xr)
    _draw_speedup(ax_speed, pts, predicted_speedup, xr, band)
    ax_tps.set_title("Decode speed", fontsize=11)
    ax_acc.set_title("Draft acceptance", fontsize=11)
    ax_speed.set_title("Speedup over the target alone", fontsize=11)
    fig.suptitle(meta.title("Speculative decoding vs draft length"), fontsize=11)
    return _save(fig, out_dir, "dashboard")


def plot_watch(
    shares: Sequence[float],
    predicted: BandCurve,
    speedups: Curve,
    running: int,
    title: str,
    out_dir: Path,
    *,
    stem: str = "watch",
) -> list[Path]:
    """A window of a running server's traffic (``llamaspec watch``): the share of its verification
    steps accepted through each draft position, and the speedup the model predicts at each length
    up to the running one with its interval from the window's counts (the running length marked,
    the break-even line y = 1)."""
    if not shares or not speedups:
        raise LlamaspecError("nothing to plot: the window has no acceptance by position or no prediction",
                             hint="wait for speculative requests, and give the costs (--cost) if none are found")
    fig, (ax_pos, ax_speed) = _figure(2, (12.0, 5.0))
    ax_pos.plot(range(1, len(shares) + 1), list(shares), marker="o", markersize=4, color="C0")
    _style_positions(ax_pos, "verification steps accepted through the position")
    ax_pos.set_title("Acceptance by draft position", fontsize=11)
    xs = [k for k, _ in speedups]
    ax_speed.fill_between([k for k, _, _ in predicted], [lo for _, lo, _ in predicted], [hi for _, _, hi in predicted],
                          color="C1", alpha=0.2, label="95 % interval (window's counts)")
    ax_speed.plot(xs, [s for _, s in speedups], marker="o", markersize=4, color="C1", label="predicted")
    now = dict(speedups).get(running)
    if now is not None:
        ax_speed.plot([running], [now], marker="*", markersize=14, color="C3", linestyle="none", label=f"running ({running})")
    ax_speed.axhline(1.0, color="grey", linestyle="--", linewidth=1, label="the target alone")
    _style_x(ax_speed, (min(xs), max(xs)))
    ax_speed.set_ylabel("speedup over the target alone")
    ax_speed.legend(loc="best", fontsize=9)
    ax_speed.set_title("Predicted speedup vs draft length", fontsize=11)
    fig.suptitle(title, fontsize=11)
    return _save(fig, out_dir, stem)


def plot_workload(rows: Sequence[WorkloadRow], categories: dict[str, str], title: str, out_dir: Path) -> list[Path]:
    """A workload study's answer: each setup's speedup over the workload (the geometric mean of its
    prompts', with its 95 % interval), best first, each prompt's own beside it (a marker per
    category), the target alone at 1.0 and the recommended setup marked."""
    if not rows:
        raise LlamaspecError("nothing to plot: no setup has a workload estimate", hint="measure every setup on every prompt")
    fig, (ax,) = _figure(1, (9.0, 0.45 * len(rows) + 1.8))
    ys = list(range(len(rows)))[::-1]
    for y, r in zip(ys, rows, strict=True):
        ax.errorbar([r.speedup], [y], xerr=[[r.speedup - r.low], [r.high - r.speedup]], fmt="o",
                    color="C3" if r.chosen else "C0", markersize=7 if r.chosen else 5, capsize=3, zorder=3)
    cats = list(dict.fromkeys(categories.values()))
    markers = "s^Dvp*hX"
    for i, cat in enumerate(cats):
        xs = [r.prompts[p] for r in rows for p, c in categories.items() if c == cat and p in r.prompts]
        yy = [y for y, r in zip(ys, rows, strict=True) for p, c in categories.items() if c == cat and p in r.prompts]
        ax.scatter(xs, yy, marker=markers[i % len(markers)], s=22, alpha=0.6, color=f"C{(i + 1) % 10}", label=cat, zorder=2)
    ax.axvline(1.0, color="grey", linestyle="--", linewidth=1, label="the target alone")
    ax.set_yticks(ys, [r.label + ("  (recommended)" if r.chosen else "") for r in rows])
    ax.set_xlabel("speedup over the target alone (workload: geometric mean of the prompts', 95 % interval)")
    ax.grid(True, axis="x", alpha=0.3)
    ax.legend(loc="best", fontsize=8)
    ax.set_title(title, fontsize=10)
    return _save(fig, out_dir, "workload")


def plot_all(
    points: Sequence[PlotPoint],
    meta: PlotMeta,
    out_dir: Path,
    *,
    predicted_speedup: Curve | None = None,
    predicted_accept: Curve | None = None,
    band: BandCurve | None = None,
) -> list[Path]:
    """The three single plots and the dashboard; returns every path written. ``band``: the
    model's 95 % bootstrap band, (draft length, low, high) per length."""
    return [
        *plot_panel("decode_tps", points, meta, out_dir),
        *plot_panel("acceptance", points, meta, out_dir, predicted=predicted_accept),
        *plot_panel("speedup", points, meta, out_dir, predicted=predicted_speedup, band=band),
        *plot_dashboard(
            points,
            meta,
            out_dir,
            predicted_speedup=predicted_speedup,
            predicted_accept=predicted_accept,
            band=band,
        ),
    ]


# ---------------------------------------------------------------------------------------------
# Drawing
# ---------------------------------------------------------------------------------------------


def _checked(points: Sequence[PlotPoint]) -> list[PlotPoint]:
    if not points:
        raise LlamaspecError("nothing to plot: no measured points", hint="run a sweep or a measurement first")
    return sorted(points, key=lambda p: p.draft_max)


def _figure(ncols: int, size: tuple[float, float]) -> tuple[Figure, list[Axes]]:
    from matplotlib.figure import Figure

    fig = Figure(figsize=size, dpi=_DPI, layout="constrained")
    axes = fig.subplots(1, ncols, squeeze=False)[0]
    return fig, list(axes)


def _x_range(pts: Sequence[PlotPoint], *curves: Curve | None) -> tuple[float, float]:
    """One x range for every panel: the measured points and the whole predicted curves."""
    xs = [float(p.draft_max) for p in pts] + [float(x) for c in curves if c for x, _ in c]
    return min(xs), max(xs)


def _style_x(ax: Axes, xr: tuple[float, float]) -> None:
    from matplotlib.ticker import MaxNLocator

    ax.set_xlabel("draft length k (tokens drafted per round)")
    ax.xaxis.set_major_locator(MaxNLocator(integer=True))
    lo, hi = xr
    if hi - lo < 4:  # too few lengths for the locator, which would fall back to fractional ticks
        ax.set_xticks(range(math.floor(lo) - 1, math.ceil(hi) + 2))
        pad = 1.0
    else:
        pad = max(0.5, 0.04 * (hi - lo))
    ax.set_xlim(lo - pad, hi + pad)
    ax.grid(True, alpha=0.3)


def _style_positions(ax: Axes, ylabel: str) -> None:
    """An axis of acceptance (a share, in percent) by draft position."""
    from matplotlib.ticker import MaxNLocator, PercentFormatter

    ax.set_xlabel("draft position")
    ax.set_ylabel(ylabel)
    ax.yaxis.set_major_formatter(PercentFormatter(1.0))
    ax.xaxis.set_major_locator(MaxNLocator(integer=True))
    ax.set_ylim(0, 1.05)
    ax.grid(True, alpha=0.3)


def _spread(values: Sequence[float], lows: Sequence[float], highs: Sequence[float]) -> list[list[float]] | None:
    below = [v - lo for v, lo in zip(values, lows, strict=True)]
    above = [hi - v for v, hi in zip(values, highs, strict=True)]
    return None if not any(below) and not any(above) else [below, above]


def _draw_decode_tps(ax: Axes, pts: Sequence[PlotPoint], xr: tuple[float, float]) -> None:
    xs = [p.draft_max for p in pts]
    ys = [p.decode_tps for p in pts]
    err = _spread(ys, [p.tps_low for p in pts], [p.tps_high for p in pts])
    label = "speculative (median, min–max)" if err else "speculative"
    ax.errorbar(xs, ys, yerr=err, marker="o", capsize=3, color="C0", label=label)
    baselines = [p.baseline_tps for p in pts]
    if max(baselines) - min(baselines) <= 1e-9 * max(baselines):
        ax.axhline(baselines[0], color="C3", linestyle="--", label=f"target alone ({baselines[0]:.1f} t/s)")
    else:  # points measured against different baselines: show each
        ax.plot(xs, baselines, color="C3", linestyle="--", marker="_", label="target alone")
    ax.set_ylabel("decode speed (tokens/s)")
    top = max(max(p.tps_high for p in pts), max(baselines))
    ax.set_ylim(0, top * 1.25)  # headroom for the legend
    _style_x(ax, xr)
    ax.legend(loc="best", fontsize=9)


def _draw_acceptance(ax: Axes, pts: Sequence[PlotPoint], predicted: Curve | None, xr: tuple[float, float]) -> None:
    from matplotlib.ticker import PercentFormatter

    measured = [(p.draft_max, p.acceptance) for p in pts if p.acceptance is not None]
    if measured:
        ax.plot(*zip(*measured, strict=True), marker="o", color="C0", label="measured (n_accept / n_drafted)")
    if predicted:
        px, py = zip(*predicted, strict=True)
        ax.plot(px, py, linestyle="--", color="C1", label="model (fitted α)")
    if not measured and not predicted:
        ax.text(0.5, 0.5, "no acceptance measured", ha="center", va="center", transform=ax.transAxes)
    ax.set_ylabel("accepted share of drafted tokens")
    ax.yaxis.set_major_formatter(PercentFormatter(1.0))  # fractions, labelled in percent
    ax.set_ylim(0, 1.05)
    _style_x(ax, xr)
    if measured or predicted:
        ax.legend(loc="best", fontsize=9)


def _draw_speedup(ax: Axes, pts: Sequence[PlotPoint], predicted: Curve | None, xr: tuple[float, float],
                  band: BandCurve | None = None) -> None:
    xs = [p.draft_max for p in pts]
    ys = [p.speedup for p in pts]
    err = _spread(ys, [p.speedup_interval[0] for p in pts], [p.speedup_interval[1] for p in pts])
    ax.axhspan(0, 1, color="C3", alpha=0.06, linewidth=0)
    ax.axhline(1.0, color="C3", linestyle="--", linewidth=1, label="break-even (target alone)")
    ax.errorbar(xs, ys, yerr=err, marker="o", capsize=3, color="C0", label="measured (median, 95 % interval)", zorder=3)
    differing = [p for p in pts if p.differs]
    if differing:
        ax.plot([p.draft_max for p in differing], [p.speedup for p in differing], linestyle="none", marker="X",
                markersize=11, color="C3", label="output differs (not lossless)", zorder=5)
    tops = [max(p.speedup_interval[1] for p in pts), 1.0]
    if predicted:
        px, py = zip(*predicted, strict=True)
        ax.plot(px, py, linestyle="-", color="C1", alpha=0.8, label="model prediction")
        tops.append(max(py))
    if band:
        bx, blo, bhi = zip(*band, strict=True)
        ax.fill_between(bx, blo, bhi, color="C1", alpha=0.18, linewidth=0, label="model, 95 % bootstrap band")
        tops.append(max(bhi))
    at_points = [(p.draft_max, p.predicted_speedup) for p in pts if p.predicted_speedup is not None]
    if at_points:
        ax.plot(
            *zip(*at_points, strict=True),
            linestyle="none",
            marker="x",
            color="C1",
            label="model at measured points",
        )
        tops.append(max(s for _, s in at_points))
    lossless = [p for p in pts if not p.differs] or list(pts)
    best = max(lossless, key=lambda p: p.speedup)
    # A ring and a legend entry rather than an annotation, which would collide with the curve.
    ax.plot(
        [best.draft_max],
        [best.speedup],
        linestyle="none",
        marker="o",
        markersize=14,
        markerfacecolor="none",
        markeredgecolor="C2",
        markeredgewidth=2,
        label=f"best measured: draft {best.draft_max}, {best.speedup:.2f}×",
        zorder=4,
    )
    ax.set_ylabel("speedup (× target alone decode t/s)")
    ax.set_ylim(0, max(tops) * 1.3)  # headroom for the legend
    _style_x(ax, xr)
    ax.legend(loc="best", fontsize=9)


# ---------------------------------------------------------------------------------------------
# Saving
# ---------------------------------------------------------------------------------------------


def _save(fig: Figure, out_dir: Path, stem: str, formats: Sequence[str] = FORMATS) -> list[Path]:
    import matplotlib

    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    written = []
    # Text stays text in SVG (searchable, smaller); no timestamps, so reruns give equal files.
    with matplotlib.rc_context({"svg.fonttype": "none", "svg.hashsalt": "llamaspec"}):
        for fmt in formats:
            dest = out_dir / f"{stem}.{fmt}"
            metadata: dict[str, Any] = {"Software": None} if fmt == "png" else {"Date": None, "Creator": None}
            with atomic.atomic_path(dest) as tmp:
                # The temporary name has no image suffix, so the format is given explicitly.
                fig.savefig(tmp, format=fmt, metadata=metadata)
            written.append(dest)
    return written


def draw_group(group: Any, meta: dict[str, str], out_dir: Path, stem_prefix: str = "") -> list[Path]:
    """The figures of one group of a sweep's report (``speedup_model.FittedGroup``: its rows, the model's
    fit and band) under ``out_dir``/``stem_prefix``: speed and speedup by draft length, acceptance
    by position."""
    fits = {p.draft_max: p for p in (group.analysis.points if group.analysis else ())}
    points = []
    for r in group.rows:
        s = r.summary
        if not s.decode_tps or not s.baseline_decode_tps or not s.speedup:
            continue
        fit = fits.get(r.draft_max)
        points.append(PlotPoint(
            draft_max=r.draft_max, decode_tps=s.decode_tps.median, baseline_tps=s.baseline_decode_tps.median,
            acceptance=s.acceptance.median if s.acceptance else None,
            predicted_speedup=fit.predicted_speedup if fit else None,
            decode_tps_min=s.decode_tps.min, decode_tps_max=s.decode_tps.max,
            speedup_median=s.speedup.median, speedup_low=s.speedup.low, speedup_high=s.speedup.high,
            differs=s.status == "differs"))
    lines = [PositionLine(f"draft {r.draft_max}" + (f" (run {r.run_id})" if len(group.rows) > 1 and
                                                     sum(o.draft_max == r.draft_max for o in group.rows) > 1 else ""),
                          rates, r.summary.drafted_by_position[0] if r.summary.drafted_by_position else None)
             for r in group.rows if (rates := r.summary.acceptance_by_position)]
    if not points and not lines:
        return []
    label = f"{meta['experiment']}/{meta['case']}" + (f" [{group.label}]" if group.label else "")
    pm = PlotMeta(meta["target"], meta["draft"], meta["machine"], meta["engine"], meta["build"], label)
    a = group.analysis
    folder = out_dir / stem_prefix if stem_prefix else out_dir
    band = [(float(b.cost[0]), b.low, b.high) for b in group.view.bands] if group.view else None  # cost[0]: the length
    drawn = plot_all(points, pm, folder, predicted_speedup=a.speedup_curve if a and a.cost else None,
                     predicted_accept=a.accept_curve if a else None, band=band) if points else []
    return drawn + (plot_acceptance_by_position(lines, pm, folder) if lines else [])
