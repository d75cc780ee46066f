"""The speedup model of speculative decoding, fed with costs measured on the run's own footing.

After Leviathan, Kalman & Matias (2023), "Fast Inference from Transformers via Speculative
Decoding". Each round the draft proposes ``k`` tokens and the target verifies them in one batch.
If every drafted token is accepted independently with probability ``alpha`` (the paper's α) and
acceptance stops at the first rejection, one round yields

    E[accepted]       = α(1 - α^k) / (1 - α)            (mean accepted length)
    E[tokens / round] = (1 - α^(k+1)) / (1 - α)          (accepted + the target's own token)

and, with ``c`` the draft's cost per token in target steps, the paper's speedup is

    S(k) = (1 - α^(k+1)) / ((1 - α)(k·c + 1)).

What a real program spends per round is not the paper's ``k·c + 1`` target steps
(:class:`CostModel`, :class:`RoundProfile`):

- **draft steps**: the pinned ``llama-speculative`` decodes ``k + 1`` single tokens on the draft
  each round (the target's own token, then each drafted token, the last one included);
  ``llama-speculative-simple`` (common/speculative, what llama-server runs) decodes ``k`` and
  also runs the draft on the verified batch. :meth:`RoundProfile.draft_steps_per_round`.
- **verification**: the target processes ``k + 1`` tokens in one batch, with logits for every one
  of them. On CPUs that costs more than one step; the cost is *measured* (llama-bench on the
  target at the run's context depth, every token an output) and used as measured, interpolated
  between measured batch sizes, never fitted to a line.
- **rounds**: the pinned ``llama-speculative`` samples the first token from the prompt's logits,
  so it verifies ``n_predict - n_accept - 1`` times; ``llama-speculative-simple`` holds the last
  prompt token back and verifies ``n_predict - n_accept`` times. :meth:`RoundProfile.rounds`.

Every engine that records a round profile's name with its runs (``Measurement.program``) and
times the two costs (``Capabilities.times_costs``) gets the model: llama.cpp's two programs and
llama-server (llama-bench on the same build), transformers' assisted generation (torch forward
passes timed by the engine). What a profile cannot see is said with its fit
(:attr:`RoundProfile.unmodelled`).

The target's single-token step comes from the same llama-bench data (batch 1 at the same depth),
so verify(k+1)/step and the draft's step/target step are ratios taken within one program. The
speed both sides are compared on is ``llamaspec.measure.contract.SPEED_DEFINITION`` (tokens after the
first over the time from the first generated token to the last), so the predicted speedup is
tokens per round × (baseline time per token) / (time per round).

**llama.cpp's ``accept`` is not α.** llama-speculative prints ``accept = 100 * n_accept /
n_drafted``: the accepted share of *all drafted tokens*. Drafted tokens after the first rejection
are counted in n_drafted but can never be accepted, so with a fixed draft length ``k``

    accept = E[accepted] / k = α(1 - α^k) / ((1 - α)·k)  <  α   (for 0 < α < 1, k > 1).

E.g. α = 0.9 at k = 8 gives accept = 0.64. We solve this for α numerically
(:func:`alpha_from_acceptance`), or, equivalently when the number of rounds is known, solve
tokens per round (:func:`alpha_from_tokens_per_round`). A fit (:func:`analyze`) uses the mean number
drafted per round, ``n_drafted / rounds``, as ``k``: programs draft fewer than ``--draft`` with
``--draft-p-min`` or near the end of generation, and 2023 builds adapted the length.

The package, one module per part: ``maths`` (the closed forms at one α), ``profiles``
(:class:`RoundProfile`: each engine defines its programs' in its own package,
``llamaspec.llamacpp.profiles``, ``llamaspec.hf.profiles``, and the engine registry finds one by
program name, ``llamaspec.registry.engines.round_profile``; the model is given the profile of what
it models), ``cost`` (:class:`CostModel`), ``observation`` (:class:`Observation`), ``positions``
(acceptance by draft position, :class:`PositionCurve`), ``fit`` (:func:`analyze`). Every name is
importable from here.

Everything here is pure: frozen dataclasses in, frozen dataclasses out, LlamaspecError on bad input.
"""

from __future__ import annotations

from llamaspec.theory.cost import (
    FIT_MIN_LENGTHS,
    VERIFY_BATCH_SIZES,
    CostModel,
    bench_depth,
    best_draft_length,
    interpolate,
    monotone,
)
from llamaspec.theory.fit import Analysis, PointFit, Prediction, analyze
from llamaspec.theory.maths import (
    acceptance,
    alpha_from_acceptance,
    alpha_from_tokens_per_round,
    ceiling_speedup,
    expected_accepted,
    expected_tokens_per_round,
    paper_speedup,
)
from llamaspec.theory.observation import Observation
from llamaspec.theory.positions import CONTRADICTION, PositionCurve
from llamaspec.theory.profiles import RoundProfile

__all__ = [
    "CONTRADICTION",
    "FIT_MIN_LENGTHS",
    "VERIFY_BATCH_SIZES",
    "Analysis",
    "CostModel",
    "Observation",
    "PointFit",
    "PositionCurve",
    "Prediction",
    "RoundProfile",
    "acceptance",
    "alpha_from_acceptance",
    "alpha_from_tokens_per_round",
    "analyze",
    "best_draft_length",
    "bench_depth",
    "ceiling_speedup",
    "expected_accepted",
    "expected_tokens_per_round",
    "interpolate",
    "monotone",
    "paper_speedup",
]
