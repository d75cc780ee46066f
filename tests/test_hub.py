"""Downloads over HTTP, through a Hugging Face hub on loopback (``hub_server.Hub``) and the real
huggingface_hub client: pins, the disk and time plan, and the faults a hub serves. Then the
write-up's own commands end to end (``models fetch``, ``run quicksort-python``, ``sweep`` over Alpaca
with Alpaca) on the catalog's real repo names holding tiny checkpoints made here.

Nothing here reaches the real hub: HF_ENDPOINT is the loopback server, HF_HOME a temp folder.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import shutil
import subprocess
import sys
from collections import namedtuple
from pathlib import Path

import pytest
import yaml
from hub_server import Hub
from models_factory import hf_checkpoint, tiny_gguf

from llamaspec.base.errors import LlamaspecError
from llamaspec.models import catalog as catalogs
from llamaspec.models import pins, store

ROOT = Path(__file__).resolve().parent.parent
CODELLAMA = "codellama/CodeLlama-7b-hf"
TINYLLAMA = "TinyLlama/TinyLlama-1.1B-python-v0.1"

pytestmark = pytest.mark.hub




@pytest.fixture
def checkpoints(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """A tiny CodeLlama-shaped target (2 layers) and a TinyLlama-shaped draft (1 layer: the target's
    first, its embeddings and head) sharing one SentencePiece vocabulary with byte fallback, as the
    write-up's pair does. They are made with sentencepiece and safetensors (the convert extra): on
    a clone with the dev extra alone the tests that download them are skipped, saying so."""
    for module in ("sentencepiece", "safetensors"):
        pytest.importorskip(module, reason=f"the tiny checkpoints need {module}: the convert extra "
                                           "(pip install -e '.[convert]', or make setup-convert)")
    root = tmp_path_factory.mktemp("checkpoints")
    target = hf_checkpoint(root / "target", seed=0, byte_fallback=True)
    draft = hf_checkpoint(root / "draft", seed=0, tokenizer_from=target, layers=1)  # the target's first layer
    return target, draft


def _catalog(home: Path) -> catalogs.Catalog:
    shutil.copyfile(ROOT / "models" / "catalog.yaml", home / "catalog.yaml")
    return catalogs.load(home / "catalog.yaml")


def _sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def _snapshot_files(cache: Path, repo: str) -> dict[str, list[str]]:
    root = cache / f"models--{repo.replace('/', '--')}" / "snapshots"
    return {c.name: sorted(p.name for p in c.iterdir()) for c in root.iterdir()} if root.is_dir() else {}


# --- pins ---------------------------------------------------------------------------------------


def test_first_fetch_pins_main_and_later_fetches_use_the_pin(hub: Hub, home: Path, checkpoints, tmp_path: Path) -> None:
    cat = _catalog(home)
    entry = cat.entry("codellama-7b")
    first = hub.add(CODELLAMA, checkpoints[0])
    folder, origin = store._checkpoint(entry, ("f16",))
    assert origin == {"kind": "hf", "repo": CODELLAMA, "revision": "main", "commit": first}
    lock = pins.load(home / "catalog.lock")
    assert lock["codellama-7b"].commit == first and lock["codellama-7b"].revision == "main"
    assert (home / "catalog.lock").read_text().startswith("# Commits that llamaspec resolved")
    # main moves on the hub: the pin holds, here and on a machine with an empty cache and the same lock file
    second = hub.add(CODELLAMA, {**{p.name: p.read_bytes() for p in checkpoints[0].iterdir()}, "model.safetensors":
                                 (checkpoints[1] / "model.safetensors").read_bytes()})
    shutil.rmtree(tmp_path / "hf-cache")
    hub.requests.clear()
    folder, origin = store._checkpoint(entry, ("f16",))
    assert origin["commit"] == first and folder.name == first
    assert {r.path for r in hub.requests if "/resolve/" in r.path} == {
        f"/{CODELLAMA}/resolve/{first}/{name}" for name in ("config.json", "model.safetensors", "tokenizer.model")}
    change = store.hub_pin(entry, cat)
    assert (change.old, change.new, change.weights_differ) == (first, second, ["model.safetensors"])
    assert change.describe() == (f"codellama-7b: {CODELLAMA} main moved {first[:12]} -> {second[:12]} "
                                 "(weights differ: model.safetensors)")
    assert pins.load(home / "catalog.lock")["codellama-7b"].commit == first  # reported, not moved
    moved = store.hub_pin(entry, cat, update=True)
    assert (moved.old, moved.new) == (first, second)
    assert pins.load(home / "catalog.lock")["codellama-7b"].commit == second
    assert store._checkpoint(entry, ("f16",))[1]["commit"] == second


def test_a_file_made_from_another_commit_than_the_pin_is_made_again(hub: Hub, home: Path, tmp_path: Path,
                                                                     caplog: pytest.LogCaptureFixture) -> None:
    """The lock file moved (a colleague's --update, pulled from git): the GGUF made from the old
    commit is not the model asked for any more; its record still names the old commit."""
    cat = _catalog(home)
    old, new = "a" * 40, "b" * 40
    pins.save(home / "catalog.lock", pins.Pin("codellama-7b", CODELLAMA, "main", old))
    gguf = tiny_gguf(tmp_path / "tiny.gguf")
    entry = cat.entry("codellama-7b")
    made = store._produce(entry, "f16", lambda tmp: (shutil.copyfile(gguf, tmp), {"kind": "hf", "commit": old})[1])
    assert store.finished("codellama-7b", "f16") == made
    pins.save(home / "catalog.lock", pins.Pin("codellama-7b", CODELLAMA, "main", new))
    with caplog.at_level(logging.WARNING):
        assert store.finished("codellama-7b", "f16") is None
    assert (f"codellama-7b:f16 was made from {CODELLAMA}@{old[:12]}, but catalog.lock pins {new[:12]}: "
            "the weights differ") in caplog.text
    assert json.loads(store.record_path(made.path).read_text())["provenance"]["commit"] == old


def test_a_pin_for_another_revision_does_not_apply(hub: Hub, home: Path, checkpoints) -> None:
    cat = _catalog(home)
    pins.save(home / "catalog.lock", pins.Pin("codellama-7b", CODELLAMA, "v0-old-branch", "c" * 40))
    commit = hub.add(CODELLAMA, checkpoints[0])
    assert store.pinned_commit(cat.entry("codellama-7b"), cat) is None
    assert store._checkpoint(cat.entry("codellama-7b"))[1]["commit"] == commit
    assert pins.load(home / "catalog.lock")["codellama-7b"].revision == "main"


# --- disk and time up front -----------------------------------------------------------------------


DiskUsage = namedtuple("DiskUsage", "total used free")


def test_the_plan_is_printed_before_the_download(hub: Hub, home: Path, checkpoints, caplog: pytest.LogCaptureFixture) -> None:
    cat = _catalog(home)
    hub.add(CODELLAMA, checkpoints[0])
    size = sum(p.stat().st_size for p in checkpoints[0].iterdir())
    with caplog.at_level(logging.INFO):
        store._checkpoint(cat.entry("codellama-7b"), ("f16", "q4_0"), home)
    lines = [r.getMessage() for r in caplog.records if r.getMessage().startswith("codellama-7b: ")]
    assert lines[1].startswith(f"codellama-7b: {CODELLAMA}@") and lines[1].endswith(f"{size / 1e6:.1f} MB in 3 files")
    assert lines[2].startswith("codellama-7b: then writes f16 ~") and ", q4_0 ~" in lines[2]
    assert " free" in lines[3] and lines[-1].startswith("codellama-7b: about ")
    assert "LLAMASPEC_DOWNLOAD_MBPS" in lines[-1]


def test_too_little_disk_is_refused_with_the_shortfall_before_any_byte(hub: Hub, home: Path, checkpoints,
                                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    cat = _catalog(home)
    hub.add(CODELLAMA, checkpoints[0])
    monkeypatch.setattr(shutil, "disk_usage", lambda path: DiskUsage(10**12, 10**12 - 10**5, 10**5))
    with pytest.raises(LlamaspecError) as err:
        store._checkpoint(cat.entry("codellama-7b"), ("f16",), home)
    assert err.value.message.startswith("not enough free disk for codellama-7b: ")
    assert "0.1 MB free: " in err.value.message and err.value.message.endswith(" short")
    assert "HF_HOME" in (err.value.hint or "")
    assert [r for r in hub.requests if "/resolve/" in r.path or "/cdn/" in r.path] == []


# --- faults -----------------------------------------------------------------------------------------


def test_a_cut_download_is_not_used_and_resumes_on_the_rerun(hub: Hub, home: Path, checkpoints, tmp_path: Path,
                                                             monkeypatch: pytest.MonkeyPatch) -> None:
    import huggingface_hub.constants as constants

    monkeypatch.setattr(constants, "DOWNLOAD_CHUNK_SIZE", 4096)  # the real 10 MB exceeds a tiny checkpoint
    cat = _catalog(home)
    weights = (checkpoints[0] / "model.safetensors").read_bytes()
    commit = hub.add(CODELLAMA, checkpoints[0])
    hub.cut["model.safetensors"] = len(weights) // 2
    try:
        folder, _ = store._checkpoint(cat.entry("codellama-7b"))
    except LlamaspecError as err:  # huggingface_hub below 1.0: the cut ends the command, the rerun resumes
        assert err.message.startswith(f"the download of checkpoint {CODELLAMA}@{commit} was cut off: ")
        assert "run the command again" in (err.hint or "")
        assert "model.safetensors" not in _snapshot_files(tmp_path / "hf-cache", CODELLAMA).get(commit, [])
        partial = list((tmp_path / "hf-cache").rglob("*.incomplete"))
        assert len(partial) == 1 and 0 < partial[0].stat().st_size < len(weights)
        kept = partial[0].stat().st_size
        folder, _ = store._checkpoint(cat.entry("codellama-7b"))
    else:  # 1.0 and later resume within the same call
        kept = None
    assert (folder / "model.safetensors").read_bytes() == weights
    resumed = hub.gets("model.safetensors")[-1].range
    assert resumed is not None and (kept is None or resumed == f"bytes={kept}-")
    assert 0 < int(resumed.removeprefix("bytes=").removesuffix("-")) < len(weights)


def test_a_gated_repo_names_the_login(hub: Hub, home: Path, checkpoints) -> None:
    cat = _catalog(home)
    hub.add(CODELLAMA, checkpoints[0])
    hub.gated.add(CODELLAMA)
    with pytest.raises(LlamaspecError) as err:
        store._checkpoint(cat.entry("codellama-7b"))
    assert err.value.message.startswith(f"{CODELLAMA}@") and "is gated" in err.value.message
    assert "`hf auth login`" in (err.value.hint or "") and "HF_TOKEN" in (err.value.hint or "")


def test_a_pinned_commit_the_hub_lost_is_one_line(hub: Hub, home: Path, checkpoints) -> None:
    cat = _catalog(home)
    hub.add(CODELLAMA, checkpoints[0])
    pins.save(home / "catalog.lock", pins.Pin("codellama-7b", CODELLAMA, "main", "d" * 40))
    with pytest.raises(LlamaspecError) as err:
        store._checkpoint(cat.entry("codellama-7b"))
    assert err.value.message == f"revision {'d' * 40!r} not found in {CODELLAMA}"
    assert "llamaspec models fetch --update NAME" in (err.value.hint or "")


def test_a_file_that_does_not_match_its_checksum_is_deleted(hub: Hub, home: Path, checkpoints, tmp_path: Path) -> None:
    cat = _catalog(home)
    weights = (checkpoints[0] / "model.safetensors").read_bytes()
    commit = hub.add(CODELLAMA, checkpoints[0])
    hub.corrupt.add("model.safetensors")
    with pytest.raises(LlamaspecError) as err:
        store._checkpoint(cat.entry("codellama-7b"))
    assert err.value.message.startswith(f"model.safetensors from {CODELLAMA}@{commit[:12]} has sha256 ")
    assert err.value.message.endswith(f", the hub says {_sha(weights)}: deleted it from the cache")
    assert "model.safetensors" not in _snapshot_files(tmp_path / "hf-cache", CODELLAMA)[commit]
    assert not list((tmp_path / "hf-cache").rglob(_sha(weights)))
    hub.corrupt.clear()
    folder, _ = store._checkpoint(cat.entry("codellama-7b"))
    assert _sha((folder / "model.safetensors").read_bytes()) == _sha(weights)


def test_a_hub_that_answers_slowly_times_out_in_one_line(hub: Hub, home: Path, checkpoints,
                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    cat = _catalog(home)
    hub.add(CODELLAMA, checkpoints[0])
    monkeypatch.setenv("HF_HUB_ETAG_TIMEOUT", "0.3")
    hub.delay = 3.0
    with pytest.raises(LlamaspecError) as err:
        store._checkpoint(cat.entry("codellama-7b"))
    assert err.value.message == (f"Hugging Face ({hub.url}) did not answer within 0.3 s while downloading "
                                 f"checkpoint {CODELLAMA}@main")
    assert "HF_HUB_ETAG_TIMEOUT" in (err.value.hint or "")
    assert not (home / "catalog.lock").exists()


def test_the_renamed_repo_is_found_under_its_alias(hub: Hub, home: Path, checkpoints) -> None:
    cat = _catalog(home)
    commit = hub.add("PY007/TinyLlama-1.1B-python-v0.1", checkpoints[1])
    _, origin = store._checkpoint(cat.entry("tinyllama-1.1b-python"))
    assert (origin["repo"], origin["commit"]) == ("PY007/TinyLlama-1.1B-python-v0.1", commit)
    assert pins.load(home / "catalog.lock")["tinyllama-1.1b-python"].repo == "PY007/TinyLlama-1.1B-python-v0.1"


# --- the write-up's commands, end to end ------------------------------------------------------------------


def _cli(args: list[str], env: dict[str, str], cwd: Path, timeout: float = 900) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "llamaspec", *args], capture_output=True, text=True, env=env,
                          timeout=timeout, cwd=cwd)


def _project(tmp_path: Path) -> Path:
    """A checkout's models/ and experiments/ (the real catalog and experiments), models made here."""
    root = tmp_path / "project"
    (root / "models").mkdir(parents=True)
    shutil.copyfile(ROOT / "models" / "catalog.yaml", root / "models" / "catalog.yaml")
    shutil.copytree(ROOT / "experiments", root / "experiments")
    return root


def _env(hub: Hub, root: Path) -> dict[str, str]:
    from llamaspec.llamacpp import source

    env = {**os.environ, "LLAMASPEC_ROOT": str(root), "LLAMASPEC_MODELS": str(root / "models"),
           "PYTHONPATH": os.pathsep.join([str(ROOT), *filter(None, [os.environ.get("PYTHONPATH")])])}  # this checkout's code
    env["LLAMASPEC_LLAMACPP"] = str(source.current().tree)  # the pinned tree (its convert_hf_to_gguf.py)
    return env


@pytest.mark.llamacpp
@pytest.mark.convert
@pytest.mark.slow
def test_the_write_up_pair_is_fetched_from_the_hub_and_runs(llama_build, hub: Hub, checkpoints, tmp_path: Path) -> None:
    """`llamaspec models fetch codellama-7b tinyllama-1.1b-python`, then `llamaspec run quicksort-python -n 16`:
    download, convert to f16 with the pinned tree's convert_hf_to_gguf.py, quantize to q4_0, pair check, run,
    the reference comparison."""
    root = _project(tmp_path)
    env = _env(hub, root)
    target = hub.add(CODELLAMA, checkpoints[0])
    draft = hub.add(TINYLLAMA, checkpoints[1])
    fetched = _cli(["models", "fetch", "codellama-7b", "tinyllama-1.1b-python"], env, tmp_path)
    assert fetched.returncode == 0, fetched.stderr[-3000:]
    print(fetched.stderr[-4000:])
    assert "codellama-7b:f16 (made)" in fetched.stdout and "tinyllama-1.1b-python:q4_0 (made)" in fetched.stdout
    assert f"codellama-7b: {CODELLAMA} main pinned at {target[:12]}" in fetched.stderr
    assert "codellama-7b: about " in fetched.stderr and "codellama-7b: then writes f16 ~" in fetched.stderr
    lock = yaml.safe_load((root / "models" / "catalog.lock").read_text())["pins"]
    assert lock["codellama-7b"] == {"repo": CODELLAMA, "revision": "main", "commit": target,
                                    "pinned_at": lock["codellama-7b"]["pinned_at"]}
    assert lock["tinyllama-1.1b-python"]["commit"] == draft
    q4 = json.loads((root / "models" / "tinyllama-1.1b-python" / "ggml-model-q4_0.gguf.json").read_text())
    assert q4["provenance"]["commit"] == draft and q4["provenance"]["from"] == "tinyllama-1.1b-python:f16"
    assert q4["metadata"]["file_type"] == "Q4_0"
    ran = _cli(["run", "quicksort-python", "-n", "16"], env, tmp_path)
    print(ran.stdout, ran.stderr[-3000:])
    assert ran.returncode == 0, ran.stderr[-3000:]
    assert "reference" in ran.stdout.lower()
    hub.requests.clear()
    again = _cli(["models", "fetch", "codellama-7b", "tinyllama-1.1b-python"], env, tmp_path)
    assert again.returncode == 0 and "nothing to do" in again.stderr
    assert not [r for r in hub.requests if "/resolve/" in r.path]  # the pin compared, nothing downloaded
    newer = hub.add(CODELLAMA, {**{p.name: p.read_bytes() for p in checkpoints[0].iterdir()},
                                "model.safetensors": (checkpoints[1] / "model.safetensors").read_bytes()})
    kept = _cli(["models", "fetch", "codellama-7b"], env, tmp_path)
    assert kept.returncode == 0 and "nothing to do" in kept.stderr
    assert (f"codellama-7b: {CODELLAMA} main moved {target[:12]} -> {newer[:12]} (weights differ: model.safetensors); "
            "keeping the pin (llamaspec models fetch --update codellama-7b moves it)") in kept.stderr
    moved = _cli(["models", "fetch", "--update", "codellama-7b"], env, tmp_path)
    assert moved.returncode == 0, moved.stderr[-3000:]
    assert f"codellama-7b: {CODELLAMA} main moved {target[:12]} -> {newer[:12]} (weights differ: model.safetensors)\n" in moved.stderr
    assert "the weights differ, making it again from the pinned commit" in moved.stderr
    assert "codellama-7b:f16 (made)" in moved.stdout
    f16 = json.loads((root / "models" / "codellama-7b" / "ggml-model-f16.gguf.json").read_text())
    assert f16["provenance"]["commit"] == newer
    assert yaml.safe_load((root / "models" / "catalog.lock").read_text())["pins"]["codellama-7b"]["commit"] == newer


ALPACA = [{"instruction": f"Give {i} reasons to sort a list.", "input": "" if i % 2 else f"list {i}", "output": "..."}
          for i in range(20)]


@pytest.mark.llamacpp
@pytest.mark.slow
def test_alpaca_is_downloaded_from_the_hub_for_a_prompt_set(llama_build, hub: Hub, tmp_path: Path) -> None:
    pq = pytest.importorskip("pyarrow.parquet", reason="pip install 'llamaspec[prompts]'")
    import pyarrow as pa

    table = tmp_path / "train.parquet"
    pq.write_table(pa.Table.from_pylist(ALPACA), table)
    commit = hub.add("tatsu-lab/alpaca", {"data/train-00000-of-00001-a09b74b3ef9c3b56.parquet": table.read_bytes(),
                                          "README.md": b"# alpaca\n"}, kind="datasets")
    root = _project(tmp_path)
    env = _env(hub, root)
    done = _cli(["sweep", "smollm2-server-alpaca", "--prompts", "alpaca", "--limit", "3", "--sample-seed", "1",
                 "-n", "16", "-t", "1", "--fixed-grid", "--repeats", "1", "--no-plot"], env, tmp_path)
    print(done.stdout, done.stderr[-3000:])
    assert done.returncode == 0, done.stderr[-3000:]
    assert [r.path for r in hub.requests if "/cdn/" in r.path]  # the parquet file came over HTTP
    cached = tmp_path / "hf-cache" / "datasets--tatsu-lab--alpaca" / "snapshots" / commit / "data"
    assert [p.name for p in cached.iterdir()] == ["train-00000-of-00001-a09b74b3ef9c3b56.parquet"]
    assert "3 prompts" in done.stdout or "3 prompts" in done.stderr
