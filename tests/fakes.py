"""Faithful fake llama.cpp programs for error paths: they answer --help and --version with the
real recorded texts, print real recorded output, then misbehave as asked (crash, hang, stop
without stats, always or once); a fake engine; and a fake llama-server whose /metrics counters
advance as a scripted load proceeds (:class:`FakeLlamaServer`, for llamaspec watch)."""

from __future__ import annotations

import sys
from pathlib import Path

FIXTURES = Path(__file__).resolve().parent / "fixtures" / "llamacpp"

HANG_SECONDS = 600  # how long a "hang" fake sleeps: a run that lasts less was stopped by its timeout

SCRIPT = '''#!{python}
import os, signal, sys, time
from pathlib import Path
rec = Path({recorded!r})
args = sys.argv[1:]
if "--help" in args:
    sys.stdout.write(Path({help!r}).read_text()); sys.exit(0)
if "--version" in args:
    sys.stderr.write(Path({version!r}).read_text()); sys.exit(0)
behaviour = {behaviour!r}
out = (rec.with_suffix(".stdout")).read_text()
err = (rec.with_suffix(".stderr")).read_text()
if behaviour == "hang":
    sys.stderr.write(err[: len(err) // 3]); sys.stderr.flush(); time.sleep({hang})
if behaviour == "killed":
    sys.stdout.write(out[: len(out) // 2]); sys.stdout.flush()
    sys.stderr.write(err[: len(err) // 2]); sys.stderr.flush()
    os.kill(os.getpid(), signal.SIGKILL)
if behaviour == "no-stats":
    sys.stdout.write(out); sys.exit(0)
marker = Path(sys.argv[0] + ".lost-once")
if behaviour == "lost-tail-once" and not marker.exists():  # llama.cpp's log thread not flushed at exit, once
    marker.write_text(""); sys.stdout.write(out[: len(out) // 2]); sys.exit(0)
if behaviour == "fail":
    sys.stderr.write("error: failed to load model 'x.gguf'\\n"); sys.exit(1)
# speculation on in a target-only run (always, or when the environment asks): the shared code's statistics line
if behaviour == "drafting" or (behaviour == "drafting-from-env" and os.environ.get("LLAMA_ARG_SPEC_TYPE")):
    drafted = (rec.parent / "speculative-simple-ngram-simple.stderr").read_text().splitlines(keepends=True)
    err += "".join(line for line in drafted if " statistics " in line)
sys.stdout.write(out); sys.stderr.write(err)
'''

# A llama-server that answers --help and --version with the recorded texts and serves /health and
# /completion on the --port it is given, answering with the recorded answers of the pinned server:
# the speculative one (draft_n in its timings) when its speculative types draft, the target alone's
# otherwise. Its types are made as 0c1e570's common/arg.cpp makes them: the build's default list,
# then LLAMA_ARG_SPEC_TYPE, then each --spec-type, each appended to the list ("none" takes nothing
# out); ``replaces``: each --spec-type replaces the list instead (a build where none turns it off).
SERVER_SCRIPT = '''#!{python}
import http.server, json, os, sys
from pathlib import Path
args = sys.argv[1:]
if "--help" in args:
    sys.stdout.write(Path({help!r}).read_text()); sys.exit(0)
if "--version" in args:
    sys.stderr.write(Path({version!r}).read_text()); sys.exit(0)
types = list({default!r})
if os.environ.get("LLAMA_ARG_SPEC_TYPE"):
    types += os.environ["LLAMA_ARG_SPEC_TYPE"].split(",")
for i, arg in enumerate(args):
    if arg == "--spec-type":
        types = args[i + 1].split(",") if {replaces!r} else types + args[i + 1].split(",")
drafts = any(t not in ("none", "draft-simple") for t in types) or ("draft-simple" in types and "-md" in args)
answer = json.loads(Path({answers!r}).read_text())[{drafting!r} if drafts else "baseline"]
sys.stderr.write("fake llama-server: speculative types " + ",".join(types) + "\\n"); sys.stderr.flush()

class Handler(http.server.BaseHTTPRequestHandler):
    def log_message(self, *a):
        pass

    def reply(self, status, body):
        data = json.dumps(body).encode()
        self.send_response(status); self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data))); self.end_headers(); self.wfile.write(data)

    def do_GET(self):
        self.reply(200, {{"status": "ok"}}) if self.path == "/health" else self.reply(501, {{"error": {{"message": "no"}}}})

    def do_POST(self):
        self.rfile.read(int(self.headers.get("Content-Length", 0)))
        self.reply(200, answer) if self.path == "/completion" else self.reply(404, {{"error": {{"message": "no"}}}})

http.server.ThreadingHTTPServer(("127.0.0.1", int(args[args.index("--port") + 1])), Handler).serve_forever()
'''


