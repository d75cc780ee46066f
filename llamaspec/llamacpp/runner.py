"""The llama.cpp command-line backend: llama-speculative against a target-only baseline.

The baseline is llama-completion (llama-cli / main on older builds) on the target alone: the
pinned llama-speculative will not run without a draft, so the two modes are different programs
with the same model, prompt, seed, threads and offload. Both print their own timings; see
``parse`` for what each decode speed covers.

Draft-free n-gram modes run on llama-speculative-simple, with ``--spec-type MODE`` and no draft
model (``llamaspec.measure.spectypes`` says which program runs which type; the capabilities list the
modes this build's program offers in its ``--help``). llama-speculative lists the same modes (its
options are shared) but requires a draft model: a case that asks it for one is refused.

A chat prompt (``ResolvedCase.chat``) is rendered with the target's chat template as
``llama-server --jinja`` renders it (``llamacpp.chat``) and given to both programs as ``-p`` with
``--no-escape``: both tokenize ``-p`` with special tokens parsed, so they read the very tokens the
deployed server would. Each program prints the prompt back before its generation, in two forms
(``chat.echoes``): llama-speculative(-simple) with the special tokens' texts, llama-completion
without its control tokens'; ``generated_part`` cuts either off, so the lossless check compares
the generated parts alone. ``stats["prompt_form"]`` says how the prompt was served.
"""

from __future__ import annotations

import logging
from dataclasses import replace
from pathlib import Path
from typing import Any

from llamaspec.base import proc
from llamaspec.base.errors import LlamaspecError
from llamaspec.llamacpp import costs, counting, deploy_check, flags, parse, programhelp
from llamaspec.llamacpp.build import Build
from llamaspec.llamacpp.prompting import generated_part, invocation, prompt_text, served_prompt
from llamaspec.measure import spectypes
from llamaspec.measure.contract import (
    Capabilities,
    Deployment,
    EngineOptions,
    Measurement,
    ModelPath,
    Positions,
    ResolvedCase,
    acceptance_by_position,
)
from llamaspec.measure.settings import defaults_for, program_binary

log = logging.getLogger(__name__)


SETTINGS = flags.takes("speculative") | flags.takes("speculative-simple") | flags.takes("completion")


def open_engine(options: EngineOptions) -> LlamaCppEngine:
    from llamaspec.llamacpp.build import find
    from llamaspec.llamacpp.cache import auto_build

    build = find(options.accel, options.bin_dir, rpc=options.rpc, build=auto_build())
    log.info("using %s from %s", build.label, build.bin_dir)
    return LlamaCppEngine(build)


def deployment(case: ResolvedCase, options: EngineOptions, speculative: bool = True) -> Deployment:
    """The deploy command for ``case`` with the build these options find (nothing is started)."""
    from llamaspec.llamacpp import deploy
    from llamaspec.llamacpp.build import find

    return deploy.deployment(find(options.accel, options.bin_dir, rpc=options.rpc), case, "llama.cpp", speculative)


