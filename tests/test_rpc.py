"""llama.cpp's RPC backend: the setting, the command lines, the server command, a worker that is
down, and (with the RPC build) a target held by two real RPC servers producing exactly the
local baseline's text."""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path

import pytest
from click.testing import CliRunner
from fakes import fake_bin_dir

from llamaspec.base.errors import LlamaspecError
from llamaspec.cli import main
from llamaspec.llamacpp import build, rpc
from llamaspec.llamacpp.runner import LlamaCppEngine
from llamaspec.measure import settings as settings_mod
from llamaspec.measure.contract import ModelPath, ResolvedCase
from llamaspec.measure.settings import DEFAULTS, Settings

PROMPT = "# Quick-sort implementation in Python and sample usage:"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def case(target: str, draft: str, **settings) -> ResolvedCase:
    s = Settings(n_predict=32, threads=1, draft_max=8, ctx_size=512, **settings).over(DEFAULTS)
    return ResolvedCase("exp", "rpc", ModelPath("smollm2-135m:f32", target, "aa"), ModelPath("smollm2-135m:q4_1", draft, "bb"),
                        PROMPT, None, s)


def test_the_rpc_setting_takes_host_port_lists() -> None:
    assert settings_mod.check("rpc", ["127.0.0.1:50052", "10.0.0.7:50053"]) == ("127.0.0.1:50052", "10.0.0.7:50053")
    assert settings_mod.check("rpc", "127.0.0.1:50052,127.0.0.1:50053") == ("127.0.0.1:50052", "127.0.0.1:50053")
    with pytest.raises(settings_mod.SettingError, match="expected host:port, got '127.0.0.1'"):
        settings_mod.check("rpc", ["127.0.0.1"])
    assert settings_mod.FIELDS["rpc"].metadata["side"] == "target"  # it changes the baseline's speed
    assert Settings.from_dict({"rpc": ["a:1"]}).rpc == ("a:1",)
    assert rpc.parse_endpoint("[::1]:50052") == ("::1", 50052)
    with pytest.raises(LlamaspecError, match="is not host:port"):
        rpc.parse_endpoint("host:99999")


def test_rpc_puts_the_targets_layers_on_the_servers_and_keeps_the_draft_local(tmp_path: Path) -> None:
    # The recorded 0c1e570 programs as a CPU build: without rpc every layer stays on the CPU (-ngl 0).
    backend = LlamaCppEngine(replace(build.prebuilt(fake_bin_dir(tmp_path / "bin")), accel="cpu"))
    c = case("t.gguf", "d.gguf", rpc=("127.0.0.1:50052", "127.0.0.1:50053"))
    spec = backend.argv(c, "speculative")
    base = backend.argv(c, "baseline")
    for argv in (spec, base):
        assert argv[argv.index("--rpc") + 1] == "127.0.0.1:50052,127.0.0.1:50053"
        assert argv[argv.index("-ngl") + 1] == "999"
    assert spec[spec.index("-ngld") + 1] == "0"
    plain = backend.argv(replace(c, settings=replace(c.settings, rpc=())), "speculative")
    assert "--rpc" not in plain and plain[plain.index("-ngl") + 1] == "0"


def test_a_worker_that_is_down_is_one_clear_error_before_anything_runs(tmp_path: Path) -> None:
    port = free_port()
    backend = LlamaCppEngine(build.prebuilt(fake_bin_dir(tmp_path / "bin")))
    with pytest.raises(LlamaspecError) as err:
        backend.check(case("t.gguf", "d.gguf", rpc=(f"127.0.0.1:{port}",)))
    assert err.value.message == f"RPC worker 127.0.0.1:{port} does not answer (Connection refused)"
    assert err.value.hint == f"start it with `llamaspec rpc serve --port {port}`"


