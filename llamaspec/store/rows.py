"""What the results store's rows are: the group a run belongs to, a measurement's row (the one
``Measurement`` <-> row mapping, both ways), and a stored run's engine however it was recorded."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, fields
from typing import Any

from llamaspec.base.cpu import CpuInfo
from llamaspec.base.host import NoiseSample
from llamaspec.measure.contract import PAIR_MODES, Measurement

GROUP_KINDS = ("sweep", "tune", "promptset", "study")
# The kind of the row that keeps a workload study's one decision (llamaspec.studies.study), as it printed it:
# its answer, not a measurement (report shows it apart).
STUDY_KIND = "study"
# The kind of the run that keeps a workload study prompt's block baselines (B S1..Sk B): the target
# alone, measured for the setups' runs beside it, not a setup of its own.
BASELINES_KIND = "baselines"


@dataclass(frozen=True)
class Group:
    """The set a run belongs to beside its experiment: a sweep (its points), a tune (the settings it
    measured), a prompt set (its prompts) or a cluster study (its work items). ``id`` is what a rerun
    of the same command finds it by, to resume it."""

    kind: str  # of GROUP_KINDS
    id: str

    def __post_init__(self) -> None:
        if self.kind not in GROUP_KINDS:
            raise ValueError(f"group kind {self.kind!r} is not one of {', '.join(GROUP_KINDS)}")


@dataclass(frozen=True)
class MeasurementRow:
    run_id: int
    mode: str
    repeat: int
    ok: bool
    error: str | None
    argv: list[str]
    exit_code: int | None
    wall_seconds: float | None
    peak_rss_bytes: int | None
    n_prompt: int | None
    n_predict: int | None
    encode_tps: float | None
    decode_tps: float | None
    n_drafted: int | None
    n_accept: int | None
    acceptance: float | None  # Measurement.acceptance (a fraction), kept for queries of the store
    text: str | None
    stats: dict[str, Any] | None
    log_path: str | None
    baseline_key: str | None = None
    speed_basis: str | None = None
    rounds: int | None = None
    drafted_rounds: int | None = None
    draft_len: int | None = None
    draft_policy: str | None = None
    tokens: list[int] | None = None  # generated token ids, where the engine gives them
    end_of_text: bool = False  # the model stopped on its own before n_predict
    draft_steps: int | None = None
    program: str | None = None
    sample_ms_per_token: float | None = None
    error_kind: str | None = None
    prompt_ms: float | None = None
    generation_ms: float | None = None
    noise: dict[str, Any] | None = None  # host.NoiseSample.to_dict() of the measurement's window
    drafted_by_position: list[int] | None = None
    accepted_by_position: list[int] | None = None
    block: str | None = None  # Measurement.block: the block its ratio is taken in
    id: int | None = None
    created_at: str = ""

    @classmethod
    def of(cls, m: Measurement, *, run_id: int, repeat: int | None = None, baseline_key: str | None = None) -> MeasurementRow:
        """The row for an engine's Measurement (every field of the contract, none forgotten). ``repeat``
        is the measurement's pair index (``Measurement.pair``); a draft or batch timing, in no pair,
        takes ``repeat`` (0 by default)."""
        if m.pair is not None and repeat is not None and repeat != m.pair:
            raise ValueError(f"a {m.mode} measurement of pair {m.pair} stored as repeat {repeat}")
        index = m.pair if m.pair is not None else (repeat or 0)
        data = {f.name: getattr(m, f.name) for f in fields(Measurement) if f.name != "pair"}
        for key in ("argv", "tokens", "drafted_by_position", "accepted_by_position"):  # tuples -> JSON lists
            data[key] = list(data[key]) if data[key] is not None else None
        data["noise"] = m.noise.to_dict() if m.noise is not None else None
        return cls(**data, run_id=run_id, repeat=index, acceptance=m.acceptance, baseline_key=baseline_key)


def measurement_of(row: dict[str, Any]) -> Measurement:
    """The Measurement a stored row holds (the inverse of :meth:`MeasurementRow.of`)."""
    names = {f.name for f in fields(Measurement)}
    data = {k: v for k, v in row.items() if k in names}
    for key in ("error", "exit_code", "peak_rss_bytes"):  # rows recorded without them (benchmark fixtures)
        data.setdefault(key, None)
    data["argv"] = tuple(row.get("argv") or ())
    data["tokens"] = tuple(row["tokens"]) if row.get("tokens") is not None else None
    for key in ("drafted_by_position", "accepted_by_position"):
        data[key] = tuple(row[key]) if row.get(key) is not None else None
    data["ok"], data["end_of_text"] = bool(row.get("ok")), bool(row.get("end_of_text"))
    data["noise"] = NoiseSample.from_dict(row.get("noise"))
    data["pair"] = int(row["repeat"]) if row.get("mode") in PAIR_MODES and row.get("repeat") is not None else None
    return Measurement(**data)


def measurements_of(rows: Sequence[dict[str, Any]]) -> list[Measurement]:
    return [measurement_of(r) for r in rows]


def engine_of(provenance: dict[str, Any]) -> dict[str, Any]:
    """A run's provenance of its engine, with its ``name`` (what an experiment's ``engine:`` names),
    however it was stored: ``provenance["engine"]`` holds the name since the engine's own provenance
    and its name were merged; before, the name was ``provenance["backend"]``, and before 0.2 the
    engine's provenance was under ``"llamacpp"``."""
    engine = provenance.get("engine") or provenance.get("llamacpp") or {}
    if not isinstance(engine, dict):
        return {}
    if "name" not in engine and isinstance(provenance.get("backend"), str):
        return {**engine, "name": provenance["backend"]}
    return engine


def built_from(run: dict[str, Any]) -> str | None:
    """The source tree a stored run's engine was built from (``Capabilities.built_from``; its
    ``engine_version`` is that tree's commit), None for an engine in a library. Runs stored before
    engines declared it: the engines that recorded a commit were the ones built from llama.cpp."""
    engine = engine_of(run.get("provenance") or {})
    if "built_from" in engine:
        found = engine["built_from"]
        return str(found) if found else None
    return "llama.cpp" if run.get("engine_version") else None


def run_meta(run: dict[str, Any]) -> dict[str, str]:
    """What a stored run ran on, as a report's and a figure's header print it: the pair, the
    machine, the engine and its build."""
    prov = run.get("provenance") or {}
    hw = prov.get("hardware") or {}
    gpus = hw.get("gpus") or []
    cpu = CpuInfo.from_hardware(hw)
    threads = f", {run['settings'].get('threads')} threads"
    source = built_from(run)
    return {"target": run.get("target") or "?", "draft": run.get("draft") or f"none ({run['settings'].get('spec_type')})",
            # the CPU's kind and speed flags: two machines with one CPU name can differ in speed
            "hardware": (gpus[0] if gpus else cpu.text()) + threads,
            "machine": (gpus[0] if gpus else cpu.short()) + threads,  # shorter, for a figure's title
            # an engine built from source: its accelerator and build ("llama.cpp 0c1e570"); an engine in
            # a library: its identity (library versions, device), and no build
            "engine": (run.get("accel") or "?") if source else str(prov.get("identity") or run.get("engine")),
            "build": f"{source} {run.get('engine_version') or '?'}" if source else "",
            "experiment": run["experiment"], "case": run["case_name"],
            "traffic": str((prov.get("engine") or {}).get("traffic") or "")}  # llama-server: warm or cold
