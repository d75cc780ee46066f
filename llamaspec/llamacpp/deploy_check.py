"""The deploy check (docs/engines.md, "The deploy check"): the answer's llama-server command started
as printed and the target alone's, each once, sent a few of the workload's prompts in turn as a
client sends them (a chat one to ``/v1/chat/completions``, a raw one to ``/completion``; greedy).
Each answer's ``timings`` give its decode speed (``(predicted_n - 1) / predicted_ms``, as the
study's server figures) and, where present, ``draft_n`` / ``draft_n_accepted``. The check's speedup
has its own 95 % interval; :func:`check_answer` takes the command out of an answer only where that
interval lies wholly below or above the answer's (:meth:`DeployCheck.verdict`).

    answer, checked = deploy_check.check_answer(answer, alone, prompts, interval, 64, Path("logs"))
"""

from __future__ import annotations

import contextlib
import http.client
import logging
import math
import statistics
import time
from collections.abc import Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from llamaspec.base.errors import LlamaspecError
from llamaspec.base.stats import Spread, percent_text, t975
from llamaspec.llamacpp.server_process import RequestFailed, Server, ServerDied, decode_tps
from llamaspec.measure import chat
from llamaspec.measure.contract import ClientPrompt, Command, Deployment

log = logging.getLogger(__name__)

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
        return self.spread.median if self.spread is not None else None

    @property
    def spread(self) -> Spread | None:
        """The geometric mean of the prompts' speedups and its 95 % interval (Student's t over the log
        ratios; none from one prompt: low = high = the figure, ``n`` 1)."""
        logs = [math.log(p.speedup) for p in self.prompts]
        if not logs:
            return None
        mean, n = statistics.fmean(logs), len(logs)
        half = t975(n - 1) * statistics.stdev(logs) / math.sqrt(n) if n > 1 else 0.0
        ratios = tuple(p.speedup for p in self.prompts)
        return Spread(math.exp(mean), math.exp(mean - half), math.exp(mean + half), n, min(ratios), max(ratios), None, ratios)

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
        """``unchecked``; ``below`` / ``above``: the check's whole interval outside the answer's;
        ``within``: its figure inside the answer's interval; ``unsure``: its figure outside, its own
        interval not (or one prompt: no interval of its own)."""
        own = self.spread
        if own is None:
            return "unchecked"
        if own.n > 1 and not own.overlaps(interval):
            return "below" if own.high < interval.low else "above"
        return "within" if interval.low <= own.median <= interval.high else "unsure"

    def to_dict(self, interval: Spread) -> dict[str, Any]:
        own = self.spread
        return {"setting": self.setting, "speedup": self.speedup, "low": own.low if own and own.n > 1 else None,
                "high": own.high if own and own.n > 1 else None, "acceptance": self.acceptance,
                "verdict": self.verdict(interval), "error": self.error,
                "study": {"median": interval.median, "low": interval.low, "high": interval.high},
                "prompts": [{"prompt": p.prompt, "base_tps": p.base_tps, "spec_tps": p.spec_tps, "drafted": p.drafted,
                             "accepted": p.accepted} for p in self.prompts]}

    def render(self, interval: Spread) -> str:
        study = f"the study {interval.median:.2f}x [{interval.low:.2f}-{interval.high:.2f}]"
        own = self.spread
        if self.error is not None or own is None:
            return f"deploy check: unchecked ({self.error or 'no prompt answered'}); {study} stands as measured"
        acc = self.acceptance
        n = len(self.prompts)
        accepted = (f", {percent_text(acc)} of drafted tokens accepted" if acc is not None else
                    ", acceptance unknown: no answer's timings had draft counters (nothing drafted, or a server "
                    "that does not report them)" if not self.counted else ", nothing drafted")
        where = {"within": "within its interval", "below": "below its interval", "above": "above its interval",
                 "unsure": ("outside its interval, but one request tells no spread: not a contradiction" if n == 1 else
                            "outside its interval, but the check's own interval overlaps it: not a contradiction")}
        return (f"deploy check ({n} prompt{'s' if n != 1 else ''} in turn on one server, one request each, as a client "
                f"sends them): llama-server {own.text(suffix='x')}{accepted}; {study}: {where[self.verdict(interval)]}")