class LlamaCppEngine:
    """llama.cpp's command-line programs, one process per measurement."""

    name = "llama.cpp"

    def __init__(self, build: Build) -> None:
        self.build = build
        self._caps: dict[str, programhelp.HelpFlags] = {}
        self._pairs_checked: set[tuple[str, str]] = set()
        self._prompt_tokens: dict[str, int] = {}  # prompt text -> tokens, as the programs counted them
        modes = {"baseline", "speculative", "draft"} | ({"batch"} if "bench" in build.programs else set())
        self.capabilities = Capabilities(modes=frozenset(modes), settings=SETTINGS,
                                         spec_types=("draft", *self._draft_free_modes()),
                                         draft_policy="fixed", keeps_models_loaded=False, token_ids=False,
                                         built_from="llama.cpp")

    def caps(self, role: str) -> programhelp.HelpFlags:
        if role not in self._caps:
            self._caps[role] = programhelp.program_flags(self.build.program(role))
        return self._caps[role]

    def _draft_free_modes(self) -> tuple[str, ...]:
        """The draft-free modes this build runs: each that a program running such modes without a
        draft (``spectypes``: llama-speculative-simple) lists in its ``--spec-type``; none on builds
        before 2026 (no ``--spec-type``) or without that program."""
        roles = sorted({p for t in spectypes.SPEC_TYPES.values() if t.draft_free for p in t.programs})
        found = [m for role in roles if role in self.build.programs for m in flags.draft_free_modes(self.caps(role), role)]
        return tuple(dict.fromkeys(found))

    def identity(self) -> str:
        return str(self.build.key or self.build.commit)

    def provenance(self) -> dict[str, Any]:
        from llamaspec.llamacpp import cache

        spec = self.caps("speculative")
        return {**cache.provenance(self.build, spec.version), "flag_generation": spec.generation}

    def _role(self, case: ResolvedCase) -> str:
        """The speculative program: the case's, else the one that runs its spec type (``spectypes``)."""
        program = case.settings.program or spectypes.default_program(case.settings.spec_type, "speculative")
        return "speculative-simple" if program == "speculative-simple" else "speculative"

    def profile(self, case: ResolvedCase) -> counting.CountingProfile:
        """How the case's speculative program drafts and counts (fixed, capped or adaptive)."""
        role = self._role(case)
        return counting.profile_for(self.caps(role), role)

    def argv(self, case: ResolvedCase, mode: str) -> list[str]:
        inv = invocation(case, case.settings, case.draft.path if case.draft else None, self.build.accel)
        if mode == "speculative":
            role = self._role(case)
            argv = flags.speculative_argv(self.caps(role), self.build.program(role), inv, role)
            # the log level that prints acceptance by position, before extra_args (which stay last)
            at = len(argv) - len(case.settings.extra_args or ())
            return [*argv[:at], *self.profile(case).positions_argv, *argv[at:]]
        if mode == "baseline":
            return flags.completion_argv(self.caps("completion"), self.build.program("completion"),
                                         replace(inv, draft=None))
        if mode in costs.MODES:
            # The speedup model's costs: llama-bench on the run's footing at its mean depth (costs.py).
            return costs.argv(self.build, self.caps("completion").generation, case, mode, self.bench_depth(case))
        raise LlamaspecError(f"unknown mode {mode!r}", hint="use speculative, baseline, draft or batch")

    def longest_draft(self, case: ResolvedCase, stats: parse.SpeculativeStats) -> int | None:
        """The longest draft a round of this run could make: with a draft model, the printed
        ``n_draft``; in a draft-free mode its m-gram size (set, else the ``--help`` default), else
        what its own trace line printed (ngram-cache's n_draft); None where nothing says."""
        if spectypes.needs_draft(case.settings.spec_type):
            return stats.n_draft
        role = self._role(case)
        return flags.longest_ngram_draft(self.caps(role), case.settings) or stats.longest_draft

    def bench_depth(self, case: ResolvedCase) -> int:
        """The run's mean context depth (``costs.depth``), the prompt's length as a baseline or
        speculative run of it printed."""
        text = prompt_text(case)
        return costs.depth(self._prompt_tokens.get(text), text, case.settings.n_predict)

    def resolve_model(self, model: str, variant: str) -> ModelPath:
        from llamaspec import models
        from llamaspec.llamacpp import modeltools

        return models.gguf_model(model, variant, modeltools.tools(self.build))  # a variant not made yet: made by llama.cpp

    def check(self, case: ResolvedCase) -> None:
        if case.settings.rpc:
            from llamaspec.llamacpp import rpc

            if not rpc.has_rpc(self.build):
                raise LlamaspecError(f"this case sets rpc, but the llama.cpp build in {self.build.bin_dir} has no RPC backend",
                                     hint="build one with `llamaspec build --rpc` (experiments that set rpc: then use it "
                                          "by themselves), or pass --bin-dir with binaries built with -DGGML_RPC=ON")
            rpc.check_endpoints(case.settings.rpc)
        if case.draft is not None and (case.target.path, case.draft.path) not in self._pairs_checked:
            from llamaspec import models

            models.check_pair(Path(case.target.path), Path(case.draft.path))  # llama.cpp's own vocabulary checks
            self._pairs_checked.add((case.target.path, case.draft.path))
        if self._role(case) not in self.build.programs:
            draft_free = spectypes.of(case.settings.spec_type).draft_free
            raise LlamaspecError(f"this llama.cpp build has no {program_binary(self._role(case))} program"
                                 + (f" to run {case.settings.spec_type} without a draft" if draft_free else ""),
                                 hint="use a llama.cpp build from 2026 on (`llamaspec build`), or llama-server" if draft_free
                                 else "use program: speculative, or a build that has llama-speculative-simple")
        profile = self.profile(case)
        if case.settings.draft_p_min is not None and not profile.reads_p_min:
            raise LlamaspecError(
                f"{program_binary(profile.role)} ignores p-min (the program never reads it: the same tokens are drafted at any value)",
                hint="use program: speculative-simple (the common/speculative path llama-server uses), which reads it")
        role = self._role(case)
        defaults = defaults_for(case.settings.spec_type)
        for name in sorted(SETTINGS - flags.takes(role)):
            value = getattr(case.settings, name)
            if value not in (None, (), getattr(defaults, name)):
                readers = sorted(r for r in flags.SPECULATIVE if name in flags.takes(r))
                raise LlamaspecError(f"{program_binary(role)} does not read {name} (set to {value!r}): its --help may list "
                                     f"the flag, but the program never uses it",
                                     hint=f"use program: {' or '.join(readers)}, which reads it" if readers
                                     else f"drop {name}")
        self.argv(case, "speculative")
        flags.check_spec_type(case.settings, case.draft.label if case.draft else None,
                              spectypes.draft_free_modes(self.capabilities))
        self.argv(case, "baseline")

    def measure(self, case: ResolvedCase, mode: str, log_path: Path) -> Measurement:
        argv = self.argv(case, mode)
        timeout = case.settings.timeout or 1800.0
        # 2023 builds write a trace log (<program>.log or <program>.<pid>.log) into their working
        # directory, and --log-disable would silence their statistics too: give them a folder of
        # their own beside the run's log (the trace holds each round's draft and verdict).
        cwd = None
        if mode != "batch" and self.caps("speculative").generation == "2023":  # the build's generation
            cwd = Path(log_path).with_suffix(".trace")
            cwd.mkdir(parents=True, exist_ok=True)
        for attempt in range(1, LOST_TAIL_ATTEMPTS + 1):
            done = proc.run(argv, log_path=log_path, timeout=timeout, check=False, cwd=cwd,
                            what=Path(argv[0]).name, env=flags.measured_env())
            if not _lost_tail(done, mode) or attempt == LOST_TAIL_ATTEMPTS:
                break
            kept = Path(log_path).with_name(f"{Path(log_path).stem}.lost-tail-{attempt}.log")
            Path(log_path).replace(kept)
            log.warning("%s exited 0 but its output stops before its statistics (llama.cpp leaks its log thread "
                        "at exit and can lose the end of a short run's output: llama.cpp issue 22142); running it "
                        "again (log kept: %s)", Path(argv[0]).name, kept)
        base: dict[str, Any] = dict(mode=mode, argv=tuple(argv), exit_code=done.returncode,
                                    wall_seconds=done.seconds, peak_rss_bytes=done.peak_rss_bytes,
                                    log_path=str(log_path))
        if done.timed_out or done.returncode != 0:
            tail = " | ".join(s.strip() for s in done.tail(3).splitlines() if s.strip())
            error = f"{Path(argv[0]).name} {done.describe_exit()}" + (f" after {timeout:.0f} s" if done.timed_out else "")
            return Measurement(ok=False, error=error + (f": {tail}" if tail else ""), **base)
        try:
            if mode in costs.MODES:
                return Measurement(ok=True, error=None, **base,
                                   **costs.fields(done.stdout, case, mode, prompt_text(case) in self._prompt_tokens))
            if mode == "speculative":
                spec = parse.parse_speculative(done.stdout, done.stderr)
                m = Measurement(ok=True, error=None, **base,
                                **_speculative_fields(spec, self.profile(case), case, self.longest_draft(case, spec)))
            else:
                comp = parse.parse_completion(done.stdout, done.stderr)
                m = Measurement(ok=True, error=None, **base, **_completion_fields(comp, case))
            if m.n_prompt:
                self._prompt_tokens[prompt_text(case)] = m.n_prompt
            return m
        except LlamaspecError as exc:
            return Measurement(ok=False, error=f"{Path(argv[0]).name} output: {exc.message}", **base)

    def deployment(self, case: ResolvedCase, speculative: bool = True) -> Deployment:
        from llamaspec.llamacpp import deploy

        return deploy.deployment(self.build, case, self.name, speculative)

    def prepare(self, case: ResolvedCase, modes: tuple[str, ...] = ("baseline", "speculative")) -> None:
        """Not declared (capabilities.prepares is False): every measurement is its own process: nothing to load ahead."""

    def top_tokens(self, case: ResolvedCase, position: int, prefix: Any, log_path: Path,
                   n: int = 2) -> list[dict[str, Any]] | None:
        """Not declared (capabilities.top_tokens is False): no probe of the target's probabilities."""
        return None

    def close(self) -> None:
        """Nothing stays running: every measurement is its own process."""


