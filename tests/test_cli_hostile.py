"""Hostile inputs and wrong uses through the REAL command line, as a new user or an attacker.

Every case runs an installed entry point (``.venv/bin/recsys-*``) in a fresh working folder
``<case>/work`` (with a neighbour file in ``<case>/`` so that ``output=..`` has something to
lose) and checks the project's rules:

1. a user error exits with status 2 and prints ONE paragraph on stderr starting with
   ``<command>: error:`` that names the option, file, line or column at fault; never a
   traceback (bad Hydra overrides included);
2. a user's file is never lost: every byte of the case folder is the same after a refused
   command (train and eval may add their own ``outputs/`` run folder, nothing else);
3. the demo runs only when asked: a raw or mistyped ``data.path`` is refused with a pointer
   to recsys-prep and nothing is prepared or written there;
4. with an explicit ``output=``, recsys-prep, recsys-recommend and recsys-export write that
   and nothing else (no ``outputs/``, ``.hydra/`` or log file), and a re-run replaces their
   own previous output;
5. a dataset too short to train on is refused, not trained on 0 batches.

Each interpreter start costs ~5 s, so the expensive material (raw logs, prepared data, a
checkpoint) is made once per session (:func:`make_materials`), and the cases run side by side
in a thread pool (one fresh folder each) before the tests check their outcomes one by one.
"""

from __future__ import annotations

import hashlib
import os
import re
import shutil
import subprocess
import sys
import zipfile
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
BIN = REPO / ".venv" / "bin"
if not (BIN / "recsys-train").exists():  # installed elsewhere (CI): beside this interpreter
    BIN = Path(sys.executable).parent
BUNDLED = REPO / "data_prep" / "bundled" / "clicks.csv.gz"

TRAIN, EVAL, PREP = "recsys-train", "recsys-eval", "recsys-prep"
RECOMMEND, EXPORT = "recsys-recommend", "recsys-export"
HAS_GPU = Path("/dev/nvidiactl").exists()

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


# ------------------------------------------------------------------------------ running


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


# ------------------------------------------------------------------------------ material


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


# ------------------------------------------------------------------------------ cases

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


@pytest.fixture(scope="module")
def outcomes(request, materials, tmp_path_factory) -> dict[str, Outcome]:
    """Run the selected cases of this module side by side; also snapshot the shared material
    before and after (no case may change it)."""
    here = Path(__file__).resolve()
    selected = [
        item.callspec.params["case"]
        for item in request.session.items
        if Path(str(item.path)).resolve() == here
        and "case" in getattr(getattr(item, "callspec", None), "params", {})
    ]
    cases = sorted({c.id: c for c in selected}.values(), key=lambda c: -c.cost)
    dirs = {c.id: tmp_path_factory.mktemp(re.sub(r"[^\w.-]", "_", c.id)[:40]) for c in cases}
    before = snapshot(materials.root)
    workers = max(2, min(4, os.cpu_count() or 2))
    with ThreadPoolExecutor(workers) as pool:
        done = list(pool.map(lambda c: run_case(c, dirs[c.id], materials), cases))
    results = {o.case.id: o for o in done}
    results["__materials__"] = (before, snapshot(materials.root))  # type: ignore[assignment]
    return results


# ------------------------------------------------------------------------------ checks


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


# ------------------------------------------------------------------------------ setups


def user_file(name: str, content: bytes | str = "the user's own notes\n") -> Setup:
    def setup(cwd: Path, m: Materials) -> None:
        path = cwd / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(content if isinstance(content, bytes) else content.encode())

    return setup


def both(*setups: Setup) -> Setup:
    def setup(cwd: Path, m: Materials) -> None:
        for one in setups:
            one(cwd, m)

    return setup


