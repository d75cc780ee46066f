"""Speculative types: what each ``spec_type`` is, in one table (:data:`SPEC_TYPES`).

A case speculates with a draft model (``draft``) or with a draft-free mode that drafts from the
text already there: llama.cpp's n-gram modes, transformers' prompt lookup. Every place that must
know whether a type needs a draft model, which of llama.cpp's command-line programs run it, which
engines can, or which setting bounds a round's draft asks here; a new type is one row.

- ``programs``: llama.cpp's command-line programs (``Settings.program``) that run the type, the
  default first: a case that names no program gets it (``Settings.with_defaults``).
  llama-speculative requires a draft model whatever ``--spec-type`` says; llama-speculative-simple
  runs the n-gram modes without one (0c1e570). () where no command-line program runs it.
- ``engines``: the engines that can run it where their build offers it (what a build offers is
  the engine's to declare: ``Capabilities.spec_types``, read by llama.cpp from each ``--help``).
- ``length``: the setting that bounds one round's draft (the requested draft length); None where
  the mode sizes its drafts itself (ngram-cache).
- ``keeps_state``: whether a long-lived llama-server drafts a request differently from a fresh one
  because of the requests it served before (the mode keeps n-gram state between requests), as
  measured on the pinned build by ``benchmarks/server_state.py``'s ``probe`` (tests/test_server.py checks
  :data:`KEEPS_STATE` there; docs/engines.md has the table). The command-line programs start fresh
  each run, so only the server differs.

How an engine spells a type on its command line stays with that engine (llama.cpp:
``llamacpp.flags.SPEC_TYPE_FLAGS``, with each mode's size flags). A type a build lists that has no
row here (llama.cpp's ``draft-eagle3``, a future ``ngram-*``) is read by llama.cpp's naming:
``draft-*`` speculates with a draft model, anything else is draft-free, and llama-server alone
runs it.

The API a study uses::

    from llamaspec.measure import spectypes
    spectypes.draft_free_modes(engine.capabilities, case.settings.program)   # ("ngram-simple", ...)
    Case(name, target, None, prompt, None, Settings(spec_type="ngram-simple"))  # program: the row's default
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

LLAMA_CPP_ENGINES = frozenset({"llama.cpp", "llama-server"})


@dataclass(frozen=True)
class SpecType:
    """One speculative type (see the module docstring for each field)."""

    name: str
    needs_draft: bool
    programs: tuple[str, ...]
    engines: frozenset[str]
    length: str | None
    keeps_state: bool = False

    @property
    def draft_free(self) -> bool:
        return not self.needs_draft

    def runs_on(self, program: str) -> bool:
        """Whether llama.cpp's command-line program ``program`` runs this type."""
        return program in self.programs


def _ngram(name: str, length: str | None = "ngram_size_m", keeps_state: bool = False) -> SpecType:
    return SpecType(name, needs_draft=False, programs=("speculative-simple",), engines=LLAMA_CPP_ENGINES, length=length,
                    keeps_state=keeps_state)


SPEC_TYPES: dict[str, SpecType] = {t.name: t for t in (
    SpecType("draft", needs_draft=True, programs=("speculative", "speculative-simple"),
             engines=LLAMA_CPP_ENGINES | {"transformers"}, length="draft_max"),
    _ngram("ngram-simple"),
    # a repeated prompt drafts from the map its first request left (24 drafted, 24 accepted, fresh 65/24)
    _ngram("ngram-map-k", keeps_state=True),
    _ngram("ngram-map-k4v", keeps_state=True),
    _ngram("ngram-mod", keeps_state=True),  # its n-gram pool keeps earlier requests' text (reset when a quarter full)
    # its drafts' size is its own (8 at 0c1e570), no flag sets it; its context cache keeps the
    # longest request so far, so a shorter one drafts from the last one's n-grams
    _ngram("ngram-cache", length=None, keeps_state=True),
    # transformers' prompt lookup: prompt_lookup_num_tokens is the draft length
    SpecType("prompt-lookup", needs_draft=False, programs=(), engines=frozenset({"transformers"}), length="draft_max"),
)}
DEFAULT = "draft"
# The types whose llama-server drafts a request differently after serving others (measured at 0c1e570).
KEEPS_STATE = frozenset(t.name for t in SPEC_TYPES.values() if t.keeps_state)


def of(name: str | None) -> SpecType:
    """The row of ``name`` (None: ``draft``); a name with no row is read by llama.cpp's naming."""
    name = name or DEFAULT
    known = SPEC_TYPES.get(name)
    if known is not None:
        return known
    draft = name.startswith("draft")
    # an n-gram mode nobody measured here is taken to keep state: a fresh server per timed request
    # costs only time, a warm one would time a different drafting
    return SpecType(name, needs_draft=draft, programs=(), engines=frozenset({"llama-server"}),
                    length="draft_max" if draft else None, keeps_state=not draft)


def needs_draft(name: str | None) -> bool:
    return of(name).needs_draft


def keeps_state(name: str | None) -> bool:
    """Whether llama-server keeps this type's drafting state between requests (the row's ``keeps_state``)."""
    return of(name).keeps_state


def default_program(name: str | None, fallback: str) -> str:
    """The command-line program a case of this type runs on when it names none (``fallback`` where
    no command-line program runs it: the setting then means nothing to the engines that do)."""
    programs = of(name).programs
    return programs[0] if programs else fallback


def engine_for(name: str | None) -> str:
    """The engine a study of your own models uses for this type: llama.cpp's command-line programs
    where one runs it, else the first engine that can (llama-server for llama.cpp's other types)."""
    row = of(name)
    if row.programs:
        return "llama.cpp"
    return "llama-server" if "llama-server" in row.engines else sorted(row.engines)[0]


def requested_length(settings: Any) -> int | None:
    """The draft length a case asks of its type (the setting of the row's ``length``); None where
    the mode sizes its drafts itself or the setting is unset."""
    length = of(settings.spec_type).length
    return getattr(settings, length) if length else None


def draft_free_modes(capabilities: Any, program: str | None = None) -> tuple[str, ...]:
    """The draft-free modes an engine runs (``Capabilities.spec_types`` without a draft model), with
    llama.cpp's command-line ``program`` (``Settings.program``) where the engine honours that setting
    and one is named: llama-speculative runs none, llama-speculative-simple the n-gram modes."""
    types: Sequence[str] = capabilities.spec_types
    by_program = program is not None and "program" in capabilities.settings
    return tuple(t for t in types if of(t).draft_free and (not by_program or of(t).runs_on(str(program))))
