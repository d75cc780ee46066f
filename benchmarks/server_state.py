"""Which speculative modes keep state between requests: each mode × program, drafted/accepted per
request (docs/engines.md has the table this prints).

For each ``--spec-type`` the pinned llama-server runs on a plain pair (``server_state.probed_types``),
the same built-in workload chat prompts (A, B: ``--prompts``), greedy, ``cache_prompt: false``:

- **llama-speculative-simple**: one process per prompt (what the default study measures: it
  starts fresh each run);
- **llama-server, fresh**: one server per prompt;
- **llama-server, one server**: A, B, A on one long-lived server;
- **llama-server, slot erased**: A, B, A on one server, ``POST /slots/0?action=erase`` after each
  request (whether the server's own reset clears the state).

A mode keeps state when a request's counts on the one server differ from its fresh ones
(:class:`llamaspec.llamacpp.server_state.StateProbe`); greedy drafting is deterministic, so the
counts do not depend on the machine's load. It exits 1 when what it measures differs from
``spectypes.KEEPS_STATE``.

    PYTHONPATH=$PWD .venv/bin/python benchmarks/server_state.py [--prompts rw-present-tense,sum-hotel-reviews]
        [--modes draft,ngram-mod] [-n 64] [-t 1] [--bin-dir DIR] [--write tests/fixtures/llamacpp/0c1e570/server-state.json]

Defaults: the cached CPU build of the pinned llama.cpp (with llama-server), the offline pair
(SmolLM2-135M F32 target, Q4_1 draft) under models/smollm2-135m/, ``-n 64``, ``-t 1``, ``-c 4096``.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
PAIR = ROOT / "models" / "smollm2-135m"


def _prompts(names: list[str]) -> list[tuple[str, str]]:
    from llamaspec.studies import adhoc
    from llamaspec.studies import prompts as loader

    found = {p.id: p.prompt for p in loader.load(str(adhoc.builtin_prompts())).prompts}
    missing = [n for n in names if n not in found]
    if missing:
        sys.exit(f"not in the built-in workload: {', '.join(missing)}")
    return [(n, found[n]) for n in names]


def _cli_counts(build: Any, target: Any, draft: Any, mode: str, prompts: list[tuple[str, str]], settings: Any,
                logs: Path) -> list[dict[str, Any]] | None:
    """Each prompt on llama-speculative-simple, a process per prompt; None where it does not run the mode."""
    from dataclasses import replace

    from llamaspec.llamacpp.runner import LlamaCppEngine
    from llamaspec.measure import spectypes
    from llamaspec.measure.contract import ResolvedCase

    if not spectypes.of(mode).runs_on("speculative-simple"):
        return None
    engine = LlamaCppEngine(build)
    s = replace(settings, spec_type=mode, program="speculative-simple", temperature=0.0).with_defaults()
    out = []
    for pid, text in prompts:
        case = ResolvedCase("server-state", pid, target, draft if spectypes.needs_draft(mode) else None, text, None, s,
                            prompt_id=pid, chat=True)
        m = engine.measure(case, "speculative", logs / f"cli-{mode}-{pid}.log")
        if not m.ok:
            sys.exit(f"llama-speculative-simple {mode} on {pid}: {m.error}")
        out.append({"prompt": pid, "drafted": m.n_drafted or 0, "accepted": m.n_accept or 0})
    return out


def _text(counts: list[dict[str, Any]] | None) -> str:
    if counts is None:
        return "(does not run it)"
    return ", ".join(f"{c['drafted']}/{c['accepted']}" if c["drafted"] else "none" for c in counts)


def main(argv: list[str] | None = None) -> int:
    from llamaspec.base import host
    from llamaspec.llamacpp import build as builds
    from llamaspec.llamacpp import server, server_state
    from llamaspec.llamacpp.cache import SERVER_ROLES
    from llamaspec.measure import spectypes
    from llamaspec.measure.contract import ModelPath
    from llamaspec.measure.settings import Settings

    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    ap.add_argument("--prompts", default="rw-present-tense,sum-hotel-reviews")
    ap.add_argument("--modes", default=None, help="default: every type the server runs on a plain pair")
    ap.add_argument("-n", type=int, default=64)
    ap.add_argument("-t", type=int, default=1)
    ap.add_argument("--bin-dir", type=Path, default=None)
    ap.add_argument("--write", type=Path, default=None)
    a = ap.parse_args(argv)
    build = builds.prebuilt(a.bin_dir) if a.bin_dir else builds.find("cpu", roles=SERVER_ROLES)
    target = ModelPath("smollm2-135m:f32", str(PAIR / "ggml-model-f32.gguf"))
    draft = ModelPath("smollm2-135m:q4_1", str(PAIR / "ggml-model-q4_1.gguf"))
    prompts = _prompts([p for p in a.prompts.split(",") if p])
    engine = server.ServerEngine(build)
    modes = [m for m in a.modes.split(",") if m] if a.modes else list(server_state.probed_types(engine.capabilities.spec_types))
    settings = Settings(n_predict=a.n, threads=a.t, ctx_size=4096, seed=20)
    logs = Path(tempfile.mkdtemp(prefix="llamaspec-server-state-"))
    report: dict[str, Any] = {
        "command": "python benchmarks/server_state.py " + " ".join(argv if argv is not None else sys.argv[1:]),
        "date": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "machine": f"{host.cpu_model()}, {os.cpu_count()} logical CPUs",
        "llama_cpp": engine.caps.version.commit, "prompts": [p for p, _ in prompts],
        "order_on_one_server": [*(p for p, _ in prompts), prompts[0][0]], "n_predict": a.n, "threads": a.t,
        "modes": {}}
    order = " ".join(report["order_on_one_server"])
    print(f"drafted/accepted per request; prompts {', '.join(report['prompts'])}; one server: {order}")
    print(f"{'mode':<14} {'speculative-simple (fresh)':<28} {'server fresh':<18} {'one server':<24} "
          f"{'slot erased':<24} keeps state")
    for mode in modes:
        p = server_state.probe(build, target, draft, mode, prompts, settings, logs, erase=True)
        cli = _cli_counts(build, target, draft, mode, prompts, settings, logs)
        row = {**p.to_dict(), "speculative_simple": cli}
        report["modes"][mode] = row
        print(f"{mode:<14} {_text(cli):<28} {_text(row['fresh']):<18} {_text(row['served']):<24} "
              f"{_text(row['erased']):<24} {'yes' if p.keeps_state else 'no'}"
              + ("" if p.erase_clears is None or not p.keeps_state else
                 f" (erasing the slot {'clears' if p.erase_clears else 'does not clear'} it)"), flush=True)
    measured = {m for m, r in report["modes"].items() if r["keeps_state"]}
    expected = spectypes.KEEPS_STATE & set(modes)
    agree = measured == expected
    print(f"spectypes.KEEPS_STATE {sorted(expected)}: {'as measured' if agree else f'measured {sorted(measured)}'}")
    if a.write is not None:
        from llamaspec.studies.run import own_commit

        report["commit"] = own_commit()
        a.write.write_text(json.dumps(report, indent=1) + "\n")
    return 0 if agree else 1


if __name__ == "__main__":
    raise SystemExit(main())
