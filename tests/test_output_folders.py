"""Every command that writes, with its output or run folder aimed at what it must never write:

(a) the working directory, (b) a folder that is, holds or is inside one of the command's
inputs, (c) a user's folder with files. Each case runs the installed command in a working
folder full of the user's files (and the command's inputs), and checks that it is refused
with one paragraph and exit status 2, and that every byte of every file, and the set of files
(the working directory's and its parent's), is the same afterwards.
"""

from __future__ import annotations

import shutil
from importlib.metadata import distribution
from pathlib import Path

import pytest

from tests.helpers import FAST, changes, error_problems, run_cli, snapshot

pytestmark = pytest.mark.slow  # end-to-end runs and real commands: not in make test-quick

# pyproject's [project.scripts], as installed
SCRIPTS = {e.name for e in distribution("recsys-seq").entry_points if e.group == "console_scripts"}
CKPT = "ckpt_path=run/checkpoints/best.ckpt"

# command -> (the arguments it runs with, {case: the arguments that aim its output there})
COMMANDS: dict[str, tuple[tuple[str, ...], dict[str, tuple[str, ...]]]] = {
    "recsys-prep": (
        ("input=data/log.csv",),
        {"cwd": ("output=.",), "input": ("output=data",), "user": ("output=mine",)},
    ),
    "recsys-train": (
        ("data.path=prepared", *FAST),
        {
            "cwd": ("hydra.run.dir=.",),
            "input": ("hydra.run.dir=prepared/run",),
            "user": ("hydra.run.dir=mine",),
        },
    ),
    "recsys-eval": (
        (CKPT,),
        {
            "cwd": ("hydra.run.dir=.",),
            "input": ("hydra.run.dir=run",),
            "user": ("hydra.run.dir=mine",),
        },
    ),
    "recsys-recommend": (
        (CKPT, "users=users.txt"),
        {"cwd": ("hydra.run.dir=.",), "input": ("hydra.run.dir=run",), "user": ("output=mine",)},
    ),
    "recsys-export": (
        (CKPT,),
        {"cwd": ("output=.",), "input": ("hydra.run.dir=run",), "user": ("hydra.run.dir=mine",)},
    ),
    # the report goes into <folder>/report: the working folder is named "report" (below)
    "recsys-report": (
        (),
        {"cwd": ("folder=..",), "input": ("folder=study",), "user": ("folder=mine",)},
    ),
    "recsys-tune": (
        ("data.path=prepared", *FAST, "tune.n_trials=1"),
        {
            "cwd": ("tune.sweep_dir=.",),
            "input": ("tune.sweep_dir=prepared/study",),
            "user": ("tune.sweep_dir=mine",),
        },
    ),
    "recsys-bench": (
        ("task=padding", "cache=prepared"),
        {"cwd": ("output=.",), "input": ("output=prepared/rows.json",), "user": ("output=mine",)},
    ),
}
# the other way to aim the output of the commands that have two, and another run's record
MORE = [
    ("recsys-recommend", "cwd-output", (CKPT, "output=.")),
    ("recsys-export", "cwd-run-folder", (CKPT, "hydra.run.dir=.")),
    ("recsys-eval", "another-run", (CKPT, "hydra.run.dir=other_run")),
    ("recsys-train", "another-run", ("data.path=prepared", *FAST, "hydra.run.dir=evaluated")),
]
CASES = [
    pytest.param(command, [*base, *aim], id=f"{command}-{case}")
    for command, (base, aims) in COMMANDS.items()
    for case, aim in aims.items()
] + [pytest.param(command, list(args), id=f"{command}-{case}") for command, case, args in MORE]


def test_every_command_that_writes_has_its_cases():
    assert set(COMMANDS) == SCRIPTS


def users_folder(case_dir: Path, materials) -> Path:
    """The working folder: the user's notes, raw log and a folder of their own, beside the
    inputs (a prepared dataset, a training run with its checkpoint, a users file, runs that a
    report would read) and the records of earlier runs."""
    cwd = case_dir / "report"  # so that recsys-report folder=.. aims its report at it
    (cwd / "data").mkdir(parents=True)
    (case_dir / "neighbour.txt").write_text("a file of the user's beside the working folder\n")
    (cwd / "notes.txt").write_text("the user's own notes\n")
    shutil.copy(materials.raw, cwd / "data" / "log.csv")
    (cwd / "mine" / "report").mkdir(parents=True)
    (cwd / "mine" / "thesis.tex").write_text("years of work\n")
    (cwd / "mine" / "figure.png").write_bytes(bytes(range(256)))
    (cwd / "mine" / "report" / "draft.md").write_text("the user's report\n")
    shutil.copytree(materials.prepared, cwd / "prepared")
    run = materials.ckpt.parents[1]
    for copy in ("run", "other_run", "study/report/run"):
        shutil.copytree(run, cwd / copy)
    shutil.copytree(run, cwd / "evaluated", ignore=shutil.ignore_patterns("checkpoints"))
    marker = cwd / "evaluated" / ".recsys-seq.json"
    marker.write_text(marker.read_text().replace('"train"', '"eval"'))
    (cwd / "users.txt").write_text("1000\n1001\n")
    return cwd


@pytest.mark.parametrize("command, args", CASES)
def test_an_output_that_would_lose_a_file_is_refused(tmp_path, materials, command, args):
    cwd = users_folder(tmp_path, materials)
    before, shared = snapshot(tmp_path), snapshot(materials.root)
    done = run_cli(command, args, cwd)
    problems = error_problems(command, done, [])
    problems += changes(before, snapshot(tmp_path)) + changes(shared, snapshot(materials.root))
    assert not problems, "\n".join([" ".join(args), *problems, done.stderr[-1500:]])
