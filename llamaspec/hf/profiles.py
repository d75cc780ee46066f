"""transformers' round profiles (assisted generation and prompt lookup), read by the speedup model.

What the speedup model needs to know of ``generate()``'s assisted loop
(``llamaspec.theory.profiles.RoundProfile``); importing this imports neither torch nor transformers.
The engine registry reads ``ROUND_PROFILES`` (``llamaspec.registry.engines.round_profile``).
"""

from __future__ import annotations

from llamaspec.theory.profiles import RoundProfile

# transformers 4.57 _assisted_decoding: every round the assistant's generate() drafts up to
# num_assistant_tokens (one forward per drafted token, the first over the tokens it has not seen)
# and the target runs one forward over the last token and the candidates (k + 1, logits for
# each); the first round is fused with the prompt's forward, so every token comes from a round
# (rounds = n_predict - n_accept) and the counting hook counts them all. generate()'s own loop
# (logits processors, stopping criteria, cache bookkeeping) runs once per round on the target
# side: the baselines' step beyond the timed forward pass, charged per round.
TRANSFORMERS_ASSISTED = RoundProfile("transformers-assisted", extra_draft_steps=0, first_token_from_prompt=False,
                                     draft_policy="capped", loop_overhead="round",
                                     unmodelled=("generate()'s loop: charged once per round as the baselines' step beyond "
                                                 "the timed forward pass",
                                                 "the assistant's generate() set-up each round is not timed",
                                                 "the first round (fused with the prompt) is in the counters, not in the "
                                                 "speed"))
# transformers' prompt lookup: the same loop with n-grams of the context as candidates (no draft
# model, nothing to time on a draft side: alpha and the ceiling only).
TRANSFORMERS_PROMPT_LOOKUP = RoundProfile("transformers-prompt-lookup", extra_draft_steps=0, first_token_from_prompt=False,
                                          draft_policy="capped", loop_overhead="round")

ROUND_PROFILES = (TRANSFORMERS_ASSISTED, TRANSFORMERS_PROMPT_LOOKUP)