def raw_log_in(folder: str) -> Setup:
    """The user's raw logs in ``folder`` (a csv and the bundled gzipped log), no meta.json."""

    def setup(cwd: Path, m: Materials) -> None:
        (cwd / folder).mkdir(parents=True, exist_ok=True)
        shutil.copy(m.raw, cwd / folder / "log.csv")
        shutil.copy(BUNDLED, cwd / folder / "clicks.csv.gz")

    return setup


def copy_prepared(folder: str) -> Setup:
    def setup(cwd: Path, m: Materials) -> None:
        shutil.copytree(m.prepared, cwd / folder)

    return setup


def link(name: str, target: str) -> Setup:
    def setup(cwd: Path, m: Materials) -> None:
        (cwd / name).symlink_to(target)

    return setup


def user_parquet(name: str) -> Setup:
    def setup(cwd: Path, m: Materials) -> None:
        import polars as pl

        pl.DataFrame({"user": [1, 2], "clicks": [10, 20]}).write_parquet(cwd / name)

    return setup


def user_zip(name: str) -> Setup:
    """A zip archive of the user's (a program exported by other means)."""

    def setup(cwd: Path, m: Materials) -> None:
        with zipfile.ZipFile(cwd / name, "w") as archive:
            archive.writestr("mine/data.pkl", b"not the project's")
            archive.writestr("mine/version", "3\n")

    return setup


def pickle_bomb(name: str) -> Setup:
    """A "checkpoint" whose unpickling runs a shell command that creates ``PWNED``."""

    def setup(cwd: Path, m: Materials) -> None:
        import pickle

        class Bomb:
            def __reduce__(self):
                return (os.system, (f"touch {cwd / 'PWNED'}",))

        (cwd / name).write_bytes(pickle.dumps({"state_dict": Bomb()}, protocol=2))

    return setup


def prepared_then_user_file(folder: str) -> Setup:
    """A dataset recsys-prep made, into which the user then put a file of their own."""

    def setup(cwd: Path, m: Materials) -> None:
        must_succeed(run_cli(PREP, [f"input={m.raw}", f"output={folder}"], cwd))
        (cwd / folder / "notes.txt").write_text("the user's notes about this dataset\n")

    return setup


# ------------------------------------------------------------------------------ rule 1


def train_case(bad: str, names: tuple[str, ...], case_id: str | None = None) -> Case:
    key = bad.split("=", 1)[0].lstrip("+")
    fast = tuple(a for a in FAST if a.split("=", 1)[0] != key)
    return Case(case_id or f"train {bad}", TRAIN, ("data.path={prepared}", *fast, bad), names=names)


def recommend_case(case_id: str, *args: str, names=(), setup=None, marks=()) -> Case:
    if not any(a.startswith("output=") for a in args):
        args = (*args, "output=recs.csv")
    return Case(
        case_id, RECOMMEND, ("ckpt_path={ckpt}", *args), names=names, setup=setup, marks=marks
    )


