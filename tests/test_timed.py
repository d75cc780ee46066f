"""What a run timed (llamaspec.measure.timed): the floor of "too short to time", and a loop found on
real outputs of the offline target (SmolLM2-135M-Instruct F32, llama.cpp 0c1e570, greedy, -n 64):
its answers to the old built-in chat prompt as raw text and through its chat template, and a
reasoning answer that does not loop."""

from __future__ import annotations

import pytest

from llamaspec.measure import timed
from llamaspec.measure.contract import Measurement
from llamaspec.measure.summary import summarize

# llama-completion's generated part, 2026-12-06, on the chat prompt through SmolLM2's template
PORTUGAL = ("Porto e Lisbon e Portugal e Portugal e Portugal e Portugal e Portugal e Portugal e Portugal e Portugal e "
            "Portugal e Portugal e Portugal e Portugal e Portugal e Portugal e Portugal e Portugal e Portugal e Portugal "
            "e Portugal e Portugal e Portugal e Portugal e Portugal e Portugal e Portugal e Portugal e Portugal e Portugal "
            "e Portugal e Portugal\n")
# ... and as raw text ("User: ... Assistant:"), as the issue quotes it
ANSWER = " The answer to your question is:" * 7
# llama-speculative-simple's generated part on the reasoning prompt through the template (-n 128)
REASONING = ("To solve this problem, we need to break it down step by step. First, let's find the total distance "
             "traveled by the train. The train travels 12 minutes at 90 km/h. So, the total distance traveled is "
             "12 * 12 = 144 meters.\n\nNow, let's find the time it takes for the train to travel 12 minutes. To do "
             "this, we can divide 12 minutes by 12 minutes per minute. This is a classic example of the time-space "
             "paradox, where time and space are intertwined.\n\nThe time it takes for the train to travel 12")


def test_the_floor_is_32_tokens_or_half_of_n_where_that_is_fewer() -> None:
    assert timed.floor(64) == 32 and timed.floor(256) == 32 and timed.floor(16) == 8 and timed.floor(None) == 32
    assert timed.too_short(12, 64) and not timed.too_short(32, 64) and not timed.too_short(8, 16)
    assert not timed.too_short(None, 64)  # unknown is not short
    assert timed.short_text(1, 64) == ("too short to time: the target alone answers in 2 tokens (1 after the first; "
                                       "fewer than 32)")


@pytest.mark.parametrize("text, span", [(PORTUGAL, "Portugal e "), (ANSWER, " The answer to your question is:")])
def test_a_span_repeated_to_the_end_is_a_loop(text: str, span: str) -> None:
    loop = timed.loop_of(text)
    assert loop is not None and sorted(loop.span) == sorted(span)  # the span as the repetition is cut
    assert loop.repeats >= 2 and loop.start + loop.repeats * len(loop.span) == pytest.approx(len(text.rstrip()))
    assert loop.text().startswith("loops: ") and f"x{loop.repeats:.0f} to the end" in loop.text()
    assert timed.Loop.from_dict(loop.to_dict()) == loop


def test_text_that_does_not_repeat_itself_to_the_end_is_no_loop() -> None:
    assert timed.loop_of(REASONING) is None
    assert timed.loop_of("") is None and timed.loop_of("aaaa") is None  # too short to call a loop
    assert timed.loop_of("x" * 40) is not None
    # one sentence said twice at the very end of a long answer is under a third of it: not a loop
    assert timed.loop_of(REASONING + " It moves. It moves.") is None


def test_a_summary_says_what_its_baselines_timed_and_whether_they_loop() -> None:
    def m(mode: str, pair: int, text: str, n: int) -> Measurement:
        return Measurement(mode=mode, ok=True, error=None, argv=(mode,), exit_code=0, wall_seconds=1.0,
                           peak_rss_bytes=None, n_predict=n, decode_tps=50.0 if mode == "baseline" else 60.0,
                           text=text, pair=pair)

    looping = summarize([m("baseline", 0, PORTUGAL, 64), m("speculative", 0, PORTUGAL, 64)])
    assert looping.timed_tokens == 63 and looping.loop is not None and looping.loop.span.strip() in ("Portugal e", "e Portugal")
    plain = summarize([m("baseline", 0, "12", 2), m("speculative", 0, "12", 2)])
    assert plain.timed_tokens == 1 and plain.loop is None
    assert type(plain).from_dict(looping.to_dict()).loop == looping.loop  # stored and read back
