"""The ``llama-server`` backend: models loaded once, one HTTP request per measurement.

For each (model pair, speculative setting) one ``llama-server`` runs with the draft (or a
draft-free n-gram mode), and beside it one with the target alone; both stay loaded for the
whole run, so a measurement is a single ``/completion`` request with no process start or
model load inside it. Per-request speculative settings are ignored by the server, so every
setting gets its own server; servers live in a pool keyed by (program, argv) and are stopped
by ``close()`` (and at exit, and on Ctrl-C).

Speed. The server's ``timings`` (``tools/server/server-common.{h,cpp}`` at 0c1e570):
``predicted_n`` counts every generated token including the first; ``predicted_ms`` runs from
the moment the first generated token was sampled (``t_prompt_last``, set when ``n_gen`` becomes
1) to the last one (``t_gen_last``); ``predicted_per_second`` is ``(predicted_n - 1) /
predicted_ms``. That is exactly SPEED_DEFINITION, so ``decode_tps`` is computed the same way
from the two raw figures and ``speed_basis`` says so. ``draft_n`` / ``draft_n_accepted`` are only
present when something was drafted: absent means 0. Verification rounds are not in the
response: ``rounds`` (every target call) follows from the counters by the server's loop
(``llamacpp.profiles.LLAMA_SERVER``), and with one slot the rounds that drafted something are the change of
``spec_decode_num_drafts_total`` on ``/metrics`` across the request (``drafted_rounds``).

Prompts are sent as text to ``/completion`` with ``return_tokens`` so that the lossless check
runs on token ids. A chat prompt's messages (its earlier turns, then the prompt) are first
rendered with the model's own template (``/apply-template``, the same rendering
``/v1/chat/completions`` does; llama.cpp's ChatML for a file without one), on the target-only
server, so both modes see the very same text.

Its size: one engine over a pool of live servers, one per setting and mode: which server a case
needs and its start, the prompt rendered and its length in tokens, the request with its lossless
check and ``/metrics`` read around it, the costs timed with llama-bench. The process itself (start,
health, stop at exit and on Ctrl-C) is ``server_process.py``; the ``/metrics`` text is read by
``metrics.py``.
"""

from __future__ import annotations

import contextlib
import dataclasses
import http.client
import json
import logging
import math
import os
import threading
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from llamaspec.base import paths
from llamaspec.base.errors import LlamaspecError
from llamaspec.llamacpp import costs, deploy_check, flags, programhelp
from llamaspec.llamacpp.build import Build
from llamaspec.llamacpp.deploy import server_args  # the measuring server's arguments, the deployed one's too
from llamaspec.llamacpp.metrics import metrics_change, positions_from_metrics
from llamaspec.llamacpp.profiles import LLAMA_SERVER
from llamaspec.llamacpp.server_process import READY_TIMEOUT, RequestFailed, Server, ServerDied, decode_tps, stop_all
from llamaspec.measure import chat, spectypes
from llamaspec.measure.contract import (
    Capabilities,
    Deployment,
    EngineOptions,
    Measurement,
    Message,
    ModelPath,
    Positions,
    ResolvedCase,
)
from llamaspec.measure.settings import Settings, defaults_for

log = logging.getLogger(__name__)


# The settings llama-server honours, and how each reaches it, come from the one flag table
# (flags.FLAG_TABLE); the speculative type and its n-gram sizes from flags.SPEC_TYPE_FLAGS, as
# for llama-speculative-simple (what each type is: llamaspec.measure.spectypes).
HONOURED = flags.takes("server")

SPEED_BASIS = ("llama-server timings: (predicted_n - 1) / predicted_ms; predicted_ms runs from the first generated "
               "token to the last, predicted_n counts the first (same as its predicted_per_second)")
# The round profile the speedup model reads for this engine's speculative runs (registered in llamacpp.profiles).
PROGRAM = LLAMA_SERVER.name


# --- the engine -------------------------------------------------------------------------------

