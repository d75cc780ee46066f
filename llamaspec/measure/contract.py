"""The contract between the run core and an engine: "run this case, give me timings, counters and text".

The run core (``run``, ``sweep``, ``analysis``, ``report``, ``plot``) knows engines only
through this module and the registry above the engines (``llamaspec.registry.engines``); it never imports one.

An engine (:class:`Engine`) is an object with:

- ``name`` and ``capabilities``: what it can measure and which settings it honours, declared,
  never probed with ``getattr``;
- ``identity()``: what makes two of its measurements comparable (a build key, a library version);
  baselines are shared only under the same identity;
- ``provenance()``: what produced the numbers (its ``version`` and ``accel`` among them);
- ``resolve_model(model, variant)``: the model in the form the engine loads (a GGUF file for
  llama.cpp; a checkpoint folder or a GGUF file for transformers), via the models room;
- ``check(case)``: refuse, before anything runs, a case it cannot honour (raise LlamaspecError);
- ``measure(case, mode, log_path)``: generate once in ``mode`` and return a :class:`Measurement`;
  a failure of the engine is returned as ``ok=False``, not raised;
- ``deployment(case, speculative)``: the exact command that deploys the case's setting outside
  llamaspec (a :class:`Deployment`; ``speculative=False``: the target alone);
- ``close()``: stop what it keeps running (servers, loaded models);
- where ``capabilities`` declares them: ``prepare(case)`` (load before timing) and
  ``top_tokens(...)`` (the target's most probable tokens at a position, for divergence probes).

Adding an engine is one module with ``open_engine(options)`` and ``deployment(case, options,
speculative)``, declared in ``llamaspec.registry.engines.BUILT_IN`` or, from another package, under
the ``llamaspec.engines`` entry point group. The built-in engines:

- ``llama.cpp`` (``llamaspec.llamacpp.runner``): llama-speculative / llama-speculative-simple
  against llama-completion, one process per measurement; the draft-free n-gram modes on
  llama-speculative-simple (``llamaspec.measure.spectypes``: which program runs which type);
- ``llama-server`` (``llamaspec.llamacpp.server``): one server per (model pair, setting) kept
  loaded, a target-only server beside it, requests alternating between the two; draft-free
  n-gram modes; prompt sets;
- ``transformers`` (``llamaspec.hf``): Hugging Face assisted generation, with and without
  ``assistant_model``, counting drafted and accepted tokens per round itself.

Each fills the same :class:`Measurement`, with ``decode_tps`` on one definition (below), so the
run core computes speedups, intervals and the lossless verdict the same way for all of them; and
what a baseline is, the target alone, is decided here once for all of them
(:func:`refuse_drafting_baseline`).

Its size: the protocol and every type that crosses it (the measurement with each quantity derived
from its counters, acceptance by position, deploy commands, options), and the rules every engine's
measurement is held to, in one file that engines and the run core both read.
"""

from __future__ import annotations

import shlex
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Protocol

from llamaspec.base.host import NoiseSample
from llamaspec.measure.settings import Settings

# speculative: target with a draft (or a draft-free mode); baseline: the target alone;
# draft: the draft model alone (one draft step's cost); batch: the target on batches of
# 1..17 tokens (one verification call's cost). The last two feed the speedup model.
MODES = ("baseline", "speculative", "draft", "batch")
# The two modes a pair holds: the target alone and with speculation, measured next to each other.
PAIR_MODES = ("baseline", "speculative")

# The one definition of decode speed every backend reports in Measurement.decode_tps.
SPEED_DEFINITION = ("generated tokens after the first, over the time from the first generated token to the last "
                    "(prompt processing and the first token excluded)")

# How a program chooses how many tokens to draft per round.
DRAFT_POLICIES = (
    "fixed",     # exactly the requested length every round (pinned llama-speculative)
    "capped",    # up to the requested length; fewer when the draft is unsure (p-min) or near the end
    "adaptive",  # the program changes the length during the run (2023 llama.cpp: +8 / -1)
    "none",      # nothing drafted by design (a baseline)
)


