"""Throughput against concurrency, drawn (``llamaspec concurrency --plot``).

Drawn as :mod:`llamaspec.views.plot` draws a study: a ``matplotlib.figure.Figure`` (no pyplot, no
global figure registry), saved through its atomic writer; matplotlib is imported only when plotting.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

from llamaspec.base import stats
from llamaspec.views.plot import _figure, _save

_FORMATS = ("png",)
_WIDE = (11.0, 4.2)


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
