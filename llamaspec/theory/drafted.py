"""How many rounds drafted each position, from what a program says of its rounds in total: the
arithmetic behind acceptance by position where the counts of drafted tokens are only totals
(llama-speculative-simple's statistics line, read by ``llamacpp.parse.positions``; llama-server's
``/metrics``, read by ``llamacpp.metrics.positions_from_metrics``). No text is read here."""

from __future__ import annotations

from collections import Counter

from llamaspec.measure.contract import Positions, check_positions


def by_position(accepted: tuple[int, ...], drafting_rounds: int, drafted_tokens: int, draft_len: int,
                shrinking: bool = False, ran_out: bool = False) -> Positions:
    """Drafted and accepted counts by position from the accepted ones and the drafting rounds'
    totals (llama-speculative-simple's statistics line, llama-server's /metrics).

    With every drafting round at the full length k, every position was drafted by all of them. The
    S = k x rounds - tokens missing tokens come from rounds cut short, each missing at most S, so
    positions 1..k-S were drafted by every round. ``shrinking``: the only rounds cut short are the
    last ones (p-min 0: only the context or the -n budget cuts a draft), and what is left of both
    shrinks by exactly the tokens a round emits, so a short round of r tokens that accepted a is
    followed by one of r - a - 1: the short rounds' lengths are distinct, and every round but the
    last of them accepted a number fixed by the lengths, which must be among the accepted numbers
    the counts give; ``ran_out``: the run used up its budget (no end of text cut it), so the last
    short round of r accepted r - 1 or r (nothing left for another). Every set of short lengths
    that fits is tried, and a position is kept where all of them agree on how many rounds drafted
    it. Positions after the last one known are left out, with a note saying so."""
    if draft_len <= 0:
        return Positions(note="no draft length")
    while accepted and accepted[-1] == 0:  # llama.cpp's lists may run on with zeros: they say nothing
        accepted = accepted[:-1]
    if len(accepted) > draft_len:
        return Positions(note=f"accepted counts for {len(accepted)} positions with a draft length of {draft_len}")
    if drafted_tokens > draft_len * drafting_rounds:
        return Positions(note=f"{drafted_tokens} tokens drafted in {drafting_rounds} rounds of at most {draft_len}")
    if drafting_rounds <= 0:
        return Positions(note="nothing was drafted")
    problem = check_positions((drafting_rounds,) * len(accepted), accepted) if accepted else None
    if problem:
        return Positions(note=problem)
    short = draft_len * drafting_rounds - drafted_tokens
    # how many drafting rounds accepted exactly n tokens, n = 0..k (from "accepted through n")
    through = (*accepted, *(0,) * (draft_len + 1 - len(accepted)))
    exactly = (drafting_rounds - through[0], *(through[n] - through[n + 1] for n in range(draft_len)))
    missing = _missing_by_position(short, draft_len, drafting_rounds, exactly if shrinking else None, ran_out)
    known = len(missing)
    if known == 0:
        return Positions(note=f"drafts were shorter than {draft_len} tokens ({drafted_tokens} in {drafting_rounds} "
                              "rounds) and the program does not say by how much each: no position known for certain")
    drafted = tuple(drafting_rounds - m for m in missing)
    counts = (accepted + (0,) * draft_len)[:known]
    problem = check_positions(drafted, counts)
    if problem:
        return Positions(note=problem)
    note = (f"positions {known + 1}..{draft_len} left out: {short} drafted tokens short of {drafting_rounds} full "
            "rounds, and the program does not say which rounds were cut" if known < draft_len else None)
    return Positions(drafted, counts, note)


# Sets of short rounds tried at most (the subsets of 1..k-1 summing to S); past it, the plain rule.
_MAX_SHORT_SETS = 20000


def _missing_by_position(short: int, draft_len: int, rounds: int,
                         exactly: tuple[int, ...] | None, ran_out: bool = False) -> tuple[int, ...]:
    """For positions 1..n (as far as known), how many drafting rounds did not reach the position.
    ``exactly``: how many rounds accepted n tokens, n = 0..k, where the short rounds shrink (see
    :func:`by_position`); None: nothing known of them."""
    if short == 0:
        return (0,) * draft_len
    plain = (0,) * max(draft_len - short, 0)
    if exactly is None:
        return plain

    def fits(deficits: tuple[int, ...]) -> bool:
        """Whether the counts allow these short rounds: the accepted numbers their lengths fix."""
        # lengths from the first short round to the last; each but the last accepted r_j - r_j+1 - 1
        lengths = sorted((draft_len - d for d in deficits), reverse=True)
        needed = Counter(r - after - 1 for r, after in zip(lengths, lengths[1:], strict=False))
        # the last one accepted r - 1 or r where the run ran out of budget; anything up to r where not known
        for last in ((lengths[-1] - 1, lengths[-1]) if ran_out else (None,)):
            want = needed + Counter([last]) if last is not None else needed
            if all(n < len(exactly) and exactly[n] >= c for n, c in want.items()):
                return True
        return False

    sets: list[tuple[int, ...]] = []

    def deficits(left: int, below: int, chosen: tuple[int, ...]) -> None:
        if len(sets) > _MAX_SHORT_SETS or len(chosen) > rounds:
            return
        if left == 0:
            if fits(chosen):
                sets.append(chosen)
            return
        for d in range(min(left, below - 1), 0, -1):
            if d * (d + 1) // 2 < left:  # the distinct parts below d+1 cannot add up to what is left
                break
            deficits(left - d, d, (*chosen, d))

    deficits(short, draft_len, ())  # each short round misses 1..k-1 tokens (an empty one is not a drafting round)
    if not sets or len(sets) > _MAX_SHORT_SETS:
        return plain
    out: list[int] = []
    for i in range(1, draft_len + 1):
        # a round missing d tokens drafted positions 1..k-d: it did not reach i when d >= k - i + 1
        counts = {sum(1 for d in chosen if d >= draft_len - i + 1) for chosen in sets}
        if len(counts) != 1:
            break
        out.append(counts.pop())
    return tuple(out)
