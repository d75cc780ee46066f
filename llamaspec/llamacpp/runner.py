"""The llama.cpp command-line backend: llama-speculative against a target-only baseline.

The baseline is llama-completion (llama-cli / main on older builds) on the target alone: the
pinned llama-speculative will not run without a draft, so the two modes are different programs
with the same model, prompt, seed, threads and offload. Both print their own timings; see
``parse`` for what each decode speed covers.
"""

from __future__ import annotations

import platform
from dataclasses import replace
from pathlib import Path
from typing import Any

from llamaspec import proc
from llamaspec.backend import Measurement, ResolvedCase
from llamaspec.errors import LlamaspecError
from llamaspec.llamacpp import flags, parse
from llamaspec.llamacpp.build import Build


class LlamaCppBackend:
    name = "llama.cpp"

    def __init__(self, build: Build) -> None:
        self.build = build
        self._caps: dict[str, flags.Capabilities] = {}

    def caps(self, role: str) -> flags.Capabilities:
        if role not in self._caps:
            self._caps[role] = flags.capabilities(self.build.program(role))
        return self._caps[role]

    def provenance(self) -> dict[str, Any]:
        spec = self.caps("speculative")
        return {
            "commit": self.build.commit if self.build.commit != "unknown" else spec.version.commit,
            "build_number": spec.version.number,
            "backend": self.build.backend,
            "cmake_args": list(self.build.cmake_args),
            "bin_dir": self.build.bin_dir,
            "programs": dict(self.build.programs),
            "source": self.build.source,
            "build_key": self.build.key,
            "flag_generation": spec.generation,
        }

    def settings_for(self, case: ResolvedCase, mode: str) -> flags.Settings:
        s = case.settings
        caps = self.caps("speculative" if mode == "speculative" else "completion")
        speculative = mode == "speculative"
        return flags.Settings(
            target=case.target.path,
            draft=case.draft.path if (speculative and case.draft) else None,
            prompt=case.prompt,
            prompt_file=case.prompt_file,
            n_predict=s.n_predict if s.n_predict is not None else 256,
            seed=s.seed if s.seed is not None else 20,
            temperature=s.temperature if s.temperature is not None else 0.0,
            draft_max=s.draft_max if speculative else None,
            draft_min=s.draft_min if speculative else None,
            draft_p_min=s.draft_p_min if speculative else None,
            threads=s.threads,
            threads_draft=s.threads_draft if speculative else None,
            # With RPC servers the target's layers go to them (they count as devices even on a CPU build).
            gpu_layers=flags.gpu_layers(s.gpu_layers, "rpc" if s.rpc else self.build.backend, caps.generation),
            draft_gpu_layers=flags.gpu_layers(s.draft_gpu_layers, self.build.backend, caps.generation) if speculative and case.draft else None,
            ctx_size=s.ctx_size,
            batch_size=s.batch_size,
            escape=s.escape if s.escape is not None else True,
            spec_type=s.spec_type if speculative else None,
            extra_args=tuple(s.extra_args or ()),
            rpc=tuple(s.rpc or ()),
        )

    def argv(self, case: ResolvedCase, mode: str) -> list[str]:
        if mode == "speculative":
            program = self.build.program("speculative")
            return flags.speculative_argv(self.caps("speculative"), program, self.settings_for(case, mode))
        if mode in ("baseline", "draft"):
            program = self.build.program("completion")
            settings = self.settings_for(case, mode)
            if mode == "draft":  # the draft model alone: what one draft step costs
                if case.draft is None:
                    raise LlamaspecError("this case has no draft model to time", hint="drop the draft measurement")
                settings = replace(settings, target=case.draft.path, rpc=(), gpu_layers=flags.gpu_layers(
                    case.settings.draft_gpu_layers, self.build.backend, self.caps("completion").generation))
            return flags.completion_argv(self.caps("completion"), program, settings)
        if mode == "batch":
            s = self.settings_for(case, "baseline")
            return flags.bench_argv(self.build.program("bench"), case.target.path, s.threads, s.gpu_layers)
        raise LlamaspecError(f"unknown mode {mode!r}", hint="use speculative, baseline, draft or batch")

    def can_time_batches(self) -> bool:
        return "bench" in self.build.programs

    def check(self, case: ResolvedCase) -> None:
        if case.settings.rpc:
            from llamaspec.llamacpp import rpc

            if not rpc.has_rpc(self.build):
                raise LlamaspecError(f"this case sets rpc, but the llama.cpp build in {self.build.bin_dir} has no RPC backend",
                                     hint="build one with `llamaspec build --rpc` and run with it (--bin-dir its bin folder)")
            rpc.check_endpoints(case.settings.rpc)
        self.argv(case, "speculative")
        self.argv(case, "baseline")

    def measure(self, case: ResolvedCase, mode: str, log_path: Path) -> Measurement:
        argv = self.argv(case, mode)
        timeout = case.settings.timeout or 1800.0
        done = proc.run(argv, log_path=log_path, timeout=timeout, check=False,
                        what=Path(argv[0]).name)
        base: dict[str, Any] = dict(mode=mode, argv=tuple(argv), exit_code=done.returncode,
                                    wall_seconds=round(done.seconds, 3), peak_rss_bytes=done.peak_rss_bytes,
                                    log_path=str(log_path))
        if done.timed_out or done.returncode != 0:
            tail = " | ".join(s.strip() for s in done.tail(3).splitlines() if s.strip())
            error = f"{Path(argv[0]).name} {done.describe_exit()}" + (f" after {timeout:.0f} s" if done.timed_out else "")
            return Measurement(ok=False, error=error + (f": {tail}" if tail else ""), **base)
        try:
            if mode == "speculative":
                spec = parse.parse_speculative(done.stdout, done.stderr)
                return Measurement(ok=True, error=None, **base, **_speculative_fields(spec))
            if mode == "batch":
                batches = parse.parse_bench_json(done.stdout)
                return Measurement(ok=True, error=None, **base, stats={"batch_ms": batches.ms_by_tokens})
            comp = parse.parse_completion(done.stdout, done.stderr)
            return Measurement(ok=True, error=None, **base, **_completion_fields(comp))
        except LlamaspecError as exc:
            return Measurement(ok=False, error=f"{Path(argv[0]).name} output: {exc.message}", **base)


def _speculative_fields(stats: Any) -> dict[str, Any]:
    return dict(
        n_prompt=stats.n_encoded,
        n_predict=stats.n_decoded,
        encode_tps=stats.encode_tps,
        decode_tps=stats.decode_tps,
        n_drafted=stats.n_drafted,
        n_accept=stats.n_accept,
        accept=stats.accept,
        text=stats.text,
        stats=stats.to_dict(),
    )


def _completion_fields(stats: Any) -> dict[str, Any]:
    return dict(
        n_prompt=stats.n_prompt,
        n_predict=stats.n_decoded,
        encode_tps=stats.encode_tps,
        decode_tps=stats.decode_tps,
        text=stats.text,
        stats=stats.to_dict(),
    )


def hardware() -> dict[str, Any]:
    import psutil

    from llamaspec.llamacpp import build as builds

    return {
        "cpu": builds.cpu_model(),
        "cores": psutil.cpu_count(logical=False),
        "threads": psutil.cpu_count(),
        "memory_bytes": psutil.virtual_memory().total,
        "os": f"{platform.system()} {platform.release()}",
        "machine": platform.machine(),
        "gpus": list(builds.list_gpus()),
        "host": platform.node(),
    }