def fake_bin_dir(folder: Path, speculative: str = "ok", completion: str = "ok", commit: str = "0c1e570",
                 simple: str | None = None, completion_recording: str = "completion",
                 server_default: tuple[str, ...] | None = None, server_replaces: bool = False,
                 speculative_recording: str = "speculative", server_drafting: str = "speculative") -> Path:
    """A binaries folder with llama-speculative and llama-completion replaying ``commit``'s recordings
    (and a llama-server that answers --help and --version, enough to open the server backend).
    ``simple``: a llama-speculative-simple too, replaying that recording (an n-gram run, say), with
    ``completion_recording`` the baseline's of the same prompt. ``completion="drafting"``: the
    baseline prints the statistics of an n-gram mode that drafted (recorded from
    llama-speculative-simple); ``"drafting-from-env"``: only when ``LLAMA_ARG_SPEC_TYPE`` is set
    in its environment. ``server_default``: a llama-server that serves too
    (:data:`SERVER_SCRIPT`), with that default list of speculative types and ``server_replaces``;
    ``speculative_recording``: the speculative program's recording (``chat/...`` for the chat recordings);
    ``server_drafting``: the recorded answer (server-completion.json) a speculative fake server gives."""
    rec = FIXTURES / commit
    folder.mkdir(parents=True, exist_ok=True)
    baseline = "llama-completion" if (rec / "llama-completion.help.txt").is_file() else "llama-cli"  # llama-cli in 2025
    programs = [("llama-speculative", speculative_recording, speculative),
                (baseline, completion_recording, completion),
                ("llama-server", "completion", "ok")]  # --help and --version only
    if simple is not None:
        programs.append(("llama-speculative-simple", simple, "ok"))
    for program, recorded, behaviour in programs:
        path = folder / program
        path.write_text(SCRIPT.format(python=sys.executable, recorded=str(rec / recorded), help=str(rec / f"{program}.help.txt"),
                                      version=str(rec / f"{program}.version.txt"), behaviour=behaviour,
                                      hang=HANG_SECONDS))
        path.chmod(0o755)
    if server_default is not None:
        (folder / "llama-server").write_text(SERVER_SCRIPT.format(
            python=sys.executable, help=str(rec / "llama-server.help.txt"), version=str(rec / "llama-server.version.txt"),
            default=list(server_default), replaces=server_replaces, answers=str(rec / "server-completion.json"),
            drafting=server_drafting))
    return folder


# --- an in-process engine for the run, sweep and tune logic ------------------------------------------

from dataclasses import dataclass, field, replace  # noqa: E402
from typing import Any  # noqa: E402

from llamaspec.base.errors import LlamaspecError  # noqa: E402
from llamaspec.measure.contract import Capabilities, Command, Deployment, Measurement, ModelPath, ResolvedCase  # noqa: E402