def test_a_build_without_rpc_is_refused_with_the_command_that_makes_one(tmp_path: Path) -> None:
    plain = build.Build(bin_dir=str(tmp_path), commit="0c1e570", accel="cpu", cmake_args=["-DGGML_CPU=ON"],
                        programs={"speculative": "llama-speculative"})
    with pytest.raises(LlamaspecError, match="has no RPC backend") as err:
        LlamaCppEngine(plain).check(case("t.gguf", "d.gguf", rpc=("127.0.0.1:1",)))
    assert "llamaspec build --rpc" in (err.value.hint or "")
    with pytest.raises(LlamaspecError, match="has no RPC server") as err:
        rpc.server_program(plain)
    assert "llamaspec build --rpc" in (err.value.hint or "")


@pytest.mark.llamacpp  # reads the pinned source tree's CMake files
def test_the_build_plan_adds_the_rpc_flag_and_server_and_keeps_its_own_cache_entry() -> None:
    from llamaspec.llamacpp import source

    src = source.current()
    plain = build.plan(src, "cpu", cpu_disable=())
    with_rpc = build.plan(src, "cpu", cpu_disable=(), rpc=True)
    assert "-DGGML_RPC=ON" in with_rpc.cmake_args() and "-DGGML_RPC=ON" not in plain.cmake_args()
    assert with_rpc.targets["rpc-server"] == "ggml-rpc-server" and "rpc-server" not in plain.targets
    assert with_rpc.key != plain.key
    assert build.rpc_target(Path(src.path)) == "ggml-rpc-server"