# A run whose output ends before its statistics is run again at most this many times in all.
LOST_TAIL_ATTEMPTS = 5


def _lost_tail(done: proc.Completed, mode: str) -> bool:
    """A program that exited 0 without printing its statistics: llama.cpp's logger is a thread that
    is never joined at exit (common/log.cpp, deliberately, since llama.cpp issue 22142), so a short
    run can exit before the thread has written the last lines (the generation's end, the timings).
    Nothing was measured: running it again is sound."""
    if done.timed_out or done.returncode != 0 or mode in ("batch", "draft"):
        return False
    try:
        if mode == "speculative":
            parse.parse_speculative(done.stdout, done.stderr)
        else:
            parse.parse_completion(done.stdout, done.stderr)
    except parse.ParseError:  # no statistics block, or one cut off
        return True
    except LlamaspecError:
        return False
    return False


def _speculative_fields(stats: parse.SpeculativeStats, profile: counting.CountingProfile, case: ResolvedCase,
                        longest: int | None) -> dict[str, Any]:
    """``longest``: the run's longest possible draft (``LlamaCppEngine.longest_draft``): the
    printed n_draft with a draft model; a draft-free mode's own, which n_draft is not."""
    text, echoed = generated_part(stats.text, case)
    requested = case.settings.n_predict
    # with the -n it ran with, which pins down more positions
    by = (parse.positions(stats, requested, draft_len=longest) if longest is not None
          else Positions(note=f"{case.settings.spec_type} does not say how long its drafts may be"))
    return dict(
        n_prompt=stats.n_encoded,
        n_predict=stats.n_predict,
        encode_tps=stats.encode_tps,
        decode_tps=profile.decode_tps(stats.n_decoded, stats.decode_s),
        speed_basis=profile.speed_basis,
        n_drafted=stats.n_drafted,
        n_accept=stats.n_accept,
        rounds=profile.rounds(stats.n_predict, stats.n_accept),
        draft_len=longest,
        draft_steps=profile.rounds(stats.n_predict, stats.n_accept) * profile.draft_steps_per_round(stats.n_draft)
        if profile.draft_policy == "fixed" and case.draft is not None else None,
        draft_policy=profile.draft_policy,
        program=program_binary(profile.role),
        text=text,
        end_of_text=requested is not None and stats.n_predict < requested,
        stats={**stats.to_dict(), "prompt_echo_found": echoed, "prompt_form": served_prompt(case).form,
               "by_position": {"drafted": by.drafted, "accepted": by.accepted, "note": by.note,
                               "acceptance": acceptance_by_position(by.accepted, by.drafted)}},
        **by.fields(),
    )


