"""Real Ray clusters on this machine, loopback only: two (or three) Ray nodes, each with its
``llamaspec:NAME`` resource, standing in for machines.

Ray binds non-loopback addresses even when told 127.0.0.1, so every test body runs inside a
fresh network namespace whose only interface is loopback (``unshare -n``, as root): the
``loopback_only`` decorator re-runs the test there and skips, saying why, where it cannot.
Nothing here can send a packet off this machine.

The selected tests run there in one second pytest, on one Ray head; each test starts its own
nodes with its own environment and removes them at its end (a Ray start each, and a pytest
start each, cost about as much as the smaller tests themselves).
"""

from __future__ import annotations

import functools
import os
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

pytestmark = [pytest.mark.slow, pytest.mark.cluster]
ray = pytest.importorskip("ray", reason="Ray is not installed (pip install 'llamaspec[cluster]')")

INSIDE = "LLAMASPEC_TEST_NETNS"
F32, Q41 = "smollm2-135m:f32", "smollm2-135m:q4_1"


@functools.lru_cache(maxsize=1)
def netns_unavailable() -> str | None:
    """Why a loopback-only network namespace cannot be made here (None: it can)."""
    if not sys.platform.startswith("linux"):
        return "network namespaces are Linux only"
    for tool in ("unshare", "ip"):
        if not shutil.which(tool):
            return f"`{tool}` is not installed (util-linux / iproute2)"
    done = subprocess.run(["unshare", "-n", "ip", "link", "set", "lo", "up"], capture_output=True, text=True)
    if done.returncode != 0:
        return f"cannot make a network namespace (`unshare -n` needs root or user namespaces): {done.stderr.strip()[:200]}"
    return None


def loopback_only(test: Callable[..., None]) -> Callable[..., None]:
    """Run the test body in a fresh network namespace with loopback only (a second pytest, which
    runs every selected test of this module at once: see :func:`_inner_results`)."""

    @functools.wraps(test)
    def wrapper(*args: Any, **kwargs: Any) -> None:
        if os.environ.get(INSIDE) == "1":
            test(*args, **kwargs)
            return
        why = netns_unavailable()
        if why:
            pytest.skip(f"Ray tests run in a loopback-only network namespace: {why}")
        outcome, text, out = _inner_results(test.__name__)
        if outcome == "skipped":
            pytest.skip(text)
        assert outcome == "passed", text
        print("\n".join(line for line in out.splitlines() if line.startswith("figures:")))  # shown with -s

    wrapper.loopback_only = True  # type: ignore[attr-defined]
    return wrapper


_SELECTED: list[str] = []  # this module's loopback-only tests that the outer session runs (node ids)
_RESULTS: dict[str, tuple[str, str, str]] = {}  # test name -> (outcome, message, its stdout)


@pytest.fixture(scope="module", autouse=True)
def _selected_tests(request: pytest.FixtureRequest) -> None:
    _SELECTED[:] = [item.nodeid for item in request.session.items
                    if item.module is request.module and getattr(getattr(item, "function", None), "loopback_only", False)]
    _RESULTS.clear()