@dataclass
class FakeEngine:
    """A backend whose numbers depend on what it is asked, like a real engine's, on a machine that drifts.

    - The target alone runs at ``base_tps / threads_penalty(threads)``, scaled by the machine's
      speed at that moment: each measurement makes the machine ``drift`` slower (a shared,
      noisy machine), so a baseline measured earlier than its speculative partner flatters it.
      ``spec_drift`` makes each measurement slow the speculative side by that much more (a
      machine whose state hurts the two-model run more as a sweep goes on, which pairing cannot
      cancel: a point measured later reads lower).
    - With a draft of length k, the true speedup is ``speedup_of(k)``; the speculative speed is
      that times the target's speed at the moment of the measurement.
    - Counters follow a fixed-length program: rounds = n - accepted - 1, n_drafted = k x rounds.
    - Greedy text is the same with and without a draft, unless told otherwise; sampled text
      (temperature above 0) differs from the fourth token on, as two samplings do by chance.
    Faults to expose: ``drafts`` (always draft this length, whatever was asked), ``truncate``
    (speculative output cut after N tokens), ``differ_at_k`` (outputs diverge for these lengths),
    ``baseline_speculates`` (the target-only run speculates as the speculative one does, with its
    counters and its speed: a build whose default turns speculation on, a variable in the environment).
    ``positions``: the speculative runs count acceptance by draft position (every round drafts
    every position; accepted through i in about α^i of them), as llama-speculative-simple does;
    ``position_bias`` scales the acceptance of rounds shorter than 16 (1.0: a position's acceptance
    does not depend on the draft length, the assumption of predicting short lengths from long runs).
    """

    base_tps: float = 100.0
    drift: float = 0.02
    alpha: float = 0.8
    draft_cost: float = 0.1  # one draft step against one target step
    drafts: int | None = None
    truncate: int | None = None
    differ_at_k: tuple[int, ...] = ()
    noise: tuple[float, ...] = (1.0,)  # multiplicative factors cycled per measurement
    spec_drift: float = 0.0
    name: str = "fake"
    built_from: str | None = None  # Capabilities.built_from: a source tree (its version is then "fake")
    calls: list[tuple[str, dict[str, Any]]] = field(default_factory=list)
    positions: bool = False
    position_bias: float = 1.0
    baseline_speculates: bool = False
    top_gap: float | None = None  # answers top_tokens: the two outputs' tokens where they diverge, this far apart
    probes: list[int] = field(default_factory=list)  # the positions top_tokens was asked for

    def __post_init__(self) -> None:
        self.capabilities = Capabilities(modes=frozenset({"baseline", "speculative", "draft", "batch"}),
                                         settings=frozenset({"n_predict", "draft_max", "threads", "seed", "ctx_size",
                                                             "flash_attn", "temperature", "escape", "gpu_layers",
                                                             "draft_gpu_layers", "spec_type", "program", "timeout"}),
                                         spec_types=("draft",), draft_policy="fixed", built_from=self.built_from,
                                         top_tokens=self.top_gap is not None)

    def top_tokens(self, case: ResolvedCase, position: int, prefix: Any, log_path: Any, n: int = 2) -> list[dict[str, Any]] | None:
        """The target alone's top two at ``position`` on its own path (None on another): its own
        token there and the one a differing draft run takes (7), ``top_gap`` apart."""
        self.probes.append(position)
        if list(prefix) != list(range(100, 100 + position)):
            return None
        gap = self.top_gap or 0.0
        return [{"id": 100 + position, "p": 0.45 + gap / 2}, {"id": 7, "p": 0.45 - gap / 2}]

    def identity(self) -> str:
        return f"fake-{self.base_tps}"

    def provenance(self) -> dict[str, Any]:
        return {"version": "fake", "build_key": self.identity()}

    def resolve_model(self, model: str, variant: str) -> ModelPath:
        return ModelPath(f"{model}:{variant}", f"/models/{model}-{variant}.gguf", variant)

    def check(self, case: ResolvedCase) -> None:
        return None

    def close(self) -> None:
        return None

    def deployment(self, case: ResolvedCase, speculative: bool = True) -> Deployment:
        argv = ["fake-serve", case.target.path, *(["--draft", case.draft.path, "-k", str(case.settings.draft_max)]
                                                   if speculative and case.draft else [])]
        drafts = speculative and case.draft is not None
        setting = f"draft {case.settings.draft_max}" if drafts else f"no draft: the target {case.target.label} alone"  # as the real engines say
        return Deployment(self.name, drafts, setting, (Command.shell("fake-serve", argv),))

    def speedup_of(self, k: int) -> float:
        accepted = self.alpha * (1 - self.alpha ** k) / (1 - self.alpha)  # expected accepted per round
        return (accepted + 1) / (1 + k * self.draft_cost)

    def machine_speed(self) -> float:
        n = len(self.calls)
        return (1 - self.drift) ** n * self.noise[n % len(self.noise)]

    def target_tps(self, case: ResolvedCase) -> float:
        return self.base_tps / (1 + 0.5 * ((case.settings.threads or 1) - 1))

    def measure(self, case: ResolvedCase, mode: str, log_path: Any) -> Measurement:
        speed = self.machine_speed()
        if mode == "speculative":
            speed *= (1 - self.spec_drift) ** len(self.calls)
        self.calls.append((mode, {"threads": case.settings.threads, "draft_max": case.settings.draft_max}))
        n = case.settings.n_predict or 16
        tokens = tuple(range(100, 100 + n))
        common = dict(mode=mode, ok=True, error=None, argv=(mode,), exit_code=0, wall_seconds=0.01, peak_rss_bytes=1,
                      n_prompt=8, speed_basis=f"fake {mode}")
        if mode == "baseline" and not self.baseline_speculates:
            return Measurement(**common, n_predict=n, decode_tps=self.target_tps(case) * speed, tokens=tokens,
                               text=" ".join(map(str, tokens)), draft_policy="none")
        if mode == "draft":
            return Measurement(**common, n_predict=n, decode_tps=self.target_tps(case) / self.draft_cost * speed)
        if mode == "batch":
            step = 1000 / self.target_tps(case)
            return Measurement(**common, stats={"batch_ms": {b: step * (1 + 0.05 * (b - 1)) for b in range(1, 18)}})
        k = self.drafts if self.drafts is not None else (case.settings.draft_max or 8)
        alpha = self.alpha * (self.position_bias if k < 16 else 1.0)
        accepted_per_round = alpha * (1 - alpha ** k) / (1 - alpha)
        rounds = max(round((n - 1) / (accepted_per_round + 1)), 1)
        n_accept = n - 1 - rounds
        out = tokens[: self.truncate] if self.truncate is not None else tokens
        if case.settings.draft_max in self.differ_at_k or (case.settings.temperature or 0) > 0:
            out = (*out[:3], 7, *out[4:])
        return Measurement(**common, n_predict=n, decode_tps=self.target_tps(case) * self.speedup_of(k) * speed,
                           n_drafted=k * rounds, n_accept=n_accept, rounds=rounds,
                           draft_len=k, draft_policy="fixed", draft_steps=rounds * (k + 1), program="llama-speculative", tokens=out,
                           text=" ".join(map(str, out)),
                           **({"drafted_by_position": (rounds,) * k,
                               "accepted_by_position": tuple(round(rounds * alpha ** i) for i in range(1, k + 1))}
                              if self.positions else {}))