def _completion_fields(stats: parse.CompletionStats, case: ResolvedCase) -> dict[str, Any]:
    text, echoed = generated_part(stats.text, case)
    return dict(
        n_prompt=stats.n_prompt,
        n_predict=stats.n_decoded,
        encode_tps=stats.encode_tps,
        decode_tps=stats.generation_tps,
        speed_basis="llama-completion: eval runs / (eval time + sampling time) (one decode per token after the first)",
        draft_policy="none",
        sample_ms_per_token=_sample_ms(stats),
        text=text,
        end_of_text=stats.end_of_text,
        stats={**stats.to_dict(), "prompt_echo_found": echoed, "prompt_form": served_prompt(case).form},
        # None unless the program printed drafting: then the run core refuses this baseline
        n_drafted=stats.n_drafted,
        n_accept=stats.n_accept,
    )


def _sample_ms(stats: parse.CompletionStats) -> float | None:
    """Sampling time per generated token (``sampling time`` on current builds, ``sample time`` before)."""
    t = stats.timings
    total = t.sampling_total_ms if t.sampling_total_ms is not None else t.sample_ms
    return total / stats.n_decoded if total is not None and stats.n_decoded else None


# the engine's deploy check (registry.engines.check_deployment)
check_deployment = deploy_check.check_answer
