"""Running the installed commands and checking their errors and what they left on disk."""

import hashlib
import importlib
import os
import re
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import tomllib

REPO = Path(__file__).resolve().parents[2]
BIN = REPO / ".venv" / "bin"
if not (BIN / "recsys-train").exists():  # installed elsewhere (CI): beside this interpreter
    BIN = Path(sys.executable).parent
SCRIPTS = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["scripts"]


def hydra_main(command: str):
    """The ``@hydra.main`` function behind a console script (``module:main`` runs it)."""
    module = importlib.import_module(SCRIPTS[command].partition(":")[0])
    return module._main


# a short run, should a wrong option ever be accepted
FAST = (
    "trainer.max_epochs=1",
    "trainer.limit_train_batches=2",
    "trainer.limit_val_batches=1",
    "trainer.limit_test_batches=1",
    "baselines=false",
    "callbacks.progress_bar=null",
    "callbacks.model_summary=null",
)


def run_cli(command: str, args: list[str], cwd: Path) -> subprocess.CompletedProcess:
    """One real command line; the environment as a user has it, minus what changes messages
    (HYDRA_FULL_ERROR) or where results go (RECSYS_SEQ_ROOT)."""
    env = {k: v for k, v in os.environ.items() if k not in ("HYDRA_FULL_ERROR", "RECSYS_SEQ_ROOT")}
    return subprocess.run(
        [str(BIN / command), *args],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )


def must_succeed(proc: subprocess.CompletedProcess) -> None:
    assert proc.returncode == 0, f"{proc.args}: exit {proc.returncode}\n{proc.stderr[-3000:]}"


def snapshot(root: Path) -> dict[str, tuple]:
    """Every entry under ``root`` (hidden ones too): folders, links and file contents."""
    entries: dict[str, tuple] = {}
    for dirpath, dirnames, filenames in os.walk(root):
        for name in dirnames + filenames:
            path = Path(dirpath) / name
            key = str(path.relative_to(root))
            if path.is_symlink():
                entries[key] = ("link", os.readlink(path))
            elif path.is_dir():
                entries[key] = ("dir",)
            else:
                entries[key] = ("file", hashlib.sha256(path.read_bytes()).hexdigest())
    return entries


def changes(before: dict, after: dict, allowed: Callable[[str], bool] = lambda key: False):
    """What differs between two snapshots, as readable lines (``allowed`` new entries
    skipped)."""
    added = [k for k in after if k not in before and not allowed(k)]
    removed = [k for k in before if k not in after]
    changed = [k for k in before if k in after and before[k] != after[k]]
    return (
        [f"added {k}" for k in sorted(added)]
        + [f"removed {k}" for k in sorted(removed)]
        + [f"changed {k}" for k in sorted(changed)]
    )


def error_problems(command: str, proc: subprocess.CompletedProcess, names: list[str]):
    """Rule 1: exit 2, no traceback, one paragraph ``<command>: error: ...`` naming
    ``names``, and nothing else on stderr."""
    problems = []
    if proc.returncode != 2:
        problems.append(f"exit status {proc.returncode}, expected 2")
    if "Traceback" in proc.stderr:
        problems.append("a Python traceback on stderr")
    text = proc.stderr.strip()
    prefix = f"{command}: error:"
    match = re.search(rf"(?m)^{re.escape(prefix)}", text)
    if match is None:
        problems.append(f"no paragraph starting with {prefix!r} on stderr")
        paragraph = text
    else:
        paragraph = text[match.start() :]
        if re.search(r"\n\s*\n", paragraph):
            problems.append("the error is more than one paragraph")
        if match.start() > 0:
            problems.append(
                f"other output on stderr before the error: {text[: match.start()][:300]!r}"
            )
    for name in names:
        if not re.search(rf"(?<![\w-]){re.escape(name)}(?![\w-])", paragraph):
            problems.append(f"the error does not name {name!r}")
    return problems
