"""Build-time only (setuptools' ``build_py``, named in pyproject.toml's ``cmdclass``): the wheel
carries the shipped files as package data.

The model catalog, the experiments and their prompt sets stay where a clone keeps them
(``models/catalog.yaml``, ``experiments/``); a built wheel gets copies of them in
``llamaspec/_shipped/`` with the same relative paths, which ``paths.shipped_root()`` reads when
llamaspec runs without a clone. An sdist carries the originals (``get_source_files``), so a wheel
built from it gets the same copies. An editable install copies nothing: it reads the clone's own.

Never imported at run time (setuptools need not be installed then).
"""

from __future__ import annotations

import shutil
from pathlib import Path

from setuptools.command.build_py import build_py as _build_py

PACKAGE_DIR = "_shipped"  # paths.SHIPPED_PACKAGE_DIR
SHIPPED = ("models/catalog.yaml", "experiments/*.yaml", "experiments/*.yml", "experiments/README.md",
           "experiments/prompts/*")


def shipped_files(root: Path) -> list[Path]:
    """The shipped files under ``root`` (the project folder), relative to it."""
    files = {p.relative_to(root) for pattern in SHIPPED for p in root.glob(pattern)
             if p.is_file() and not p.name.startswith(".")}
    return sorted(files)


class build_py(_build_py):  # noqa: N801 (setuptools' command name)
    def run(self) -> None:
        super().run()
        if getattr(self, "editable_mode", False):
            return
        shutil.rmtree(Path(self.build_lib) / "llamaspec" / PACKAGE_DIR, ignore_errors=True)  # none left from an older tree
        for rel in shipped_files(Path.cwd()):
            dest = Path(self.build_lib) / "llamaspec" / PACKAGE_DIR / rel
            self.mkpath(str(dest.parent))
            self.copy_file(str(rel), str(dest))

    def get_source_files(self) -> list[str]:
        return [*super().get_source_files(), *(str(p) for p in shipped_files(Path.cwd()))]

    def get_outputs(self, include_bytecode: bool = True) -> list[str]:
        if getattr(self, "editable_mode", False):
            return super().get_outputs(include_bytecode)
        built = [str(Path(self.build_lib) / "llamaspec" / PACKAGE_DIR / p) for p in shipped_files(Path.cwd())]
        return [*super().get_outputs(include_bytecode), *built]
