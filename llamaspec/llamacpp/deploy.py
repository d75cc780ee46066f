"""The command that deploys a measured llama.cpp setting: ``llama-server`` (what serves it) and
``llama-speculative-simple`` (the same speculative loop from the command line), or for the target
alone ``llama-server`` without a draft and ``llama-completion``.

Flags come from the same tables the measurement used, read from each binary's ``--help``
(``server_args`` for the server, shared with the measuring server, ``flags.speculative_argv`` / ``completion_argv`` for the
programs), so the command names the flags of the build that measured, by its full path.
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

from llamaspec.llamacpp import flags, programhelp
from llamaspec.llamacpp.build import Build
from llamaspec.llamacpp.prompting import invocation
from llamaspec.measure import spectypes
from llamaspec.measure.contract import Command, Deployment, ResolvedCase

SERVER_NOTE = "serves on 127.0.0.1:8080; add --host and --port to serve elsewhere"
STATE_TABLE = "docs/engines.md, \"State between requests\""


def keeps_state_note(spec_type: str, engine: str, warm: bool = False) -> str:
    """What an answer says of a mode that keeps drafting state between requests on llama-server
    (``spectypes.KEEPS_STATE``): measured on the command-line program (``engine`` llama.cpp), its
    server deploy is not what was measured and is left out; measured on llama-server, each request
    was timed on a fresh server, which a long-lived one is not (``warm``: on one long-lived server)."""
    if warm:
        return (f"{spec_type} keeps n-gram state between requests on llama-server: this answer was measured as warm "
                "traffic, one long-lived server answering the study's prompts in turn, as a deployed one does; a cold "
                f"study (fresh server per request, the default) measures each prompt alone ({STATE_TABLE})")
    if engine == "llama.cpp":
        return (f"{spec_type} keeps n-gram state between requests on llama-server: after its first request a "
                "long-lived server drafts from earlier requests' text (at 0c1e570 a shorter request after a longer "
                f"one drafts tokens it cannot use; the measured counts are in {STATE_TABLE}). This answer was "
                "measured on llama-speculative-simple, fresh each run, so no llama-server command is printed: "
                "deploy the llama-speculative-simple command above, or measure the mode as served "
                "(an experiment with engine: llama-server; `sweep NAME --warm` as traffic)")
    return (f"{spec_type} keeps n-gram state between requests on llama-server: each figure was timed on a fresh server "
            f"(docs: {STATE_TABLE}); a long-lived server drafts from earlier requests' text, so its traffic may "
            "run faster or slower than this answer: `llamaspec watch URL` reads it as served")


def deployment(build: Build, case: ResolvedCase, engine: str, speculative: bool = True, warm: bool = False) -> Deployment:
    s = case.settings.with_defaults()
    kind = spectypes.of(s.spec_type)
    draft_free = kind.draft_free
    speculative = speculative and (case.draft is not None or draft_free)
    alone = replace(case, draft=None, settings=replace(s, spec_type=None)) if not speculative else replace(case, settings=s)
    commands: list[Command] = []
    notes: list[str] = []
    # a stateful mode measured on a command-line program: the server would draft otherwise (keeps_state_note)
    withheld = speculative and kind.keeps_state and engine == "llama.cpp"
    if withheld:
        notes.append(keeps_state_note(str(s.spec_type), engine))
    elif "server" in build.programs:
        program = build.program("server")
        args = server_args(programhelp.program_flags(program), build.accel, alone,
                           "speculative" if speculative else "baseline", deploy=True)
        commands.append(Command.shell("llama-server", [str(program), *args], SERVER_NOTE))
    elif "server" in build.pending:  # compiled when first needed (the demo never starts a server)
        notes.append(f"llama-server is not built yet in {build.bin_dir}: `llamaspec build --server` adds it to "
                     "this build; rerun this command then to print its llama-server command")
    else:
        notes.append(f"the build in {build.bin_dir} has no llama-server")
    draft = case.draft.path if speculative and case.draft else None
    inv = invocation(case, alone.settings, draft, build.accel)  # the programs get the prompt as measured
    if case.chat:
        notes.append("chat requests (/v1/chat/completions) go through the target's chat template (--jinja), as the "
                     "prompts were measured")
    if not speculative:
        if "completion" in build.programs:
            program = build.program("completion")
            commands.append(Command.shell(Path(program).name, flags.completion_argv(programhelp.program_flags(program), program, inv),
                                          "this case's prompt and length, without a draft"))
    elif draft_free and not kind.runs_on("speculative-simple"):
        notes.append(f"{s.spec_type} runs in llama-server only")
    elif "speculative-simple" in build.programs:
        program = build.program("speculative-simple")
        caps = programhelp.program_flags(program)
        if draft_free and not caps.has("--spec-type"):
            notes.append(f"this build's llama-speculative-simple ({caps.version.commit}) has no --spec-type: "
                         f"{s.spec_type} runs in llama-server only")
        else:
            commands.append(Command.shell("llama-speculative-simple",
                                          flags.speculative_argv(caps, program, inv, "speculative-simple"),
                                          f"this case's prompt and length, {'without a draft' if draft_free else 'with the draft'}"))
    else:
        notes.append(f"the build in {build.bin_dir} has no llama-speculative-simple")
    if speculative and kind.keeps_state and not withheld:
        notes.append(keeps_state_note(str(s.spec_type), engine, warm))
    if speculative and engine == "llama.cpp" and s.program != "speculative-simple" and not draft_free:
        notes.append("measured with llama-speculative (exactly k drafted per round); llama-server and "
                     "llama-speculative-simple draft up to k: confirm with --program speculative-simple")
    if s.rpc:
        notes.append(f"the target's layers ran on the RPC servers {','.join(s.rpc)}: start llamaspec rpc serve there "
                     "(llama-server needs --rpc with them as well)")
    if s.extra_args:
        notes.append(f"passed through as measured, to both sides: {' '.join(s.extra_args)}")
    what = (f"no draft: the target {case.target.label} alone" if not speculative
            else " ".join([str(s.spec_type), *(f"{k}={v}" for k, v in (("n", s.ngram_size_n), ("m", s.ngram_size_m))
                                                if v is not None)]) if draft_free
            else f"draft {s.draft_max} ({case.draft.label if case.draft else '?'})")
    if speculative:
        what += f" on the target {case.target.label}"
    return Deployment(engine, speculative, what, tuple(commands), tuple(notes))


def server_args(caps: programhelp.HelpFlags, backend: str, case: ResolvedCase, mode: str, *, deploy: bool = False) -> list[str]:
    """llama-server's arguments (without host and port) for the server that measures ``mode``: the
    flag table's rows for the server, the target side first (the baseline's arguments are the
    speculative server's first ones), then the draft side. The baseline, the target alone, says
    ``--spec-type none`` where the server's ``--help`` offers it (``flags.no_speculation_argv``),
    whatever the build's default: the measuring server and the deployed one for "no draft" alike.

    ``deploy``: the same server for serving, not measuring: the measurement's own switches
    (``--metrics`` for the round counter, no web UI, no prompt cache across requests) are left out."""
    s = case.settings.with_defaults()
    draft = case.draft.path if mode != "baseline" and case.draft and spectypes.needs_draft(s.spec_type) else None
    inv = flags.Invocation(target=case.target.path, settings=s, draft=draft, accel=backend)
    argv = [flags.pick(caps, "target", flags.MODEL_FLAGS["target"]), case.target.path]
    argv += flags.settings_argv(caps, inv, "server", draft=False)
    for flag in ("--jinja",) if deploy else ("--metrics", "--no-webui", "--jinja"):  # rounds from /metrics; no UI; chat templates
        if caps.has(flag):
            argv.append(flag)
    if caps.has("--cache-ram") and not deploy:
        argv += ["--cache-ram", "0"]  # no prompt cache across requests: every measurement processes its prompt
    if mode == "baseline":  # extra_args passed through to both sides, as on the command-line programs
        return argv + flags.no_speculation_argv(caps) + list(s.extra_args or ())
    if draft is not None:
        argv += [flags.pick(caps, "draft", flags.MODEL_FLAGS["draft"]), draft]
        argv += flags.settings_argv(caps, inv, "server", draft=True)
    # Always explicit: without --spec-type the pinned server loads a draft and never uses it.
    argv += flags.spec_type_argv(caps, s)
    argv.extend(s.extra_args or ())
    return argv