# Why a measurement failed, where the engine can tell: "server" (the engine's process is gone),
# "timeout" (no answer in time), "prompt" (the engine refused this prompt), "request" (another
# refusal of this one request); "drafted" is the run core's: a baseline that drafted
# (refuse_drafting_baseline). A prompt set stops at the first "server", "timeout" or "drafted":
# the prompts after it would fail alike.
# ModelRef.model of a model named by where it is rather than by the catalog: its ``variant`` is
# the location as ``llamaspec.models.given`` reads it (an absolute GGUF path, USER/REPO[:QUANT],
# or a catalog NAME[:VARIANT]). A sweep swaps the variant as for a catalog model, so
# several drafts given on the command line are one more dimension of it. Here, below both the
# experiment and the models that read it.
GIVEN = "given"

# An earlier turn of a chat prompt: (role, content), as a chat template's ``messages`` take it
# ("user", "assistant", "system"). A chat prompt is its earlier turns, then the user's ``prompt``.
Message = tuple[str, str]

ERROR_KINDS = ("server", "timeout", "prompt", "request", "drafted")


@dataclass(frozen=True)
class ModelPath:
    """A concrete model file (or folder) a case runs on."""

    label: str  # "name:variant"
    path: str
    sha256: str | None = None
    metadata: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class ResolvedCase:
    """A case with its models on disk and every setting decided (defaults applied)."""

    experiment: str
    case: str
    target: ModelPath
    draft: ModelPath | None
    prompt: str | None
    prompt_file: str | None
    settings: Settings
    prompt_id: str | None = None  # within a prompt set
    category: str | None = None  # a prompt set's category
    chat: bool = False  # send the prompt as a chat message (the model's template), not raw text
    history: tuple[Message, ...] = ()  # a chat prompt's earlier turns, before the user's ``prompt``


@dataclass(frozen=True)
class Capabilities:
    """What an engine can do, declared once."""

    modes: frozenset[str]  # which of MODES it measures ("draft" and "batch" feed the speedup model)
    settings: frozenset[str]  # Settings fields it honours; check() refuses the others when set
    # "draft" plus the draft-free modes the engine's build runs (spectypes.draft_free_modes filters
    # them by llama.cpp's program, where the engine takes that setting)
    spec_types: tuple[str, ...] = ("draft",)
    draft_policy: str = "fixed"  # of DRAFT_POLICIES, for the default program
    keeps_models_loaded: bool = False  # True: no process start or model load inside a measurement
    token_ids: bool = False  # Measurement.tokens is filled: lossless is checked on ids, not text
    prepares: bool = False  # prepare(case) loads what a measurement needs before it is timed
    top_tokens: bool = False  # top_tokens(...) gives the target's most probable tokens at a position
    prompt_timings: bool = False  # Measurement.prompt_ms and generation_ms are filled (end-to-end figures)
    # The source tree the engine's programs are built from ("llama.cpp" for the command-line programs
    # and the server: one build), whose commit is its provenance's ``version``, with the ``accel`` and
    # CMake flags of the build; None: an engine in a library, known by its identity (transformers).
    built_from: str | None = None

    @property
    def times_costs(self) -> bool:
        return {"draft", "batch"} <= self.modes


