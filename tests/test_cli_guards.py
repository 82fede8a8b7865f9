"""Guards found by attacking the command line: sweeps into a user's folder, run folders inside
the data, refused runs that leave folders behind, trainer options Lightning refuses, benchmark
options, datasets sharing a name."""

import subprocess
import sys
from pathlib import Path

import pytest

from data_prep.demo import prepare_demo
from recsys_seq.cli.bench import TASKS
from recsys_seq.cli.report import Run, _distinct_dataset_names
from tests.helpers import FAST as SHORT

BIN = Path(sys.executable).parent


@pytest.fixture(scope="module")
def prepared(tmp_path_factory) -> Path:
    return prepare_demo(tmp_path_factory.mktemp("data") / "demo")


def snapshot(folder: Path) -> dict[str, bytes]:
    return {str(p.relative_to(folder)): p.read_bytes() for p in folder.rglob("*") if p.is_file()}


def run(cwd: Path, command: str, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([str(BIN / command), *args], cwd=cwd, capture_output=True, text=True)


def refused(done: subprocess.CompletedProcess, command: str, *fragments: str) -> None:
    assert done.returncode == 2, done.stderr[-2000:]
    assert done.stderr.startswith(f"{command}: error: ") and "Traceback" not in done.stderr
    for fragment in fragments:
        assert fragment in done.stderr, (fragment, done.stderr)


def test_a_sweep_into_a_users_folder_is_refused_before_hydra_writes(tmp_path, prepared):
    user = tmp_path / "mine"
    (user / "0").mkdir(parents=True)
    (user / "notes.txt").write_text("mine")
    (user / "0" / "data.csv").write_text("a,b\n")
    before = snapshot(user)
    done = run(tmp_path, "recsys-train", "-m", f"data.path={prepared}", *SHORT,
               f"hydra.sweep.dir={user}", "seed=1,2")  # fmt: skip
    refused(done, "recsys-train", str(user))
    assert snapshot(user) == before


def test_a_run_folder_inside_the_data_is_refused_and_left_no_trace(tmp_path, prepared):
    before = snapshot(prepared)
    done = run(tmp_path, "recsys-train", f"data.path={prepared}", *SHORT,
               f"hydra.run.dir={prepared / 'run'}")  # fmt: skip
    refused(done, "recsys-train", "inside the input folder")
    assert snapshot(prepared) == before and not (prepared / "run").exists()


REFUSED_IN_THE_TASK = [  # Hydra has made the run folder (and outputs/<task>/runs) by then
    ("recsys-train", ["model.embedding_dim=-1"], "model.embedding_dim"),
    ("recsys-eval", ["ckpt_path=missing.ckpt"], "missing.ckpt"),
    ("recsys-recommend", ["ckpt_path=missing.ckpt"], "missing.ckpt"),
    ("recsys-eval", ["ckpt_path=missing.ckpt", "hydra.run.dir=a/b/c"], "missing.ckpt"),
]


@pytest.mark.parametrize(("command", "args", "fragment"), REFUSED_IN_THE_TASK)
def test_a_refused_run_leaves_no_folder_it_made(tmp_path, command, args, fragment):
    work = tmp_path / "work"
    work.mkdir()
    refused(run(work, command, *args), command, fragment)
    assert list(work.iterdir()) == []  # not outputs/<task>/runs either


@pytest.mark.parametrize(("command", "args", "fragment"), REFUSED_IN_THE_TASK)
def test_a_refused_run_leaves_the_empty_folders_it_found(tmp_path, command, args, fragment):
    work = tmp_path / "work"
    task = command.removeprefix("recsys-")
    (work / "outputs" / task / "runs").mkdir(parents=True)  # all empty, made before the run
    (work / "a" / "b").mkdir(parents=True)
    before = sorted(p.relative_to(work) for p in work.rglob("*"))
    refused(run(work, command, *args), command, fragment)
    assert sorted(p.relative_to(work) for p in work.rglob("*")) == before


@pytest.mark.parametrize(
    "option, fragment",
    [
        ("trainer.precision=7", "trainer.precision"),
        ("trainer.accelerator=tpu", "trainer options do not work here"),
        ("trainer.devices=[]", "trainer.devices"),
        ("+trainer.foo=1", "trainer.foo"),
    ],
)
def test_trainer_options_lightning_refuses_are_option_errors(tmp_path, prepared, option, fragment):
    done = run(tmp_path, "recsys-train", f"data.path={prepared}", *SHORT, option)
    refused(done, "recsys-train", fragment)
    assert list(tmp_path.glob("outputs/*/runs/*")) == []


@pytest.mark.parametrize(
    "args, fragment",
    [
        (["task=padding", "output=[1,2]"], "output must be a string"),
        (["task=padding", "budget_s=abc"], "budget_s must be a finite number"),
        (["task=padding", "datasets=nope"], "Unknown dataset(s) nope"),
        (["task=padding", "datasets=[ml_1m,nope]"], "Unknown dataset(s) nope"),
        (["task=padding", "strategies=[fastest]"], "Unknown strategy(s) fastest"),
        (["task=padding", "models=[gru]"], "recsys-bench task=padding takes: output"),
        (["task=throughput", "precisions=fp8"], "Unknown precision(s) fp8"),
        (["task=padding", "nonsense=1"], "Unknown option(s) nonsense: not in the command's config"),
        (["task=padding", "+nonsense=1"], "Unknown option(s) nonsense"),
        (["task=nosuch"], f"task must be one of {', '.join(TASKS)}, not 'nosuch'"),
        ([], "usage: recsys-bench task=<name>"),
    ],
)
def test_benchmark_options_are_checked(tmp_path, args, fragment):
    refused(run(tmp_path, "recsys-bench", *args), "recsys-bench", fragment)
    assert list(tmp_path.iterdir()) == []


def test_report_tells_apart_datasets_that_share_a_folder_name(tmp_path):
    def made(data: Path) -> Run:
        return Run(tmp_path, "r", "sasrec", data.name, data, [], {})

    a, b, c = made(tmp_path / "A" / "p"), made(tmp_path / "B" / "p"), made(tmp_path / "q")
    assert [r.dataset for r in _distinct_dataset_names([a, b, c, a])] == ["A/p", "B/p", "q", "A/p"]
