"""The transformers backend on a tiny Llama pair made here, with the real transformers generation
on the CPU: baseline against assisted and prompt-lookup generation, the counters, pinned assistant
settings, universal assisted decoding, and each refusal."""

from __future__ import annotations

import dataclasses
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from llamaspec.base.errors import LlamaspecError
from llamaspec.measure.contract import EngineOptions, ModelPath, ResolvedCase
from llamaspec.measure.settings import Settings

pytest.importorskip("transformers")
pytestmark = pytest.mark.hf

PROMPT = "def quick sort the list"


@pytest.fixture(scope="module")
def pair(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    import hf_factory

    return hf_factory.pair(tmp_path_factory.mktemp("pair"))


@pytest.fixture(scope="module")
def other_pair(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    import hf_factory

    return hf_factory.pair(tmp_path_factory.mktemp("other"), other_tokenizer=True)


@pytest.fixture(scope="module")
def backend():
    from llamaspec.hf.runner import open_engine

    opened = open_engine(EngineOptions(accel="cpu"))
    yield opened
    opened.close()


def case(target: Path, draft: Path | None, **settings) -> ResolvedCase:
    chosen = Settings(**{"n_predict": 24, "threads": 1, "draft_max": 4, "draft_p_min": 0.0, **settings}).with_defaults()
    return ResolvedCase("exp", "case", ModelPath("target:hf", str(target)),
                        ModelPath("assistant:hf", str(draft)) if draft else None, PROMPT, None, chosen)


def test_assisted_generation_is_lossless_and_counted(backend, pair, tmp_path: Path) -> None:
    c = case(*pair)
    backend.check(c)
    base = backend.measure(c, "baseline", tmp_path / "b.log")
    spec = backend.measure(c, "speculative", tmp_path / "s.log")
    assert base.ok and spec.ok, (base.error, spec.error)
    assert base.n_predict == spec.n_predict == 24 and base.tokens is not None and len(base.tokens) == 24
    assert spec.tokens == base.tokens  # greedy with an assistant is greedy without one
    tokenizer = backend._loaded[next(iter(backend._loaded))].tokenizer
    assert base.text == tokenizer.decode(list(base.tokens), skip_special_tokens=True)
    # the baseline: one token per target call, no counters
    assert base.stats["target_calls"] == 24 and base.stats["decode_tokens"] == 23
    assert base.n_drafted is None and base.rounds is None and base.draft_policy == "none"
    # the assistant: each round drafts up to 4, some accepted and some not (the pair agrees at times)
    rounds = spec.stats["per_round"]
    assert spec.rounds == len(rounds) == spec.stats["target_calls"] < 24
    assert spec.n_drafted == sum(d for d, _ in rounds) and spec.n_accept == sum(a for _, a in rounds)
    assert all(0 <= a <= d <= 4 for d, a in rounds)
    assert 0 < spec.n_accept < spec.n_drafted
    assert spec.n_predict == spec.rounds + spec.n_accept  # each call: its accepted drafts plus one token of its own
    assert spec.acceptance == spec.n_accept / spec.n_drafted and 0 < spec.acceptance < 1  # a fraction
    assert spec.mean_accepted == pytest.approx(spec.n_accept / spec.rounds)
    # acceptance by position: the rounds that drafted position i and those accepted through it
    assert spec.drafted_by_position == tuple(sum(d >= i for d, _ in rounds) for i in range(1, 5))
    assert spec.accepted_by_position == tuple(sum(a >= i for _, a in rounds) for i in range(1, 5))
    assert sum(spec.drafted_by_position) == spec.n_drafted and sum(spec.accepted_by_position) == spec.n_accept
    assert spec.draft_policy == "capped" and spec.draft_len == 4 and spec.program == "transformers-assisted"
    # threshold 0: every round drafts 4, except where less is left of max_new_tokens (less one)
    made = 0
    for drafted, accepted in rounds:
        assert drafted == min(4, 24 - made - 1)
        made += accepted + 1
    assert spec.stats["assistant"]["candidate_generator"] == "AssistedCandidateGenerator"
    assert spec.stats["decode_tokens"] == 24 - spec.stats["first_call_tokens"]
    for m in (base, spec):
        assert m.speed_basis and m.speed_basis.startswith("streamer timestamps")
        assert m.decode_tps and m.decode_tps > 0 and m.encode_tps and m.wall_seconds > 0
        assert m.decode_tps == pytest.approx(m.stats["decode_tokens"] / m.stats["decode_seconds"], rel=1e-12)
    assert '"mode": "speculative"' in (tmp_path / "s.log").read_text()


def test_draft_mode_times_the_assistant_alone(backend, pair, tmp_path: Path) -> None:
    m = backend.measure(case(*pair), "draft", tmp_path / "d.log")
    assert m.ok and m.n_predict == 24 and m.stats["model"] == "assistant:hf" and m.n_drafted is None


def test_batch_mode_times_the_target_s_forward_passes_at_the_run_s_depth(backend, pair, tmp_path: Path) -> None:
    c = case(*pair)
    m = backend.measure(c, "batch", tmp_path / "batch.log")
    assert m.ok, m.error
    batch = m.stats["batch_ms"]
    assert sorted(batch) == list(range(1, 18)) and all(ms > 0 for ms in batch.values())
    assert m.stats["depth"] == m.n_prompt + 24 // 2 and m.stats["model"] == "target:hf"
    assert m.decode_tps == pytest.approx(1000.0 / batch[1]) and m.speed_basis.startswith("torch: one forward pass")
    assert '"mode": "batch"' in (tmp_path / "batch.log").read_text()


def test_every_timed_forward_pass_sees_the_same_depth(pair) -> None:
    """The cache is cropped back after each pass: a pass over 5 tokens after a 40-token context
    attends to 40 cached tokens, however many passes came before it."""
    import torch
    from transformers import AutoModelForCausalLM

    from llamaspec.hf import generation

    model = AutoModelForCausalLM.from_pretrained(str(pair[0]))
    seen: list[tuple[int, int]] = []  # (cached tokens, new tokens) at each forward pass
    original = model.forward

    def spy(input_ids=None, past_key_values=None, **kwargs):  # type: ignore[no-untyped-def]
        seen.append((past_key_values.get_seq_length(), int(input_ids.shape[1])))
        out = original(input_ids=input_ids, past_key_values=past_key_values, **kwargs)
        assert out.logits.shape[1] == input_ids.shape[1]  # logits for every token, as a verification
        return out

    model.forward = spy
    context = torch.arange(3, 43).unsqueeze(0)
    got = generation.time_forward(model, context, (1, 5, 17), repetitions=2)
    assert sorted(got) == [1, 5, 17] and all(ms > 0 for ms in got.values())
    assert seen[0] == (0, 40)  # the context, once
    assert seen[1:] == [(40, n) for _ in range(3) for n in (1, 5, 17)]  # a warm-up pass, then 2 timed


def test_assistant_settings_are_pinned_each_call(backend, pair, tmp_path: Path) -> None:
    """heuristic carries its learnt length over to the next call in transformers; here every
    measurement starts from the case's settings."""
    c = case(*pair, draft_schedule="heuristic", draft_max=2)
    first = backend.measure(c, "speculative", tmp_path / "1.log")
    second = backend.measure(c, "speculative", tmp_path / "2.log")
    for m in (first, second):
        assert m.ok and m.draft_policy == "adaptive"
        assert m.stats["assistant"]["start"] == {"num_assistant_tokens": 2, "num_assistant_tokens_schedule": "heuristic",
                                                 "assistant_confidence_threshold": 0.0}
    length = 2.0  # transformers' heuristic, replayed on the counted rounds: +2 after a fully accepted draft, else -1
    for drafted, accepted in first.stats["per_round"]:
        length = length + 2 if accepted == drafted else max(1.0, length - 1)
    assert first.stats["assistant"]["end"]["num_assistant_tokens"] == length != 2
    assert first.tokens == second.tokens and first.stats["per_round"] == second.stats["per_round"]
    # unset draft_p_min: the assistant's own threshold (transformers' default), drafting capped by it
    default = backend.measure(case(*pair, draft_p_min=None), "speculative", tmp_path / "3.log")
    assert default.stats["assistant"]["start"]["assistant_confidence_threshold"] == pytest.approx(0.4)
    assert default.draft_policy == "capped" and default.tokens == first.tokens


def test_confidence_retuning_is_off(backend, pair, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """transformers re-tunes the threshold with scikit-learn's roc_curve when it finds scikit-learn;
    the counting subclass keeps that path shut, so the threshold measured is the one set."""
    from transformers.generation import candidate_generator

    calls: list[int] = []

    def roc_curve(matches, probs):  # what the re-tuning would call; it must not be reached
        calls.append(1)
        raise AssertionError("re-tuning ran")

    monkeypatch.setattr(candidate_generator, "is_sklearn_available", lambda: True)
    monkeypatch.setattr(candidate_generator, "roc_curve", roc_curve, raising=False)
    m = backend.measure(case(*pair, draft_p_min=0.05, n_predict=32), "speculative", tmp_path / "s.log")
    assert m.ok, m.error
    assert not calls
    assert m.stats["assistant"]["end"]["assistant_confidence_threshold"] == pytest.approx(0.05)


def test_prompt_lookup(backend, pair, tmp_path: Path) -> None:
    target, _ = pair
    c = case(target, None, spec_type="prompt-lookup", draft_max=3, n_predict=32)
    backend.check(c)
    base = backend.measure(c, "baseline", tmp_path / "b.log")
    spec = backend.measure(c, "speculative", tmp_path / "s.log")
    assert base.ok and spec.ok and base.n_predict == 32
    # transformers' prompt lookup may overshoot max_new_tokens by a token or so (as llama-speculative
    # overshoots n_predict): the generation is reported as made, and is lossless over the common length
    assert 32 <= spec.n_predict <= 32 + 3 and spec.tokens[:32] == base.tokens
    assert spec.stats["assistant"]["candidate_generator"] == "PromptLookupCandidateGenerator"
    assert spec.draft_policy == "capped" and spec.draft_len == 3
    assert spec.rounds == spec.stats["target_calls"] and spec.n_predict == spec.rounds + spec.n_accept
    assert spec.n_accept > 0  # the tiny target repeats itself: its own output is there to look up


def test_a_baseline_whose_model_asks_for_prompt_lookup_drafts_and_is_refused(backend, tmp_path: Path) -> None:
    """generate() without an assistant still drafts when the target's own generation_config asks for
    prompt lookup: the engine counts that baseline's drafting, and the run core refuses it."""
    import hf_factory
    from transformers import GenerationConfig

    from llamaspec.measure import pairs

    target, assistant = hf_factory.pair(tmp_path / "pair")
    config = GenerationConfig.from_pretrained(target)
    config.prompt_lookup_num_tokens = 3
    config.save_pretrained(target)
    backend.close()  # load the target again, with its prompt-lookup default
    m = pairs.measure_one(backend, case(target, assistant, n_predict=32), "baseline", 0, tmp_path / "b.log")
    assert m.stats is not None and m.stats["candidate_generator"] == "PromptLookupCandidateGenerator"
    assert m.n_drafted and not m.ok and m.error_kind == "drafted"
    assert (m.error or "").startswith(f"the baseline drafted {m.n_drafted} tokens: speculation was on in the target-only run")
    backend.close()  # the next test loads its own models


def test_sampling_is_seeded(backend, pair, tmp_path: Path) -> None:
    c = case(*pair, temperature=0.8, seed=3)
    one, two = (backend.measure(c, "baseline", tmp_path / f"{i}.log") for i in range(2))
    other = backend.measure(dataclasses.replace(c, settings=dataclasses.replace(c.settings, seed=4)), "baseline",
                            tmp_path / "3.log")
    assert one.tokens == two.tokens != other.tokens


def test_other_tokenizer_needs_universal_mode(backend, other_pair, tmp_path: Path) -> None:
    c = case(*other_pair)
    with pytest.raises(LlamaspecError, match=r"have different tokenizers \(300 vs 280 tokens\)") as info:
        backend.check(c)
    assert "universal_assisted: true" in (info.value.hint or "")
    u = case(*other_pair, universal_assisted=True)
    backend.check(u)
    base = backend.measure(u, "baseline", tmp_path / "b.log")
    spec = backend.measure(u, "speculative", tmp_path / "s.log")
    assert spec.ok, spec.error
    assert spec.tokens == base.tokens
    assert spec.stats["assistant"]["candidate_generator"] == "AssistedCandidateGeneratorDifferentTokenizers"
    assert spec.rounds == spec.stats["target_calls"] and spec.n_drafted is not None
    # transformers 5 rolls this generator's assistant cache back by a length in target tokens: on this
    # pair generate() then fails (a round with no new token for the assistant) unless llamaspec counts
    # it in the assistant's tokens, and the record says it did.
    import transformers

    corrected = spec.stats["assistant"].get("cache_rollback_corrected")
    if int(transformers.__version__.split(".")[0]) >= 5:
        assert corrected is not None and corrected["rounds"] >= 1 and len(corrected["by_tokens"]) == corrected["rounds"]
    else:
        assert corrected is None


def test_only_transformers_5s_generator_for_other_tokenizers_gets_its_rollback_corrected() -> None:
    import transformers
    from transformers.generation import candidate_generator as cg

    from llamaspec.hf import generation

    five = int(transformers.__version__.split(".")[0]) >= 5
    assert generation.rolls_back_in_target_tokens(cg.AssistedCandidateGeneratorDifferentTokenizers) is five
    assert not generation.rolls_back_in_target_tokens(cg.AssistedCandidateGenerator)
    assert not generation.rolls_back_in_target_tokens(cg.PromptLookupCandidateGenerator)
    assert not generation.rolls_back_in_target_tokens(cg.UniversalSpeculativeDecodingGenerator)


def test_same_size_other_tokenizer_cannot_run(backend, tmp_path: Path) -> None:
    """transformers takes equal vocabulary sizes for one tokenizer: such a pair is refused, with or
    without universal mode (its drafts would be other tokens' ids)."""
    import hf_factory

    target, assistant = hf_factory.pair(tmp_path, other_tokenizer=True, assistant_vocab=300)
    for universal in (False, True):
        with pytest.raises(LlamaspecError, match="different tokenizers .* vocabularies of the same size \\(300\\)"):
            backend.check(case(target, assistant, universal_assisted=universal))


def test_the_record_says_what_generate_was_asked(backend, pair, tmp_path: Path) -> None:
    m = backend.measure(case(*pair), "speculative", tmp_path / "s.log")
    assert m.argv[0] == "generate" and "max_new_tokens=24" in m.argv and f"assistant_model={pair[1]}" in m.argv


@pytest.mark.parametrize(("settings", "message"), [
    ({"load_in": "8bit"}, "load_in: 8bit needs a CUDA GPU"),
    ({"load_in": "4bit"}, "load_in: 4bit needs a CUDA GPU"),
    ({"load_in": "8bit", "device": "cuda"}, "load_in: 8bit needs a CUDA GPU \\(bitsandbytes\\), and torch sees none here"),
    ({"device": "cuda"}, "torch sees no CUDA GPU"),
    ({"device": "tpu"}, "unknown device 'tpu'"),
    ({"draft_min": 2}, "no equivalent of draft_min"),
    ({"flash_attn": "on", "batch_size": 64}, "no equivalent of batch_size, flash_attn"),
    ({"spec_type": "ngram-simple"}, "spec_type 'ngram-simple' is not a transformers mode"),
])
def test_refusals(backend, pair, settings, message) -> None:
    with pytest.raises(LlamaspecError, match=message):
        backend.check(case(*pair, **settings))


def test_no_assistant_without_prompt_lookup(backend, pair) -> None:
    with pytest.raises(LlamaspecError, match="has no assistant model"):
        backend.check(case(pair[0], None))


def test_measure_reports_failures_instead_of_raising(backend, pair, tmp_path: Path) -> None:
    m = backend.measure(case(*pair, load_in="8bit"), "speculative", tmp_path / "x.log")
    assert not m.ok and "needs a CUDA GPU" in (m.error or "")
    m = backend.measure(case(*pair), "prompt", tmp_path / "y.log")  # a mode it does not declare
    assert not m.ok and "does not measure mode 'prompt'" in (m.error or "")


def test_corrupt_model_is_refused_in_check(backend, pair, tmp_path: Path) -> None:
    broken = tmp_path / "broken"
    shutil.copytree(pair[0], broken)
    weights = broken / "model.safetensors"
    weights.write_bytes(weights.read_bytes()[: weights.stat().st_size // 3])
    with pytest.raises(LlamaspecError, match="cannot load target:hf") as info:
        backend.check(case(broken, pair[1]))
    assert "fetch them again" in (info.value.hint or "")


def test_missing_extra_names_the_install(monkeypatch: pytest.MonkeyPatch) -> None:
    from llamaspec.hf import runner as hf_runner
    from llamaspec.registry import engines

    monkeypatch.setitem(sys.modules, "transformers", None)  # what an environment without the extra gives
    with pytest.raises(LlamaspecError, match="needs torch and transformers") as info:
        engines.open_engine("transformers")
    assert info.value.hint == "pip install 'llamaspec[hf]'"
    with pytest.raises(LlamaspecError):
        hf_runner.TransformersEngine()


def test_heavy_imports_stay_out() -> None:
    """`llamaspec --help` and importing the backend module do not import torch or transformers."""
    code = ("import sys; from click.testing import CliRunner; from llamaspec.cli import main; "
            "r = CliRunner().invoke(main, ['--help']); assert r.exit_code == 0, r.output; "
            "import llamaspec.hf.runner, llamaspec.hf.models; "
            "heavy = [m for m in ('torch', 'transformers') if m in sys.modules]; assert not heavy, heavy")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]


def test_an_assistant_that_samples_by_default_drafts_greedily(backend, tmp_path: Path) -> None:
    """transformers copies an assistant's own decoding defaults (do_sample=True, ...) into its drafts
    when the call leaves them at the global default: the draft would sample while the target decodes
    greedily, and the acceptance measured would be the sampler's, not the pair's."""
    import hf_factory
    from transformers import GenerationConfig

    target, assistant = hf_factory.pair(tmp_path / "pair")
    greedy = backend.measure(case(target, assistant), "speculative", tmp_path / "g.log")
    sampling = GenerationConfig.from_pretrained(assistant)
    sampling.do_sample, sampling.temperature, sampling.top_k = True, 3.0, 0
    sampling.save_pretrained(assistant)
    backend.close()  # load the assistant again, with its sampling defaults
    spec = backend.measure(case(target, assistant), "speculative", tmp_path / "s.log")
    assert greedy.ok and spec.ok, (greedy.error, spec.error)
    assert spec.stats["assistant"]["decoding_defaults_overridden"] == {"do_sample": True, "temperature": 3.0, "top_k": 0}
    assert spec.stats["per_round"] == greedy.stats["per_round"] and spec.n_accept == greedy.n_accept > 0
