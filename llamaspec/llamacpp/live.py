"""A running llama-server asked from outside (``llamaspec watch``): its ``/metrics``, ``/props`` and
``/slots`` read into typed readings, and, where it runs on this machine, its command line.

The readers are pure functions of what the server answers, tested on recorded answers
(``tests/fixtures/llamacpp/0c1e570/watch/``). What each field is, in the pinned server
(``tools/server`` at 0c1e570):

- ``/metrics`` (only with ``--metrics``; otherwise HTTP 501 "Start it with `--metrics`"): counters
  since the server started, each added when a request *finishes* (``metrics_on_prediction``):
  ``tokens_predicted_total`` (every generated token, the first included), ``tokens_predicted_seconds_total``
  (each request's time from its first generated token to its last), ``spec_decode_num_drafts_total``
  (verification steps: the steps that drafted something), ``spec_decode_num_draft_tokens_total``,
  ``spec_decode_num_accepted_tokens_total`` and ``spec_decode_num_accepted_tokens_per_pos_total{position}``
  (``metrics.accepted_per_position``: absent before the first speculative request finishes, and in
  servers from before it). The gauge ``predicted_tokens_seconds`` is the generation steps (tokens
  after each request's first) over the generation seconds of the requests finished since the
  previous read of ``/metrics`` by anyone: every read resets it. Values are printed with six
  significant digits (C++ ``ostream`` defaults), so a counter past a million is rounded
  (:func:`resolution`).
- ``/props``: ``model_path`` (the target's file, as the server opened it), ``total_slots``,
  ``build_info`` (``b<number>-<commit>``), ``default_generation_settings.n_ctx``. It names neither the
  draft model nor the draft length.
- ``/slots`` (unless ``--no-slots``): per slot ``speculative`` (a draft or an n-gram mode is loaded),
  ``is_processing``, ``id_task`` and its ``params["speculative.types"]`` (``none,draft-simple``).

The draft's file and the draft length come from the server's own command line where it runs on
this machine (:func:`local_command`: the process that listens on the URL's port, from ``/proc``);
the draft length also from the length of the per-position series (``common_speculative_n_max``).
"""

from __future__ import annotations

import contextlib
import http.client
import json
import math
import os
import socket
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from llamaspec.base.errors import LlamaspecError
from llamaspec.llamacpp.metrics import accepted_per_position, metric_value

TIMEOUT = 10.0
LOOPBACK = ("127.0.0.1", "localhost", "::1", "0.0.0.0", "::")
# The counters llamaspec watch takes differences of: a restart is one of them going down.
COUNTERS = ("prompt_tokens_total", "prompt_tokens_cached_total", "tokens_predicted_total",
            "tokens_predicted_seconds_total", "n_decode_total", "spec_decode_num_drafts_total",
            "spec_decode_num_draft_tokens_total", "spec_decode_num_accepted_tokens_total")
SIGNIFICANT_DIGITS = 6  # how the pinned server prints every value


@dataclass(frozen=True)
class MetricsReading:
    """One ``/metrics`` answer: each counter by its name without ``llamacpp:`` (None: absent)."""

    counters: dict[str, float]
    accepted_by_position: tuple[int, ...] | None  # index i-1: verification steps accepted through position i
    rate: float | None  # predicted_tokens_seconds: generation steps / seconds since the previous read
    processing: int | None  # requests_processing: requests being generated now
    longest: int | None = None  # n_tokens_max: the longest sequence (prompt and generation) any request reached

    def get(self, name: str) -> float | None:
        return self.counters.get(name)

    @property
    def speculative_counters(self) -> bool:
        """The server counts speculative decoding (every generation since 2025 does, 0 when off)."""
        return "spec_decode_num_drafts_total" in self.counters


def read_metrics(text: str) -> MetricsReading | None:
    """``/metrics`` text as a reading; None when it holds no ``llamacpp:tokens_predicted_total`` (not
    llama-server's)."""
    counters = {name: value for name in COUNTERS if (value := metric_value(text, name)) is not None}
    if "tokens_predicted_total" not in counters:
        return None
    processing = metric_value(text, "requests_processing")
    longest = metric_value(text, "n_tokens_max")
    return MetricsReading(counters, accepted_per_position(text), metric_value(text, "predicted_tokens_seconds"),
                          int(processing) if processing is not None else None,
                          int(longest) if longest is not None else None)