def test_the_default_build_has_rpc_where_the_tree_does_and_answers_both_pointers(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from llamaspec.llamacpp import cache

    tree = tmp_path / "tree"
    (tree / "tools" / "rpc").mkdir(parents=True)
    assert not build.with_rpc(tree, None) and build.with_rpc(tree, True)  # a tree before RPC (2023): none by default
    (tree / "tools" / "rpc" / "CMakeLists.txt").write_text("set(TARGET ggml-rpc-server)\nadd_executable(${TARGET} rpc-server.cpp)\n")
    assert build.with_rpc(tree, None) and not build.with_rpc(tree, False)
    monkeypatch.setenv("LLAMASPEC_CACHE", str(tmp_path / "cache"))

    def made(name: str, **programs: str) -> cache.Build:
        (cache.paths.builds_dir() / name / "bin").mkdir(parents=True)
        b = cache.Build(bin_dir=str(cache.paths.builds_dir() / name / "bin"), commit="0c1e570", accel="cpu",
                        programs={"speculative": "llama-speculative", **programs})
        cache.write_manifest(b)
        build.point_latest_at(b)
        return b

    default = made("0c1e570-cpu-a", **{"rpc-server": "ggml-rpc-server"})
    assert cache.latest("cpu", "0c1e570") == default == cache.latest("cpu-rpc", "0c1e570")
    plain = made("0c1e570-cpu-b")  # `llamaspec build --no-rpc`: the plain runs' build from now on, never an RPC run's
    assert cache.latest("cpu", "0c1e570") == plain and cache.latest("cpu-rpc", "0c1e570") == default


FAKE_SERVER = '''#!{python}
import sys
print("fake rpc server", " ".join(sys.argv[1:]))
'''


def rpc_bin_dir(tmp_path: Path, source: str) -> Path:
    """A bin folder whose ggml-rpc-server is the given Python script."""
    bins = fake_bin_dir(tmp_path / "bin")
    server = bins / "ggml-rpc-server"
    server.write_text(source.format(python=sys.executable))
    server.chmod(0o755)
    return bins


def test_rpc_serve_binds_loopback_by_default_and_warns_for_any_other_address(tmp_path: Path) -> None:
    bins = rpc_bin_dir(tmp_path, FAKE_SERVER)
    runner = CliRunner()
    done = runner.invoke(main, ["rpc", "serve", "--bin-dir", str(bins), "-t", "1"])
    assert done.exit_code == 0, done.output
    assert "warning" not in done.output
    log = sorted((Path(_data()) / "rpc").glob("rpc-server-50052.log"))[0].read_text()
    assert "fake rpc server --host 127.0.0.1 --port 50052 --threads 1" in log
    done = runner.invoke(main, ["rpc", "serve", "--bin-dir", str(bins), "--host", "10.0.0.7", "--port", "50060"])
    assert done.exit_code == 0, done.output
    assert "no authentication" in done.output and "10.0.0.7:50060" in done.output
    # No server in the build: one error with the command that makes one.
    plain = fake_bin_dir(tmp_path / "plain")
    done = runner.invoke(main, ["rpc", "serve", "--bin-dir", str(plain)])
    assert done.exit_code == 1 and "has no RPC server" in done.output and "llamaspec build --rpc" in done.output


LISTENING_SERVER = '''#!{python}
# Binds --host/--port as asked and serves until stopped; exits 1 when the port is taken (as the
# real server does when it cannot bind).
import socket, sys, time
args = sys.argv[1:]
host, port = args[args.index("--host") + 1], int(args[args.index("--port") + 1])
s = socket.socket()
try:
    s.bind((host, port))
except OSError as exc:
    print("Failed to bind", exc, file=sys.stderr)
    sys.exit(1)
s.listen(4)
print("Starting RPC server on", host, port, flush=True)
while True:
    c, _ = s.accept()
    c.close()
'''


def test_rpc_serve_on_a_port_it_cannot_bind_is_one_error_naming_the_exit_and_the_port(tmp_path: Path) -> None:
    bins = rpc_bin_dir(tmp_path, LISTENING_SERVER)
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        busy = taken.getsockname()[1]
        done = CliRunner().invoke(main, ["rpc", "serve", "--bin-dir", str(bins), "--port", str(busy)])
    assert done.exit_code == 1, done.output
    assert "exited with code 1" in done.output and f"is port {busy} free?" in done.output, done.output
    log = Path(_data()) / "rpc" / f"rpc-server-{busy}.log"
    assert "Failed to bind" in log.read_text()


def _data() -> str:
    return os.environ["LLAMASPEC_DATA"]


@contextlib.contextmanager
def rpc_serve(bin_dir: Path, port: int, threads: int = 1) -> Iterator[str]:
    """``llamaspec rpc serve`` in the background, as a lending machine runs it: yields its endpoint
    once the port answers, and ends it with SIGTERM (which stops its server)."""
    cli = subprocess.Popen([sys.executable, "-m", "llamaspec", "rpc", "serve", "--bin-dir", str(bin_dir), "--port", str(port),
                            "-t", str(threads)], env={**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parent.parent)},
                           stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    endpoint = f"127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 30
        while True:
            assert cli.poll() is None, f"llamaspec rpc serve exited with code {cli.returncode}"
            try:
                rpc.check_endpoints([endpoint], timeout=0.5)
                break
            except LlamaspecError:
                assert time.monotonic() < deadline, f"nothing listens on {endpoint} after 30 s"
                time.sleep(0.1)
        yield endpoint
        cli.send_signal(signal.SIGTERM)
        assert cli.wait(timeout=15) == 0
    finally:
        if cli.poll() is None:
            cli.kill()


@pytest.fixture(scope="module")
def rpc_build(llama_build):
    """The pinned default build: it has the RPC server and backend (the pinned tree has them)."""
    assert build.RPC_ROLE in llama_build.programs, f"the default build {llama_build.bin_dir} has no RPC server"
    assert "-DGGML_RPC=ON" in llama_build.cmake_args
    assert build.find("cpu", rpc=True) == build.find("cpu")  # the RPC runs and the plain ones use the same build
    return llama_build


@pytest.fixture(scope="module")
def pair():
    from llamaspec.models import store

    f32, q41 = store.finished("smollm2-135m", "f32"), store.finished("smollm2-135m", "q4_1")
    if not (f32 and q41):
        pytest.skip("the offline SmolLM2 pair is not here: run `llamaspec models fetch smollm2-135m` first")
    return str(f32.path), str(q41.path)


@pytest.mark.llamacpp
@pytest.mark.slow
def test_target_on_two_rpc_servers_gives_the_local_baseline_text(rpc_build, pair, tmp_path: Path) -> None:
    backend = LlamaCppEngine(rpc_build)
    local = case(*pair)
    base_local = backend.measure(local, "baseline", tmp_path / "local-baseline.log")
    assert base_local.ok, base_local.error
    ports = free_port(), free_port()
    with rpc_serve(Path(rpc_build.bin_dir), ports[0]), rpc_serve(Path(rpc_build.bin_dir), ports[1]):
        remote = case(*pair, rpc=tuple(f"127.0.0.1:{p}" for p in ports))
        backend.check(remote)
        base_rpc = backend.measure(remote, "baseline", tmp_path / "rpc-baseline.log")
        spec_rpc = backend.measure(remote, "speculative", tmp_path / "rpc-speculative.log")
        # Where the layers went, from llama.cpp's own verbose log (a separate, unmeasured run).
        verbose = replace(remote, settings=replace(remote.settings, extra_args=("-v",), n_predict=4))
        backend.measure(verbose, "speculative", tmp_path / "verbose.log")
    assert base_rpc.ok and spec_rpc.ok, (base_rpc.error, spec_rpc.error)
    verbose_log = (tmp_path / "verbose.log").read_text()
    devices = {line.split("device ")[1].split(",")[0] for line in verbose_log.splitlines() if "assigned to device" in line}
    assert devices == {"RPC0", "RPC1", "CPU"}  # the target's layers on both servers, the draft's on the CPU
    assert "offloaded 31/31 layers to GPU" in verbose_log and "offloaded 0/31 layers to GPU" in verbose_log
    for port in ports:
        assert f"[127.0.0.1:{port}] model buffer size" in verbose_log
    assert base_rpc.text.strip() == base_local.text.strip()
    n = min(len(spec_rpc.text.strip()), len(base_local.text.strip()))
    assert n > 50 and spec_rpc.text.strip()[:n] == base_local.text.strip()[:n]
    assert spec_rpc.n_accept and spec_rpc.n_drafted and spec_rpc.n_accept <= spec_rpc.n_drafted
    print(f"local baseline {base_local.decode_tps:.1f} t/s; over RPC: baseline {base_rpc.decode_tps:.1f} t/s, "
          f"speculative {spec_rpc.decode_tps:.1f} t/s, accepted {100 * (spec_rpc.acceptance or 0):.1f} %")
    # Once the servers are gone, the same case is refused before anything runs.
    with pytest.raises(LlamaspecError, match=f"RPC worker 127.0.0.1:{ports[0]} does not answer"):
        backend.check(remote)


# --- the RPC build is chosen by the experiment; costs are timed where the run verifies ----------

def test_llama_bench_times_the_targets_batches_on_the_rpc_servers_and_the_draft_locally(tmp_path: Path) -> None:
    backend = LlamaCppEngine(replace(build.prebuilt(fake_bin_dir(tmp_path / "bin")), accel="cpu",
                                      programs={**build.prebuilt(fake_bin_dir(tmp_path / "bin")).programs,
                                                "bench": "llama-bench"}))
    c = case("t.gguf", "d.gguf", rpc=("127.0.0.1:50052", "127.0.0.1:50053"))
    batch, draft = backend.argv(c, "batch"), backend.argv(c, "draft")
    assert batch[batch.index("-m") + 1] == "t.gguf" and batch[batch.index("--rpc") + 1] == "127.0.0.1:50052,127.0.0.1:50053"
    assert batch[batch.index("-ngl") + 1] == "999"  # the target's layers on the servers, as in the run
    assert draft[draft.index("-m") + 1] == "d.gguf" and "--rpc" not in draft and draft[draft.index("-ngl") + 1] == "0"
    local = backend.argv(replace(c, settings=replace(c.settings, rpc=())), "batch")
    assert "--rpc" not in local and local[local.index("-ngl") + 1] == "0"


def test_an_experiment_that_sets_rpc_opens_the_rpc_build_and_names_the_command_when_there_is_none(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from llamaspec.llamacpp import runner
    from llamaspec.measure.contract import EngineOptions
    from llamaspec.studies import experiment

    (tmp_path / "e.yaml").write_text(
        "name: e\nbackend: llama.cpp\nsettings: {rpc: [127.0.0.1:50052]}\n"
        "cases:\n  - name: c\n    target: {model: smollm2-135m, variant: f32}\n"
        "    draft: {model: smollm2-135m, variant: q4_1}\n    prompt: hi\n")
    (tmp_path / "plain.yaml").write_text((tmp_path / "e.yaml").read_text().replace("settings: {rpc: [127.0.0.1:50052]}\n", ""))
    assert rpc.needed(experiment.load(str(tmp_path / "e.yaml")))
    assert not rpc.needed(experiment.load(str(tmp_path / "plain.yaml")))
    try:  # with this machine's cache: a build with the RPC server when asked (the default build has it)
        with_rpc = runner.open_engine(EngineOptions(accel="cpu", rpc=True)).build
        assert rpc.ROLE in with_rpc.programs
    except LlamaspecError as exc:
        print(f"no cached builds here to pick from: {exc.message}")
    monkeypatch.setenv("LLAMASPEC_CACHE", str(tmp_path / "empty-cache"))  # no builds at all
    done = CliRunner().invoke(main, ["run", str(tmp_path / "e.yaml"), "--accel", "cpu"])
    assert done.exit_code == 1
    assert ", with RPC) in " in done.output and "Hint: run `llamaspec build --rpc` first" in done.output, done.output
    plain = CliRunner().invoke(main, ["run", str(tmp_path / "plain.yaml"), "--accel", "cpu"])
    assert plain.exit_code == 1 and "with RPC" not in plain.output and "`llamaspec build` first" in plain.output, plain.output


def test_a_terminated_rpc_serve_stops_its_server(tmp_path: Path) -> None:
    """`llamaspec rpc serve` ended by SIGTERM (kill, a node going down) takes its server with it."""
    bins = rpc_bin_dir(tmp_path, LISTENING_SERVER)
    with rpc_serve(bins, free_port()) as endpoint:
        rpc.check_endpoints([endpoint])
    with pytest.raises(LlamaspecError, match=f"RPC worker {endpoint} does not answer"):
        rpc.check_endpoints([endpoint])


def test_a_sweep_whose_rpc_worker_is_down_stops_before_measuring_or_storing_anything(tmp_path: Path, pair) -> None:
    from llamaspec.store.results import Store

    port = free_port()
    (tmp_path / "e.yaml").write_text(
        f"name: e\nbackend: llama.cpp\nrepeats: 1\nsettings: {{rpc: [127.0.0.1:{port}], n_predict: 8, threads: 1}}\n"
        "cases:\n  - name: c\n    target: {model: smollm2-135m, variant: f32}\n"
        "    draft: {model: smollm2-135m, variant: q4_1}\n    prompt: hi\n")
    done = CliRunner().invoke(main, ["sweep", str(tmp_path / "e.yaml"), "--draft", "1,2", "--no-plot",
                                     "--bin-dir", str(fake_bin_dir(tmp_path / "bin"))])
    assert done.exit_code == 1, done.output
    assert f"Error: RPC worker 127.0.0.1:{port} does not answer (Connection refused)" in done.output
    assert f"Hint: start it with `llamaspec rpc serve --port {port}`" in done.output
    assert Store.open().runs() == []  # nothing half-measured left behind
