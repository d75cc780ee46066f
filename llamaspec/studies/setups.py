"""A study's setups: a sweep point (a draft length, a draft file, other settings) or a draft-free
n-gram mode, each named and costed once (:class:`Setup`, :func:`setups_for`)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from llamaspec.base.errors import LlamaspecError
from llamaspec.decision import workload_runs
from llamaspec.measure import spectypes
from llamaspec.studies.grid import Point, grid

MODES_AXIS = "spec_type"


@dataclass(frozen=True)
class Setup:
    """One setup of a study: a sweep point (draft length, draft file, other settings) or a draft-free mode."""

    point: Point
    label: str

    @property
    def key(self) -> str:
        return self.point.key

    @property
    def values(self) -> dict[str, Any]:
        return dict(self.point.values)

    @property
    def draft_free(self) -> bool:
        return spectypes.of(self.values.get(MODES_AXIS)).draft_free

    @property
    def length(self) -> int | None:
        k = self.values.get("draft_max")
        return None if self.draft_free or k is None else int(k)

    @property
    def group(self) -> tuple[tuple[str, Any], ...]:
        """The settings the speedup model is fitted over (everything but the draft length)."""
        return tuple((a, v) for a, v in self.point.values if a != "draft_max")

    def with_length(self, k: int) -> Setup:
        values = tuple((a, k if a == "draft_max" else v) for a, v in self.point.values)
        return make_setup(Point(values), self._draft_names)

    _draft_names: Mapping[str, str] = field(default_factory=dict, compare=False, repr=False)


def make_setup(point: Point, draft_names: Mapping[str, str] | None = None) -> Setup:
    names = dict(draft_names or {})
    values = dict(point.values)
    mode = values.get(MODES_AXIS)
    if spectypes.of(mode).draft_free:
        label = str(mode)
    else:
        parts = [f"draft {values['draft_max']}" if "draft_max" in values else "draft"]
        extra = [names.get(str(v), str(v)) if a == "draft_variant" else f"{a}={v}"
                 for a, v in point.values if a not in ("draft_max", MODES_AXIS)]
        label = parts[0] + (f" ({', '.join(extra)})" if extra else "")
    return Setup(point, label, names)


def setups_for(axes: Mapping[str, Sequence[Any]], modes: Sequence[str] = (),
               draft_names: Mapping[str, str] | None = None) -> tuple[Setup, ...]:
    """The grid of ``axes`` (draft lengths, draft files, other settings), then each draft-free mode."""
    found = [make_setup(p, draft_names) for p in grid(axes)] if axes else []
    found += [make_setup(Point(((MODES_AXIS, m),)), draft_names) for m in modes]
    if not found:
        raise LlamaspecError("nothing to measure: no draft length and no draft-free mode",
                             hint="give --draft 1..16, or a draft-free mode with --modes ngram-simple")
    return tuple(found)


def cost_of(setup: Setup, draft_bytes: int = 0) -> tuple[float, ...]:
    """Smaller is cheaper (:func:`llamaspec.decision.workload_runs.cost`: a draft-free mode, then the
    shorter draft length, then the smaller draft file)."""
    return workload_runs.cost(setup.draft_free, setup.length, draft_bytes)


__all__ = ["MODES_AXIS", "Setup", "cost_of", "make_setup", "setups_for"]
