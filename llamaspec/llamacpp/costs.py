"""The speedup model's cost timings for both llama.cpp engines (the command-line programs and
llama-server): llama-bench on the same build and model files as the run, on the run's footing
(threads, offload, batch size, flash attention), at the run's mean context depth.

- mode ``draft``: the draft model's single-token step (``-p 1``, 10 repetitions);
- mode ``batch``: the target on batches of 1..17 tokens with every token an output (a verification
  batch of a draft of up to 16 tokens plus one; batch 1 is the target's own step, so every ratio
  the model takes comes from one program), 3 repetitions each.

Both engines declare the two modes in their capabilities (``Capabilities.times_costs``) and fill
``Measurement.stats`` the same way (``batch_ms``, ``depth``, ``depth_basis``), which the summary
and ``llamaspec.decision.speedup_model.cost_model`` read without knowing which engine measured.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from llamaspec import theory
from llamaspec.base import proc
from llamaspec.base.errors import LlamaspecError
from llamaspec.llamacpp import bench, flags
from llamaspec.llamacpp.build import Build
from llamaspec.measure.contract import Measurement, ResolvedCase

MODES = ("draft", "batch")


def depth(counted_prompt: int | None, prompt: str, n_predict: int | None) -> int:
    """The run's mean context depth (``theory.bench_depth``: its prompt plus half its generation),
    the prompt as the engine counted it in an earlier run, else estimated at four characters a
    token (llama-bench times a context of that size; it does not read the prompt)."""
    n_prompt = counted_prompt if counted_prompt is not None else max(len(prompt) // 4, 1)
    return theory.bench_depth(n_prompt, n_predict or 0)


def argv(build: Build, generation: str, case: ResolvedCase, mode: str, at_depth: int) -> list[str]:
    """llama-bench's command line timing ``mode``'s cost for ``case`` at context depth ``at_depth``."""
    if mode not in MODES:
        raise LlamaspecError(f"unknown cost timing {mode!r}", hint=f"use one of {', '.join(MODES)}")
    if "bench" not in build.programs:
        raise LlamaspecError(f"the llama.cpp build in {build.bin_dir} has no llama-bench to time the costs with",
                             hint="rebuild with `llamaspec build --force`, or pass --bin-dir with a build that has it")
    s = case.settings
    on_draft = mode == "draft"
    if on_draft and case.draft is None:
        raise LlamaspecError("this case has no draft model to time", hint="drop the draft measurement")
    model = case.draft.path if on_draft and case.draft else case.target.path
    # The target's batches are timed where the run verifies them: on the RPC servers (each
    # batch crosses the network, as in the run); the draft stays local, as in the run.
    remote = bool(s.rpc) and not on_draft
    layers = flags.gpu_layers(s.draft_gpu_layers if on_draft else s.gpu_layers, "rpc" if remote else build.accel,
                              generation)
    # -p N -n 0 -d D times one batch of N tokens after a D-token context (built outside the timed
    # span, restored from a snapshot between repetitions); -p 1 is one single-token step, the same
    # decode as -n 1. -embd 1 makes every token of the batch an output with its logits, as in a
    # verification batch (llama-bench otherwise computes the last token's only). All in 0c1e570's llama-bench.
    sizes = (1,) if on_draft else theory.VERIFY_BATCH_SIZES
    argv = [str(build.program("bench")), "-m", model, "-p", ",".join(str(n) for n in sizes), "-n", "0",
            "-r", str(10 if on_draft else 3), "-o", "json"]
    threads = s.threads_draft if on_draft and s.threads_draft else s.threads
    for flag, value in (("-d", at_depth or None), ("-t", threads), ("-ngl", layers), ("-b", s.batch_size),
                        ("-fa", s.flash_attn)):
        if value is not None:
            argv += [flag, str(value)]
    return [*argv, "-embd", "1", *(("--rpc", ",".join(s.rpc or ())) if remote else ())]


def fields(stdout: str, case: ResolvedCase, mode: str, depth_measured: bool) -> dict[str, Any]:
    """Measurement fields from llama-bench's JSON (ParseError when it printed none)."""
    batches = bench.parse_bench_json(stdout)
    step = batches.median_ms.get(1)
    where = f", target on RPC servers {','.join(case.settings.rpc)}" if case.settings.rpc and mode == "batch" else ""
    return dict(decode_tps=1000.0 / step if step else None,
                speed_basis=f"llama-bench: one single-token step at the run's depth (1000 / ms){where}",
                stats={"batch_ms": batches.median_ms, "depth": batches.depth,
                       "depth_basis": "prompt tokens as counted by the run" if depth_measured
                       else "prompt tokens estimated at 4 characters each"})


def measure(build: Build, generation: str, case: ResolvedCase, mode: str, log_path: Path, at_depth: int,
            depth_measured: bool) -> Measurement:
    """Run llama-bench for ``mode``; a failure is returned as ``ok=False``, not raised."""
    try:
        cmd = argv(build, generation, case, mode, at_depth)
    except LlamaspecError as exc:
        return Measurement(mode=mode, ok=False, error=exc.message, argv=(), exit_code=None, wall_seconds=0.0,
                           peak_rss_bytes=None, log_path=str(log_path))
    timeout = case.settings.timeout or 1800.0
    done = proc.run(cmd, log_path=log_path, timeout=timeout, check=False, what=Path(cmd[0]).name)
    base: dict[str, Any] = dict(mode=mode, argv=tuple(cmd), exit_code=done.returncode, wall_seconds=done.seconds,
                                peak_rss_bytes=done.peak_rss_bytes, log_path=str(log_path))
    if done.timed_out or done.returncode != 0:
        tail = " | ".join(s.strip() for s in done.tail(3).splitlines() if s.strip())
        error = f"{Path(cmd[0]).name} {done.describe_exit()}" + (f" after {timeout:.0f} s" if done.timed_out else "")
        return Measurement(ok=False, error=error + (f": {tail}" if tail else ""), **base)
    try:
        return Measurement(ok=True, error=None, **base, **fields(done.stdout, case, mode, depth_measured))
    except LlamaspecError as exc:
        return Measurement(ok=False, error=f"{Path(cmd[0]).name} output: {exc.message}", **base)