def _inner_results(name: str) -> tuple[str, str, str]:
    """The inner pytest's outcome for test ``name``: on first call, one pytest in a loopback-only
    namespace runs every selected test of this module (one interpreter start and one Ray head for
    them all, instead of one each); each outer test then reports its own outcome."""
    if name not in _RESULTS:
        import xml.etree.ElementTree as ET

        _provide_offline_pair()
        nodes = _SELECTED if any(n.rsplit("::", 1)[-1] == name for n in _SELECTED) else [f"{Path(__file__).resolve()}::{name}"]
        if any(n.rsplit("::", 1)[-1] == ODD_MACHINES for n in nodes):
            _provide_other_machines_build()
        with tempfile.TemporaryDirectory(prefix="lsray-junit-") as folder:
            junit = Path(folder) / "inner.xml"
            argv = ["unshare", "-n", "sh", "-c", 'ip link set lo up && exec "$@"', "sh",
                    sys.executable, "-m", "pytest", "-q", "-rs", "-p", "no:cacheprovider", f"--junitxml={junit}",
                    "-o", "junit_logging=system-out", *nodes]
            try:
                done = subprocess.run(argv, env={**os.environ, INSIDE: "1"}, capture_output=True, text=True,
                                      timeout=900 * len(nodes), cwd=Path(__file__).resolve().parent.parent)
                tail = f"exit {done.returncode}: {(done.stdout + done.stderr)[-6000:]}"
            except subprocess.TimeoutExpired as exc:
                tail = f"no end after {exc.timeout:.0f} s: {str(exc.stdout or '')[-6000:]}"
            cases = ET.parse(junit).getroot().iter("testcase") if junit.is_file() else iter(())
            for case in cases:
                out = "".join(e.text or "" for e in case.findall("system-out"))
                bad = next((e for e in case if e.tag in ("failure", "error")), None)
                skipped = case.find("skipped")
                if bad is not None:
                    _RESULTS[case.get("name", "")] = ("failed", f"{bad.get('message', '')}\n{bad.text or ''}"[-6000:], out)
                elif skipped is not None:
                    _RESULTS[case.get("name", "")] = ("skipped", skipped.get("message", ""), out)
                else:
                    _RESULTS[case.get("name", "")] = ("passed", "", out)
        for node in nodes:  # a test the inner run never reported (it crashed or hung): its output says why
            _RESULTS.setdefault(node.rsplit("::", 1)[-1], ("failed", tail, ""))
    return _RESULTS[name]


def _provide_offline_pair() -> None:
    """The offline pair the real-binary tests below run (made here, outside the namespace, as the
    other modules' fixtures make it: the inner tests only look for it). Without a build or the
    models, nothing is made and those tests skip, saying what is missing."""
    import llamacpp_builds

    from llamaspec import models
    from llamaspec.base.errors import LlamaspecError
    from llamaspec.llamacpp import modeltools

    try:
        build = llamacpp_builds.pinned()
        for variant in ("f32", "q4_1"):
            models.resolve("smollm2-135m", variant, tools=modeltools.tools(build))
    except LlamaspecError:
        return


def _provide_other_machines_build() -> Any:
    """llama-cpp-python 0.2.20's tree and its llama.cpp build (b38a16d), host-b's own in the odd
    machines' test, from tests/llamacpp_builds.py: made here, outside the namespace (the sdist may
    need a download), or waited for where ``make test``'s background is still making them (the
    build cache's lock); the inner test then finds them whole. A failure here fails that test."""
    import llamacpp_builds

    from llamaspec.base.errors import LlamaspecError

    try:
        return llamacpp_builds.older(llamacpp_builds.OTHER_MACHINE)
    except LlamaspecError:
        return None  # the inner test asks again and fails with the error


class _Head:
    """One Ray head for the module's tests (started by the first that asks): each test adds its
    own nodes and removes them at its end."""

    def __init__(self) -> None:
        self.cluster: Any = None
        self.temp = ""
        self.env = pytest.MonkeyPatch()

    def get(self) -> Any:
        if self.cluster is None:
            from ray.cluster_utils import Cluster

            self.temp = tempfile.mkdtemp(prefix="lsray-", dir="/tmp")  # short: Ray's unix sockets live under it
            # Ray writes the address of "the current cluster" into <RAY_TMPDIR or /tmp>/ray/, which it
            # does not create: on a fresh machine (no /tmp/ray yet), or when another run removes it, the
            # head's start failed. This module's own folder, made here, serves both and keeps runs apart.
            self.env.setenv("RAY_TMPDIR", self.temp)
            os.makedirs(os.path.join(self.temp, "ray"), exist_ok=True)
            self.cluster = Cluster(initialize_head=True, head_node_args={
                "num_cpus": 0, "include_dashboard": False, "node_ip_address": "127.0.0.1", "temp_dir": self.temp})
        return self.cluster

    def close(self) -> None:
        if self.cluster is not None:
            ray.shutdown()
            self.cluster.shutdown()
            self.cluster = None
        self.env.undo()
        if self.temp:
            shutil.rmtree(self.temp, ignore_errors=True)


@pytest.fixture(scope="module")
def ray_head() -> Iterator[_Head]:
    head = _Head()
    yield head
    head.close()