class ServerEngine:
    """The ``llama-server`` backend (see the module docstring)."""

    name = "llama-server"

    def __init__(self, build: Build, servers_dir: Path | None = None, warm: bool = False) -> None:
        self.build = build
        self.warm = warm  # EngineOptions.warm: no server restarted for a stateful mode; identity and runs say so
        self.program = build.program("server")
        self.caps = programhelp.program_flags(self.program)
        # The speedup model's costs (draft, batch) are llama-bench's on the same build and files.
        costs_modes = set(costs.MODES) if "bench" in build.programs else set()
        self.capabilities = Capabilities(
            modes=frozenset({"baseline", "speculative", *costs_modes}),
            settings=HONOURED,
            spec_types=tuple(dict.fromkeys(("draft", *flags.offered(self.caps)))),  # draft-simple is our "draft"
            draft_policy="capped",
            keeps_models_loaded=True,
            token_ids=True,
            prepares=True,
            top_tokens=True,
            prompt_timings=True,
            built_from="llama.cpp",
        )
        self.servers_dir = servers_dir or paths.runs_dir() / "servers"
        self._pool: dict[tuple[str, ...], Server] = {}
        self._lock = threading.Lock()
        self._starting: dict[tuple[str, ...], threading.Lock] = {}
        self._rendered: dict[tuple[str, tuple[Message, ...]], str] = {}  # (target, turns) -> the rendered chat
        self._prompt_tokens: dict[tuple[str, str, bool, tuple[Message, ...]], int] = {}  # _prompt_key(case) -> tokens the server counted

    # identity and provenance

    def identity(self) -> str:
        return f"llama-server:{self.build.key or self.build.commit or self.caps.version.commit}" + (":warm" if self.warm else "")

    def provenance(self) -> dict[str, Any]:
        from llamaspec.llamacpp import cache

        return {**cache.provenance(self.build, self.caps.version), "program": "llama-server", "speed_basis": SPEED_BASIS,
                "traffic": "warm" if self.warm else "cold"}

    # checking

    def resolve_model(self, model: str, variant: str) -> ModelPath:
        from llamaspec import models
        from llamaspec.llamacpp import modeltools

        return models.gguf_model(model, variant, modeltools.tools(self.build))  # a variant not made yet: made by llama.cpp

    def check(self, case: ResolvedCase) -> None:
        self._check_settings(case)
        if case.draft is not None:
            from llamaspec import models

            models.check_pair(Path(case.target.path), Path(case.draft.path))  # llama.cpp's own vocabulary checks

    def _check_settings(self, case: ResolvedCase) -> None:
        s = case.settings.with_defaults()
        defaults = defaults_for(s.spec_type)
        for name in dataclasses.asdict(s):
            if name not in HONOURED and getattr(s, name) != getattr(defaults, name):
                raise LlamaspecError(f"llama-server does not take setting {name} (set to {getattr(s, name)!r})",
                                     hint="drop it from the experiment, or use backend llama.cpp")
        spec_type = s.spec_type or "draft"
        if spec_type not in self.capabilities.spec_types:
            raise LlamaspecError(f"llama-server ({self.caps.version.commit}) has no spec_type {spec_type!r}",
                                 hint=f"this build offers: {', '.join(self.capabilities.spec_types)}")
        flags.check_spec_type(s, case.draft.label if case.draft else None,
                              spectypes.draft_free_modes(self.capabilities))
        if s.temperature not in (None, 0, 0.0):
            log.warning("temperature %s: outputs with and without speculation may differ by sampling", s.temperature)
        server_args(self.caps, self.build.accel, case, "speculative")

    # servers

    def server_for(self, case: ResolvedCase, mode: str, *, unused: bool = False) -> Server:
        """The running server for this case and mode, started (outside any timing) if needed;
        ``unused``: one that has answered no ``/completion`` yet (a pooled one that has is stopped
        and a fresh one started in its place)."""
        if mode not in ("baseline", "speculative"):
            raise LlamaspecError(f"no llama-server measures mode {mode!r}", hint="modes: baseline, speculative")
        args = server_args(self.caps, self.build.accel, case, mode)
        key = (str(self.program), *args)
        with self._lock:
            gate = self._starting.setdefault(key, threading.Lock())
        with gate:  # one thread starts a server; concurrent clients wait for it
            with self._lock:
                server = self._pool.get(key)
            if server is not None and server.alive() and unused and server.completions:
                log.debug("llama-server (%s) has served %d requests: a fresh one for the next", server.label,
                          server.completions)
                server.stop()
                with self._lock:
                    self._pool.pop(key, None)
                server = None
            if server is not None and server.alive():
                return server
            if server is not None:
                # Died since its last request: this measurement fails (the reason is in the log);
                # the next call starts a fresh one.
                with self._lock:
                    self._pool.pop(key, None)
                raise ServerDied(f"({server.label}) {server.exit_description()} (log: {server.log_path})")
            label = mode if mode == "baseline" else f"speculative, {case.settings.spec_type or 'draft'}"
            stem = f"{int(time.time())}-{os.getpid()}-{len(self._pool)}-{mode}"
            server = Server(self.program, args, self.servers_dir / f"{stem}.log", label)
            server.start(READY_TIMEOUT if case.settings.timeout is None else max(READY_TIMEOUT, case.settings.timeout))
            with self._lock:
                self._pool[key] = server
            return server

    def deployment(self, case: ResolvedCase, speculative: bool = True) -> Deployment:
        from llamaspec.llamacpp import deploy

        return deploy.deployment(self.build, case, self.name, speculative, warm=self.warm)

    def servers(self) -> list[Server]:
        with self._lock:
            return list(self._pool.values())

    def close(self) -> None:
        for server in self.servers():
            server.stop()
        with self._lock:
            self._pool.clear()

    # prompts

    def prompt_text(self, case: ResolvedCase) -> str:
        """The text sent to /completion: a raw prompt as every engine reads it (``chat.raw_prompt``),
        or the chat's messages (earlier turns, then the prompt) rendered by the server's own template."""
        if not case.chat:
            return chat.raw_prompt(case)
        prompt = chat.written(case)
        base = self.server_for(case, "baseline")
        turns = chat.messages(case, prompt)
        key = (case.target.path, tuple(turns))
        with self._lock:
            hit = self._rendered.get(key)
        if hit is not None:
            return hit
        rendered = apply_template(base, turns, case.target.label)
        with self._lock:
            self._rendered[key] = rendered
        return rendered

    def prepare(self, case: ResolvedCase, modes: tuple[str, ...] = ("baseline", "speculative")) -> None:
        """Start the servers for ``modes`` and render the prompt, so that nothing of it lands in a timing.

        Servers not yet started are started side by side when their threads fit the cores: then
        a run waits for the slowest load, not the sum (loads were most of a prompt set's time
        outside generation). When they do not fit they start one after the other: on 2 cores, two
        -t 2 servers loading at once took a median 8.9 s against 4.0 s in turn (-t 1: 2.3 s
        against 2.6 s). A server that died is left for the next measurement to report."""
        todo = [m for m in modes if self._pooled(case, m) is None]
        per_server = case.settings.with_defaults().threads
        if len(todo) > 1 and (per_server is None or per_server * len(todo) > (os.cpu_count() or 1)):
            for mode in todo:
                self.server_for(case, mode)
            todo = []
        errors: list[LlamaspecError] = []

        def start(mode: str) -> None:
            try:
                self.server_for(case, mode)
            except LlamaspecError as exc:
                errors.append(exc)

        threads = [threading.Thread(target=start, args=(m,), name=f"start-{m}", daemon=True) for m in todo]
        for t in threads:
            t.start()
        try:
            for t in threads:
                t.join()
        except KeyboardInterrupt:
            stop_all()  # what has started so far; a start still waiting for /health then fails and ends
            raise
        if errors:
            raise errors[0]
        base = self._pooled(case, "baseline")
        if case.chat and base is not None and base.alive():
            with contextlib.suppress(ServerDied):
                self.prompt_text(case)

    def _pooled(self, case: ResolvedCase, mode: str) -> Server | None:
        key = (str(self.program), *server_args(self.caps, self.build.accel, case, mode))
        with self._lock:
            return self._pool.get(key)

    def top_tokens(self, case: ResolvedCase, position: int, prefix: Sequence[int], log_path: Path,
                   n: int = 2) -> list[dict[str, Any]] | None:
        """The target's ``n`` most probable tokens at generated position ``position`` (0-based), on
        its own greedy path, from the target-only server (raw probabilities, before sampling).

        ``prefix`` is the baseline's output before that position; None when this request's path
        differs from it (then the probabilities would belong to another context)."""
        s = case.settings.with_defaults()
        server = self.server_for(case, "baseline")
        body = {"prompt": self.prompt_text(case), "n_predict": position + 1, "temperature": s.temperature,
                "seed": s.seed, "cache_prompt": False, "return_tokens": True, "stream": False, "n_probs": n,
                "post_sampling_probs": False}
        try:
            data = server.post("/completion", body, timeout=s.timeout or 1800.0)
        except (ServerDied, RequestFailed, OSError, http.client.HTTPException) as exc:
            raise LlamaspecError(f"llama-server ({server.label}) could not give token probabilities: {exc}") from None
        _write_log(log_path, server, body, data, None)
        return top_tokens_at(data, position, prefix)

    # measuring

    def measure(self, case: ResolvedCase, mode: str, log_path: Path) -> Measurement:
        s = case.settings.with_defaults()
        if mode in costs.MODES and mode in self.capabilities.modes:
            return self._time_costs(case, mode, log_path)
        serial = (s.parallel or 1) == 1
        # A mode that keeps drafting state between requests is timed cold: on a server that has
        # served nothing (erasing the slot does not clear that state at 0c1e570: docs/engines.md).
        # Requests that overlap (concurrency levels) share one server: that is warm traffic, as is a warm engine's.
        cold = mode == "speculative" and serial and spectypes.keeps_state(s.spec_type) and not self.warm
        try:
            server = self.server_for(case, mode, unused=cold)
            text = self.prompt_text(case)
        except ServerDied as exc:
            return Measurement(mode=mode, ok=False, error=f"llama-server {exc}", argv=(), exit_code=None,
                               wall_seconds=0.0, peak_rss_bytes=None, log_path=str(log_path), error_kind="server")
        body = completion_request(text, s)
        served_before = server.completions
        # the rounds that drafted, from /metrics: only one request at a time tells its own
        metrics_before = server.metrics_text() if serial and mode == "speculative" else None
        timeout = s.timeout or 1800.0
        base: dict[str, Any] = dict(mode=mode, argv=tuple(server.argv), exit_code=None, log_path=str(log_path))
        t0 = time.monotonic()
        error: str | None = None
        kind = ""
        data: dict[str, Any] = {}
        try:
            data = server.post("/completion", body, timeout=timeout)
        except ServerDied as exc:
            error, kind = f"llama-server ({server.label}) {exc} (log: {server.log_path})", "server"
        except RequestFailed as exc:
            kind = "prompt" if exc.status == 400 else "request"
            error = f"llama-server refused the prompt: {exc}" if kind == "prompt" else f"llama-server error {exc.status}: {exc}"
        except TimeoutError:
            error, kind = f"no answer from llama-server ({server.label}) within {timeout:.0f} s", "timeout"
            server.stop()  # it is still generating: a fresh one serves the next request
        except (ConnectionError, http.client.HTTPException) as exc:
            error, kind = f"lost the connection to llama-server ({server.label}): {exc}", "server"
        wall = time.monotonic() - t0
        _write_log(log_path, server, body, data, error)
        base.update(wall_seconds=wall, peak_rss_bytes=server.peak_rss_bytes())
        if error is not None:
            return Measurement(ok=False, error=error, error_kind=kind, stats={"server_log": str(server.log_path)}, **base)
        metrics_after = server.metrics_text() if metrics_before is not None else None
        change = metrics_change(metrics_before, metrics_after)
        rounds = change.get("spec_decode_num_drafts_total")
        fields = completion_fields(data, mode, s, int(rounds) if rounds is not None else None)
        if mode == "speculative":
            by = (positions_from_metrics(metrics_before, metrics_after, fields["draft_len"],
                                         p_min_zero=not s.draft_p_min and spectypes.needs_draft(s.spec_type),
                                         ran_out=data.get("stop_type") == "limit")
                  if metrics_before is not None and metrics_after is not None else
                  Positions(note="several requests at a time: /metrics does not tell one request's positions"
                            if not serial else "/metrics did not answer"))
            fields.update(by.fields())
            fields["stats"] = {**fields["stats"], "by_position": {"drafted": by.drafted, "accepted": by.accepted,
                                                                  "note": by.note}}
        # what the server had served before this request: a stateful mode's drafts depend on it
        fields["stats"] = {**fields["stats"], "prompt_form": prompt_form(case), "served_before": served_before,
                           "warm": self.warm}
        if isinstance(fields.get("n_prompt"), int):
            with self._lock:
                self._prompt_tokens[_prompt_key(case)] = fields["n_prompt"]
        return Measurement(ok=True, error=None, **base, **fields, speed_basis=SPEED_BASIS)

    def _time_costs(self, case: ResolvedCase, mode: str, log_path: Path) -> Measurement:
        """The speedup model's costs with llama-bench (costs.py), at the run's mean depth: the prompt
        as the server counted it (after the first pair; before any, four characters a token)."""
        key = _prompt_key(case)
        with self._lock:
            counted = self._prompt_tokens.get(key)
        return costs.measure(self.build, self.caps.generation, case, mode, log_path,
                             costs.depth(counted, key[1], case.settings.with_defaults().n_predict), counted is not None)