@dataclass
class WorkloadEngine(FakeEngine):
    """:class:`FakeEngine` over a workload: each prompt (the case's name) accepts with its own
    ``alphas[prompt]``, and the draft-free modes of ``modes`` run too, each at its own speedup
    per prompt (``modes[mode][prompt]``), drafting a little each round. A setup named in ``fails``
    (a mode, or ``draft K``) fails on every prompt, as a crashing program would; a mode the
    engine does not declare is refused by ``check``, as a build without it refuses it."""

    alphas: dict[str, float] = field(default_factory=dict)
    modes: dict[str, dict[str, float]] = field(default_factory=dict)
    fails: tuple[str, ...] = ()
    refuse: tuple[str, ...] = ()  # modes declared but refused for this program (llama-speculative runs none)
    answers: dict[str, int] = field(default_factory=dict)  # prompt -> tokens the target answers with, ending early
    loops: dict[str, str] = field(default_factory=dict)  # prompt -> the span its output repeats to the end

    def __post_init__(self) -> None:
        super().__post_init__()
        self.capabilities = replace(self.capabilities, spec_types=("draft", *self.modes))

    def alpha_of(self, prompt: str) -> float:
        return self.alphas.get(prompt, self.alpha)

    def speedup_for(self, prompt: str, setup: str | int) -> float:
        """The true speedup of ``setup`` (a mode, or a draft length) on ``prompt``."""
        if isinstance(setup, str):
            return self.modes[setup][prompt]
        a = self.alpha_of(prompt)
        accepted = a * (1 - a ** setup) / (1 - a)
        return (accepted + 1) / (1 + setup * self.draft_cost)

    def check(self, case: ResolvedCase) -> None:
        kind = case.settings.spec_type or "draft"
        if kind not in self.capabilities.spec_types or kind in self.refuse:
            raise LlamaspecError(f"this build does not run --spec-type {kind}", hint="use a build that lists it")

    def measure(self, case: ResolvedCase, mode: str, log_path: Any) -> Measurement:
        kind = case.settings.spec_type or "draft"
        setup = kind if kind != "draft" else f"draft {case.settings.draft_max}"
        if mode == "speculative" and setup in self.fails:
            self.calls.append((mode, {"draft_max": case.settings.draft_max}))
            return Measurement(mode=mode, ok=False, error="the program crashed (exit -11)", argv=(mode,), exit_code=-11,
                               wall_seconds=0.01, peak_rss_bytes=None)
        saved = self.alpha
        self.alpha = self.alpha_of(case.case)
        try:
            m = self._shaped(case.case, super().measure(case, mode, log_path))
        finally:
            self.alpha = saved
        if mode != "speculative" or kind == "draft":
            return m
        n = m.n_predict or 16
        rounds = max(n // 3, 1)
        base = self.target_tps(case) * self.machine_speed_at(len(self.calls) - 1)
        return replace(m, decode_tps=base * self.modes[kind][case.case], n_drafted=2 * rounds, n_accept=rounds,
                       rounds=rounds, draft_len=case.settings.draft_max, draft_policy="capped", draft_steps=0,
                       drafted_by_position=None,
                       accepted_by_position=None)

    def machine_speed_at(self, n: int) -> float:
        return (1 - self.drift) ** n * self.noise[n % len(self.noise)]

    def _shaped(self, prompt: str, m: Measurement) -> Measurement:
        """The target's output on ``prompt``, the same with and without speculation: ended after its
        ``answers`` tokens, or repeating its ``loops`` span to the end."""
        if m.mode not in ("baseline", "speculative") or m.tokens is None:
            return m
        n = self.answers.get(prompt)
        if n is not None:
            m = replace(m, n_predict=n, tokens=m.tokens[:n], text=" ".join(map(str, m.tokens[:n])), end_of_text=True)
        span = self.loops.get(prompt)
        if span is not None:
            m = replace(m, text=(span * len(m.tokens))[:4 * len(m.tokens)])
        return m


# --- a fake llama-server for llamaspec watch ------------------------------------------------------

WATCH_RECORDED = FIXTURES / "0c1e570" / "watch"


@dataclass(frozen=True)
class Served:
    """One request as the fake server finishes it: what it adds to the real server's counters."""

    tokens: int = 26  # generated, the first included: 1 + 5 rounds + 20 accepted
    seconds: float = 0.8  # from the first generated token to the last
    accepted_by_position: tuple[int, ...] = (4, 4, 3, 3, 2, 2, 1, 1)  # steps accepted through position i
    steps: int = 4  # verification steps
    drafted: int = 30
    prompt: int = 12

    @property
    def accepted(self) -> int:
        return sum(self.accepted_by_position)


class FakeLlamaServer:
    """A fake llama-server on 127.0.0.1 that answers ``/metrics``, ``/props`` and ``/slots`` as the
    pinned one does (the recorded ``/props`` and ``/slots``, ``/metrics`` in its format), according
    to what it is asked: every read of ``/metrics`` first lets the scripted load proceed by one step
    (``script``: a :class:`Served` request finishes, ``"restart"`` zeroes every counter, ``"scrape"``
    is another client reading ``/metrics``, ``None`` nothing, a tuple: those in turn), then answers with the counters so far
    and the rate gauge of the requests finished since the previous read, which it resets, as the
    real one does. ``per_position``: the per-position series (a server from before it has none);
    ``metrics``: served at all (without --metrics: HTTP 501); ``llama``: answers as llama-server;
    ``speculative``: the slots speculate (``spec_types``)."""

    def __init__(self, script: list[Served | str | tuple[Served | str, ...] | None], *, per_position: bool = True,
                 metrics: bool = True, llama: bool = True, speculative: bool = True,
                 spec_types: str = "none,draft-simple", draft_max: int = 8,
                 model_path: str = "/nonexistent/ggml-model-f32.gguf") -> None:
        import http.server
        import threading

        self.script = list(script)
        self.per_position, self.metrics_on, self.llama = per_position, metrics, llama
        self.speculative, self.spec_types, self.draft_max = speculative, spec_types, draft_max
        self.model_path = model_path
        self.reads = 0
        self._zero()
        fake = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def log_message(self, *args: object) -> None:  # quiet
                pass

            def do_GET(self) -> None:  # noqa: N802 - http.server's name
                status, body, kind = fake.answer(self.path)
                data = body.encode()
                self.send_response(status)
                self.send_header("Content-Type", kind)
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

        self.httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.thread = threading.Thread(target=self.httpd.serve_forever, kwargs={"poll_interval": 0.02}, daemon=True)
        self.thread.start()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.httpd.server_address[1]}"

    def close(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()

    def __enter__(self) -> FakeLlamaServer:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _zero(self) -> None:
        self.tokens = self.steps = self.drafted = self.accepted = self.prompt = 0
        self.seconds = 0.0
        self.by_position: list[int] = []
        self.bucket_steps, self.bucket_seconds = 0, 0.0

    def _proceed(self) -> None:
        step = self.script.pop(0) if self.script else None
        for event in step if isinstance(step, tuple) else (step,):
            self._apply(event)

    def _apply(self, event: Served | str | None) -> None:
        if event == "restart":
            self._zero()
        elif event == "scrape":
            self.bucket_steps, self.bucket_seconds = 0, 0.0
        elif isinstance(event, Served):
            self.tokens += event.tokens
            self.seconds += event.seconds
            self.steps += event.steps
            self.drafted += event.drafted
            self.accepted += event.accepted
            self.prompt += event.prompt
            if self.speculative:
                counts = list(event.accepted_by_position) + [0] * (self.draft_max - len(event.accepted_by_position))
                self.by_position = [a + b for a, b in zip(self.by_position or [0] * self.draft_max, counts, strict=True)]
            self.bucket_steps += event.tokens - 1
            self.bucket_seconds += event.seconds

    def metrics_text(self) -> str:
        rate = self.bucket_steps / self.bucket_seconds if self.bucket_seconds else 0.0
        counters = [("prompt_tokens_total", self.prompt), ("prompt_tokens_cached_total", 0), ("prompt_seconds_total", 0.1),
                    ("tokens_predicted_total", self.tokens), ("tokens_predicted_seconds_total", self.seconds),
                    ("n_decode_total", self.tokens), ("n_tokens_max", 64),
                    ("spec_decode_num_draft_tokens_total", self.drafted if self.speculative else 0),
                    ("spec_decode_num_accepted_tokens_total", self.accepted if self.speculative else 0),
                    ("spec_decode_num_drafts_total", self.steps if self.speculative else 0)]
        gauges = [("prompt_tokens_seconds", 0), ("predicted_tokens_seconds", rate), ("requests_processing", 0),
                  ("requests_deferred", 0), ("n_busy_slots_per_decode", 1)]
        lines = []
        for kind, items in (("counter", counters), ("gauge", gauges)):
            for name, value in items:  # printed as C++ streams print a double: 6 significant digits
                lines += [f"# HELP llamacpp:{name} {name}", f"# TYPE llamacpp:{name} {kind}", f"llamacpp:{name} {value:.6g}"]
        if self.per_position and self.by_position:
            lines += ["# HELP llamacpp:spec_decode_num_accepted_tokens_per_pos_total Accepted tokens per draft position",
                      "# TYPE llamacpp:spec_decode_num_accepted_tokens_per_pos_total counter"]
            lines += [f'llamacpp:spec_decode_num_accepted_tokens_per_pos_total{{position="{i}"}} {c}'
                      for i, c in enumerate(self.by_position)]
        return "\n".join(lines) + "\n"

    def answer(self, path: str) -> tuple[int, str, str]:
        import json as json_

        if not self.llama:
            return 404, "<html><body>Not Found</body></html>", "text/html"
        if path == "/props":
            props = json_.loads((WATCH_RECORDED / "draft" / "props.json").read_text())
            props["endpoint_metrics"] = self.metrics_on
            props["model_path"] = self.model_path
            return 200, json_.dumps(props), "application/json"
        if path == "/slots":
            slots = json_.loads((WATCH_RECORDED / "draft" / "slots-1.json").read_text())
            for s in slots:
                s["speculative"] = self.speculative
                s["params"]["speculative.types"] = self.spec_types if self.speculative else "none"
            return 200, json_.dumps(slots), "application/json"
        if path == "/metrics":
            if not self.metrics_on:
                return 501, (WATCH_RECORDED / "no-metrics" / "metrics-0.txt").read_text().splitlines()[1], "application/json"
            self.reads += 1
            self._proceed()
            text = self.metrics_text()
            self.bucket_steps, self.bucket_seconds = 0, 0.0  # every read resets the rate gauge
            return 200, text, "text/plain"
        return 404, '{"error":{"code":404,"message":"File Not Found","type":"not_found_error"}}', "application/json"


# --- a study's grid, as the tests of a sweep's points read it -------------------------------------


@dataclass
class Swept:
    """A study measured over a grid (every setup on every prompt), and its first prompt's points as
    one sweep (``sweep_id``: that prompt's group, which a sweep report reads)."""

    result: Any  # llamaspec.studies.study.StudyResult
    sweep_id: str


HW = {"cpu": "test", "cores": 2}  # the hardware a fake run records


def case(**settings: Any) -> ResolvedCase:
    """The quicksort case of the offline pair's names, at ``settings`` over -n 64, -t 1, draft 8."""
    from llamaspec.measure.settings import Settings

    s = Settings(**{"n_predict": 64, "threads": 1, "draft_max": 8, **settings}).with_defaults()
    return ResolvedCase("exp", "python", ModelPath("t:f32", "/t.gguf", "aa"), ModelPath("t:q4_1", "/d.gguf", "bb"),
                        "# Quick-sort", None, s)


def exp(repeats: int | str = 2) -> Any:
    """The built-in smollm2-quicksort experiment at -n 64, -t 1 and these repeats."""
    from llamaspec.measure.settings import Settings
    from llamaspec.studies import experiment

    return experiment.load("smollm2-quicksort").with_overrides(Settings(n_predict=64, threads=1), repeats=repeats)


def swept(exp: Any, axes: dict[str, tuple[Any, ...]], engine: Any, store: Any, **options: Any) -> Swept:
    """``exp`` measured over the grid of ``axes`` by the one workload study, every setup on every
    prompt at the experiment's repeats (the fixed grid, in passes)."""
    from llamaspec.studies import study

    result = study.run_study(exp, study.setups_for(axes), engine, store, fixed_grid=True, **options)
    return Swept(result, study.prompt_group(result.study_id, exp.cases[0].name))


def study_everything(exp: Any, engine: Any, store: Any, variants: tuple[str, ...] = (), modes: Any = None,
                     budget: Any = None) -> Any:
    """The study `llamaspec sweep NAME --draft 1..16 [--draft-variant A,B] [--modes ...]` runs:
    every draft length 1..16 (of each variant given), then the draft-free modes."""
    from llamaspec.studies import study

    axes: dict[str, tuple[Any, ...]] = {"draft_max": tuple(range(1, 17))}
    if variants:
        axes["draft_variant"] = tuple(variants)
    return study.run_study(exp, study.sweep_setups(exp, engine, axes, modes), engine, store, budget)
