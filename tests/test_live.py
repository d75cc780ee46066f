"""Reading a running llama-server from outside (llamaspec.llamacpp.live), on its recorded answers
(tests/fixtures/llamacpp/0c1e570/watch/: a draft model, an n-gram mode, the target alone, no
--metrics), and the command-line change llamaspec watch ends with (command.edited)."""

from __future__ import annotations

import json
import shlex
from pathlib import Path

import pytest

from llamaspec.base.errors import LlamaspecError
from llamaspec.llamacpp import command, live
from llamaspec.llamacpp.metrics import metric_value

REC = Path(__file__).resolve().parent / "fixtures" / "llamacpp" / "0c1e570" / "watch"
FIXTURES = json.loads((REC / "fixtures.json").read_text())


def metrics(case: str, i: int) -> live.MetricsReading:
    found = live.read_metrics((REC / case / f"metrics-{i}.txt").read_text())
    assert found is not None
    return found


def answers(case: str) -> list[dict]:
    return [json.loads(p.read_text()) for p in sorted((REC / case).glob("answer-*.json"))]


def test_metrics_read_every_counter_the_server_printed() -> None:
    text = (REC / "draft" / "metrics-4.txt").read_text()
    m = metrics("draft", 4)
    for name in live.COUNTERS:
        assert m.get(name) == metric_value(text, name), name
    assert m.rate == metric_value(text, "predicted_tokens_seconds") and m.processing == 0 and m.longest == 107
    assert m.accepted_by_position == (14, 14, 13, 10, 10, 10, 10, 10) and m.speculative_counters


def test_the_counters_are_the_sums_of_the_requests_own_figures() -> None:
    """/metrics adds each finished request's figures: the answers' own timings sum to its counters."""
    for case, n in (("draft", 4), ("ngram", 5)):
        got = answers(case)
        assert len(got) == n
        m = metrics(case, n)
        assert m.get("tokens_predicted_total") == sum(a["timings"]["predicted_n"] for a in got)
        assert m.get("spec_decode_num_draft_tokens_total") == sum(a["timings"].get("draft_n", 0) for a in got)
        assert m.get("spec_decode_num_accepted_tokens_total") == sum(a["timings"].get("draft_n_accepted", 0) for a in got)
        assert sum(m.accepted_by_position or ()) == m.get("spec_decode_num_accepted_tokens_total")
        seconds = sum(a["timings"]["predicted_ms"] for a in got) / 1000.0
        assert m.get("tokens_predicted_seconds_total") == pytest.approx(seconds, abs=1e-3)


def test_before_any_request_the_series_is_absent_and_every_counter_zero() -> None:
    m = metrics("draft", 0)
    assert m.accepted_by_position is None and m.get("tokens_predicted_total") == 0 and m.rate == 0
    assert live.finished_requests(None, m) == 0


def test_finished_requests_come_from_the_rate_gauge_one_per_recorded_read() -> None:
    """Each recorded read of /metrics followed one request: the gauge (reset by every read) tells each."""
    for case, n in (("draft", 4), ("ngram", 5), ("plain", 1)):
        readings = [metrics(case, i) for i in range(n + 1)]
        assert [live.finished_requests(a, b) for a, b in zip(readings, readings[1:], strict=False)] == [1] * n, case
        assert live.finished_requests(None, readings[1]) == 1  # the first read: since the server started


def test_finished_requests_refuse_a_gauge_another_reader_reset() -> None:
    """Over four requests the gauge holds the last one only (the other reads reset it): not counts."""
    assert live.finished_requests(metrics("draft", 0), metrics("draft", 4)) is None
    assert live.finished_requests(None, metrics("draft", 4)) is None
    assert live.finished_requests(None, metrics("ngram", 5)) is None


def test_a_restart_is_a_counter_going_down() -> None:
    assert live.went_down(metrics("draft", 2), metrics("draft", 3)) is None
    down = live.went_down(metrics("draft", 3), metrics("draft", 1))
    assert down is not None and "tokens_predicted_total" in down or "prompt_tokens_total" in (down or "")
    assert live.went_down(metrics("draft", 1), metrics("draft", 0)) is not None  # series gone: restarted


def test_resolution_follows_six_significant_digits() -> None:
    assert live.resolution(999999) == 0.5 and live.resolution(1.23457e6) == 5.0
    assert live.resolution(23.3695) == pytest.approx(0.00005) and live.resolution(0) == 0.0


