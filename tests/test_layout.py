"""The package's layout: folders in the order the data flows, imports running one way only.

Every import of a llamaspec module, at the top of a file or inside a function, is read from the
source (``ast``). A package may import its own layer and those below it, never one above; no two
files import each other in a loop. ``python tests/test_layout.py`` prints the counts that
docs/development.md quotes (files, import arrows between files and between packages, circles).
"""

from __future__ import annotations

import ast
import functools
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "llamaspec"

# Bottom to top, as docs/development.md draws them: a package imports only its own layer and those
# below. Packages on one layer may import each other's files, but no file loop may form.
LAYERS: tuple[tuple[str, ...], ...] = (
    ("base",),                 # errors, files, processes, the machine, statistics
    ("measure",),              # settings, spec types, the engine contract, pairs, summaries
    ("models", "theory"),      # model files; the speedup model
    ("llamacpp", "hf"),        # the engines
    ("registry",),             # the registry above them: built-in and installed engines, what they lend below
    ("store",),                # the results store
    ("decision",),             # the decision rule, one answer for a workload
    ("studies",),              # experiments, runs, sweeps, workload studies, tuning
    ("views",),                # a stored sweep's report, plots, reports, doctor
    ("watch",),                # a running server watched
    ("cluster",),              # studies spread over machines
    ("cli", "__main__"),       # the command line
)
RANK = {name: rank for rank, names in enumerate(LAYERS) for name in names}
# Files of the root that belong to no layer: the package's face and the wheel's build hook.
ROOT_FILES = {"__init__", "_build_hooks"}


def module_name(path: Path) -> str:
    parts = path.relative_to(ROOT).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def source_files() -> dict[str, Path]:
    return {module_name(p): p for p in sorted(PACKAGE.rglob("*.py")) if "__pycache__" not in p.parts}


def imports_of(path: Path, modules: set[str]) -> set[str]:
    return imports_in(path.read_text(), module_name(path), path.stem == "__init__", modules)


def imports_in(text: str, name: str, is_package: bool, modules: set[str]) -> set[str]:
    """The llamaspec modules that module ``name``'s source imports: its ``import`` and ``from``
    statements, relative ones resolved (``from llamaspec.x import name`` and ``from . import name``
    name module x.name where that is a module, else x), and every string literal that is a module's
    dotted path: ``importlib.import_module("llamaspec.x")``, a table of module names, ``python -m``."""
    package = name if is_package else name.rpartition(".")[0]
    found: set[str] = set()
    for node in ast.walk(ast.parse(text, name)):
        if isinstance(node, ast.Import):
            found.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parent = package.rsplit(".", node.level - 1)[0] if node.level > 1 else package
                base = f"{parent}.{base}" if base else parent
            subs = {f"{base}.{a.name}" for a in node.names} & modules
            found.update(subs or {base})
        elif isinstance(node, ast.Constant) and isinstance(node.value, str):
            found.add(node.value)
    return found & modules


@functools.cache
def graph() -> dict[str, set[str]]:
    files = source_files()
    modules = set(files)
    return {m: imports_of(p, modules) - {m} for m, p in files.items()}


def top(module: str) -> str:
    """The first folder under llamaspec (or the root file's name)."""
    return module.split(".")[1] if "." in module else module


