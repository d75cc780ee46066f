"""Which speculative modes keep state between requests: each mode × program, drafted/accepted per
request (docs/engines.md has the table this prints).

For each ``--spec-type`` the pinned llama-server runs on a plain pair (:func:`probed_types`),
the same built-in workload chat prompts (A, B: ``--prompts``), greedy, ``cache_prompt: false``:

- **llama-speculative-simple**: one process per prompt (what the default study measures: it
  starts fresh each run);
- **llama-server, fresh**: one server per prompt;
- **llama-server, one server**: A, B, A on one long-lived server;
- **llama-server, slot erased**: A, B, A on one server, ``POST /slots/0?action=erase`` after each
  request (whether the server's own reset clears the state).

A mode keeps state when a request's counts on the one server differ from its fresh ones
(:class:`StateProbe`, :func:`probe`: each request as ``ServerEngine`` sends it, the chat rendered
by ``/apply-template``, then ``/completion``); greedy drafting is deterministic, so the counts do
not depend on the machine's load. It exits 1 when what it measures differs from
``spectypes.KEEPS_STATE``. tests/test_server.py checks the recording and measures the same on the
pinned build.

    PYTHONPATH=$PWD .venv/bin/python benchmarks/server_state.py [--prompts rw-present-tense,sum-hotel-reviews]
        [--modes draft,ngram-mod] [-n 64] [-t 1] [--bin-dir DIR] [--write tests/fixtures/llamacpp/0c1e570/server-state.json]

Defaults: the cached CPU build of the pinned llama.cpp (with llama-server), the offline pair
(SmolLM2-135M F32 target, Q4_1 draft) under models/smollm2-135m/, ``-n 64``, ``-t 1``, ``-c 4096``.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import logging
import os
import sys
import tempfile
import time
from collections.abc import Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from llamaspec.llamacpp import programhelp
from llamaspec.llamacpp.build import Build
from llamaspec.llamacpp.deploy import server_args
from llamaspec.llamacpp.server import apply_template, completion_fields, completion_request
from llamaspec.llamacpp.server_process import Server
from llamaspec.measure import chat, spectypes
from llamaspec.measure.contract import ModelPath, ResolvedCase
from llamaspec.measure.settings import Settings

log = logging.getLogger(__name__)

REQUEST_TIMEOUT = 600.0  # seconds for one request (a -n 64 answer of a small model takes a few)


@dataclass(frozen=True)
class Counts:
    """One request's drafting: ``timings.draft_n`` and ``draft_n_accepted`` (absent: 0)."""

    prompt: str  # the prompt's id
    drafted: int
    accepted: int

    def text(self) -> str:
        return f"{self.drafted}/{self.accepted}" if self.drafted else "none"


@dataclass(frozen=True)
class StateProbe:
    """One mode's requests: ``fresh`` (each prompt on a server of its own, in prompt order) and
    ``served`` (the prompts in turn on one server, the first again at the end)."""

    spec_type: str
    fresh: tuple[Counts, ...]
    served: tuple[Counts, ...]
    # the served order again on one server whose slot is erased between requests
    # (``POST /slots/0?action=erase``); empty where not asked
    erased: tuple[Counts, ...] = ()

    def changed(self, requests: Sequence[Counts] | None = None) -> tuple[tuple[str, Counts, Counts], ...]:
        """(prompt, fresh, served) for each request of ``requests`` (``served`` by default) whose
        counts differ from the fresh ones."""
        cold = {c.prompt: c for c in self.fresh}
        return tuple((c.prompt, cold[c.prompt], c) for c in (self.served if requests is None else requests)
                     if (c.drafted, c.accepted) != (cold[c.prompt].drafted, cold[c.prompt].accepted))

    @property
    def keeps_state(self) -> bool:
        return bool(self.changed())

    @property
    def erase_clears(self) -> bool | None:
        """Whether erasing the slot between requests gives the fresh counts back (None: not measured)."""
        return not self.changed(self.erased) if self.erased else None

    def to_dict(self) -> dict[str, Any]:
        return {"spec_type": self.spec_type, "keeps_state": self.keeps_state, "erase_clears": self.erase_clears,
                "fresh": [c.__dict__ for c in self.fresh], "served": [c.__dict__ for c in self.served],
                "erased": [c.__dict__ for c in self.erased]}