@dataclass(frozen=True)
class Measurement:
    """One generation by one process (or one request): what it cost and what it produced.

    ``decode_tps`` follows SPEED_DEFINITION; ``speed_basis`` says from which printed figures the
    backend derived it. ``text`` is the generated part only (no echoed prompt).
    """

    mode: str  # one of MODES
    ok: bool
    error: str | None
    argv: tuple[str, ...]
    exit_code: int | None
    wall_seconds: float
    peak_rss_bytes: int | None
    n_prompt: int | None = None
    n_predict: int | None = None  # tokens generated
    encode_tps: float | None = None
    decode_tps: float | None = None
    speed_basis: str | None = None
    n_drafted: int | None = None
    n_accept: int | None = None
    rounds: int | None = None  # every verification round (target call after the prompt), by the program's own loop
    drafted_rounds: int | None = None  # the rounds that drafted something, where the engine counts them apart
    draft_len: int | None = None  # the draft length the program reports having used (its final one, if adaptive)
    draft_policy: str | None = None  # of DRAFT_POLICIES
    draft_steps: int | None = None  # draft-model decode steps in the run (rounds x steps per round)
    program: str | None = None  # the speculative program's profile name (its counting and cost shape)
    sample_ms_per_token: float | None = None  # sampling time per generated token (the speedup model)
    text: str | None = None  # the generation, without the prompt
    tokens: tuple[int, ...] | None = None  # generated token ids, where the engine gives them
    end_of_text: bool = False  # the model stopped on its own before n_predict
    error_kind: str | None = None  # of ERROR_KINDS, when not ok
    prompt_ms: float | None = None  # the engine's own prompt processing time (to the first sampled token)
    generation_ms: float | None = None  # the engine's own time from the first sampled token to the last
    # Acceptance by draft position (index i-1 holds position i), summed over the run's rounds, where
    # the engine counts it: the rounds that drafted a token at position i, and of those the rounds whose
    # draft was accepted through position i (a round's acceptance stops at its first rejected token).
    drafted_by_position: tuple[int, ...] | None = None
    accepted_by_position: tuple[int, ...] | None = None
    stats: dict[str, Any] | None = None
    log_path: str | None = None
    noise: NoiseSample | None = None  # what else the machine did meanwhile: set by the run core, not the engine
    # The pair this measurement belongs to (PAIR_MODES only; stored as the row's ``repeat``): set by
    # the pairs loop, not the engine. Which measurements form a pair is decided from it alone
    # (``pairs.whole_pairs``), never by the order they were taken in.
    pair: int | None = None
    # The block it was measured in (a workload study's B S1..Sk B on one prompt): each speculative run
    # is divided by the baselines of its own block (``summary.summarize``). Set by the run core.
    block: str | None = None

    # Derived quantities, each defined here once from the counters the engine filled. ``rounds`` has
    # one meaning for every engine: every target call after the prompt, by its program's own loop
    # (llama-speculative samples its first token from the prompt, outside any round; llama-server
    # too, and its /metrics count only the rounds that drafted, kept as ``drafted_rounds``).

    @property
    def mean_accepted(self) -> float | None:
        return mean_accepted(self.n_accept, self.rounds)

    @property
    def tokens_per_round(self) -> float | None:
        return tokens_per_round(self.n_accept, self.rounds)

    @property
    def acceptance(self) -> float | None:
        """Accepted over drafted, as a fraction in [0, 1]: the one acceptance every engine, view and
        store reads (a percentage only where text is printed)."""
        return acceptance(self.n_accept, self.n_drafted)

    @property
    def drafted_per_round(self) -> float | None:
        return drafted_per_round(self.n_drafted, self.rounds)

    @property
    def end_to_end_tps(self) -> float | None:
        """Generated tokens over the request's whole time on the engine, prompt processing included
        (``prompt_ms + generation_ms``; None where the engine does not time the prompt apart)."""
        if not self.n_predict or self.prompt_ms is None or self.generation_ms is None:
            return None
        total = self.prompt_ms + self.generation_ms
        return 1000.0 * self.n_predict / total if total > 0 else None

    @property
    def acceptance_by_position(self) -> tuple[float | None, ...] | None:
        """Per draft position i (index i-1), the share of the rounds that drafted position i whose
        draft was accepted through it; None where the engine does not count positions."""
        return acceptance_by_position(self.accepted_by_position, self.drafted_by_position)


# What can turn speculation on where the target should run alone, for the refusal below.
DRAFTED_BASELINE_HINT = ("check the program's default --spec-type (its --help), a llama.cpp config.ini "
                         "(/etc/llama.cpp, ~/.config/llama.cpp), --spec-type among the passed-through flags, "
                         "LLAMA_ARG_SPEC_TYPE set by a wrapper, or the model's generation_config "
                         "(prompt_lookup_num_tokens)")