def circles(g: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected groups of more than one file (Tarjan; depth at most the file count, ~130)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on: set[str] = set()
    out: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on.add(v)
        for w in g.get(v, ()):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            group = []
            while True:
                w = stack.pop()
                on.discard(w)
                group.append(w)
                if w == v:
                    break
            if len(group) > 1:
                out.append(sorted(group))

    for v in sorted(g):
        if v not in index:
            visit(v)
    return out


def test_every_file_of_the_package_is_on_a_layer_or_named_as_a_root_file() -> None:
    places = {top(m) for m in source_files() if m != "llamaspec"}
    assert places - set(RANK) - ROOT_FILES == set()
    assert {p.stem for p in PACKAGE.glob("*.py")} == ROOT_FILES | {"__main__"}  # the root holds no modules


def test_imports_never_run_up_a_layer() -> None:
    up = [f"{a} -> {b}" for a, targets in graph().items() if top(a) in RANK
          for b in targets if top(b) in RANK and RANK[top(b)] > RANK[top(a)]]
    assert up == []


def test_no_two_files_import_each_other_in_a_loop() -> None:
    assert circles(graph()) == []


def test_the_checks_see_an_upward_import_and_a_loop() -> None:
    g = {"llamaspec.base.a": {"llamaspec.studies.b"}, "llamaspec.studies.b": {"llamaspec.base.a"}}
    assert circles(g) == [["llamaspec.base.a", "llamaspec.studies.b"]]
    assert RANK[top("llamaspec.studies.b")] > RANK[top("llamaspec.base.a")]


def test_the_checks_see_relative_imports_and_modules_named_as_strings() -> None:
    """A loop closed by a relative import, ``importlib.import_module("...")`` or a table of module
    names (the engine registry's kind) is a loop all the same."""
    modules = {"llamaspec.measure", "llamaspec.measure.a", "llamaspec.measure.b", "llamaspec.base.errors",
               "llamaspec.models.store", "llamaspec.hf.runner", "llamaspec.llamacpp.runner"}
    source = ("import importlib\n"
              "from . import b\n"
              "from ..base import errors\n"
              "from .b import something\n"
              "TABLE = {'llama.cpp': 'llamaspec.llamacpp.runner', 'other': 'llamaspec.nothing.here'}\n"
              "def load():\n"
              "    from ..models.store import ModelFile\n"
              "    return importlib.import_module('llamaspec.hf.runner')\n")
    assert imports_in(source, "llamaspec.measure.a", False, modules) == {
        "llamaspec.measure.b", "llamaspec.base.errors", "llamaspec.models.store", "llamaspec.hf.runner",
        "llamaspec.llamacpp.runner"}
    assert imports_in("from . import a\n", "llamaspec.measure", True, modules) == {"llamaspec.measure.a"}
    back = imports_in("X = 'llamaspec.measure.a'\n", "llamaspec.llamacpp.runner", False, modules)
    g = {"llamaspec.measure.a": imports_in(source, "llamaspec.measure.a", False, modules), "llamaspec.llamacpp.runner": back}
    assert circles(g) == [["llamaspec.llamacpp.runner", "llamaspec.measure.a"]]
    assert RANK[top("llamaspec.llamacpp.runner")] > RANK[top("llamaspec.measure.a")]  # and it runs up a layer


# The commands about llama.cpp itself may name its modules: its source, its build, its RPC server and
# cluster machines, a llama.cpp log parsed (`llamaspec parse`), a pasted llama.cpp command (`run -- ...`).
# Every other command reaches an engine through the registry (llamaspec.registry.engines).
ENGINE_COMMANDS = {"llamaspec.cli.build", "llamaspec.cli.source", "llamaspec.cli.rpc", "llamaspec.cli.cluster",
                   "llamaspec.cli.parse", "llamaspec.cli.pasted"}


def test_the_measuring_commands_name_no_engine_module() -> None:
    named = {f"{a} -> {b}" for a, targets in graph().items() if top(a) == "cli" and a not in ENGINE_COMMANDS
             for b in targets if top(b) in ("llamacpp", "hf")}
    assert named == set()


def test_the_registry_says_what_llama_server_honours_and_refuses_an_engine_that_cannot() -> None:
    from llamaspec.base.errors import LlamaspecError
    from llamaspec.llamacpp import server
    from llamaspec.registry import engines

    assert engines.honoured("llama-server") == server.HONOURED and "draft_max" in server.HONOURED
    with pytest.raises(LlamaspecError, match="does not say which settings"):
        engines.honoured("llama.cpp")  # the programs: what each honours is asked of the opened engine


def counts() -> dict[str, int]:
    g = graph()
    between = {(top(a), top(b)) for a, targets in g.items() for b in targets if top(a) != top(b)}
    return {"files": len(g), "import arrows between files": sum(len(t) for t in g.values()),
            "arrows between packages (and root files)": len(between), "circles": len(circles(g))}


if __name__ == "__main__":
    for key, value in counts().items():
        print(f"{key}: {value}")
