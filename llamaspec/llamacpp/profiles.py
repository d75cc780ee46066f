"""llama.cpp's round profiles, read from its source at the pinned commit, read by the speedup model.

How each of llama.cpp's speculative programs spends a round and counts them
(``llamaspec.theory.profiles.RoundProfile``): ``llama-speculative``, ``llama-speculative-simple`` and
llama-server. When llama.cpp changes its loop, this file changes and the model does not. The engine
registry reads ``ROUND_PROFILES`` (``llamaspec.registry.engines.round_profile``).
"""

from __future__ import annotations

from llamaspec.theory.profiles import RoundProfile

# examples/speculative/speculative.cpp at 0c1e570: the first token is sampled from the prompt's
# logits before the loop; each round decodes the target's token on the draft, then drafts k
# tokens, decoding every one of them (the last included), then verifies k + 1 on the target.
# n_drafted = k · rounds exactly (recorded: 112 = 8 × 14 with n_predict 72, n_accept 57).
LLAMA_SPECULATIVE = RoundProfile("llama-speculative", extra_draft_steps=1, first_token_from_prompt=True)
# examples/speculative-simple + common/speculative.cpp (draft-simple): the last prompt token is held
# back and verified in the first round; the draft decodes id_last and each drafted token but the last
# (k decodes), stops early below --spec-draft-p-min, and decodes the verified batch (process()).
SPECULATIVE_SIMPLE = RoundProfile("llama-speculative-simple", extra_draft_steps=0, first_token_from_prompt=False,
                                  draft_processes_batch=True, draft_policy="capped",
                                  unmodelled=("the draft's pass over each verified batch is counted as one draft step "
                                              "(not timed)",))
# tools/server/server-context.cpp at 0c1e570, with the same common/speculative draft-simple: the
# prompt is processed and the first token sampled from its logits (n_gen 1 starts predicted_ms);
# each later step drafts up to min(k, n_remaining - 1) tokens from the last sampled one (k draft
# decodes, stopping below p-min) and verifies draft + 1 on the target; a step whose draft is
# empty (the last token, p-min, n-min) decodes one token. The draft then processes every batch
# the target decoded. /metrics' spec_decode_num_drafts_total (n_draft_verif_steps) grows only in
# steps that drafted: every target call is n_predict - n_accept - 1 (recorded: predicted_n 16,
# draft_n 16 at k 8, 12 accepted: 3 calls, 2 of them drafted rounds). llama-server reports no
# sampling time: its baselines' step beyond llama-bench's is charged per emitted token (its sampler
# chain runs per verified position). On the recorded server sweep (tests/fixtures/llamacpp/0c1e570/
# sweep-server/q4_1: baselines at 55.6 ms a token against llama-bench's 26.4 ms step) the median
# error is 4.3 % that way; 11.2 % with llama-bench's step alone, 61.6 % with the excess charged per round.
LLAMA_SERVER = RoundProfile("llama-server", extra_draft_steps=0, first_token_from_prompt=True, draft_processes_batch=True,
                            draft_policy="capped", loop_overhead="token",
                            unmodelled=("sampling and the server's loop: not reported by llama-server; charged per emitted "
                                        "token as the baselines' step beyond llama-bench's",
                                        "the draft's pass over each verified batch is counted as one draft step (not timed)"))

ROUND_PROFILES = (LLAMA_SPECULATIVE, SPECULATIVE_SIMPLE, LLAMA_SERVER)
