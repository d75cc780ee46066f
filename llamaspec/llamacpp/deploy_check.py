"""The deploy check: the answer's llama-server command started as printed and asked as a client asks,
against the same server without speculation, on a small sample of the workload's prompts.

For each prompt (a chat one through ``/v1/chat/completions``, a raw one through ``/completion``;
greedy, the study's length) the target-alone server answers, then the deployed one; each answer's
``timings`` give its decode speed (``(predicted_n - 1) / predicted_ms``, as the study's server
figures) and, where present, ``draft_n`` / ``draft_n_accepted``. The check's speedup is the
geometric mean of the prompts' ratios (one request each: a check, not a study), its acceptance the
accepted over the drafted tokens of all prompts. A mode that keeps state between requests
(``spectypes.KEEPS_STATE``) gets a fresh speculative server per prompt, as the study timed it.

:func:`check_answer` sets the check beside the answer: a check below the answer's interval takes
the llama-server command out of it and says why (the command-line deploy stays: it is what was
measured); a server that fails to start or dies leaves the answer as it was, marked unchecked.

    from llamaspec.llamacpp import deploy_check
    answer, checked = deploy_check.check_answer(answer, alone, prompts, interval, 64, Path("logs"), spec_type="ngram-mod")
    print(answer.render()); print(checked.render(interval))
"""

from __future__ import annotations

import contextlib
import http.client
import math
import time
from collections.abc import Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from llamaspec.base.errors import LlamaspecError
from llamaspec.base.stats import Spread, percent_text
from llamaspec.llamacpp.server_process import RequestFailed, Server, ServerDied
from llamaspec.measure import chat, spectypes
from llamaspec.measure.contract import ClientPrompt, Command, Deployment

REQUEST_TIMEOUT = 600.0


@dataclass(frozen=True)
class PromptCheck:
    prompt: str
    base_tps: float
    spec_tps: float
    drafted: int | None  # None: the answer's timings have no draft_n (nothing drafted, or a server without the counter)
    accepted: int | None

    @property
    def speedup(self) -> float:
        return self.spec_tps / self.base_tps


@dataclass(frozen=True)
class DeployCheck:
    """The check's prompts, or why it could not run (``error``: the answer is unchecked)."""

    setting: str
    prompts: tuple[PromptCheck, ...] = ()
    error: str | None = None

    @property
    def speedup(self) -> float | None:
        if not self.prompts:
            return None
        return math.exp(sum(math.log(p.speedup) for p in self.prompts) / len(self.prompts))

    @property
    def counted(self) -> bool:
        """Whether the server's timings carried draft counters: the pinned server leaves ``draft_n``
        out of an answer that drafted nothing, so no answer with it cannot tell 0 from no counter."""
        return any(p.drafted is not None for p in self.prompts)

    @property
    def acceptance(self) -> float | None:
        """Accepted over drafted, all prompts (an answer without counters: nothing drafted); None
        where no answer carried them."""
        if not self.counted:
            return None
        drafted = sum(p.drafted or 0 for p in self.prompts)
        return sum(p.accepted or 0 for p in self.prompts) / drafted if drafted else None

    def verdict(self, interval: Spread) -> str:
        """``unchecked``, ``below`` / ``above`` the answer's interval, or ``within`` it."""
        got = self.speedup
        if got is None:
            return "unchecked"
        return "below" if got < interval.low else "above" if got > interval.high else "within"

    def to_dict(self, interval: Spread) -> dict[str, Any]:
        return {"setting": self.setting, "speedup": self.speedup, "acceptance": self.acceptance,
                "verdict": self.verdict(interval), "error": self.error,
                "study": {"median": interval.median, "low": interval.low, "high": interval.high},
                "prompts": [{"prompt": p.prompt, "base_tps": p.base_tps, "spec_tps": p.spec_tps, "drafted": p.drafted,
                             "accepted": p.accepted} for p in self.prompts]}

    def render(self, interval: Spread) -> str:
        study = f"the study {interval.median:.2f}x [{interval.low:.2f}-{interval.high:.2f}]"
        if self.error is not None or self.speedup is None:
            return f"deploy check: unchecked ({self.error or 'no prompt answered'}); {study} stands as measured"
        acc = self.acceptance
        n = len(self.prompts)
        accepted = (f", {percent_text(acc)} of drafted tokens accepted" if acc is not None else
                    ", acceptance unknown: no answer's timings had draft counters (nothing drafted, or a server "
                    "that does not report them)" if not self.counted else ", nothing drafted")
        where = {"within": "within its interval", "below": "below its interval", "above": "above its interval"}
        return (f"deploy check ({n} prompt{'s' if n != 1 else ''}, one request each, as a client sends them): "
                f"llama-server {self.speedup:.2f}x{accepted}; {study}: {where[self.verdict(interval)]}")