def probed_types(offered: Sequence[str]) -> tuple[str, ...]:
    """The types of ``offered`` (a server's ``Capabilities.spec_types``) a plain target and draft can
    run: those with a row in ``spectypes.SPEC_TYPES``. The other ``draft-*`` types (eagle3, mtp,
    ...) need models made for them and are not measured here."""
    return tuple(t for t in offered if t in spectypes.SPEC_TYPES)


def probe(build: Build, target: ModelPath, draft: ModelPath | None, spec_type: str,
          prompts: Sequence[tuple[str, str]], settings: Settings, logs: Path, *, erase: bool = False) -> StateProbe:
    """Measure whether llama-server keeps ``spec_type``'s drafting state between requests.

    ``prompts``: (id, text) chat prompts, at least two; ``draft`` only for a type that needs one;
    ``settings``: the servers' (threads, context, n_predict; greedy is forced). Servers' logs go to
    ``logs``. ``erase``: also the served order on a server whose slot is erased between requests
    (whether the server's own reset clears the state). A server that fails to start or dies raises
    ``LlamaspecError`` / ``ServerDied``."""
    if len(prompts) < 2:
        raise ValueError("a state probe needs two prompts at least (A, B, A)")
    s = replace(settings, spec_type=spec_type, temperature=0.0).with_defaults()
    cases = {pid: ResolvedCase("server-state", pid, target, draft if spectypes.needs_draft(spec_type) else None,
                               text, None, s, prompt_id=pid, chat=True) for pid, text in prompts}
    order = [pid for pid, _ in prompts]
    served = _requests(build, cases, [*order, order[0]], logs, spec_type)
    # the one server's first request is the first prompt's fresh one: a server of its own for each other
    fresh = (served[0], *(_requests(build, cases, [pid], logs, spec_type)[0] for pid in order[1:]))
    erased = _requests(build, cases, [*order, order[0]], logs, spec_type, erase=True) if erase else []
    return StateProbe(spec_type, fresh, tuple(served), tuple(erased))


def _requests(build: Build, cases: dict[str, ResolvedCase], order: Sequence[str], logs: Path,
              spec_type: str, erase: bool = False) -> list[Counts]:
    """``order``'s prompts, one after the other, on one fresh speculative server (its slot erased
    after each request with ``erase``: the endpoint needs ``--slot-save-path``)."""
    program = build.program("server")
    first = cases[order[0]]
    args = server_args(programhelp.program_flags(program), build.accel, first, "speculative")
    logs.mkdir(parents=True, exist_ok=True)
    if erase:
        (logs / "slots").mkdir(exist_ok=True)
        args += ["--slot-save-path", str(logs / "slots")]
    server = Server(program, args, logs / f"{spec_type}-{int(time.time() * 1000)}.log", f"state probe, {spec_type}")
    server.start()
    try:
        out = []
        for pid in order:
            case = cases[pid]
            text = apply_template(server, chat.messages(case, str(case.prompt)), case.target.label)
            data = server.post("/completion", completion_request(text, case.settings), timeout=REQUEST_TIMEOUT)
            fields = completion_fields(data, "speculative", case.settings)
            out.append(Counts(pid, int(fields["n_drafted"]), int(fields["n_accept"])))
            if erase:
                server.post("/slots/0?action=erase", {}, timeout=60)
            log.debug("%s on %s after %d requests: %s", spec_type, pid, server.completions - 1, out[-1].text())
        return out
    finally:
        with contextlib.suppress(OSError):
            server.stop()


ROOT = Path(__file__).resolve().parent.parent
PAIR = ROOT / "models" / "smollm2-135m"


def _prompts(names: list[str]) -> list[tuple[str, str]]:
    from llamaspec.studies import adhoc
    from llamaspec.studies import prompts as loader

    found = {p.id: p.prompt for p in loader.load(str(adhoc.builtin_prompts())).prompts}
    missing = [n for n in names if n not in found]
    if missing:
        sys.exit(f"not in the built-in workload: {', '.join(missing)}")
    return [(n, found[n]) for n in names]