@pytest.fixture
def cluster_factory(ray_head: _Head) -> Iterator[Callable[..., Any]]:
    """A local Ray cluster (the module's head, without CPUs for work) with the given machines: the
    test's own nodes, started with its environment and removed at its end."""
    added: list[Any] = []

    def make(machines: dict[str, dict[str, str]]) -> tuple[Any, dict[str, Any]]:
        c = ray_head.get()
        nodes = {name: c.add_node(num_cpus=1, resources={f"llamaspec:{name}": 1}, node_ip_address="127.0.0.1",
                                  env_vars=env or None)
                 for name, env in machines.items()}
        added.extend(nodes.values())
        c.wait_for_nodes()  # also waits until an earlier test's nodes are gone
        return c, nodes

    yield make
    ray.shutdown()
    c = ray_head.cluster
    for node in added:
        if c is not None and node in c.worker_nodes:  # not already removed by the test
            c.remove_node(node)


def _kill_on_first_result(c: Any, node: Any, machine: str) -> tuple[Callable[[str, str, dict[str, Any]], None], list[str]]:
    """A coordinator's ``on_result`` that removes ``machine``'s node (its processes killed) when its
    first result comes, before the call returns: the coordinator then hands the dead machine its next
    item, which is lost whatever the load (a removal left to run beside the study raced the machine's
    next item, which could end first)."""
    killed: list[str] = []

    def on_result(key: str, by: str, result: dict[str, Any]) -> None:
        if by == machine and not killed:
            killed.append(key)
            c.remove_node(node)

    return on_result, killed


@loopback_only
def test_two_nodes_share_a_study_and_losing_one_loses_nothing(cluster_factory: Callable[..., Any], tmp_path: Path) -> None:
    from llamaspec.cluster import Requirements, StoreSink, WorkItem, raypool, run_items
    from llamaspec.store.results import Store

    c, nodes = cluster_factory({"host-a": {}, "host-b": {}})
    raypool.connect(c.address)
    assert [m["machine"] for m in raypool.machines()] == ["host-a", "host-b"]
    from click.testing import CliRunner

    from llamaspec.cli import main

    listed = CliRunner().invoke(main, ["cluster", "machines", "--cluster", c.address])
    assert listed.exit_code == 0 and [line.split()[0] for line in listed.output.splitlines()] == ["host-a", "host-b"]
    pool = raypool.RayPool()
    store = Store.open(tmp_path / "results.sqlite")
    items = [WorkItem(f"i{i:02d}", "noop", {"spin": 0.3}) for i in range(12)]
    on_result, killed = _kill_on_first_result(c, nodes["host-b"], "host-b")
    lines: list[str] = []
    report = run_items("noop-study", items, pool, StoreSink(store), Requirements(engine=None), on_result=on_result,
                       on_progress=lines.append, progress_every=1.0)
    runs = store.runs(group_id="noop-study")
    keys = sorted(r["point_key"] for r in runs)
    assert keys == [i.key for i in items]  # every item stored, each exactly once
    assert killed and report.lost.get("host-b"), report
    lost = report.lost["host-b"][0]
    by_key = {r["point_key"]: r["provenance"]["machine"] for r in runs}
    assert by_key[lost] == "host-a"  # redone on the machine that is left
    assert {k for k, m in by_key.items() if m == "host-b"} == {k for k, m in report.done.items() if m == "host-b"}
    pids = {r["point_key"]: r["summary"]["pid"] for r in runs}
    assert len({pids[k] for k, m in by_key.items() if m == "host-a"}) == 1  # one actor per machine
    assert any("host-a" in line and "/min" in line for line in lines)
    # A rerun finds everything stored and prepares no machine.
    again = run_items("noop-study", items, pool, StoreSink(store), Requirements(engine=None))
    assert again.skipped == 12 and not again.done
    pool.close()


def _have_models() -> dict[str, str] | None:
    from llamaspec.models import store

    found = {label: store.finished(*label.split(":")) for label in (F32, Q41)}
    return {k: v.sha256 for k, v in found.items() if v} if all(found.values()) else None


