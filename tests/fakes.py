"""Faithful fake llama.cpp programs for error paths: they answer --help and --version with the
real recorded texts, print real recorded output, then misbehave as asked (crash, hang, stop
without stats)."""

from __future__ import annotations

import sys
from pathlib import Path

FIXTURES = Path(__file__).resolve().parent / "fixtures" / "llamacpp"

SCRIPT = '''#!{python}
import os, signal, sys, time
from pathlib import Path
rec = Path({recorded!r})
args = sys.argv[1:]
if "--help" in args:
    sys.stdout.write(Path({help!r}).read_text()); sys.exit(0)
if "--version" in args:
    sys.stderr.write(Path({version!r}).read_text()); sys.exit(0)
behaviour = {behaviour!r}
out = (rec.with_suffix(".stdout")).read_text()
err = (rec.with_suffix(".stderr")).read_text()
if behaviour == "hang":
    sys.stderr.write(err[: len(err) // 3]); sys.stderr.flush(); time.sleep(600)
if behaviour == "killed":
    sys.stdout.write(out[: len(out) // 2]); sys.stdout.flush()
    sys.stderr.write(err[: len(err) // 2]); sys.stderr.flush()
    os.kill(os.getpid(), signal.SIGKILL)
if behaviour == "no-stats":
    sys.stdout.write(out); sys.exit(0)
if behaviour == "fail":
    sys.stderr.write("error: failed to load model 'x.gguf'\\n"); sys.exit(1)
sys.stdout.write(out); sys.stderr.write(err)
'''


def fake_bin_dir(folder: Path, speculative: str = "ok", completion: str = "ok", commit: str = "0c1e570") -> Path:
    """A binaries folder with llama-speculative and llama-completion replaying ``commit``'s recordings."""
    rec = FIXTURES / commit
    folder.mkdir(parents=True, exist_ok=True)
    for program, recorded, behaviour in (("llama-speculative", "speculative", speculative),
                                         ("llama-completion", "completion", completion)):
        path = folder / program
        path.write_text(SCRIPT.format(python=sys.executable, recorded=str(rec / recorded), help=str(rec / f"{program}.help.txt"),
                                      version=str(rec / f"{program}.version.txt"), behaviour=behaviour))
        path.chmod(0o755)
    return folder
