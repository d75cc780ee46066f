"""What a watched llama-server runs (:class:`Serving`): its speculation (a draft model, an n-gram
mode, or none), its draft length, its model files and their sha256, its command line.

Each fact from where the server says it: the speculation from ``/slots`` (each slot's
``speculative.types``), else from its command line, else from its counters; the draft length from
the length of the per-position series (the server sizes it to its longest draft), else from its
command line; the target's file from ``/props``; the draft's file, the threads and every other
flag from the command line, which ``llamacpp.live.local_command`` reads where the server runs on
this machine. A file is named by its sha256 where it is on this machine.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from llamaspec.base.errors import LlamaspecError
from llamaspec.llamacpp import live
from llamaspec.measure import spectypes

if TYPE_CHECKING:
    from llamaspec.llamacpp.command import PastedCommand

log = logging.getLogger(__name__)

DRAFT = "draft"  # speculation with a draft model (llama.cpp's draft-simple); other modes by llama.cpp's name


@dataclass(frozen=True)
class Serving:
    """What the server at ``url`` runs."""

    url: str
    speculation: str | None  # "draft", an n-gram mode ("ngram-simple" ...), None: none
    speculation_from: str  # where that was read: "/slots", "its command line", "its counters", "nothing"
    draft_max: int | None  # the running draft length K (an n-gram mode's size m); None: not known yet
    draft_max_from: str | None  # "the per-position series" or "its command line"
    target: str | None  # the target's file as the server opened it (/props)
    draft: str | None  # the draft's file (its command line)
    target_sha256: str | None
    draft_sha256: str | None
    argv: tuple[str, ...] | None  # its command line, where it runs here and /proc lets us read it
    threads: int | None  # -t from its command line
    slots: int | None
    commit: str | None  # llama.cpp's, from /props' build_info

    @property
    def draft_free(self) -> bool:
        return self.speculation is not None and self.speculation != DRAFT

    @property
    def files_here(self) -> bool:
        """Both model files (the target's alone for an n-gram mode) are on this machine."""
        return self.target_sha256 is not None and (self.draft_free or self.draft_sha256 is not None)

    def to_dict(self) -> dict[str, object]:
        return {"url": self.url, "speculation": self.speculation, "speculation_from": self.speculation_from,
                "draft_max": self.draft_max, "draft_max_from": self.draft_max_from,
                "models": {"target": {"path": self.target, "sha256": self.target_sha256},
                           **({"draft": {"path": self.draft, "sha256": self.draft_sha256}} if self.draft else {})},
                "argv": list(self.argv) if self.argv else None, "threads": self.threads, "slots": self.slots,
                "llamacpp_commit": self.commit}


def _parsed(argv: tuple[str, ...] | None) -> PastedCommand | None:
    """The server's command line read as llamaspec reads a pasted one (None where it does not
    read: no speculation, or a flag it does not know)."""
    if not argv:
        return None
    from llamaspec.llamacpp import command

    try:
        return command.parse(list(argv))
    except LlamaspecError as exc:
        log.debug("the server's command line does not read as a speculative llama-server command: %s", exc.message)
        return None


def speculation_of(reading: live.Reading, argv: tuple[str, ...] | None) -> tuple[str | None, str]:
    """(the speculation, where it was read)."""
    if reading.slots:
        types = [t for s in reading.slots for t in s.spec_types]
        if types:
            first = types[0]
            return (DRAFT if spectypes.needs_draft(first) else first), "/slots"
        if not any(s.speculative for s in reading.slots):
            return None, "/slots"
    cmd = _parsed(argv)
    if cmd is not None:
        spec_type = cmd.settings.spec_type
        return (spec_type if spec_type and spec_type != DRAFT else DRAFT), "its command line"
    if (reading.metrics.get("spec_decode_num_drafts_total") or 0) > 0:
        return DRAFT, "its counters"
    return None, "nothing"


def describe(where: live.Address, reading: live.Reading, argv: tuple[str, ...] | None) -> Serving:
    """What the server runs, from one reading and its command line (None: not readable here); the
    files named by sha256 where they are on this machine (cached per file)."""
    if argv and Path(argv[0]).name.removesuffix(".exe") != "llama-server":
        argv = None  # what listens there is not llama-server itself (a proxy, a wrapper): its argv says nothing
    speculation, speculation_from = speculation_of(reading, argv)
    cmd = _parsed(argv)
    draft_path = None
    if cmd is not None and cmd.draft is not None and cmd.draft.source == "path":
        draft_path = str(Path(cmd.draft.value).expanduser())
    series = reading.metrics.accepted_by_position
    length_setting = "draft_max" if speculation in (None, DRAFT) else "ngram_size_m"
    given = getattr(cmd.settings, length_setting) if cmd is not None and length_setting in cmd.given else None
    k: int | None = None
    k_from: str | None = None
    if series is not None and speculation is not None:
        k, k_from = len(series), "the per-position series"
    elif given:
        k, k_from = int(given), "its command line"
    target = reading.props.model_path
    return Serving(url=where.url, speculation=speculation, speculation_from=speculation_from, draft_max=k,
                   draft_max_from=k_from, target=target, draft=draft_path,
                   target_sha256=_sha256(target), draft_sha256=_sha256(draft_path) if speculation == DRAFT else None,
                   argv=argv, threads=cmd.settings.threads if cmd is not None else None, slots=reading.props.total_slots,
                   commit=reading.props.commit)


def _sha256(path: str | None) -> str | None:
    if not path or not Path(path).is_file():
        return None
    from llamaspec.models import given

    try:
        return given.file_sha256(Path(path))
    except OSError:
        return None