def _cpu_build() -> Any:
    from llamaspec.base.errors import LlamaspecError
    from llamaspec.llamacpp import build

    try:
        found = build.find("cpu")
    except LlamaspecError as exc:
        try:
            found = build.find("cpu", rpc=True)  # the workers take it too (llamacpp.machine.provide)
        except LlamaspecError:
            pytest.skip(f"no llama.cpp CPU build: {exc.message}")
    return build.ensure_program(found, "server")  # left for when first needed; the prompt-set test starts it


ODD_MACHINES = "test_odd_machines_are_refused_with_one_line_each_and_the_study_goes_on"


@loopback_only
def test_odd_machines_are_refused_with_one_line_each_and_the_study_goes_on(cluster_factory: Callable[..., Any],
                                                                           tmp_path: Path) -> None:
    """Three machines, each with its own environment: host-a runs the pinned 0c1e570 programs (the
    recorded ones: faithful fakes), host-b another llama.cpp (its source tree is llama-cpp-python
    0.2.20's, b38a16d, and that build is in the cache: tests/llamacpp_builds.py made it, or waited
    for make test's background build of it, before this ran), host-c has no compiler and no build
    in its cache. Whether the cache had host-b's build beforehand changes nothing here."""
    import llamacpp_builds
    from fakes import fake_bin_dir

    from llamaspec.cluster import Requirements, StoreSink, WorkItem, raypool, run_items
    from llamaspec.llamacpp.smoke import write_tiny_llama
    from llamaspec.store.results import Store

    # host-b's own llama.cpp source tree is another commit: its llamaspec finds that commit's build.
    other = llamacpp_builds.older(llamacpp_builds.OTHER_MACHINE)  # whole: made (or waited for) outside
    assert other.commit == "b38a16d", other
    other_env, other_commit = {"LLAMASPEC_LLAMACPP": llamacpp_builds.older_tree(llamacpp_builds.OTHER_MACHINE).tree}, other.commit
    empty_cache = tmp_path / "empty-cache"
    empty_cache.mkdir()
    c, _nodes = cluster_factory({
        "host-a": {"LLAMASPEC_BIN_DIR": str(fake_bin_dir(tmp_path / "bin"))},
        "host-b": other_env,
        "host-c": {"PATH": str(tmp_path / "no-tools"), "LLAMASPEC_CACHE": str(empty_cache)},
    })
    raypool.connect(c.address)
    pool = raypool.RayPool()
    store = Store.open(tmp_path / "results.sqlite")
    target = write_tiny_llama(tmp_path / "t.gguf")
    wanted = Requirements(commit="0c1e570", accel="cpu", models={str(target): None})
    items = [WorkItem(f"i{i}", "noop", {}) for i in range(4)]
    report = run_items("odd", items, pool, StoreSink(store), wanted)
    pool.close()
    assert report.refused == {
        "host-b": f"worker host-b ({os.uname().nodename}) has llama.cpp {other_commit}, the study runs 0c1e570",
        "host-c": "worker host-c cannot prepare: cannot build llama.cpp: cmake and a C++ compiler not found "
                  "(on Debian/Ubuntu: apt-get install cmake build-essential; on macOS: xcode-select --install && brew install cmake)",
    }, report.refused
    assert set(report.done.values()) == {"host-a"} and sorted(report.done) == [i.key for i in items]
    assert sorted(r["point_key"] for r in store.runs(group_id="odd")) == [i.key for i in items]


