"""What the tests share: small in-memory datasets, configs composed from the real conf/ and
short training runs, running the installed commands and checking their errors and what they
left on disk, and the callbacks tests load into real runs (through an entry point). Then
what pairs of test modules share: the command-line cases, damaged prepared folders, two-stage
runs and prep on a tiny file."""

import hashlib
import os
import re
import signal
import subprocess
import sys
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

import lightning as L
import numpy as np
import polars as pl
import pytest
from hydra import compose, initialize_config_dir
from hydra.core.hydra_config import HydraConfig
from omegaconf import open_dict

from data_prep import prepare, schema
from recsys_seq import configs
from recsys_seq.core.errors import UserError
from recsys_seq.core.targets import ENTRY_POINT_GROUPS
from recsys_seq.data import PreparedSequences
from recsys_seq.workflows.train import train


def sequences(histories: list[list[int]], num_items: int | None = None) -> PreparedSequences:
    """A leave-one-out PreparedSequences over the given item histories (user u = row u),
    with prep's rules: training events end at the validation target, and only they are
    counted."""
    lengths = np.array([len(h) for h in histories], dtype=np.int64)
    offsets = np.zeros(len(histories) + 1, dtype=np.int64)
    np.cumsum(lengths, out=offsets[1:])
    items = np.concatenate([np.asarray(h, dtype=np.int64) for h in histories])
    num_items = num_items or int(items.max())
    train_end = lengths - 2  # the validation target's position
    training = np.concatenate(
        [np.asarray(h[:end]) for h, end in zip(histories, train_end, strict=True)]
    )
    return PreparedSequences(
        items=items,
        offsets=offsets,
        users=np.arange(len(histories), dtype=np.int64),
        val_index=lengths - 2,
        test_index=lengths - 1,
        train_end=train_end,
        item_counts=np.bincount(training.astype(np.int64), minlength=num_items + 1),
        features={"category": items % 3 + 1},
        meta={"items": num_items, "item_fingerprint": "test"},
    )


def random_histories(n_users: int, num_items: int, max_len: int, seed: int = 0):
    rng = np.random.default_rng(seed)
    lengths = rng.integers(3, max_len + 1, size=n_users)
    return [rng.integers(1, num_items + 1, size=n).tolist() for n in lengths]


# ------------------------------------------------------------------ configs and short runs


def compose_config(name: str, run_dir: Path, overrides: list[str]):
    with initialize_config_dir(configs.CONF_DIR, version_base="1.3"):
        cfg = compose(name, overrides=overrides, return_hydra_config=True)
    HydraConfig().set_config(cfg)  # resolves ${hydra:...} as in a real run
    with open_dict(cfg):
        cfg.paths.output_dir = str(run_dir)
        del cfg.hydra
    return cfg


def train_config(run_dir: Path, data_dir: Path, *overrides: str):
    return compose_config(
        "train",
        run_dir,
        [
            f"data.path={data_dir}",
            "callbacks.progress_bar=null",
            "callbacks.model_summary=null",
            *overrides,
        ],
    )


def short_checkpoint(run_dir: Path, data_dir: Path, *overrides: str) -> Path:
    """Best checkpoint of a run of a few batches (for tests that need a trained model)."""
    cfg = train_config(
        run_dir,
        data_dir,
        "trainer.max_epochs=1",
        "trainer.limit_train_batches=3",
        "trainer.limit_val_batches=1",
        "trainer.limit_test_batches=1",
        "baselines=false",
        "logger=[]",
        *overrides,
    )
    metrics, _ = train(cfg)
    return Path(metrics["checkpoint"])


# ------------------------------------------------------------------ the installed commands

REPO = Path(__file__).resolve().parents[1]
BIN = REPO / ".venv" / "bin"
if not (BIN / "recsys-train").exists():  # installed elsewhere (CI): beside this interpreter
    BIN = Path(sys.executable).parent

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


# ------------------------------------------------------------------ callbacks loaded into runs


