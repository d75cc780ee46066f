"""A prompt set's figures: the per-prompt speedup distribution, speedup and acceptance per
category, and throughput against concurrency.

Drawn as :mod:`llamaspec.views.plot` draws a sweep: a ``matplotlib.figure.Figure`` (no pyplot, no global
figure registry), saved through its atomic writer; matplotlib is imported only when plotting.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from llamaspec.base import stats
from llamaspec.views.plot import _figure, _save

if TYPE_CHECKING:
    from llamaspec.promptset.output import SetSummary

_FORMATS = ("png",)
_WIDE = (11.0, 4.2)


def plot_set(summary: SetSummary, out_dir: Path) -> list[Path]:
    """Per-prompt speedup distribution, and speedup and acceptance per category (per method)."""
    methods = summary.methods
    stem = summary.experiment

    fig, (ax,) = _figure(1, (7.0, 4.2))
    for label, m in methods.items():
        spread = m.figures.set.geomean_speedup
        values = list(spread.values) if spread else []
        if values:
            ax.hist(values, bins=min(20, max(5, len(values) // 2)), alpha=0.5, label=label)
    ax.axvline(1.0, color="C3", linestyle="--", linewidth=1)
    ax.set_xlabel("speedup per prompt (speculative / baseline decode speed)")
    ax.set_ylabel("prompts")
    ax.grid(True, alpha=0.3)
    ax.legend(fontsize=7)
    ax.set_title(f"{stem}: per-prompt speedup", fontsize=10)
    written = _save(fig, out_dir, f"{stem}-speedup-distribution", _FORMATS)

    categories = sorted({c for m in methods.values() for c in m.figures.categories})
    fig, (ax1, ax2) = _figure(2, _WIDE)
    width = 0.8 / max(1, len(methods))
    for k, (label, m) in enumerate(methods.items()):
        xs, ys, lo, hi, acc = [], [], [], [], []
        for j, cat in enumerate(categories):
            g = m.figures.categories.get(cat)
            s = g.geomean_speedup if g else None
            if g is None or s is None:
                continue
            xs.append(j + k * width)
            ys.append(s.median)
            lo.append(s.median - s.low)
            hi.append(s.high - s.median)
            acc.append(stats.percent(g.acceptance or 0.0))  # drawn in percent
        ax1.bar(xs, ys, width, yerr=[lo, hi], capsize=3, color=f"C{k % 10}", label=label)
        ax2.bar(xs, acc, width, color=f"C{k % 10}", label=label)
    for ax in (ax1, ax2):
        ax.set_xticks([j + width * (len(methods) - 1) / 2 for j in range(len(categories))])
        ax.set_xticklabels(categories, rotation=20, fontsize=8)
        ax.grid(True, axis="y", alpha=0.3)
    ax1.axhline(1.0, color="C3", linestyle="--", linewidth=1)
    ax1.set_ylabel("geometric-mean speedup (95 % interval)")
    ax2.set_ylabel("draft tokens accepted (%)")
    ax1.legend(fontsize=7)
    fig.suptitle(f"{stem}: per category", fontsize=11)
    return [*written, *_save(fig, out_dir, f"{stem}-categories", _FORMATS)]


def plot_concurrency(rows: Sequence[dict[str, Any]], out_dir: Path, stem: str) -> list[Path]:
    """Aggregate and per-request throughput against N, speculative (solid) and its paired baseline
    (dashed) per method, with the 95 % intervals over the batches."""
    fig, axes = _figure(2, _WIDE)
    methods = list(dict.fromkeys(r["method"] for r in rows))
    for k, method in enumerate(methods):
        mine = sorted((r for r in rows if r["method"] == method), key=lambda r: r["parallel"])
        for ax, key in zip(axes, ("aggregate_tps", "per_request_tps"), strict=True):
            for mode, style in (("speculative", "-"), ("baseline", "--")):
                xs, ys, lo, hi = [], [], [], []
                for r in mine:
                    s = stats.Spread.from_dict(r[mode][key])
                    if s is None:
                        continue
                    xs.append(r["parallel"])
                    ys.append(s.median)
                    lo.append(s.median - s.low)
                    hi.append(s.high - s.median)
                if xs:
                    label = method if mode == "speculative" else f"baseline (paired with {method.split(' ')[0]})"
                    ax.errorbar(xs, ys, yerr=[lo, hi], fmt="o" + style, capsize=3, color=f"C{k % 10}",
                                label=label, alpha=1.0 if mode == "speculative" else 0.6)
    levels = sorted({r["parallel"] for r in rows})
    for ax, title in zip(axes, ("aggregate throughput (t/s)", "per-request decode speed (t/s)"), strict=True):
        ax.set_xscale("log", base=2)
        ax.set_xticks(levels)
        ax.set_xticklabels([str(n) for n in levels])
        ax.set_xlabel("concurrent requests (server slots) N")
        ax.set_ylabel(title)
        ax.set_ylim(bottom=0)
        ax.grid(True, alpha=0.3)
    axes[0].legend(fontsize=7)
    fig.suptitle(f"{stem}: throughput against concurrency (median over batches, 95 % interval)", fontsize=11)
    return _save(fig, out_dir, f"{stem}-concurrency", _FORMATS)
