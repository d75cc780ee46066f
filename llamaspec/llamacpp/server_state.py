"""Which speculative modes keep state between requests on llama-server, from a measurement.

A mode keeps state when a long-lived server drafts a request differently from a fresh server given
the same request. :func:`probe` measures that for one ``--spec-type``: each prompt once on a
server of its own (fresh), then the prompts in turn on one server, the first again at the end
(A, B, A), each request greedy with ``cache_prompt: false``, as ``ServerEngine`` sends it (the chat
rendered by ``/apply-template``, then ``/completion``); each answer's ``timings.draft_n`` and
``draft_n_accepted`` are the counts compared. Greedy drafting is deterministic, so the counts do
not depend on the machine's load.

What the pinned build does is :data:`llamaspec.measure.spectypes.KEEPS_STATE`; tests/test_server.py
measures it there, benchmarks/server_state.py prints the whole table (docs/engines.md has it).

    from llamaspec.llamacpp import server_state
    p = server_state.probe(build, target, None, "ngram-mod", [("a", "..."), ("b", "...")], settings, logs)
    p.keeps_state, p.changed()      # True, (("a", fresh Counts, served Counts),)
"""

from __future__ import annotations

import contextlib
import logging
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
    fresh = tuple(_requests(build, cases, [pid], logs, spec_type)[0] for pid in order)
    served = _requests(build, cases, [*order, order[0]], logs, spec_type)
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