BAD_OPTIONS = [
    train_case("data.nope=1", ("data.nope",)),
    train_case("data.batch_size=[1", ("data.batch_size",), "train data.batch_size=[1 (bad syntax)"),
    train_case("data.batch_size=abc", ("data.batch_size", "abc")),
    train_case("data.batch_size=0", ("data.batch_size",)),
    train_case("data.boundaries=sugested", ("data.boundaries", "suggested", "sugested")),
    train_case("optimized_metric=hr@10", ("optimized_metric", "hr@10", "val/ndcg@10")),
    train_case("optimized_metric=val/auc@10", ("optimized_metric", "val/auc@10")),
    train_case("optimized_metric=val/ndcg@0", ("optimized_metric", "val/ndcg@0")),
    train_case("model.monitor=ndcg@10", ("model.monitor",)),
    train_case("model.encoder.name=nosuch", ("model.encoder.name", "nosuch", "gru")),
    train_case("model.scorer.name=target_attention", ("candidate_bce", "target_attention")),
    train_case("encoder@model.encoder=nosuch", ("nosuch",)),
    train_case("data.max_len=0", ("data.max_len",)),
    train_case("trainer.max_epochs=-1", ("trainer.max_epochs",)),
    train_case("trainer.devices=0", ("trainer.devices",)),
    train_case("trainer.accelerator=banana", ("trainer.accelerator", "banana")),
    train_case("model.encoder.dropout=1.5", ("model.encoder.dropout",)),
    train_case("model.optimizer.lr=-1", ("model.optimizer.lr",)),
    train_case("model.ks=ten", ("model.ks",)),
    train_case("model.side_features=category", ("model.side_features",)),
    train_case("model.side_features=[brand]", ("model.side_features", "brand")),
    train_case("model=nosuch", ("model", "nosuch")),
    train_case("+trainer.foo=1", ("trainer.foo",)),
    Case("eval no ckpt_path", EVAL, (), names=("ckpt_path",)),
    Case(
        "eval data.max_len=500 above the model's 50",
        EVAL,
        ("ckpt_path={ckpt}", "data.max_len=500"),
        names=("data.max_len", "50"),
    ),
    Case(
        "eval pickle bomb as ckpt_path",
        EVAL,
        ("ckpt_path=evil.ckpt",),
        names=("evil.ckpt",),
        setup=pickle_bomb("evil.ckpt"),
        absent=("PWNED",),
    ),
    recommend_case("recommend k=ten", "k=ten", names=("k", "ten")),
    recommend_case("recommend k=0", "k=0", names=("k",)),
    recommend_case(
        "recommend trainer.accelerator=tpu9", "trainer.accelerator=tpu9", names=("accelerator",)
    ),
    recommend_case(
        "recommend trainer.accelerator=cuda without a GPU",
        "trainer.accelerator=cuda",
        names=("accelerator", "not available"),
        marks=(pytest.mark.skipif(HAS_GPU, reason="this machine has a GPU"),),
    ),
    recommend_case("recommend stage=banana", "stage=banana", names=("stage", "banana")),
    recommend_case(
        "recommend unknown=guess", "unknown=guess", names=("unknown", "guess", "popular")
    ),
    recommend_case(
        "recommend users=<unknown ids> unknown=error",
        "users=ids.txt",
        "unknown=error",
        names=("ids.txt", "nobody", "unknown=skip"),
        setup=user_file("ids.txt", "nobody\n"),
    ),
    recommend_case("recommend output=recs.txt", "output=recs.txt", names=("output", "recs.txt")),
    recommend_case(
        "recommend users=<missing file>", "users=nosuch_ids.txt", names=("nosuch_ids.txt",)
    ),
    recommend_case(
        "recommend users=<empty file>",
        "users=ids.txt",
        names=("ids.txt",),
        setup=user_file("ids.txt", ""),
    ),
    Case(
        "prep max_len=abc",
        PREP,
        ("input={raw}", "output=out", "max_len=abc"),
        names=("max_len", "abc"),
    ),
    Case(
        "prep min_user_events=1.5",
        PREP,
        ("input={raw}", "output=out", "min_user_events=1.5"),
        names=("min_user_events", "1.5"),
    ),
    Case("prep nope=1", PREP, ("input={raw}", "output=out", "nope=1"), names=("nope",)),
    Case(
        "prep format=nosuch",
        PREP,
        ("input={raw}", "output=out", "format=nosuch"),
        names=("format", "nosuch"),
    ),
    Case(
        "prep max_len=[1 (bad syntax)",
        PREP,
        ("input={raw}", "output=out", "max_len=[1"),
        names=("max_len",),
    ),
    Case(
        "prep input=<missing file>",
        PREP,
        ("input=missing.csv", "output=out"),
        names=("missing.csv",),
    ),
]


@pytest.mark.parametrize("case", [c.param() for c in BAD_OPTIONS])
def test_wrong_option_is_one_paragraph_and_exit_2(outcomes, materials, case):
    check_refused(outcomes, case, materials)