def completion_request(text: str, s: Settings) -> dict[str, Any]:
    """The ``/completion`` body that measures ``text`` with settings ``s``: the per-request fields of
    the flag table, no prompt cache (every request processes its prompt), token ids back, one answer."""
    return {"prompt": text, **flags.request_fields(s), "cache_prompt": False, "return_tokens": True, "stream": False}


def apply_template(server: Server, turns: Sequence[Message], model: str) -> str:
    """The chat ``turns`` rendered by the server's own template (``/apply-template``, as
    ``/v1/chat/completions`` renders them); ``model`` names the target in the error."""
    try:
        data = server.post("/apply-template", {"messages": chat.as_dicts(turns)}, timeout=60)
    except RequestFailed as exc:
        raise LlamaspecError(f"llama-server could not apply {model}'s chat template: {exc}",
                             hint="send the prompts raw (format: raw), or use a model with a chat template") from exc
    return str(data.get("prompt", ""))


def prompt_form(case: ResolvedCase) -> str:
    """How the server got the case's prompt (``chat.PROMPT_FORMS``): a chat through /apply-template
    is the model's template, or llama.cpp's ChatML where the file has none."""
    if not case.chat:
        return chat.RAW
    from llamaspec.models.reader import read_chat

    return chat.CHAT_TEMPLATE if read_chat(case.target.path).template is not None else chat.CHATML_DEFAULT


