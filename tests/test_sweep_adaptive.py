"""The adaptive study on one prompt (llamaspec.studies.study.run_study: `llamaspec sweep NAME --draft ...`)
on an in-process engine whose speed depends on the draft length it is asked for, on a noisy
machine: pairs go where the decision is uncertain, the study stops when it is settled or the
budget is spent, and an interruption loses no pair."""

from __future__ import annotations

import pytest
from click.testing import CliRunner
from fakes import FakeEngine
from test_core import exp, fake_models  # noqa: F401  (fixture)

from llamaspec.base.errors import LlamaspecError
from llamaspec.store.results import Store
from llamaspec.studies import study, sweep
from llamaspec.views import analysis

GRID = {"draft_max": tuple(range(1, 17))}
NOISE = (1.0, 0.93, 1.07, 0.96, 1.05, 0.94)  # a machine whose speed wobbles by several per cent


def pairs_at(store: Store, result: study.StudyResult) -> dict[int, int]:
    (prompt, _category), = result.decision.prompts
    rep = analysis.sweep_report(store, study.prompt_group(result.study_id, prompt), plot=False)
    return {r.draft_max: r.summary.pairs for r in rep.groups[0].rows}


def test_pairs_go_to_the_contenders_and_the_answer_is_near_the_true_best(fake_models) -> None:  # noqa: F811
    engine = FakeEngine(drift=0.0, noise=NOISE, alpha=0.8, draft_cost=0.08)
    store = Store.open()
    result = study.run_study(exp(3), study.setups_for(GRID), engine, store, sweep.Budget(pairs=48))
    spent = pairs_at(store, result)
    assert result.stop in ("settled", "budget", "nothing to measure") and result.pairs == sum(spent.values()) <= 48
    assert result.fixed_grid_pairs == 16 * 3
    assert set(spent) == set(GRID["draft_max"])  # the program counts no positions: the first pass is every length
    assert min(spent.values()) >= sweep.FIRST_PAIRS
    assert max(spent.values()) > sweep.FIRST_PAIRS  # more pairs somewhere: where the decision was uncertain
    decision = result.decision.decision
    true_best = max(engine.speedup_of(k) for k in GRID["draft_max"])
    assert decision.verdict == "recommend" and decision.chosen is not None
    k = int(decision.chosen.label.split()[1])
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
    setups = study.setups_for(GRID)
    with pytest.raises(KeyboardInterrupt):
        study.run_study(exp(3), setups, engine, store, sweep.Budget(pairs=60))
    before = {r["point_key"]: r for r in store.runs(kind="sweep") if r["status"] in ("ok", "differs")}
    assert len(before) >= 12
    engine.limit = 1_000_000
    calls = len(engine.calls)
    result = study.run_study(exp(3), setups, engine, store, sweep.Budget(pairs=60))
    after = pairs_at(store, result)
    assert all(after[k] >= 1 for k in GRID["draft_max"])  # nothing measured is lost
    kept = sum(analysis.Summary.from_dict(r["summary"]).pairs for r in before.values())
    new_pairs = result.pairs - kept
    # the rerun measured only new pairs (two generations each), a warm-up, and the pair the
    # interruption cut (whose run was not finished: measured again)
    assert 2 * new_pairs <= len(engine.calls) - calls <= 2 * new_pairs + 5


def test_the_budget_ends_it_and_says_so(fake_models) -> None:  # noqa: F811
    engine = FakeEngine(drift=0.0, noise=(1.0, 0.8, 1.25, 0.9, 1.15))  # too noisy to settle in 22 pairs
    result = study.run_study(exp(3), study.setups_for(GRID), engine, Store.open(), sweep.Budget(pairs=22))
    assert result.stop == "budget" and result.pairs <= 22 + study.decide.STEP and "the budget is spent" in result.render()


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
    assert result.exit_code != 0 and len(said) == 2, result.output
    # llama-speculative counts no acceptance by position: once the longest two say so, the first pass
    # is every length, and the budget cannot pay for it
    assert said[0] == ("Error: --budget 5 pairs is too small: the program counts no acceptance by draft position, "
                       "so the first pass measures every length: 16 pairs"), result.output
    assert said[1].startswith("Hint: give at least --budget 16 (the pairs measured are stored"), result.output
    # the longest two, stored (the recorded output drafts 8, not 15 or 16: the drafted-length check
    # fails them, as it should a program that drafts what it was not asked)
    assert sorted(r["draft_max"] for r in Store.open().runs(kind="sweep")) == [15, 16]
    result = CliRunner().invoke(main, ["sweep", "smollm2-quicksort", "--draft", "1..16", "--budget", "1",
                                       "--bin-dir", str(fake_bin_dir(tmp_path / "bin"))])
    assert result.exit_code != 0 and "Error: --budget 1 pairs is too small: the first pass alone measures 2" in result.output
    result = CliRunner().invoke(main, ["sweep", "smollm2-quicksort", "--p-min", "0.5,0.9", "--fixed-grid", "--budget", "10m"])
    assert result.exit_code != 0 and "--budget is for the adaptive study" in result.output