def refuse_drafting_baseline(m: Measurement) -> Measurement:
    """``m`` as a pair may count it. A baseline is the target alone: one that drafted anything (its
    engine reported ``n_drafted`` above 0: llama-server's ``draft_n``, a program's printed draft
    counters, transformers' candidate generator) measured speculation against speculation, and is
    turned into a failure of kind "drafted", with one line saying so, what ran and what to check:
    it never enters a ratio (``pairs.whole_pairs`` pairs successful measurements only). Every other
    measurement comes back as it is. The run core applies it to every measurement it takes
    (``pairs.metered``), so no engine needs its own copy."""
    if m.mode != "baseline" or not m.ok or not m.n_drafted:
        return m
    program = Path(m.argv[0]).name if m.argv else "the engine"
    return replace(m, ok=False, error_kind="drafted",
                   error=f"the baseline drafted {m.n_drafted} tokens: speculation was on in the target-only run "
                         f"({program}); it is not counted ({DRAFTED_BASELINE_HINT})")


# The derived quantities' one definition each, from counters (of one run, or summed over runs:
# a prompt set's figures, the speedup model's pooled points).


def _per(count: int | None, per: int | None) -> float | None:
    return count / per if count is not None and per else None


def acceptance(n_accept: int | None, n_drafted: int | None) -> float | None:
    """Accepted drafts over drafted ones, as a fraction."""
    return _per(n_accept, n_drafted)


def drafted_per_round(n_drafted: int | None, rounds: int | None) -> float | None:
    """Draft tokens proposed per round (at most the draft length)."""
    return _per(n_drafted, rounds)


def acceptance_by_position(accepted: Sequence[int] | None,
                           drafted: Sequence[int] | None) -> tuple[float | None, ...] | None:
    """Accepted through position i over drafted at position i, per position, as fractions (None at a
    position no round drafted)."""
    if accepted is None or drafted is None:
        return None
    return tuple(_per(a, d) for a, d in zip(accepted, drafted, strict=True))


@dataclass(frozen=True)
class Positions:
    """Acceptance by draft position as an engine counted it (``Measurement.drafted_by_position`` and
    ``accepted_by_position``), or a labelled gap: ``note`` says why positions are missing or cut
    short (an older program that prints none, a cut statistics line, counts that contradict each
    other). ``drafted``/``accepted`` cover the same positions 1..len, every one counted exactly."""

    drafted: tuple[int, ...] | None = None
    accepted: tuple[int, ...] | None = None
    note: str | None = None

    def fields(self) -> dict[str, Any]:
        """The Measurement's two fields."""
        return {"drafted_by_position": self.drafted, "accepted_by_position": self.accepted}


def positions_from_rounds(rounds: Sequence[tuple[int, int]]) -> Positions:
    """Acceptance by position from each round's (drafted, accepted) counts: position i was drafted
    by the rounds that drafted at least i tokens and accepted through by those that accepted at
    least i (a round's acceptance stops at its first rejected token)."""
    bad = [r for r in rounds if not 0 <= r[1] <= r[0]]
    if bad:
        return Positions(note=f"a round accepted more than it drafted ({bad[0][1]} of {bad[0][0]})")
    longest = max((d for d, _ in rounds), default=0)
    if longest == 0:
        return Positions(note="nothing was drafted")
    return Positions(tuple(sum(1 for d, _ in rounds if d >= i) for i in range(1, longest + 1)),
                     tuple(sum(1 for _, a in rounds if a >= i) for i in range(1, longest + 1)))