def check(speculative: Command, alone: Command, prompts: Sequence[ClientPrompt], n_predict: int, logs: Path, *,
          spec_type: str | None, seed: int | None = None, setting: str = "") -> DeployCheck:
    """Run the deploy check (module docstring); a server that fails to start or dies ends it with
    ``error`` set (one line), never an exception."""
    if not prompts:
        raise LlamaspecError("the deploy check needs one prompt at least", hint="give the study a prompt")
    logs.mkdir(parents=True, exist_ok=True)
    fresh = spectypes.keeps_state(spec_type)
    base = _server(alone, logs, "deploy check, target alone")
    spec: Server | None = None
    done: list[PromptCheck] = []
    try:
        base.start()
        for p in prompts:
            if spec is None or (fresh and spec.completions):
                if spec is not None:
                    spec.stop()
                spec = _server(speculative, logs, "deploy check, speculative")
                spec.start()
            b = _ask(base, p, n_predict, seed)
            s = _ask(spec, p, n_predict, seed)
            b_tps, s_tps = _decode_tps(b), _decode_tps(s)
            if b_tps is None or s_tps is None:
                continue  # fewer than two tokens: no decode speed to compare
            t = s.get("timings") or {}
            drafted = int(t["draft_n"]) if "draft_n" in t else None
            done.append(PromptCheck(p.id, b_tps, s_tps, drafted, int(t.get("draft_n_accepted", 0)) if drafted is not None else None))
    except (LlamaspecError, ServerDied, RequestFailed, OSError, http.client.HTTPException) as exc:
        message = exc.message if isinstance(exc, LlamaspecError) else f"llama-server: {exc}"
        return DeployCheck(setting, tuple(done), error=message.splitlines()[0][:300])
    finally:
        for server in (base, spec):
            if server is not None:
                with contextlib.suppress(OSError):
                    server.stop()
    return DeployCheck(setting, tuple(done))


def check_answer(answer: Deployment, alone: Deployment, prompts: Sequence[ClientPrompt], interval: Spread,
                 n_predict: int, logs: Path, *, spec_type: str | None, seed: int | None = None
                 ) -> tuple[Deployment, DeployCheck | None]:
    """The answer with its deploy check: a check below the answer's interval takes the llama-server
    command out and says so (the command-line deploy stays, as measured); None: nothing to check
    (no llama-server command in the answer, or none for the target alone)."""
    spec_cmd = _server_command(answer)
    alone_cmd = _server_command(alone)
    if not answer.speculative or spec_cmd is None or alone_cmd is None:
        return answer, None
    checked = check(spec_cmd, alone_cmd, prompts, n_predict, logs, spec_type=spec_type, seed=seed,
                    setting=answer.setting)
    if checked.verdict(interval) != "below":
        return answer, checked
    assert checked.speedup is not None
    note = (f"the deploy check ran llama-server at {checked.speedup:.2f}x, below the study's interval "
            f"[{interval.low:.2f}-{interval.high:.2f}]: not recommended for llama-server (measure it as served, "
            "with a prompt set: --prompts FILE)")
    kept = tuple(c for c in answer.commands if c is not spec_cmd)
    return replace(answer, commands=kept, notes=(*answer.notes, note)), checked


def _server_command(d: Deployment) -> Command | None:
    return next((c for c in d.commands if c.program == "llama-server" and c.argv), None)


def _server(command: Command, logs: Path, label: str) -> Server:
    argv = list(command.argv)
    return Server(Path(argv[0]), argv[1:], logs / f"{label.replace(', ', '-').replace(' ', '-')}-{time.time_ns()}.log", label)


def _ask(server: Server, p: ClientPrompt, n_predict: int, seed: int | None) -> dict[str, Any]:
    """One request as a client sends it: greedy, at most ``n_predict`` tokens."""
    common: dict[str, Any] = {"temperature": 0.0, "stream": False, **({"seed": seed} if seed is not None else {})}
    if p.chat:
        messages = chat.as_dicts([*p.history, ("user", p.text)])
        return server.post("/v1/chat/completions", {"messages": messages, "max_tokens": n_predict, **common},
                           timeout=REQUEST_TIMEOUT)
    return server.post("/completion", {"prompt": p.text, "n_predict": n_predict, **common}, timeout=REQUEST_TIMEOUT)


def _decode_tps(answer: dict[str, Any]) -> float | None:
    t = answer.get("timings") or {}
    n, ms = t.get("predicted_n"), t.get("predicted_ms")
    return (n - 1) / (ms / 1000.0) if isinstance(n, int) and n >= 2 and ms else None

