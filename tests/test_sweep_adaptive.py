"""Adaptive sweeps (llamaspec.sweep.run_adaptive_sweep) on an in-process engine whose speed depends
on the draft length it is asked for, on a noisy machine: pairs go where the decision is
uncertain, the sweep stops when it is settled or the budget is spent, and an interruption loses
no pair."""

from __future__ import annotations

import pytest
from click.testing import CliRunner
from fakes import FakeEngine
from test_core import exp, fake_models  # noqa: F401  (fixture)

from llamaspec import analysis, sweep
from llamaspec.errors import LlamaspecError
from llamaspec.results import Store

GRID = {"draft_max": tuple(range(1, 17))}
NOISE = (1.0, 0.93, 1.07, 0.96, 1.05, 0.94)  # a machine whose speed wobbles by several per cent


def pairs_at(store: Store, sweep_id: str) -> dict[int, int]:
    rep = analysis.sweep_report(store, sweep_id, plot=False)
    return {r.draft_max: r.summary.pairs for r in rep.groups[0].rows}


def test_pairs_go_to_the_contenders_and_the_answer_is_near_the_true_best(fake_models) -> None:  # noqa: F811
    engine = FakeEngine(drift=0.0, noise=NOISE, alpha=0.8, draft_cost=0.08)
    store = Store.open()
    ((result, ended),) = sweep.run_adaptive_sweep(exp(3), GRID, engine, store, sweep.Budget(pairs=48))
    spent = pairs_at(store, result.sweep_id)
    assert ended.stop in ("settled", "budget", "nothing to measure") and ended.pairs == sum(spent.values()) <= 48
    assert ended.fixed_grid_pairs == 16 * 3
    assert set(spent) == set(GRID["draft_max"])  # the first pass: every length
    assert min(spent.values()) >= sweep.FIRST_PAIRS
    assert max(spent.values()) > sweep.FIRST_PAIRS  # more pairs somewhere: where the decision was uncertain
    decision = analysis.sweep_report(store, result.sweep_id, plot=False).decision()
    true_best = max(engine.speedup_of(k) for k in GRID["draft_max"])
    assert decision.verdict == "recommend" and decision.chosen is not None
    k = decision.chosen.key[1]  # type: ignore[index]
    assert engine.speedup_of(k) >= true_best * 0.97, (k, engine.speedup_of(k), true_best)
    assert decision.chosen.measured.low > 1.0


def test_a_rerun_resumes_with_every_pair_it_had(fake_models) -> None:  # noqa: F811
    class Interrupting(FakeEngine):
        limit = 1_000_000

        def measure(self, case, mode, log_path):  # type: ignore[no-untyped-def]
            if len(self.calls) >= self.limit:
                raise KeyboardInterrupt
            return super().measure(case, mode, log_path)

    engine = Interrupting(drift=0.0, noise=NOISE)
    engine.limit = 44  # inside the extension requests, after the first pass's 16 pairs (and the costs)
    store = Store.open()
    with pytest.raises(KeyboardInterrupt):
        sweep.run_adaptive_sweep(exp(3), GRID, engine, store, sweep.Budget(pairs=60))
    sid = store.runs(kind="sweep")[0]["group_id"]
    before = pairs_at(store, sid)
    assert sum(before.values()) >= 12
    engine.limit = 1_000_000
    calls = len(engine.calls)
    ((result, ended),) = sweep.run_adaptive_sweep(exp(3), GRID, engine, store, sweep.Budget(pairs=60))
    after = pairs_at(store, result.sweep_id)
    assert result.sweep_id == sid and all(after[k] >= n for k, n in before.items())  # nothing measured is lost
    new_pairs = ended.pairs - sum(before.values())
    # the rerun measured only new pairs (two generations each, one warm-up at most): none again
    assert 2 * new_pairs <= len(engine.calls) - calls <= 2 * new_pairs + 1


def test_the_budget_ends_it_and_says_so(fake_models) -> None:  # noqa: F811
    engine = FakeEngine(drift=0.0, noise=(1.0, 0.8, 1.25, 0.9, 1.15))  # too noisy to settle in 22 pairs
    store = Store.open()
    ((_result, ended),) = sweep.run_adaptive_sweep(exp(3), GRID, engine, store, sweep.Budget(pairs=22))
    assert ended.stop == "budget" and ended.pairs <= 22 and "budget is spent" in ended.text()


def test_bad_budgets_are_one_line_each() -> None:
    assert sweep.parse_budget("10m") == sweep.Budget(seconds=600)
    assert sweep.parse_budget("90s") == sweep.Budget(seconds=90)
    assert sweep.parse_budget("40") == sweep.Budget(pairs=40) == sweep.parse_budget("40 pairs")
    for bad in ("0", "0m", "soon", "-3", "2.5", ""):
        with pytest.raises(LlamaspecError, match="--budget"):
            sweep.parse_budget(bad)


def test_the_cli_refuses_a_budget_smaller_than_the_first_pass_before_measuring(tmp_path, fake_models) -> None:  # noqa: F811
    from fakes import fake_bin_dir

    from llamaspec.cli import main

    # programs that would measure (recorded real output), so that only the budget can stop it
    result = CliRunner().invoke(main, ["sweep", "smollm2-quicksort", "--draft", "1..16", "--budget", "5",
                                       "--bin-dir", str(fake_bin_dir(tmp_path / "bin"))])
    said = [line for line in result.output.splitlines() if line.startswith(("Error: ", "Hint: "))]
    lengths = ", ".join(map(str, sweep.first_lengths(GRID["draft_max"])))
    assert result.exit_code != 0 and len(said) == 2, result.output
    assert said[0].startswith("Error: --budget 5 pairs is too small: the first pass alone measures ") and \
        said[0].endswith(f" at draft {lengths})"), result.output
    assert said[1].startswith("Hint: give at least --budget "), result.output
    assert Store.open().runs() == []  # nothing measured
    result = CliRunner().invoke(main, ["sweep", "smollm2-quicksort", "--p-min", "0.5,0.9", "--budget", "10m"])
    assert result.exit_code != 0 and "--budget is for adaptive sweeps" in result.output
    with pytest.raises(LlamaspecError, match="draft lengths alone"):
        sweep.run_adaptive_sweep(exp(3), {"draft_p_min": (0.5,)}, FakeEngine(), Store.open(), sweep.Budget(pairs=9))