def check_positions(drafted: Sequence[int], accepted: Sequence[int]) -> str | None:
    """Why two by-position tuples cannot be counts of one run (None: they can): equal lengths,
    drafted and accepted never growing with the position, accepted at most drafted."""
    if len(drafted) != len(accepted):
        return f"{len(accepted)} accepted counts for {len(drafted)} drafted positions"
    for name, seq in (("drafted", drafted), ("accepted", accepted)):
        if any(c < 0 for c in seq):
            return f"a negative {name} count"
        grows = next((i for i in range(1, len(seq)) if seq[i] > seq[i - 1]), None)
        if grows is not None:
            return (f"{name} counts grow with the position ({seq[grows - 1]} at position {grows}, "
                    f"{seq[grows]} at {grows + 1}): a round accepted through position i was accepted through i-1")
    over = next((i for i, (d, a) in enumerate(zip(drafted, accepted, strict=True)) if a > d), None)
    if over is not None:
        return f"more accepted ({accepted[over]}) than drafted ({drafted[over]}) at position {over + 1}"
    return None


def sum_positions(measured: Sequence[Measurement]) -> Positions:
    """Acceptance by position over several measurements: counts summed over the positions every
    one of them counted (a gap in one is a gap in the sum: the note says which)."""
    known = [m for m in measured if m.drafted_by_position is not None and m.accepted_by_position is not None]
    if not measured:
        return Positions(note="nothing measured")
    if len(known) < len(measured):
        # the engine's own word for the gap, where it left one (stats["by_position"]["note"])
        why = next((str(n) for m in measured if m.drafted_by_position is None
                    and (n := ((m.stats or {}).get("by_position") or {}).get("note"))), None)
        counted = f"{len(measured) - len(known)} of {len(measured)} runs counted no positions"
        return Positions(note=f"{why} ({counted})" if why and known else why or counted)
    n = min(len(m.drafted_by_position or ()) for m in known)
    if n == 0:
        return Positions(note="no position counted in every run")
    drafted = tuple(sum((m.drafted_by_position or ())[i] for m in known) for i in range(n))
    accepted = tuple(sum((m.accepted_by_position or ())[i] for m in known) for i in range(n))
    longest = max(len(m.drafted_by_position or ()) for m in known)
    notes = [f"positions {n + 1}..{longest} counted in only some runs: left out"] if longest > n else []
    # why the engine left positions out (the same reason in every run, as a rule: said once)
    notes += list(dict.fromkeys(str(note) for m in known
                                if (note := ((m.stats or {}).get("by_position") or {}).get("note"))))[:1]
    return Positions(drafted, accepted, "; ".join(notes) or None)


def mean_accepted(n_accept: int | None, rounds: int | None) -> float | None:
    """Mean accepted draft tokens per round (the mean accepted length)."""
    return _per(n_accept, rounds)


def tokens_per_round(n_accept: int | None, rounds: int | None) -> float | None:
    """Tokens a round emits on average: its accepted drafts plus the target's own token
    (Spec-Bench's tau, "mean accepted tokens")."""
    accepted = mean_accepted(n_accept, rounds)
    return None if accepted is None else 1.0 + accepted


def engine_provenance(backend: Engine) -> dict[str, Any]:
    """What a run stores as ``provenance["engine"]``: the engine's name (what an experiment's
    ``engine:`` names), where it was built from (``Capabilities.built_from``), and its own
    ``provenance()``, whose ``version`` and ``accel`` the results store keeps in columns."""
    return {**backend.provenance(), "name": backend.name, "built_from": backend.capabilities.built_from}


@dataclass(frozen=True)
class Command:
    """One way to deploy a setting: a program's command line (``argv``, and ``text`` quoted for a
    POSIX shell) or, for an in-process engine, a Python snippet (``argv`` empty)."""

    program: str  # what runs it: llama-server, llama-speculative-simple, llama-completion, python
    text: str
    argv: tuple[str, ...] = ()
    note: str | None = None

    @classmethod
    def shell(cls, program: str, argv: Sequence[str], note: str | None = None) -> Command:
        return cls(program, shlex.join(argv), tuple(argv), note)