def check(speculative: Command, alone: Command, prompts: Sequence[ClientPrompt], n_predict: int, logs: Path, *,
          seed: int | None = None, setting: str = "") -> DeployCheck:
    """Run the deploy check (module docstring); a server that fails to start or dies ends it with
    ``error`` set (one line), never an exception."""
    if not prompts:
        raise LlamaspecError("the deploy check needs one prompt at least", hint="give the study a prompt")
    logs.mkdir(parents=True, exist_ok=True)
    base = _server(alone, logs, "deploy check, target alone")
    spec = _server(speculative, logs, "deploy check, speculative")
    done: list[PromptCheck] = []
    try:
        for server in (base, spec):
            log.info("deploy check: starting %s (%s)", server.label, server.program.name)
            server.start()
        for i, p in enumerate(prompts, 1):
            log.info("deploy check: prompt %d of %d (%s), the target alone, then the deploy command", i, len(prompts), p.id)
            b = _ask(base, p, n_predict, seed)
            s = _ask(spec, p, n_predict, seed)
            t = s.get("timings") or {}
            b_tps, s_tps = decode_tps(b.get("timings") or {}), decode_tps(t)
            if b_tps is None or s_tps is None:
                continue  # fewer than two tokens: no decode speed to compare
            drafted = int(t["draft_n"]) if "draft_n" in t else None
            done.append(PromptCheck(p.id, b_tps, s_tps, drafted, int(t.get("draft_n_accepted", 0)) if drafted is not None else None))
    except (LlamaspecError, ServerDied, RequestFailed, OSError, http.client.HTTPException) as exc:
        message = exc.message if isinstance(exc, LlamaspecError) else f"llama-server: {exc}"
        return DeployCheck(setting, tuple(done), error=message.splitlines()[0][:300])
    finally:
        for server in (base, spec):
            with contextlib.suppress(OSError):
                server.stop()
    return DeployCheck(setting, tuple(done))


def check_answer(answer: Deployment, alone: Deployment, prompts: Sequence[ClientPrompt], interval: Spread,
                 n_predict: int, logs: Path, *, seed: int | None = None) -> tuple[Deployment, DeployCheck | None]:
    """The answer with its deploy check: a check below or above the answer's interval (``verdict``)
    takes the llama-server command out and says so (the command-line deploy stays, as measured); a
    check that could not run marks the command unchecked; None: nothing to check (no llama-server
    command in the answer, or none for the target alone)."""
    spec_cmd = answer.server_command()
    alone_cmd = alone.server_command()
    if not answer.speculative or spec_cmd is None or alone_cmd is None:
        return answer, None
    log.info("deploy check of %s: the llama-server command below and the target alone's, %d prompt%s (the first of "
             "each category) in turn, as a client sends them (--no-check-deploy skips it)", answer.setting,
             len(prompts), "s" if len(prompts) != 1 else "")
    checked = check(spec_cmd, alone_cmd, prompts, n_predict, logs, seed=seed, setting=answer.setting)
    verdict = checked.verdict(interval)
    if verdict == "unchecked":
        return replace(answer, notes=(*answer.notes, f"the llama-server command is unchecked: {checked.error}")), checked
    if verdict not in ("below", "above"):
        return answer, checked
    own = checked.spread
    assert own is not None
    note = (f"the deploy check ran llama-server at {own.text(suffix='x')}, {verdict} the study's interval "
            f"[{interval.low:.2f}-{interval.high:.2f}]: the study's figure does not hold for llama-server, so that "
            "setting is not recommended there (measure it as served: an experiment with engine: llama-server)")
    kept = tuple(c for c in answer.commands if c is not spec_cmd)
    return replace(answer, commands=kept, notes=(*answer.notes, note)), checked


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