def _cli_counts(build: Any, target: Any, draft: Any, mode: str, prompts: list[tuple[str, str]], settings: Any,
                logs: Path) -> list[dict[str, Any]] | None:
    """Each prompt on llama-speculative-simple, a process per prompt; None where it does not run the mode."""
    from llamaspec.llamacpp.runner import LlamaCppEngine

    if not spectypes.of(mode).runs_on("speculative-simple"):
        return None
    engine = LlamaCppEngine(build)
    s = replace(settings, spec_type=mode, program="speculative-simple", temperature=0.0).with_defaults()
    out = []
    for pid, text in prompts:
        case = ResolvedCase("server-state", pid, target, draft if spectypes.needs_draft(mode) else None, text, None, s,
                            prompt_id=pid, chat=True)
        m = engine.measure(case, "speculative", logs / f"cli-{mode}-{pid}.log")
        if not m.ok:
            sys.exit(f"llama-speculative-simple {mode} on {pid}: {m.error}")
        out.append({"prompt": pid, "drafted": m.n_drafted or 0, "accepted": m.n_accept or 0})
    return out


def _text(counts: list[dict[str, Any]] | None) -> str:
    if counts is None:
        return "(does not run it)"
    return ", ".join(f"{c['drafted']}/{c['accepted']}" if c["drafted"] else "none" for c in counts)


def main(argv: list[str] | None = None) -> int:
    from llamaspec.base import host
    from llamaspec.llamacpp import build as builds
    from llamaspec.llamacpp import server
    from llamaspec.llamacpp.cache import SERVER_ROLES

    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    ap.add_argument("--prompts", default="rw-present-tense,sum-hotel-reviews")
    ap.add_argument("--modes", default=None, help="default: every type the server runs on a plain pair")
    ap.add_argument("-n", type=int, default=64)
    ap.add_argument("-t", type=int, default=1)
    ap.add_argument("--bin-dir", type=Path, default=None)
    ap.add_argument("--write", type=Path, default=None)
    a = ap.parse_args(argv)
    build = builds.prebuilt(a.bin_dir) if a.bin_dir else builds.find("cpu", roles=SERVER_ROLES)
    target = ModelPath("smollm2-135m:f32", str(PAIR / "ggml-model-f32.gguf"))
    draft = ModelPath("smollm2-135m:q4_1", str(PAIR / "ggml-model-q4_1.gguf"))
    prompts = _prompts([p for p in a.prompts.split(",") if p])
    engine = server.ServerEngine(build)
    modes = [m for m in a.modes.split(",") if m] if a.modes else list(probed_types(engine.capabilities.spec_types))
    settings = Settings(n_predict=a.n, threads=a.t, ctx_size=4096, seed=20)
    logs = Path(tempfile.mkdtemp(prefix="llamaspec-server-state-"))
    report: dict[str, Any] = {
        "command": "python benchmarks/server_state.py " + " ".join(argv if argv is not None else sys.argv[1:]),
        "date": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "machine": f"{host.cpu_model()}, {os.cpu_count()} logical CPUs",
        "llama_cpp": engine.caps.version.commit, "prompts": [p for p, _ in prompts],
        "order_on_one_server": [*(p for p, _ in prompts), prompts[0][0]], "n_predict": a.n, "threads": a.t,
        "modes": {}}
    order = " ".join(report["order_on_one_server"])
    print(f"drafted/accepted per request; prompts {', '.join(report['prompts'])}; one server: {order}")
    print(f"{'mode':<14} {'speculative-simple (fresh)':<28} {'server fresh':<18} {'one server':<24} "
          f"{'slot erased':<24} keeps state")
    for mode in modes:
        p = probe(build, target, draft, mode, prompts, settings, logs, erase=True)
        cli = _cli_counts(build, target, draft, mode, prompts, settings, logs)
        row = {**p.to_dict(), "speculative_simple": cli}
        report["modes"][mode] = row
        print(f"{mode:<14} {_text(cli):<28} {_text(row['fresh']):<18} {_text(row['served']):<24} "
              f"{_text(row['erased']):<24} {'yes' if p.keeps_state else 'no'}"
              + ("" if p.erase_clears is None or not p.keeps_state else
                 f" (erasing the slot {'clears' if p.erase_clears else 'does not clear'} it)"), flush=True)
    measured = {m for m, r in report["modes"].items() if r["keeps_state"]}
    expected = spectypes.KEEPS_STATE & set(modes)
    agree = measured == expected
    print(f"spectypes.KEEPS_STATE {sorted(expected)}: {'as measured' if agree else f'measured {sorted(measured)}'}")
    if a.write is not None:
        from llamaspec.studies.run import own_commit

        report["commit"] = own_commit()
        a.write.write_text(json.dumps(report, indent=1) + "\n")
    return 0 if agree else 1


if __name__ == "__main__":
    raise SystemExit(main())