# ------------------------------------------------------------------------------ rule 2

V_LOG = user_file(
    "v/log.csv",
    "user_id,item_id,timestamp\n"
    + "".join(
        f"{u},{(u * 3 + e) % 30 + 1},{1000 + u * 10 + e}\n" for u in range(60) for e in range(6)
    ),
)

USER_FILES = [
    Case(
        "prep output=<the input's folder>",
        PREP,
        ("input=v/log.csv", "output=v"),
        names=("{cwd}/v",),
        setup=V_LOG,
    ),
    Case(
        "prep output=. (the working directory)",
        PREP,
        ("input=v/log.csv", "output=."),
        names=("{cwd}",),
        setup=V_LOG,
    ),
    Case(
        "prep output=.. (above it)",
        PREP,
        ("input=v/log.csv", "output=.."),
        names=("{parent}",),
        setup=V_LOG,
    ),
    Case(
        "prep output=<a user's file>",
        PREP,
        ("input=v/log.csv", "output=notes.txt"),
        names=("{cwd}/notes.txt",),
        setup=both(V_LOG, user_file("notes.txt")),
    ),
    Case(
        "prep output=<the input itself>",
        PREP,
        ("input=v/log.csv", "output=v/log.csv"),
        names=("{cwd}/v/log.csv",),
        setup=V_LOG,
    ),
    Case(
        "prep output=<a folder with the user's files>",
        PREP,
        ("input=v/log.csv", "output=mine"),
        names=("{cwd}/mine",),
        setup=both(V_LOG, user_file("mine/notes.txt")),
    ),
    Case(
        "prep output=<its own dataset, a user's file added>",
        PREP,
        ("input=v/log.csv", "output=ds"),
        names=("{cwd}/ds",),
        setup=both(V_LOG, prepared_then_user_file("ds")),
    ),
    Case(
        "prep output=<a symlink to a user's folder>",
        PREP,
        ("input=v/log.csv", "output=link"),
        names=("{cwd}/link",),
        setup=both(V_LOG, user_file("mine/notes.txt"), link("link", "mine")),
    ),
    recommend_case(
        "recommend output=<a user's csv>",
        "output=mine.csv",
        names=("{cwd}/mine.csv",),
        setup=user_file("mine.csv", "user_id,clicks\n1,10\n"),
    ),
    recommend_case(
        "recommend output=<a user's parquet>",
        "output=mine.parquet",
        names=("{cwd}/mine.parquet",),
        setup=user_parquet("mine.parquet"),
    ),
    recommend_case(
        "recommend output=<its own users= file>",
        "users=ids.csv",
        "output=ids.csv",
        names=("{cwd}/ids.csv",),
        setup=user_file("ids.csv", "user_id\n1000\n1001\n"),
    ),
    recommend_case(
        "recommend output=<a symlink to a user's file>",
        "output=link.csv",
        names=("{cwd}/link.csv",),
        setup=both(user_file("notes.txt"), link("link.csv", "notes.txt")),
    ),
    recommend_case(
        "recommend output=<inside the prepared dataset it reads>",
        "data.path=dataset",
        "output=dataset/recs.csv",
        names=("{cwd}/dataset",),
        setup=copy_prepared("dataset"),
    ),
    Case(
        "export output=<a user's .pt2 file>",
        EXPORT,
        ("ckpt_path={ckpt}", "output=mine.pt2"),
        names=("{cwd}/mine.pt2",),
        setup=user_zip("mine.pt2"),
    ),
    Case(
        "train hydra.run.dir=<a folder with the user's files>",
        TRAIN,
        ("data.path={prepared}", *FAST, "hydra.run.dir=mine"),
        names=("{cwd}/mine",),
        setup=user_file("mine/notes.txt"),
    ),
]


@pytest.mark.parametrize("case", [c.param() for c in USER_FILES])
def test_users_files_are_never_touched(outcomes, materials, case):
    check_refused(outcomes, case, materials)


