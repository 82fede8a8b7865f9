"""The command-line cases of the hostile-input tests: their material, setup and outcome."""

import subprocess
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from tests.helpers.commands import FAST, changes, error_problems, must_succeed, run_cli, snapshot

# (tests/test_cli_wrong_options.py, tests/test_cli_user_files.py): hostile inputs and wrong
# uses through the real commands. Each interpreter start costs ~5 s, so the expensive material
# is made once per session (:func:`make_materials`, the ``materials`` fixture) and the cases
# of both files run side by side in a thread pool, one fresh folder each (the ``outcomes``
# fixture, tests/conftest.py), before the tests check their outcomes one by one.

TRAIN, EVAL, PREP = "recsys-train", "recsys-eval", "recsys-prep"
RECOMMEND, EXPORT = "recsys-recommend", "recsys-export"


@dataclass(frozen=True)
class Materials:
    root: Path
    raw: Path  # a raw csv log: 60 users x 6 events, items 1..30
    prepared: Path  # recsys-prep of ``raw``
    two: Path  # a prepared dataset whose users all have 2 events (min_user_events=2)
    ckpt: Path  # a checkpoint trained on ``prepared``

    def values(self) -> dict[str, str]:
        return {k: str(getattr(self, k)) for k in ("raw", "prepared", "two", "ckpt")}


def write_log(path: Path, users: int, events: int) -> Path:
    """``user_id,item_id,timestamp``: distinct items per user, increasing times."""
    path.parent.mkdir(parents=True, exist_ok=True)
    rows = ["user_id,item_id,timestamp"]
    for u in range(users):
        for e in range(events):
            rows.append(f"{1000 + u},{(u * 7 + e * 5) % 30 + 1},{100_000 + u * 100 + e}")
    path.write_text("\n".join(rows) + "\n")
    return path


def make_materials(root: Path) -> Materials:
    """The shared material, made with the real commands in ``root`` (the session's
    ``materials`` fixture, tests/conftest.py)."""
    raw = write_log(root / "raw" / "log.csv", users=60, events=6)
    two_raw = write_log(root / "raw_two" / "log.csv", users=60, events=2)
    with ThreadPoolExecutor(2) as pool:
        jobs = [
            pool.submit(run_cli, PREP, [f"input={raw}", f"output={root / 'prepared'}"], root),
            pool.submit(
                run_cli,
                PREP,
                [f"input={two_raw}", f"output={root / 'two'}", "min_user_events=2"],
                root,
            ),
        ]
        for job in jobs:
            must_succeed(job.result())
    trained = run_cli(
        TRAIN, [f"data.path={root / 'prepared'}", *FAST, f"hydra.run.dir={root / 'run'}"], root
    )
    must_succeed(trained)
    ckpt = root / "run" / "checkpoints" / "best.ckpt"
    assert ckpt.is_file(), trained.stdout[-2000:]
    return Materials(root, raw, root / "prepared", root / "two", ckpt)


Setup = Callable[[Path, Materials], None]


@dataclass(frozen=True)
class Case:
    """One command line (or a few, for re-runs) in a fresh folder.

    ``args`` may hold ``{cwd}``, ``{parent}`` (the case folder above the working directory)
    and the :class:`Materials` paths ``{raw}``, ``{prepared}``, ``{two}``, ``{ckpt}``; so may
    ``names``, the strings the error paragraph must contain.
    """

    id: str
    command: str
    args: tuple[str, ...]
    names: tuple[str, ...] = ()
    setup: Setup | None = None
    absent: tuple[str, ...] = ()  # paths (from the working directory) that must not appear
    reruns: tuple[tuple[str, ...], ...] = ()  # success cases: further runs after ``args``
    output: str | None = None  # success cases: the one entry the runs add to the folder
    check: Callable[[Path], None] | None = None  # success cases: the output after the last run
    marks: tuple = ()

    @property
    def cost(self) -> float:
        startup = 1.0 if self.command == PREP else 6.0
        return startup * (1 + len(self.reruns)) + (20 if self.command == EXPORT else 0)

    def param(self):
        return pytest.param(self, id=self.id, marks=self.marks)


@dataclass
class Outcome:
    case: Case
    cwd: Path
    procs: list[subprocess.CompletedProcess] = field(default_factory=list)
    snapshots: list[dict] = field(default_factory=list)  # after setup, then after each run
    listings: list[set[str]] = field(default_factory=list)  # cwd entries, the same moments
    error: str | None = None  # an exception in setup (the test reports it)


def fill(text: str, values: dict[str, str]) -> str:
    for key, value in values.items():
        text = text.replace("{" + key + "}", value)
    return text


def run_case(case: Case, case_dir: Path, m: Materials) -> Outcome:
    cwd = case_dir / "work"
    outcome = Outcome(case, cwd)
    try:
        cwd.mkdir(parents=True)
        (case_dir / "neighbour.txt").write_text("a file of the user's beside the work folder\n")
        if case.setup:
            case.setup(cwd, m)
        values = {"cwd": str(cwd), "parent": str(case_dir), **m.values()}
        outcome.snapshots.append(snapshot(case_dir))
        outcome.listings.append({p.name for p in cwd.iterdir()})
        for args in (case.args, *case.reruns):
            outcome.procs.append(run_cli(case.command, [fill(a, values) for a in args], cwd))
            outcome.snapshots.append(snapshot(case_dir))
            outcome.listings.append({p.name for p in cwd.iterdir()})
    except Exception as error:  # noqa: BLE001 - reported by the case's test
        outcome.error = f"{type(error).__name__}: {error}"
    return outcome


def run_folder_allowed(case: Case) -> Callable[[str], bool]:
    """Train and eval make their own run folder under ``outputs/`` unless one is named."""
    if case.command in (TRAIN, EVAL) and not any(a.startswith("hydra.run.dir=") for a in case.args):
        return lambda key: key == "work/outputs" or key.startswith("work/outputs/")
    return lambda key: False


def check_refused(outcomes: dict[str, Outcome], case: Case, materials: Materials) -> None:
    outcome = outcomes[case.id]
    assert outcome.error is None, outcome.error
    proc = outcome.procs[-1]
    values = {"cwd": str(outcome.cwd), "parent": str(outcome.cwd.parent), **materials.values()}
    problems = error_problems(case.command, proc, [fill(n, values) for n in case.names])
    problems += changes(outcome.snapshots[0], outcome.snapshots[-1], run_folder_allowed(case))
    problems += [f"{p} was created" for p in case.absent if (outcome.cwd / p).exists()]
    command = " ".join(Path(a).name if i == 0 else a for i, a in enumerate(proc.args))
    assert not problems, (
        f"\n$ {command}\n(cwd {outcome.cwd})\n"
        + "\n".join(f"  - {p}" for p in problems)
        + f"\n--- stderr (tail) ---\n{proc.stderr[-1500:]}"
    )


def user_file(name: str, content: bytes | str = "the user's own notes\n") -> Setup:
    def setup(cwd: Path, m: Materials) -> None:
        path = cwd / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(content if isinstance(content, bytes) else content.encode())

    return setup


def recommend_case(case_id: str, *args: str, names=(), setup=None, marks=()) -> Case:
    if not any(a.startswith("output=") for a in args):
        args = (*args, "output=recs.csv")
    return Case(
        case_id, RECOMMEND, ("ckpt_path={ckpt}", *args), names=names, setup=setup, marks=marks
    )