def resolution(value: float) -> float:
    """Half a unit of the last digit the server printed ``value`` with (six significant digits): 0.5
    for a count below a million, 5 at 1.23457e+06; how far the printed value may be from the true one."""
    if value == 0 or not math.isfinite(value):
        return 0.0
    exponent = math.floor(math.log10(abs(value)))
    return 0.5 * 10.0 ** (exponent - SIGNIFICANT_DIGITS + 1)


def finished_requests(before: MetricsReading | None, after: MetricsReading) -> int | None:
    """How many requests finished between two reads of ``/metrics`` (``before`` None: since the
    server started), from its rate gauge: the server has no request counter, but each finished
    request adds its tokens (the first included) to ``tokens_predicted_total`` and its generation
    steps (every token but the first) to the gauge's numerator, so tokens less the gauge times
    the seconds is the number of requests. Exact when only this reader resets the gauge; None when
    the figures cannot be counts of requests (another client reads ``/metrics`` and resets it, or
    the printed values are too rounded to tell). The product is a whole number to within the
    printing's rounding (its six digits: a few ten-thousandths on the recordings), so a gauge that
    covers other requests than the counters' difference is told apart, as a rule: by chance it
    lands as near a whole number one time in 25."""
    tokens_b, seconds_b = after.get("tokens_predicted_total"), after.get("tokens_predicted_seconds_total")
    if tokens_b is None or seconds_b is None or after.rate is None:
        return None
    tokens_a = (before.get("tokens_predicted_total") if before else 0.0) or 0.0
    seconds_a = (before.get("tokens_predicted_seconds_total") if before else 0.0) or 0.0
    tokens, seconds = tokens_b - tokens_a, seconds_b - seconds_a
    if tokens == 0:
        return 0
    steps = after.rate * seconds
    slack = (0.02 + after.rate * (resolution(seconds_a) + resolution(seconds_b)) + seconds * resolution(after.rate)
             + resolution(tokens_a) + resolution(tokens_b))
    requests = round(tokens) - round(steps)
    if abs(steps - round(steps)) > slack or not 1 <= requests <= tokens:
        return None
    # Every target call after a request's first token is a step, and the verification steps are
    # some of them: tokens - accepted - requests >= verification steps.
    accepted = (after.get("spec_decode_num_accepted_tokens_total") or 0.0) - (
        (before.get("spec_decode_num_accepted_tokens_total") or 0.0) if before else 0.0)
    drafts = (after.get("spec_decode_num_drafts_total") or 0.0) - (
        (before.get("spec_decode_num_drafts_total") or 0.0) if before else 0.0)
    if tokens - accepted - requests < drafts - slack:
        return None
    if round(steps) == 0 and seconds > 0.001 * requests:  # a request of one token has no generation time
        return None
    return requests


def went_down(before: MetricsReading, after: MetricsReading) -> str | None:
    """Which counter went down between two reads (the server restarted), in words; None: none did."""
    for name in COUNTERS:
        a, b = before.get(name), after.get(name)
        if a is not None and b is not None and b < a:
            return f"{name} {a:g} -> {b:g}"
    a_pos, b_pos = before.accepted_by_position, after.accepted_by_position
    if a_pos is not None and (b_pos is None or len(b_pos) < len(a_pos)):
        return "the per-position series got shorter"
    if a_pos is not None and b_pos is not None and any(y < x for x, y in zip(a_pos, b_pos, strict=False)):
        return "a per-position count went down"
    return None


@dataclass(frozen=True)
class ServerProps:
    """What ``/props`` says about the server."""

    model_path: str | None
    total_slots: int | None
    n_ctx: int | None
    build_info: str | None  # b<number>-<commit>
    metrics_endpoint: bool | None
    slots_endpoint: bool | None

    @property
    def commit(self) -> str | None:
        """The llama.cpp commit of ``build_info`` (``b0-0c1e570`` -> ``0c1e570``)."""
        if not self.build_info or "-" not in self.build_info:
            return None
        return self.build_info.rsplit("-", 1)[1] or None


