"""How each speculative program of each llama.cpp generation drafts and counts (``CountingProfile``):
the counters llamaspec derives from what a program prints, its draft policy and speed basis, and
the flags that make it print its acceptance by position."""

from __future__ import annotations

from dataclasses import dataclass

from llamaspec import theory
from llamaspec.base.errors import LlamaspecError
from llamaspec.llamacpp.flags import takes
from llamaspec.llamacpp.profiles import LLAMA_SPECULATIVE, SPECULATIVE_SIMPLE
from llamaspec.llamacpp.programhelp import HelpFlags


@dataclass(frozen=True)
class CountingProfile:
    """How one speculative program of one generation drafts and counts: the counters llamaspec
    derives from what it prints are computed here and nowhere else.

    - ``shape``: how a round is spent and counted (``theory.RoundProfile``: rounds from n_predict and
      n_accept, draft steps per round); the speedup model reads the same object, so the counters
      and the model cannot disagree. llama-speculative samples the first token from the prompt's
      logits (rounds = n_predict - n_accept - 1; 112 drafted = 8 x 14 with n_predict 72, n_accept
      57) and decodes k + 1 draft steps a round; llama-speculative-simple holds the last prompt
      token back (rounds = n_predict - n_accept) and decodes k.
    - ``draft_policy``: fixed (exactly k per round), capped (up to k: p-min, context and n_predict
      budget) or adaptive (2023: the length itself changes, +8 after a fully accepted draft, -1
      otherwise; the printed n_draft is the final length).
    """

    role: str  # the build's program role: "speculative" or "speculative-simple"
    generation: str
    draft_policy: str
    shape: theory.RoundProfile
    speed_basis: str
    # Flags that make the program print its acceptance by draft position (parse.positions): the
    # pinned llama-speculative-simple logs common_speculative_print_stats at trace level (-lv 4);
    # () where the program prints none (llama-speculative of every generation).
    positions_argv: tuple[str, ...] = ()

    @property
    def reads_p_min(self) -> bool:
        """Whether the program reads draft_p_min at all (the flag table says which programs take it)."""
        return "draft_p_min" in takes(self.role)

    def rounds(self, n_predict: int, n_accept: int) -> int:
        return max(self.shape.rounds(n_predict, n_accept), 0)

    def draft_steps_per_round(self, k: int) -> int:
        return int(self.shape.draft_steps_per_round(k))

    def decode_tps(self, n_decoded: int, decode_s: float) -> float | None:
        """Tokens after the first over the decode loop's time. The loop's clock starts before the
        first token (sampled from the prompt's logits, no decode), so (N - 1) / T; for
        speculative-simple T also holds the first round (printed as one figure, not split)."""
        return (n_decoded - 1) / decode_s if decode_s > 0 and n_decoded > 1 else None


_SPEC_BASIS = "llama-speculative: (N - 1) / T from 'decoded N tokens in T seconds' (the loop starts at the first token)"
_SIMPLE_BASIS = ("llama-speculative-simple: (N - 1) / T from 'decoded N tokens in T seconds'; T includes the first "
                 "verification round, which the program does not time apart (about 1/rounds of T)")
_SPEC, _SIMPLE = LLAMA_SPECULATIVE, SPECULATIVE_SIMPLE

COUNTING_PROFILES: dict[tuple[str, str], CountingProfile] = {
    # Sep 2023 (llama-cpp-python 0.2.7, the write-up's era): the draft length itself adapts, +8 after a
    # fully accepted draft (at most 30), -1 otherwise (at least 2); n_draft prints the final length.
    ("speculative", "2023-sep"): CountingProfile("speculative", "2023-sep", "adaptive", _SPEC, _SPEC_BASIS),
    # Nov 2023 (0.2.20): the length stays as asked, a round stops drafting below --p-accept (0.5).
    ("speculative", "2023-nov"): CountingProfile("speculative", "2023-nov", "capped", _SPEC, _SPEC_BASIS),
    ("speculative", "2024"): CountingProfile("speculative", "2024", "fixed", _SPEC, _SPEC_BASIS),
    ("speculative", "2026"): CountingProfile("speculative", "2026", "fixed", _SPEC, _SPEC_BASIS),
    ("speculative-simple", "2024"): CountingProfile("speculative-simple", "2024", "capped", _SIMPLE, _SIMPLE_BASIS),
    ("speculative-simple", "2026"): CountingProfile("speculative-simple", "2026", "capped", _SIMPLE, _SIMPLE_BASIS,
                                                   positions_argv=("-lv", "4")),
}


def profile_for(caps: HelpFlags, role: str) -> CountingProfile:
    """The profile of a speculative program from its ``--help``: 2023 builds with ``--p-accept``
    (Nov 2023 on) keep the draft length; the ones before adapt it."""
    generation = caps.generation
    if generation == "2023":
        generation = "2023-nov" if caps.has("--p-accept") or caps.has("-pa") else "2023-sep"
    return profile(role, generation)


def profile(role: str, generation: str) -> CountingProfile:
    try:
        return COUNTING_PROFILES[(role, generation)]
    except KeyError:
        known = ", ".join(f"{r} ({g})" for r, g in COUNTING_PROFILES)
        raise LlamaspecError(f"llamaspec does not know how {role} of the {generation} generation counts",
                             hint=f"known: {known}") from None