@loopback_only
@pytest.mark.llamacpp
def test_real_pairs_split_over_two_nodes_match_one_machine(cluster_factory: Callable[..., Any], tmp_path: Path) -> None:
    """Real llama.cpp on the offline SmolLM2 pair (F32 target, Q4_1 draft, 8 drafted, 32 tokens, one
    thread): six paired items over two nodes, one node removed mid-study, then the same items on
    one machine without Ray. Same items stored once each, same generated text, speedups within
    each other's intervals."""
    from llamaspec.base import stats
    from llamaspec.cluster import LocalPool, Requirements, StoreSink, WorkItem, raypool, run_items, summary
    from llamaspec.store.results import Store

    build = _cpu_build()
    models = _have_models()
    if models is None:
        pytest.skip("the offline SmolLM2 pair is not here: run `llamaspec models fetch smollm2-135m` first")
    settings = {"n_predict": 32, "threads": 1, "draft_max": 8, "seed": 20, "temperature": 0.0, "ctx_size": 512}
    prompt = "# Quick-sort implementation in Python and sample usage:"
    items = [WorkItem(f"qs#r{r}", "pair", {"experiment": "cluster-test", "case": "qs", "target": F32, "draft": Q41,
                                          "prompt": prompt, "settings": settings, "repeats": 1, "repeat_offset": r})
             for r in range(6)]
    wanted = Requirements(commit=build.commit, accel="cpu", models=models)
    c, nodes = cluster_factory({"host-a": {}, "host-b": {}})
    raypool.connect(c.address)
    pool = raypool.RayPool()
    store = Store.open(tmp_path / "results.sqlite")
    on_result, killed = _kill_on_first_result(c, nodes["host-b"], "host-b")
    report = run_items("real", items, pool, StoreSink(store), wanted, on_result=on_result)
    pool.close()
    assert not report.failed and not report.refused, report
    runs = store.runs(group_id="real")
    assert sorted(r["point_key"] for r in runs) == [i.key for i in items]
    assert killed and report.lost.get("host-b"), report
    machines = {r["point_key"]: r["provenance"]["machine"] for r in runs}
    assert machines[report.lost["host-b"][0]] == "host-a"

    local = LocalPool(["one-machine"])
    run_items("one", items, local, StoreSink(store), wanted)
    local.close()
    cluster_per, one_per = summary.per_machine(store, "real"), summary.per_machine(store, "one")
    texts = {}
    for study in ("real", "one"):
        for r in store.runs(group_id=study):
            ms = store.measurements(r["id"])
            assert {m["mode"] for m in ms} == {"baseline", "speculative"} and all(m["ok"] for m in ms)
            for m in ms:
                texts.setdefault((m["mode"], r["point_key"][:2]), set()).add(m["text"].strip()[:60])
    # Greedy decoding: every machine, mode and repeat generated the same text (speculative may overshoot).
    assert len({t for (mode, _k), ts in texts.items() for t in ts}) == 1, texts
    cluster_all = stats.spread([x for s in cluster_per.values() for x in s.speedups])
    one_all = stats.spread(one_per["one-machine"].speedups)
    print("figures: two nodes, per machine:", {m: f"{s.items} items, {s.speedup.text(suffix='x')}" for m, s in cluster_per.items()},
          f"all repeats {cluster_all.text(suffix='x')}; one machine {one_all.text(suffix='x')};",
          f"lost {report.lost}; speculative t/s two nodes {stats.spread([v for s in cluster_per.values() for v in s.decode_tps.values]).text('{:.1f}')},"
          f" one machine {one_per['one-machine'].decode_tps.text('{:.1f}')}")
    # What the cluster path could break shows exactly, not in a speed: greedy runs of one build with
    # the same settings draft and accept the same tokens on every machine, so every speculative
    # measurement of both studies has the same counters (a setting lost on the way changes them),
    # and each item is one whole pair (a pair split across machines is not). The speedups are
    # printed, not compared: the two nodes share this machine's 2 cores while measuring, and their
    # median has differed from the one machine's by 12 % either way between runs (1.36x against
    # 1.21x, 1.16x against 1.29x).
    counters = {(m["n_predict"], m["n_drafted"], m["n_accept"]) for study in ("real", "one")
                for r in store.runs(group_id=study) for m in store.measurements(r["id"]) if m["mode"] == "speculative"}
    assert len(counters) == 1, counters
    assert cluster_all.n == one_all.n == len(items), (cluster_all, one_all)


def _tagged(tag: str) -> list[Any]:
    """Every live process whose environment carries ``LLAMASPEC_TEST_TAG=tag`` (started by this test's nodes)."""
    import psutil

    found = []
    for p in psutil.process_iter(["pid", "name"]):
        try:
            if p.environ().get("LLAMASPEC_TEST_TAG") == tag and p.status() != psutil.STATUS_ZOMBIE:
                found.append(p)
        except psutil.Error:
            continue
    return found