def read_props(data: Any) -> ServerProps | None:
    """``/props`` JSON as what the watch needs; None when it is not llama-server's (it lacks
    ``total_slots`` and ``default_generation_settings``)."""
    if not isinstance(data, dict) or "total_slots" not in data or "default_generation_settings" not in data:
        return None
    settings = data.get("default_generation_settings") or {}
    n_ctx = settings.get("n_ctx") if isinstance(settings, dict) else None
    return ServerProps(model_path=_text(data.get("model_path")), total_slots=_int(data.get("total_slots")),
                       n_ctx=_int(n_ctx), build_info=_text(data.get("build_info")),
                       metrics_endpoint=_bool(data.get("endpoint_metrics")), slots_endpoint=_bool(data.get("endpoint_slots")))


@dataclass(frozen=True)
class SlotState:
    """One slot of ``/slots``."""

    id: int
    speculative: bool  # a draft model or an n-gram mode is loaded for it
    processing: bool
    task: int | None  # id_task of its current or last request (ids count every task, /metrics reads too)
    spec_types: tuple[str, ...]  # params["speculative.types"] without "none": draft-simple, ngram-simple ...


def read_slots(data: Any) -> tuple[SlotState, ...] | None:
    """``/slots`` JSON (a list of slots); None when it is not such a list."""
    if not isinstance(data, list) or not all(isinstance(s, dict) and "id" in s for s in data):
        return None
    out = []
    for s in data:
        params = s.get("params") or {}
        types = str(params.get("speculative.types") or "") if isinstance(params, dict) else ""
        out.append(SlotState(id=int(s["id"]), speculative=bool(s.get("speculative")), processing=bool(s.get("is_processing")),
                             task=_int(s.get("id_task")),
                             spec_types=tuple(t for t in types.split(",") if t and t != "none")))
    return tuple(out)


def _text(value: Any) -> str | None:
    return str(value) if isinstance(value, str) and value else None


def _int(value: Any) -> int | None:
    return int(value) if isinstance(value, int | float) and not isinstance(value, bool) else None


def _bool(value: Any) -> bool | None:
    return value if isinstance(value, bool) else None


# --- asking a server ------------------------------------------------------------------------------

@dataclass(frozen=True)
class Address:
    """Where the server listens: ``http://127.0.0.1:8080`` (a path is its ``--api-prefix``)."""

    scheme: str
    host: str
    port: int
    prefix: str = ""

    @property
    def url(self) -> str:
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"{self.scheme}://{host}:{self.port}{self.prefix}"

    @property
    def local(self) -> bool:
        return self.host in LOOPBACK


def address(url: str) -> Address:
    """The server's address from ``http://HOST:PORT[/prefix]`` (``HOST:PORT`` alone is taken as http)."""
    text = url.strip()
    parts = urlsplit(text if "://" in text else f"http://{text}")
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise LlamaspecError(f"{url!r} is not a server address", hint="give it as http://127.0.0.1:8080")
    try:
        port = parts.port or (443 if parts.scheme == "https" else 80)
    except ValueError as exc:
        raise LlamaspecError(f"{url!r}: {exc}", hint="give it as http://127.0.0.1:8080") from None
    return Address(parts.scheme, parts.hostname, port, parts.path.rstrip("/"))


@dataclass(frozen=True)
class Reading:
    """One look at a running llama-server: ``/metrics`` read at ``at`` (``time.time()``), its
    ``/props``, and its ``/slots`` (None where it serves none)."""

    at: float
    metrics: MetricsReading
    props: ServerProps
    slots: tuple[SlotState, ...] | None


TROUBLES = ("unreachable", "not llama-server", "no metrics", "unauthorized")


@dataclass(frozen=True)
class Trouble:
    """Why a look at the server gave no reading: ``kind`` of :data:`TROUBLES`, one line, a hint."""

    kind: str
    message: str
    hint: str

    def error(self) -> LlamaspecError:
        return LlamaspecError(self.message, hint=self.hint)


def _get(where: Address, path: str, api_key: str | None, timeout: float) -> tuple[int, str]:
    cls = http.client.HTTPSConnection if where.scheme == "https" else http.client.HTTPConnection
    conn = cls(where.host, where.port, timeout=timeout)
    headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
    try:
        conn.request("GET", where.prefix + path, headers=headers)
        resp = conn.getresponse()
        return resp.status, resp.read().decode(errors="replace")
    finally:
        conn.close()


def _json(text: str) -> Any:
    try:
        return json.loads(text)
    except ValueError:
        return None