def callback_plugin(folder: Path, *classes: type) -> Path:
    """An installed package's metadata in ``folder`` (put it on ``sys.path`` or PYTHONPATH)
    that registers ``classes`` as entry points of the callbacks group, so that a config may
    name them (``+callbacks.<name>._target_=<module>.<Class>``)."""
    info = folder / "recsys_seq_test_callbacks-0.dist-info"
    info.mkdir(parents=True, exist_ok=True)
    (info / "METADATA").write_text(
        "Metadata-Version: 2.1\nName: recsys-seq-test-callbacks\nVersion: 0\n"
    )
    lines = [f"{c.__name__} = {c.__module__}:{c.__qualname__}" for c in classes]
    group = ENTRY_POINT_GROUPS[("callbacks", "*")]
    (info / "entry_points.txt").write_text(f"[{group}]\n" + "\n".join(lines) + "\n")
    return folder


class KillAtStep(L.Callback):
    """SIGKILLs its own process after training step ``step``: an abrupt, unclean death."""

    def __init__(self, step: int) -> None:
        self.step = step

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx) -> None:
        if trainer.global_step == self.step:
            os.kill(os.getpid(), signal.SIGKILL)


# ------------------------------------------------------------------ command-line cases
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


# ------------------------------------------------------------------ damaged prepared folders
# (tests/test_prepared_files.py, tests/test_prepared_tables.py; the folder itself is the
# ``prepared`` fixture, tests/conftest.py)

SEQ, ITEMS, USERS, META, PNG = (
    schema.SEQUENCES_FILE,
    schema.ITEMS_FILE,
    schema.USERS_FILE,
    schema.META_FILE,
    schema.HISTOGRAM_FILE,
)
FEATURES = ["category", "event"]


def read(folder: Path, name: str) -> pl.DataFrame:
    return pl.read_parquet(folder / name)


def table(name: str, change: Callable[[pl.DataFrame], pl.DataFrame]):
    """Rewrite ``name`` with ``change`` applied."""

    def corrupt(folder: Path) -> None:
        change(read(folder, name)).write_parquet(folder / name)

    return corrupt


def column(name: str, col: str, expr: pl.Expr):
    return table(name, lambda f: f.with_columns(expr.alias(col)))


items_col = pl.col(schema.ITEMS)


def case(corrupt, file: str | None, *fragments: str, id: str):
    """A corruption, the file its message must name (None: the folder) and what it must say."""
    return pytest.param(corrupt, file, fragments, id=id)


# ------------------------------------------------------------------ two-stage runs
# (tests/test_rerank_runs.py, tests/test_two_stage_paths.py)

SHORT = [
    "trainer.max_epochs=1",
    "trainer.limit_train_batches=3",
    "trainer.limit_val_batches=2",
    "trainer.limit_test_batches=2",
    "logger=[]",
]


def rerank_run(run_dir, demo_dir, *overrides):
    return train_config(
        run_dir, demo_dir, "model=din", "rerank=topk", "rerank.candidates=20", *SHORT, *overrides
    )


# ------------------------------------------------------------------ prep on a tiny file
# (tests/test_prep_log_values.py, tests/test_prep_option_values.py)


def write(tmp_path: Path, name: str, content: str | bytes | pl.DataFrame) -> Path:
    path = tmp_path / name
    if isinstance(content, pl.DataFrame):
        content.write_parquet(path)
    else:
        path.write_bytes(content if isinstance(content, bytes) else content.encode())
    return path


def run(tmp_path: Path, src: Path, **cfg) -> dict:
    return prepare({"input": src, "output": tmp_path / "out", "min_user_events": 1, **cfg})


def history(tmp_path: Path) -> tuple[list, list[int]]:
    """The first user's items (original ids) and timestamps, in time order."""
    items = pl.read_parquet(tmp_path / "out" / schema.ITEMS_FILE)
    back = dict(zip(items[schema.ITEM], items[schema.ORIGINAL_ID], strict=True))
    seqs = pl.read_parquet(tmp_path / "out" / schema.SEQUENCES_FILE)
    return [back[i] for i in seqs[schema.ITEMS][0]], seqs[schema.TIMESTAMPS][0].to_list()


def refused(tmp_path: Path, src: Path, fragments: list[str], **cfg) -> str:
    """The job's one-paragraph refusal (a PrepError for the log, an OptionError for an
    option), naming every fragment, with nothing written."""
    with pytest.raises(UserError) as err:
        run(tmp_path, src, **cfg)
    message = str(err.value)
    assert "\n" not in message.strip(), message  # one paragraph
    for fragment in fragments:
        assert fragment in message, (fragment, message)
    assert not (tmp_path / "out").exists()
    return message