@dataclass(frozen=True)
class Deployment:
    """The exact command(s) that deploy a measured setting, made by the engine that measured it."""

    engine: str
    speculative: bool  # False: the target alone ("no draft")
    setting: str  # what is deployed, in words ("draft 4 with smollm2-135m:q4_1", "the target alone")
    commands: tuple[Command, ...]
    notes: tuple[str, ...] = ()

    def server_command(self) -> Command | None:
        """The llama-server command that deploys it, where there is one."""
        return next((c for c in self.commands if c.program == "llama-server" and c.argv), None)

    def render(self, indent: str = "  ") -> str:
        lines = [f"deploy: {self.setting} [{self.engine}]"]
        for c in self.commands:
            lines.append(f"{indent}{c.program}" + (f" ({c.note})" if c.note else "") + ":")
            lines.extend(f"{indent}{indent}{line}" for line in c.text.splitlines())
        lines.extend(f"{indent}note: {n}" for n in self.notes)
        return "\n".join(lines)

    def to_dict(self) -> dict[str, Any]:
        return {"engine": self.engine, "speculative": self.speculative, "setting": self.setting,
                "commands": [{"program": c.program, "argv": list(c.argv), "text": c.text, "note": c.note}
                             for c in self.commands], "notes": list(self.notes)}


@dataclass(frozen=True)
class ClientPrompt:
    """One prompt as a client sends it to a deployed server: chat messages (earlier turns, then the
    prompt), or raw text (a deploy check's sample of the workload)."""

    id: str
    text: str
    chat: bool = True
    history: tuple[Message, ...] = ()


@dataclass(frozen=True)
class EngineOptions:
    """How to open an engine: which build or binaries (llama.cpp), which device (all)."""

    accel: str = "auto"  # cpu | cuda | metal | auto (llama.cpp builds); device for transformers
    bin_dir: Path | None = None  # prebuilt llama.cpp binaries instead of llamaspec's build
    rpc: bool = False  # llama.cpp: the build with the RPC backend (an experiment that sets rpc:)
    # llama-server: warm traffic, one long-lived server per setup, never restarted (else a mode that
    # keeps state is timed on a fresh server each request); its identity and every run say so
    warm: bool = False


class Engine(Protocol):
    name: str
    capabilities: Capabilities

    def identity(self) -> str:
        """What makes two measurements comparable (build key, library versions)."""
        ...

    def provenance(self) -> dict[str, Any]:
        """What produced the numbers (program versions, build flags, devices): ``version`` (the
        build's commit, or the library's version) and ``accel`` (what it computed on) among them."""
        ...

    def resolve_model(self, model: str, variant: str) -> ModelPath:
        """The model ``model:variant`` in the form this engine loads (fetched or derived if needed)."""
        ...

    def check(self, case: ResolvedCase) -> None:
        """Refuse settings or models this backend cannot honour (an incompatible pair, a setting it
        cannot apply), before anything runs (raise LlamaspecError)."""
        ...

    def measure(self, case: ResolvedCase, mode: str, log_path: Path) -> Measurement:
        """Generate once in ``mode``; a failure is returned as ``ok=False``, not raised."""
        ...

    def deployment(self, case: ResolvedCase, speculative: bool = True) -> Deployment:
        """The command that deploys ``case``'s setting as measured (``speculative=False``: the
        target alone, for a "no draft" answer); nothing is started."""
        ...

    def close(self) -> None:
        """Stop whatever the engine keeps running (servers, loaded models)."""
        ...

    # Called only where ``capabilities`` says the engine can:

    def prepare(self, case: ResolvedCase, modes: tuple[str, ...] = ("baseline", "speculative")) -> None:
        """(``capabilities.prepares``) Load what measuring ``case`` in ``modes`` needs (servers,
        models, the rendered prompt), so that none of it lands in a timing."""
        ...

    def top_tokens(self, case: ResolvedCase, position: int, prefix: Any, log_path: Path,
                   n: int = 2) -> list[dict[str, Any]] | None:
        """(``capabilities.top_tokens``) The target alone's ``n`` most probable tokens (``{"id", "p"}``)
        at generated position ``position`` on the path ``prefix``; None when its path differs."""
        ...