def read_server(where: Address, api_key: str | None = None, timeout: float = TIMEOUT) -> Reading | Trouble:
    """``/props``, ``/metrics`` and ``/slots`` of the server at ``where``, or why not (a :class:`Trouble`)."""
    url = where.url
    try:
        status, text = _get(where, "/props", api_key, timeout)
        if status == 401:
            return Trouble("unauthorized", f"{url} refused llamaspec without an API key (HTTP 401)",
                           "give the server's key with --api-key (or LLAMA_API_KEY)")
        props = read_props(_json(text)) if status == 200 else None
        if props is None:
            return Trouble("not llama-server", f"{url} does not answer as llama-server (its /props: HTTP {status}, "
                           f"{_gist(text)})", "give the address of a llama-server (it serves /props and /metrics)")
        status, text = _get(where, "/metrics", api_key, timeout)
        at = time.time()
        if status != 200:
            return Trouble("no metrics", f"llama-server at {url} serves no /metrics (HTTP {status}: {_gist(text)})",
                           "restart it with --metrics")
        metrics = read_metrics(text)
        if metrics is None:
            return Trouble("not llama-server", f"{url}/metrics holds no llama.cpp counters ({_gist(text)})",
                           "give the address of a llama-server")
        slots = None
        if props.slots_endpoint is not False:
            status, text = _get(where, "/slots", api_key, timeout)
            slots = read_slots(_json(text)) if status == 200 else None
    except (OSError, http.client.HTTPException) as exc:
        return Trouble("unreachable", f"nothing answers at {url} ({_reason(exc)})",
                       "check the address, and that llama-server runs there (by default it listens on 127.0.0.1:8080)")
    return Reading(at, metrics, props, slots)


def _gist(text: str) -> str:
    data = _json(text)
    if isinstance(data, dict) and isinstance(data.get("error"), dict):
        return str(data["error"].get("message", ""))[:160]
    one = " ".join(text.split())
    return (one[:120] + "...") if len(one) > 120 else one or "empty"


def _reason(exc: BaseException) -> str:
    if isinstance(exc, ConnectionRefusedError):
        return "connection refused"
    if isinstance(exc, socket.timeout | TimeoutError):
        return "no answer in time"
    if isinstance(exc, socket.gaierror):
        return "unknown host"
    return str(exc) or type(exc).__name__


# --- a local server's command line ----------------------------------------------------------------

def listening_inodes(proc_net_tcp: str, port: int) -> set[int]:
    """The socket inodes listening (state 0A) on ``port`` in a ``/proc/net/tcp`` or ``tcp6`` table."""
    found = set()
    for line in proc_net_tcp.splitlines()[1:]:
        fields = line.split()
        if len(fields) < 10 or fields[3] != "0A":
            continue
        with contextlib.suppress(ValueError, IndexError):
            if int(fields[1].rsplit(":", 1)[1], 16) == port:
                found.add(int(fields[9]))
    return found


def local_command(where: Address, proc: Path = Path("/proc")) -> tuple[str, ...] | None:
    """The command line of the process listening on the address's port on this machine (None: not
    local, not found, or not ours to read). Linux ``/proc`` only."""
    if not where.local:
        return None
    inodes: set[int] = set()
    for table in ("tcp", "tcp6"):
        with contextlib.suppress(OSError):
            inodes |= listening_inodes((proc / "net" / table).read_text(), where.port)
    if not inodes:
        return None
    wanted = {f"socket:[{i}]" for i in inodes}
    for pid in (p for p in _listdir(proc) if p.isdigit()):
        fd_dir = proc / pid / "fd"
        for fd in _listdir(fd_dir):
            with contextlib.suppress(OSError):
                if os.readlink(fd_dir / fd) in wanted:
                    with contextlib.suppress(OSError):
                        raw = (proc / pid / "cmdline").read_bytes()
                        argv = tuple(a.decode(errors="replace") for a in raw.split(b"\0") if a)
                        return argv or None
                    return None
    return None


def _listdir(path: Path) -> list[str]:
    try:
        return os.listdir(path)
    except OSError:
        return []


def api_key_from_env() -> str | None:
    """llama-server's own variable for its key (LLAMA_API_KEY), read as the key to send."""
    key = os.environ.get("LLAMA_API_KEY")
    return key or None

