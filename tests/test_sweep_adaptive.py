"""The adaptive study on one prompt (llamaspec.studies.study.run_study: `llamaspec sweep NAME --draft ...`)
on an in-process engine whose speed depends on the draft length it is asked for, on a noisy
machine: blocks of every setup still in the running, the setups that trail stop, the study stops
when it is settled or the budget is spent, and an interruption loses no run."""

from __future__ import annotations

import pytest
from click.testing import CliRunner
from fakes import FakeEngine, exp

from llamaspec.base.errors import LlamaspecError
from llamaspec.measure.summary import Summary
from llamaspec.store.results import Store
from llamaspec.studies import budget, study
from llamaspec.views import analysis

GRID = {"draft_max": tuple(range(1, 17))}
NOISE = (1.0, 0.93, 1.07, 0.96, 1.05, 0.94)  # a machine whose speed wobbles by several per cent


def pairs_at(store: Store, result: study.StudyResult) -> dict[int, int]:
    (prompt, _category), = result.decision.prompts
    rep = analysis.sweep_report(store, study.prompt_group(result.study_id, prompt), plot=False)
    return {r.draft_max: r.summary.pairs for r in rep.groups[0].rows}


def test_blocks_go_to_the_setups_still_in_the_running_and_the_answer_is_near_the_true_best(fake_models) -> None:
    engine = FakeEngine(drift=0.0, noise=NOISE, alpha=0.8, draft_cost=0.08)
    store = Store.open()
    result = study.run_study(exp(3), study.setups_for(GRID), engine, store, budget.Budget(pairs=120))
    spent = pairs_at(store, result)
    assert result.stop in ("settled", "budget", "nothing to measure") and result.pairs == sum(spent.values()) <= 120
    assert set(spent) == set(GRID["draft_max"])  # the program counts no positions: every length is measured
    assert max(spent.values()) > min(spent.values())  # the lengths that trail stop; the rest get more blocks
    assert result.stopped and set(result.stopped) <= {f"draft {k}" for k in GRID["draft_max"]}
    decision = result.decision.decision
    true_best = max(engine.speedup_of(k) for k in GRID["draft_max"])
    assert decision.chosen is not None
    k = int(decision.chosen.label.split()[1])
    assert engine.speedup_of(k) >= true_best * 0.95, (k, engine.speedup_of(k), true_best)


def test_a_rerun_resumes_with_every_block_it_had(fake_models) -> None:
    class Interrupting(FakeEngine):
        limit = 1_000_000

        def measure(self, case, mode, log_path):  # type: ignore[no-untyped-def]
            if len(self.calls) >= self.limit:
                raise KeyboardInterrupt
            return super().measure(case, mode, log_path)

    engine = Interrupting(drift=0.0, noise=NOISE)
    engine.limit = 30  # inside the second block, after the first's 2 lengths (and the costs)
    store = Store.open()
    setups = study.setups_for(GRID)
    with pytest.raises(KeyboardInterrupt):
        study.run_study(exp(3), setups, engine, store, budget.Budget(pairs=60))
    before = {r["point_key"]: r for r in store.runs(kind="sweep") if r["status"] in ("ok", "differs")}
    assert len(before) >= 2
    engine.limit = 1_000_000
    result = study.run_study(exp(3), setups, engine, store, budget.Budget(pairs=60))
    after = pairs_at(store, result)
    assert all(after[k] >= 1 for k in GRID["draft_max"])  # nothing measured is lost
    for key, row in before.items():  # every kept run goes on with its ratios
        assert Summary.from_dict(store.run(result.runs[(result.decision.prompts[0][0], key)])["summary"]).pairs \
            >= Summary.from_dict(row["summary"]).pairs


def test_the_budget_ends_it_and_says_so(fake_models) -> None:
    engine = FakeEngine(drift=0.0, noise=(1.0, 0.8, 1.25, 0.9, 1.15))  # too noisy to settle in 22 runs
    result = study.run_study(exp(3), study.setups_for(GRID), engine, Store.open(), budget.Budget(pairs=22))
    assert result.stop == "budget" and result.pairs <= 22 and "the budget is spent" in result.render()


def test_bad_budgets_are_one_line_each() -> None:
    assert budget.parse_budget("10m") == budget.Budget(seconds=600)
    assert budget.parse_budget("90s") == budget.Budget(seconds=90)
    assert budget.parse_budget("40") == budget.Budget(pairs=40) == budget.parse_budget("40 pairs")
    for bad in ("0", "0m", "soon", "-3", "2.5", ""):
        with pytest.raises(LlamaspecError, match="--budget"):
            budget.parse_budget(bad)


def test_the_cli_refuses_a_budget_smaller_than_the_first_block_before_measuring(tmp_path, fake_models) -> None:
    from fakes import fake_bin_dir

    from llamaspec.cli import main

    # programs that would measure (recorded real output), so that only the budget can stop it
    result = CliRunner().invoke(main, ["sweep", "smollm2-quicksort", "--draft", "1..16", "--budget", "1",
                                       "--bin-dir", str(fake_bin_dir(tmp_path / "bin"))])
    said = [line for line in result.output.splitlines() if line.startswith(("Error: ", "Hint: "))]
    assert result.exit_code != 0 and len(said) == 2, result.output
    assert said[0].startswith("Error: --budget 1 runs is too small: the first block alone measures 2"), result.output
    assert said[1].startswith("Hint: give at least --budget 2"), result.output
    assert Store.open().runs(kind="sweep") == []  # refused before anything was measured
    result = CliRunner().invoke(main, ["sweep", "smollm2-quicksort", "--p-min", "0.5,0.9", "--fixed-grid", "--budget", "10m"])
    assert result.exit_code != 0 and "--budget is for the adaptive study" in result.output
