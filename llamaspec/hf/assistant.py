"""The assistant's ``generation_config``, set from the case before every generation.

transformers reads the assistant settings from the **assistant's** ``generation_config`` (not from
the call), keeps what the ``heuristic`` schedule learnt across calls, and copies the assistant's own
decoding defaults into its drafts; so each generation first sets them again from the case's
settings and resets those defaults, and the values in force at the start and at the end are what
``Measurement.stats["assistant"]`` records."""

from __future__ import annotations

import logging
from typing import Any

from llamaspec.measure.settings import Settings

log = logging.getLogger(__name__)

# GenerationConfig fields that change which token is chosen (transformers 4.57; in 5.x unset means the global default).
_DECODING_KEYS = ("do_sample", "temperature", "top_k", "top_p", "min_p", "typical_p", "epsilon_cutoff", "eta_cutoff",
                  "top_h", "repetition_penalty", "encoder_repetition_penalty", "no_repeat_ngram_size",
                  "encoder_no_repeat_ngram_size", "bad_words_ids", "sequence_bias", "suppress_tokens",
                  "begin_suppress_tokens", "num_beams", "num_beam_groups", "penalty_alpha", "diversity_penalty",
                  "length_penalty", "renormalize_logits", "guidance_scale", "exponential_decay_length_penalty",
                  "forced_bos_token_id", "forced_eos_token_id", "watermarking_config", "dola_layers")


def pin_assistant(draft: Any, s: Settings, draft_max: int) -> dict[str, Any]:
    """Set the assistant's generation_config from the case (transformers reads it from there and
    carries heuristic changes over between calls): the values in force are the ones asked for."""
    config = draft.generator.generation_config
    # transformers copies every decoding setting the assistant's generation_config holds away from
    # the global default into the draft's generate() when the call left it at the default: an
    # assistant shipped with do_sample=True would sample its drafts while the target decodes
    # greedily (measured: no draft accepted instead of half). Drafts are decoded as the case says.
    overridden = pin_decoding(config)
    config.num_assistant_tokens = draft_max
    config.num_assistant_tokens_schedule = s.draft_schedule or "constant"
    if s.draft_p_min is not None:
        config.assistant_confidence_threshold = s.draft_p_min
    else:  # the assistant's own default, restored in case an earlier call changed it
        config.assistant_confidence_threshold = draft.info["generation_config"].get("assistant_confidence_threshold", 0.4)
    return {"mode": "assistant", "start": assistant_values(draft),
            **({"decoding_defaults_overridden": overridden} if overridden else {})}


def pin_decoding(config: Any) -> dict[str, Any]:
    """Reset the assistant's own decoding defaults (the ones that choose a token) to the global
    ones, so the call's settings are what the draft decodes with; returns what was reset."""
    from transformers import GenerationConfig

    default = GenerationConfig()
    changed = {}
    for key in _DECODING_KEYS:
        value, wanted = getattr(config, key, None), getattr(default, key, None)
        if value != wanted:
            changed[key] = value
            setattr(config, key, wanted)
    if changed:
        log.info("assistant generation_config decoding defaults reset for the measurement: %s", changed)
    return changed


def assistant_values(draft: Any) -> dict[str, Any]:
    config = draft.generator.generation_config
    return {"num_assistant_tokens": config.num_assistant_tokens,
            "num_assistant_tokens_schedule": config.num_assistant_tokens_schedule,
            "assistant_confidence_threshold": config.assistant_confidence_threshold}