def test_props_and_slots_of_each_server() -> None:
    props = live.read_props(json.loads((REC / "draft" / "props.json").read_text()))
    assert props is not None and props.total_slots == 1 and props.n_ctx == 1024 and props.commit == "0c1e570"
    assert props.model_path is not None and props.model_path.endswith("ggml-model-f32.gguf")
    assert props.metrics_endpoint is True and props.slots_endpoint is True
    assert live.read_props(json.loads((REC / "no-metrics" / "props.json").read_text())).metrics_endpoint is False
    kinds = {}
    for case in ("draft", "ngram", "plain"):
        slots = live.read_slots(json.loads((REC / case / "slots-1.json").read_text()))
        assert slots is not None and len(slots) == 1
        kinds[case] = (slots[0].speculative, slots[0].spec_types)
    assert kinds == {"draft": (True, ("draft-simple",)), "ngram": (True, ("ngram-simple",)), "plain": (False, ())}
    busy = live.read_slots(json.loads((REC / "draft" / "slots-busy.json").read_text()))
    assert busy is not None and busy[0].processing
    idle = live.read_slots(json.loads((REC / "draft" / "slots-0.json").read_text()))
    assert idle is not None and not idle[0].processing


def test_other_answers_are_not_llama_servers() -> None:
    assert live.read_props({"data": []}) is None and live.read_props("<html>") is None
    assert live.read_slots({"error": "x"}) is None
    assert live.read_metrics("# HELP go_gc_duration_seconds\ngo_gc_duration_seconds 0.1\n") is None


def test_the_no_metrics_answer_says_to_restart_with_metrics() -> None:
    status, body = (REC / "no-metrics" / "metrics-0.txt").read_text().split("\n", 1)
    assert status == "HTTP 501" and "--metrics" in body


def test_listening_inodes_read_the_recorded_proc_net_tcp() -> None:
    text = (REC / "draft" / "proc-net-tcp.txt").read_text()
    port = int(text.splitlines()[1].split()[1].rsplit(":", 1)[1], 16)
    (inode,) = live.listening_inodes(text, port)
    assert inode == int(text.splitlines()[1].split()[9]) and live.listening_inodes(text, port + 1) == set()


def test_local_command_finds_the_process_behind_a_port(tmp_path: Path) -> None:
    """A /proc of our own making: the table, a process's fd pointing at the socket, its cmdline."""
    proc = tmp_path / "proc"
    (proc / "net").mkdir(parents=True)
    text = (REC / "draft" / "proc-net-tcp.txt").read_text()
    (proc / "net" / "tcp").write_text(text)
    fields = text.splitlines()[1].split()
    port, inode = int(fields[1].rsplit(":", 1)[1], 16), fields[9]
    (proc / "4242" / "fd").mkdir(parents=True)
    (proc / "4242" / "fd" / "7").symlink_to(f"socket:[{inode}]")
    argv = ["/b/llama-server", "-m", "T.gguf", "--port", str(port)]
    (proc / "4242" / "cmdline").write_bytes(b"\0".join(a.encode() for a in argv) + b"\0")
    assert live.local_command(live.address(f"http://127.0.0.1:{port}"), proc) == tuple(argv)
    assert live.local_command(live.address(f"http://127.0.0.1:{port + 1}"), proc) is None
    assert live.local_command(live.address(f"http://10.0.0.9:{port}"), proc) is None  # not this machine


def test_addresses() -> None:
    assert live.address("127.0.0.1:8080").url == "http://127.0.0.1:8080"
    a = live.address("http://localhost:9000/api/")
    assert (a.host, a.port, a.prefix, a.local) == ("localhost", 9000, "/api", True)
    with pytest.raises(LlamaspecError, match="not a server address"):
        live.address("ftp://x")


def test_an_unreachable_address_is_one_line(tmp_path: Path) -> None:
    from llamaspec.llamacpp.server_process import free_port

    got = live.read_server(live.address(f"http://127.0.0.1:{free_port()}"), timeout=2.0)
    assert isinstance(got, live.Trouble) and got.kind == "unreachable" and "connection refused" in got.message


# --- the command-line change --------------------------------------------------------------------

def recorded_argv(case: str) -> list[str]:
    return shlex.split((REC / case / "command.txt").read_text())


def test_the_draft_length_changes_in_place_and_nothing_else() -> None:
    argv = recorded_argv("draft")
    changed = list(command.edited(argv, draft_max=4))
    at = argv.index("--spec-draft-n-max")
    assert changed == argv[:at + 1] + ["4"] + argv[at + 2:]
    assert command.edited(["llama-server", "-m", "T", "-md", "D", "--draft-max=6"], draft_max=3)[-1] == "--draft-max=3"
    assert command.edited(["llama-server", "-m", "T", "-md", "D"], draft_max=3)[-2:] == ("--spec-draft-n-max", "3")


def test_without_speculation_only_the_target_side_stays() -> None:
    argv = recorded_argv("draft")
    alone = command.edited(argv, speculative=False)
    assert not {"-md", "-ngld", "--spec-type", "--spec-draft-n-max"} & set(alone)
    assert "--port" in alone and "--metrics" in alone and alone[:3] == tuple(argv[:3])
    ngram = recorded_argv("ngram")
    assert not any(a.startswith("--spec") for a in command.edited(ngram, speculative=False))
    size = command.edited(ngram, draft_max=5, spec_type="ngram-simple")
    assert size[size.index("--spec-ngram-simple-size-m") + 1] == "5"
    assert size[size.index("--spec-ngram-simple-size-n") + 1] == "3"  # the lookup length stays