def _prompt_key(case: ResolvedCase) -> tuple[str, str, bool, tuple[Message, ...]]:
    """(target, prompt, chat, earlier turns): what fixes the prompt's length in tokens."""
    return (case.target.path, chat.written(case), case.chat, case.history if case.chat else ())


def completion_fields(data: dict[str, Any], mode: str, s: Settings, drafted_rounds: int | None = None) -> dict[str, Any]:
    """Measurement fields from one ``/completion`` answer (pure: tested on recorded answers);
    ``drafted_rounds``: how much /metrics' count of verification steps grew over the request."""
    t = data.get("timings") or {}
    n_gen = t.get("predicted_n", data.get("tokens_predicted"))
    ms = t.get("predicted_ms")
    prompt_ms, prompt_n = t.get("prompt_ms"), t.get("prompt_n")
    fields: dict[str, Any] = dict(
        n_prompt=data.get("tokens_evaluated", prompt_n),
        n_predict=n_gen,
        encode_tps=prompt_n / (prompt_ms / 1000.0) if prompt_n and prompt_ms else None,
        decode_tps=decode_tps(t, data.get("tokens_predicted")),
        prompt_ms=float(prompt_ms) if isinstance(prompt_ms, int | float) else None,
        generation_ms=float(ms) if isinstance(ms, int | float) else None,
        text=data.get("content"),
        tokens=tuple(int(x) for x in data["tokens"]) if isinstance(data.get("tokens"), list) and data["tokens"] else None,
        end_of_text=data.get("stop_type") == "eos" and (n_gen or 0) < (s.n_predict or 0),
        stats={"timings": t, "stop_type": data.get("stop_type"), "truncated": data.get("truncated"),
               "tokens_cached": data.get("tokens_cached")},
    )
    if mode == "speculative":
        drafted = int(t.get("draft_n", 0))  # absent: nothing was drafted
        accepted = int(t.get("draft_n_accepted", 0))
        # rounds: every target call after the prompt (LLAMA_SERVER's loop: the first token
        # comes from the prompt's logits), as for every engine; /metrics' verification steps count
        # only the rounds that drafted something (a step whose draft came back empty, the last
        # token among them, is a plain decode): those are drafted_rounds.
        calls = LLAMA_SERVER.rounds(n_gen, accepted) if isinstance(n_gen, int) else -1
        fields.update(n_drafted=drafted, n_accept=accepted,
                      rounds=calls if calls >= 0 else None, drafted_rounds=drafted_rounds,
                      draft_policy="capped", program=PROGRAM,
                      draft_len=spectypes.requested_length(s))
    else:
        fields.update(draft_policy="none")
        if "draft_n" in t:  # the target alone drafted: the run core refuses this baseline
            fields.update(n_drafted=int(t["draft_n"]), n_accept=int(t.get("draft_n_accepted", 0)))
    return fields


