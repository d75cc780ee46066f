"""A study's grid of settings (draft length first of all).

The values a command line gives each sweepable setting (:func:`parse_values`) and the grid's points
(:class:`Point`, :func:`grid`: each point a case's settings, its key what a rerun finds its stored
run by). Measuring a grid is the workload study's (:mod:`llamaspec.studies.study`), within the
budget its policy spends (:mod:`llamaspec.studies.policy`).
"""

from __future__ import annotations

import dataclasses
import hashlib
import itertools
import json
import logging
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from llamaspec.base.errors import LlamaspecError
from llamaspec.measure import spectypes
from llamaspec.measure.settings import FIELDS, SWEEPABLE, SettingError, Settings, check
from llamaspec.studies.experiment import Case, ModelRef

log = logging.getLogger(__name__)

# sweepable axis -> how to parse one value: every setting whose schema says it is sweepable, plus
# "draft_variant", which swaps the draft model's variant.
AXES: dict[str, Callable[[str], Any]] = {**SWEEPABLE, "draft_variant": str}
_RANGE = re.compile(r"^(-?\d+)\.\.(-?\d+)(?::(\d+))?$")


def _axis_help(axis: str) -> str:
    return (FIELDS[axis].metadata["help"] if axis in FIELDS else "") or axis.replace("_", " ")


def parse_values(axis: str, text: str) -> tuple[Any, ...]:
    """``1,2,4,8``, ``1..16``, ``1..16:2`` or a mix (``1..4,8,16``); order kept, duplicates dropped."""
    if axis not in AXES:
        raise LlamaspecError(f"cannot sweep {axis!r}", hint=f"sweepable: {', '.join(AXES)}")
    option = f"--{axis.replace('_', '-')}"
    parts = [p.strip() for p in text.split(",")]
    if not text.strip() or any(not p for p in parts):
        raise LlamaspecError(f"--{axis.replace('_', '-')}: empty value in {text!r}",
                             hint="give a comma-separated list or a range, e.g. 1,2,4,8 or 1..16")
    values: list[Any] = []
    for part in parts:
        m = _RANGE.match(part)
        if m:
            lo, hi, step = int(m.group(1)), int(m.group(2)), int(m.group(3) or 1)
            if hi < lo or step < 1:
                raise LlamaspecError(f"--{axis.replace('_', '-')}: empty range {part!r}", hint="write low..high, e.g. 1..16")
            if AXES[axis] is str:
                raise LlamaspecError(f"--{axis.replace('_', '-')}: ranges need numbers, got {part!r}")
            for v in range(lo, hi + 1, step):  # each value checked, as a listed one is
                try:
                    values.append(check(axis, v) if axis in SWEEPABLE else v)
                except SettingError as exc:
                    raise LlamaspecError(f"{option}: {part!r}: {v}: {exc}", hint=f"{option}: {_axis_help(axis)}") from None
            continue
        try:
            values.append(check(axis, AXES[axis](part)) if axis in SWEEPABLE else part)
        except (ValueError, SettingError) as exc:
            if isinstance(exc, SettingError):
                raise LlamaspecError(f"{option}: {part!r}: {exc}", hint=f"{option}: {_axis_help(axis)}") from None
            raise LlamaspecError(f"--{axis.replace('_', '-')}: {part!r} is not a valid value",
                                 hint="give a comma-separated list or a range, e.g. 1,2,4,8 or 1..16") from None
    for v in values:
        if isinstance(v, (int, float)) and v < 0:
            raise LlamaspecError(f"--{axis.replace('_', '-')}: negative value {v}")
    return tuple(dict.fromkeys(values))


@dataclass(frozen=True)
class Point:
    values: tuple[tuple[str, Any], ...]  # (axis, value) in grid order

    @property
    def key(self) -> str:
        return hashlib.sha256(json.dumps(self.values, default=str).encode()).hexdigest()[:16]

    @property
    def label(self) -> str:
        return ", ".join(f"{k}={v}" for k, v in self.values)

    def apply(self, case: Case) -> Case:
        """The case at this point. A draft-free spec type (an n-gram mode) runs without the
        case's draft model."""
        settings: dict[str, Any] = {}
        draft = case.draft
        for axis, value in self.values:
            if axis == "draft_variant":
                if draft is None:
                    raise LlamaspecError(f"case {case.name} has no draft model to vary", hint="drop --draft-variant")
                draft = ModelRef(draft.model, value)
            else:
                settings[axis] = value
        merged = Settings(**settings).over(case.settings)
        if spectypes.of(merged.spec_type).draft_free:
            return dataclasses.replace(case, draft=None, drafts=(), settings=merged)
        return dataclasses.replace(case, draft=draft, settings=merged)


def grid(axes: Mapping[str, Sequence[Any]]) -> list[Point]:
    if not axes:
        raise LlamaspecError("nothing to sweep", hint="give at least one axis, e.g. --draft 1..16")
    names = list(axes)
    return [Point(tuple(zip(names, combo, strict=True))) for combo in itertools.product(*(axes[n] for n in names))]
