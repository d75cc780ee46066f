"""``llamaspec models ...``: thin commands, data on stdout, one-line errors with hints on stderr."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner
from models_factory import tiny_gguf, write_catalog

from llamaspec.cli import main

HEAVY = ("gguf", "huggingface_hub", "torch", "transformers", "numpy", "yaml")


def test_help_imports_nothing_heavy() -> None:
    code = ("import sys\nfrom llamaspec.cli import main\ntry:\n    main(['models', '--help'])\nexcept SystemExit:\n    pass\n"
            f"print(sorted(m for m in {HEAVY!r} if m in sys.modules), file=sys.stderr)")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert done.stderr.strip().splitlines()[-1] == "[]"
    assert "check-pair" in done.stdout


@pytest.mark.parametrize("command", ["list", "show", "fetch", "check-pair"])
def test_every_command_help_ends_with_an_example(command: str) -> None:
    out = CliRunner().invoke(main, ["models", command, "-h"]).output
    help_lines = [line.strip() for line in out.split("Options:")[0].splitlines() if line.strip()]
    assert help_lines[-1].startswith(f"Example: llamaspec models {command}")


def test_list_and_show_a_fetched_model(home: Path, tmp_path: Path) -> None:
    src = tiny_gguf(tmp_path / "tiny.gguf")
    write_catalog(home, {"tiny": {"source": {"kind": "path", "path": str(src), "type": "f32"}, "variants": ["f32", "q4_0"]}},
                  default_pair={"target": "tiny:f32", "draft": "tiny:q4_0", "draft_max": 3})
    runner = CliRunner()
    fetched = runner.invoke(main, ["models", "fetch", "tiny", "--variant", "f32"])
    assert fetched.exit_code == 0, fetched.output
    assert "tiny:f32 (made)" in fetched.stdout and "SPM (llama), 265 tokens" in fetched.stdout
    again = runner.invoke(main, ["models", "fetch", "tiny", "--variant", "f32"])
    assert "tiny:f32 (already there)" in again.stdout
    assert "nothing to do: f32 already fetched" in again.stderr
    named = runner.invoke(main, ["models", "fetch", "tiny:f32"])  # NAME:VARIANT, as everywhere else
    assert named.exit_code == 0 and "tiny:f32 (already there)" in named.stdout

    table = runner.invoke(main, ["models", "list"]).stdout.splitlines()
    assert table[0].split() == ["MODEL", "VARIANT", "ON", "DISK", "ARCH", "PARAMS", "TYPE", "CTX", "VOCAB", "BOS/EOS", "SOURCE"]
    # 2 x 265 x 64 (embeddings, output) + 4 x 64 x 64 + 3 x 128 x 64 + 3 norms of 64 = 75,072
    assert table[1].split()[:9] == ["tiny", "f32", "yes", "llama", "75.1K", "F32", "256", "SPM", "265"]
    assert table[2].split()[:3] == ["tiny", "q4_0", "no"]
    assert "default offline pair: target tiny:f32, draft tiny:q4_0, draft length 3" in table[-1]

    listed = json.loads(runner.invoke(main, ["models", "list", "--json"]).stdout)
    row = listed["models"][0]
    assert (row["name"], row["variant"], row["on_disk"], row["vocab_type"], row["vocab_size"]) == ("tiny", "f32", True, "SPM", 265)
    assert listed["default_pair"] == {"target": "tiny:f32", "draft": "tiny:q4_0", "draft_max": 3, "note": ""}

    shown = runner.invoke(main, ["models", "show", "tiny"]).stdout
    assert "tiny:q4_0: not on disk (llamaspec models fetch tiny --variant q4_0)" in shown
    assert "BOS / EOS:      1 / 2 (add BOS true, add EOS false)" in shown
    as_json = json.loads(runner.invoke(main, ["models", "show", "tiny:f32", "--json"]).stdout)
    assert as_json["on_disk"]["f32"]["metadata"]["context_length"] == 256


def test_show_any_gguf_file(tmp_path: Path) -> None:
    path = tiny_gguf(tmp_path / "some.gguf")
    shown = CliRunner().invoke(main, ["models", "show", str(path), "--json"])
    data = json.loads(shown.stdout)
    assert data["metadata"]["vocab"]["type"] == "SPM" and data["path"] == str(path)


def test_errors_are_one_line_and_a_hint(home: Path, tmp_path: Path) -> None:
    write_catalog(home, {"tiny": {"source": {"kind": "path", "path": "x.gguf", "type": "f32"}, "variants": ["f32"]}})
    done = CliRunner().invoke(main, ["models", "fetch", "nope"])
    assert done.exit_code == 1
    assert done.stderr.splitlines() == [f"Error: unknown model 'nope' (not in {home / 'catalog.yaml'})",
                                        "Hint: known models: tiny; `llamaspec models list` shows them"]
    broken = tmp_path / "broken.gguf"
    broken.write_bytes(b"GGUF\x03\x00")
    done = CliRunner().invoke(main, ["models", "show", str(broken)])
    assert done.exit_code == 1 and done.stderr.startswith(f"Error: {broken} is not a usable GGUF file")


def test_check_pair(tmp_path: Path) -> None:
    spm = tiny_gguf(tmp_path / "spm.gguf")
    spm2 = tiny_gguf(tmp_path / "spm2.gguf", seed=4)
    bpe = tiny_gguf(tmp_path / "bpe.gguf", tokenizer="gpt2", pre="smollm", add_bos=False)
    ok = CliRunner().invoke(main, ["models", "check-pair", str(spm), str(spm2)])
    assert ok.exit_code == 0 and ok.stdout.startswith("ok: llama.cpp accepts spm2.gguf as a draft for spm.gguf")
    bad = CliRunner().invoke(main, ["models", "check-pair", str(spm), str(bpe)])
    assert bad.exit_code == 1
    assert "Error: llama.cpp would refuse draft bpe.gguf for target spm.gguf: vocabulary type differs: " \
           "target SPM (llama), draft BPE (gpt2)" in bad.stderr