# ------------------------------------------------------------------------------ rules 3, 5

NOT_PREPARED = [
    Case(
        "train data.path=<a folder of raw logs>",
        TRAIN,
        ("data.path=logs", *FAST),
        names=("{cwd}/logs", "recsys-prep"),
        setup=raw_log_in("logs"),
    ),
    Case(
        "train data.path=<a typo>",
        TRAIN,
        ("data.path=prepraed", *FAST),
        names=("{cwd}/prepraed", "recsys-prep"),
        absent=("prepraed", "data"),
    ),
    Case(
        "eval data.path=<a folder of raw logs>",
        EVAL,
        ("ckpt_path={ckpt}", "data.path=logs"),
        names=("{cwd}/logs", "recsys-prep"),
        setup=raw_log_in("logs"),
    ),
    Case(
        "train on users of 2 events (min_user_events=2)",
        TRAIN,
        ("data.path={two}", *FAST),
        names=("{two}", "no train windows"),
    ),
]


@pytest.mark.parametrize("case", [c.param() for c in NOT_PREPARED])
def test_no_demo_and_no_empty_training_behind_the_users_back(outcomes, materials, case):
    check_refused(outcomes, case, materials)


# ------------------------------------------------------------------------------ rule 4


def meta_max_length(expected: int) -> Callable[[Path], None]:
    def check(out: Path) -> None:
        import json

        meta = json.loads((out / "meta.json").read_text())
        assert meta["length_quantiles"]["max"] == expected, meta["length_quantiles"]

    return check


def parquet_rows(expected: int) -> Callable[[Path], None]:
    def check(out: Path) -> None:
        import polars as pl

        frame = pl.read_parquet(out)
        assert frame.columns == ["user_id", "rank", "item_id", "score"]
        assert frame.height == expected and frame["rank"].max() == expected // 60

    return check


def an_export(out: Path) -> None:
    with zipfile.ZipFile(out) as archive:
        assert any(n.endswith("/extra/recsys_seq_artifact") for n in archive.namelist())


OWN_OUTPUTS = [
    Case(
        "prep onto its own previous output",
        PREP,
        ("input=v/log.csv", "output=out", "max_len=6"),
        setup=V_LOG,
        reruns=(("input=v/log.csv", "output=out", "max_len=4"),),
        output="out",
        check=meta_max_length(4),
    ),
    Case(
        "recommend onto its own previous parquet",
        RECOMMEND,
        ("ckpt_path={ckpt}", "k=3", "output=recs.parquet"),
        reruns=(("ckpt_path={ckpt}", "k=5", "output=recs.parquet"),),
        output="recs.parquet",
        check=parquet_rows(60 * 5),
    ),
    Case(
        "export onto its own previous .pt2",
        EXPORT,
        ("ckpt_path={ckpt}", "output=model.pt2"),
        reruns=(("ckpt_path={ckpt}", "output=model.pt2", "exclude_history=true"),),
        output="model.pt2",
        check=an_export,
    ),
]


@pytest.mark.parametrize("case", [c.param() for c in OWN_OUTPUTS])
def test_explicit_output_is_all_that_is_written_and_reruns_replace_it(outcomes, case):
    outcome = outcomes[case.id]
    assert outcome.error is None, outcome.error
    start = outcome.listings[0]
    for proc, listing in zip(outcome.procs, outcome.listings[1:], strict=True):
        assert proc.returncode == 0 and "Traceback" not in proc.stderr, (
            f"{proc.args}: exit {proc.returncode}\n{proc.stderr[-2000:]}"
        )
        extra = sorted(listing - start - {case.output})
        assert listing - start == {case.output}, (
            f"{proc.args}: the working directory holds {extra or 'no output'} beside {case.output}"
        )
    case.check(outcome.cwd / case.output)


def test_shared_material_is_untouched(outcomes):
    before, after = outcomes["__materials__"]
    assert changes(before, after) == []