@loopback_only
@pytest.mark.llamacpp
def test_a_server_experiment_over_two_nodes_survives_losing_one_and_leaves_no_server_running(
        cluster_factory: Callable[..., Any], tmp_path: Path) -> None:
    """A llama-server experiment's 6 repeats (16 tokens, one thread), each an item, over two nodes;
    host-b is removed (its processes killed) after its first item. Every item is stored exactly once,
    host-b's unfinished item is redone on host-a, the figures are per machine, and no llama-server
    that host-b's worker started is left running (its reaper stopped it)."""
    import time
    import uuid

    from llamaspec.cluster import Requirements, StoreSink, raypool, run_items
    from llamaspec.cluster import study as studies
    from llamaspec.cluster import summary as per_machine
    from llamaspec.store.results import Store
    from llamaspec.studies.experiment import load

    build = _cpu_build()
    models = _have_models()
    if models is None:
        pytest.skip("the offline SmolLM2 pair is not here: run `llamaspec models fetch smollm2-135m` first")
    if "server" not in build.programs:
        pytest.skip(f"the llama.cpp build in {build.bin_dir} has no llama-server")
    (tmp_path / "e.yaml").write_text(
        "name: cluster-srv\nbackend: llama-server\nrepeats: 6\n"
        "settings: {n_predict: 16, seed: 20, temperature: 0, threads: 1, ctx_size: 1024}\n"
        "cases:\n  - name: k8\n    target: {model: smollm2-135m, variant: f32}\n"
        "    draft: {model: smollm2-135m, variant: q4_1}\n    settings: {draft_max: 8}\n"
        "    prompt: '# Quick-sort implementation in Python and sample usage:'\n")
    exp = load(str(tmp_path / "e.yaml"))
    tag = uuid.uuid4().hex
    c, nodes = cluster_factory({m: {"LLAMASPEC_TEST_TAG": tag, "LLAMASPEC_LOCK": str(tmp_path / f"{m}.lock")}
                                for m in ("host-a", "host-b")})
    raypool.connect(c.address)
    pool = raypool.RayPool()
    store = Store.open(tmp_path / "results.sqlite")
    on_result, killed = _kill_on_first_result(c, nodes["host-b"], "host-b")
    work = studies.experiment_items(exp, split_repeats=True)
    report = run_items("set", work, pool, StoreSink(store),
                       Requirements(commit=build.commit, accel="cpu", models=models), on_result=on_result)
    pool.close()
    assert not report.failed and not report.refused, report
    runs = store.runs(group_id="set")
    assert sorted(r["point_key"] for r in runs) == sorted(i.key for i in work)  # each item once
    assert killed and report.lost.get("host-b"), report
    by_key = {r["point_key"]: r["machine"] for r in runs}
    assert by_key[report.lost["host-b"][0]] == "host-a"
    figures = per_machine.per_machine(store, "set")
    assert sum(f.items for f in figures.values()) == 6
    lossless = figures["host-a"].cases["k8"].lossless  # greedy: unchanged, or changed at a greedy near-tie only
    assert lossless.verdict == "identical" or lossless.near_tie is not None, lossless
    print("figures: a server experiment over two nodes:", " | ".join(line.strip() for line in per_machine.describe(figures)))
    def llama_cpp() -> list[str]:  # the nodes' own Ray processes carry the tag too, until the test's end
        return [" ".join(p.cmdline()[:3]) for p in _tagged(tag) if "llama" in p.name()]

    deadline = time.monotonic() + 60  # ends as soon as they are gone; generous on a loaded machine
    while llama_cpp() and time.monotonic() < deadline:  # host-a's actor closed its servers; host-b's reaper
        time.sleep(0.2)
    assert not (left := llama_cpp()), f"llama.cpp processes outlived their workers: {left}"


DECISION_HEADS = ("    recommended:", "    undecided:")  # a machine's decision, as echo_cluster_report indents it


def _machine_block(lines: list[str], machine: str) -> list[str]:
    """The lines a cluster study prints for one machine (``  MACHINE:``, then its indented lines)."""
    at = lines.index(f"  {machine}:")
    block = []
    for line in lines[at + 1:]:
        if not line.startswith("    "):
            break
        block.append(line)
    return block