def top_tokens_at(data: dict[str, Any], position: int, prefix: Sequence[int]) -> list[dict[str, Any]] | None:
    """``[{"id", "piece", "p"}, ...]`` at ``position`` from an ``n_probs`` answer (pure: tested on a
    recorded one); None when the answer's tokens before it are not ``prefix``."""
    tokens = data.get("tokens") or []
    if list(tokens[:position]) != list(prefix):
        log.warning("the probe's output differs from the baseline's before token %d: top tokens not used", position)
        return None
    probs = data.get("completion_probabilities") or []
    if position >= len(probs):
        return None
    top = probs[position].get("top_logprobs") or []
    return [{"id": int(t["id"]), "piece": t.get("token", ""), "p": math.exp(float(t["logprob"]))} for t in top]


def _write_log(log_path: Path, server: Server, body: dict[str, Any], data: dict[str, Any], error: str | None) -> None:
    log_path.parent.mkdir(parents=True, exist_ok=True)
    record = {"server": server.label, "argv": server.argv, "server_log": str(server.log_path), "request": body,
              "response": data, "error": error}
    log_path.write_text(json.dumps(record, indent=1, ensure_ascii=False))


def open_engine(options: EngineOptions) -> ServerEngine:
    from llamaspec.llamacpp.build import ensure_program, find
    from llamaspec.llamacpp.cache import SERVER_ROLES, auto_build

    build = find(options.accel, options.bin_dir, rpc=options.rpc, roles=SERVER_ROLES, build=auto_build())
    build = ensure_program(build, "server")  # built when first needed
    if "server" not in build.programs:
        raise LlamaspecError(f"the llama.cpp build in {build.bin_dir} has no llama-server",
                             hint="rebuild with `llamaspec build --force` (it builds llama-server), or pass --bin-dir")
    return ServerEngine(build, warm=options.warm)


def deployment(case: ResolvedCase, options: EngineOptions, speculative: bool = True) -> Deployment:
    """The deploy command for ``case`` with the build these options find (nothing is started)."""
    from llamaspec.llamacpp import deploy
    from llamaspec.llamacpp.build import find
    from llamaspec.llamacpp.cache import SERVER_ROLES

    return deploy.deployment(find(options.accel, options.bin_dir, rpc=options.rpc, roles=SERVER_ROLES), case, "llama-server",
                             speculative, warm=options.warm)


# the engine's deploy check (registry.engines.check_deployment)
check_deployment = deploy_check.check_answer
