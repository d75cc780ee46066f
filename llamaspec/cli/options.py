"""Options shared by run, sweep and tune, defined once."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import click

from llamaspec.experiment import Settings


class GpuLayers(click.ParamType):
    name = "all|none|N"

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> int | str:
        if isinstance(value, int) or value in ("all", "none"):
            return value
        try:
            number = int(value)
        except ValueError:
            self.fail(f"{value!r} is not 'all', 'none' or a layer count", param, ctx)
        if number < 0:
            self.fail("must not be negative", param, ctx)
        return number


Decorator = Callable[[Callable[..., Any]], Callable[..., Any]]

# Settings a run takes one value of (a sweep takes lists of them instead).
SETTING_OPTIONS: list[Decorator] = [
    click.option("--threads", "-t", type=click.IntRange(min=1), default=None, help="CPU threads (default: physical cores)."),
    click.option("--gpu-layers", "-ngl", type=GpuLayers(), default=None, help="Offload: all, none or a layer count."),
    click.option("--p-min", "draft_p_min", type=click.FloatRange(0, 1), default=None, help="Draft p-min (stop drafting below it)."),
    click.option("--spec-type", default=None, help="draft (a draft model) or a draft-free n-gram mode of the build."),
]

# Options every measuring command (run, sweep, tune) takes.
COMMON_OPTIONS: list[Decorator] = [
    click.option("--n-predict", "-n", type=click.IntRange(min=1), default=None, help="Tokens to generate."),
    click.option("--prompt", "-p", default=None, help="Replace the experiment's prompt."),
    click.option("--prompt-file", "-f", type=click.Path(path_type=Path), default=None, help="Read the prompt from a file."),
    click.option("--repeats", "-r", type=click.IntRange(min=1), default=None, help="Repeat each measurement (median reported)."),
    click.option("--timeout", type=click.FloatRange(min=1), default=None, help="Seconds before a llama.cpp process is stopped."),
    click.option("--bin-dir", type=click.Path(path_type=Path), default=None, envvar="LLAMASPEC_BIN_DIR",
                 help="Use these llama.cpp binaries (any generation) instead of llamaspec's build."),
    click.option("--accel", type=click.Choice(["auto", "cpu", "cuda", "metal"]), default="auto", show_default=True,
                 help="Which cached llama.cpp build to use (what it computes on)."),
    click.option("--json", "as_json", is_flag=True, help="Print results as JSON on stdout."),
]


def _apply(options: list[Decorator], func: Callable[..., Any]) -> Callable[..., Any]:
    for option in reversed(options):
        func = option(func)
    return func


def setting_options(func: Callable[..., Any]) -> Callable[..., Any]:
    return _apply(SETTING_OPTIONS, func)


def common_options(func: Callable[..., Any]) -> Callable[..., Any]:
    return _apply(COMMON_OPTIONS, func)


def overrides(draft_max: int | None = None, n_predict: int | None = None, threads: int | None = None,
              gpu_layers: int | str | None = None, draft_p_min: float | None = None, spec_type: str | None = None,
              timeout: float | None = None) -> Settings:
    return Settings(n_predict=n_predict, threads=threads, gpu_layers=gpu_layers, draft_gpu_layers=gpu_layers,
                    draft_max=draft_max, draft_p_min=draft_p_min, spec_type=spec_type, timeout=timeout)


def check_prompt_file(prompt_file: Path | None) -> str | None:
    if prompt_file is None:
        return None
    if not prompt_file.is_file():
        from llamaspec.errors import LlamaspecError

        raise LlamaspecError(f"prompt file not found: {prompt_file}", hint="check the path given to --prompt-file")
    return str(prompt_file.resolve())