@loopback_only
@pytest.mark.llamacpp
def test_a_sweep_over_two_nodes_from_the_command_line(cluster_factory: Callable[..., Any]) -> None:
    """`llamaspec sweep ... --cluster` as a user types it, on the offline pair (16 tokens, a budget
    of 24 pairs) over two nodes: each machine runs the study for itself, every point it measured is
    stored here once with its machine, each machine's answer is decided here, and `report --compare
    machine` sets the two machines side by side."""
    import real_checks
    from click.testing import CliRunner

    from llamaspec.cli import main
    from llamaspec.measure.estimators import BLOCK
    from llamaspec.measure.summary import Summary
    from llamaspec.store.results import Store

    _cpu_build()
    if _have_models() is None:
        pytest.skip("the offline SmolLM2 pair is not here: run `llamaspec models fetch smollm2-135m` first")
    data = Path(os.environ["LLAMASPEC_DATA"])
    c, _nodes = cluster_factory({m: {"LLAMASPEC_LOCK": str(data / f"{m}.lock")} for m in ("host-a", "host-b")})
    sweep_args = ["sweep", "smollm2-quicksort", "-n", "16", "--repeats", "1", "--draft-variant", "q4_1", "--budget", "24",
                  "--accel", "cpu", "--cluster", c.address]
    swept = CliRunner().invoke(main, sweep_args)
    assert swept.exit_code == 0, swept.output
    again = CliRunner().invoke(main, sweep_args)  # each machine's study is stored: a rerun measures nothing
    assert again.exit_code == 0 and ": 0 items run, 2 already stored" in again.output, again.output
    store = Store.open()
    studies = [r for r in store.runs(experiment="smollm2-quicksort") if r["kind"] == "cluster-study"]
    assert sorted(r["machine"] for r in studies) == ["host-a", "host-b"], studies
    out = swept.output.splitlines()
    for r in studies:
        (one,) = r["summary"]["study"]
        # a decision of whichever kind this machine's timings (one pair per point, a shared machine)
        # lead to, with that kind's parts (a cluster prints no deploy command: each machine has its own)
        real_checks.answer_text(r["summary"]["text"], deploys=False)
        # Each machine's points are stored here, once each, with that machine.
        points = [p for p in store.runs() if (p["group_id"] or "").startswith(one["study_id"] + "/")
                  and p["group_id"].endswith(f"@{r['machine']}") and p["kind"] != "baselines"]
        assert len(points) == len(one["runs"]) == len({p["point_key"] for p in points}) >= 2
        assert {p["machine"] for p in points} == {r["machine"]}
        # each ratio over the baselines of its own block
        assert all(Summary.from_dict(p["summary"]).estimator == BLOCK
                   for p in points if p["status"] == "ok")
        # Its block of the output is the decision made here from those points: a table row for each
        # point it measured, then one decision (one pair per point on a shared machine: it may be
        # to measure more, "undecided: ...")
        block = _machine_block(out, r["machine"])
        rows = [line for line in block if line.lstrip().startswith(("draft ", "ngram"))]
        assert len(rows) == len(points), swept.output  # one prompt: each point is a setup of its own
        assert sum(line.startswith(DECISION_HEADS) for line in block) == 1, swept.output

    compared = CliRunner().invoke(main, ["report", "smollm2-quicksort", "--compare", "machine", "--no-plot"])
    assert compared.exit_code == 0, compared.output
    rows = [line for line in compared.output.splitlines() if line.startswith("| host-")]
    assert sorted(line.split("|")[1].strip() for line in rows) == ["host-a", "host-b"], compared.output
    print("figures: sweep over two nodes:", " | ".join(
        f"{m}: {next(line.strip() for line in _machine_block(out, m) if line.startswith(DECISION_HEADS))}"
        for m in ("host-a", "host-b")))
    print("figures: report | " + "\nfigures: report | ".join(compared.output.splitlines()[:40]))
    print("figures: report --compare machine:", " | ".join(rows))
    print("\n".join(f"figures: sweep | {line}" for line in swept.output.splitlines()))
