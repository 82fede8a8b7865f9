"""What the commands print and leave behind for people to read: tables that are never cut in
logs, one clean line per prep stage with its real duration, dataset names that mean something,
a model summary of the network's parts, and run folders with no empty or duplicated files."""

import io
import re
import subprocess
import sys
import time
from pathlib import Path

import lightning as L
import pytest
from torch import nn
from torchmetrics import MaxMetric, MetricCollection
from torchmetrics.aggregation import MeanMetric

from data_prep.cli import dataset_name, resolve_paths
from data_prep.demo import prepare_demo
from data_prep.progress import console_stages, duration
from recsys_seq.callbacks import NetworkSummary
from recsys_seq.core.tables import Column, markdown, print_table
from recsys_seq.models import build_model, model_spec

pytestmark = pytest.mark.slow  # end-to-end runs and real commands: not in make test-quick

BIN = Path(sys.executable).parent
WIDE = "5,000,000,000 events in a cell far wider than any narrow console would show"


class Terminal(io.StringIO):
    """A stream that says it is a terminal, as a user's console does."""

    def isatty(self) -> bool:
        return True


COLUMNS = [Column("name"), Column("count", right=True)]
ROWS = [["alpha", "5,000"], ["b", WIDE]]


def test_a_table_that_is_not_on_a_terminal_is_markdown_with_every_cell_whole():
    out = io.StringIO()
    print_table(COLUMNS, ROWS, title="figures", file=out)
    lines = out.getvalue().splitlines()
    assert lines[:2] == ["figures", ""]
    assert lines[2].startswith("| name ") and lines[3].endswith(": |")  # counts align right
    assert WIDE in out.getvalue() and "…" not in out.getvalue()
    assert len({len(line) for line in lines[2:]}) == 1  # fixed width: columns line up
    assert lines[4] == "| alpha | " + "5,000".rjust(len(WIDE)) + " |"


def test_markdown_cells_stay_on_one_line_and_in_their_column():
    text = markdown([Column("a"), Column("b")], [["x | y", "two\nlines"]])
    assert text.splitlines()[-1] == r"| x \| y | two lines |"
    with pytest.raises(ValueError, match="2 columns"):
        markdown([Column("a"), Column("b")], [["only one"]])


def test_a_table_on_a_terminal_is_drawn_by_rich(monkeypatch):
    monkeypatch.setenv("COLUMNS", "200")
    out = Terminal()
    print_table(COLUMNS, ROWS, title="figures", file=out, header=False)
    assert "│ alpha │" in out.getvalue() and WIDE in out.getvalue()
    assert "name" not in out.getvalue()  # header=False hides the headings in a terminal


def test_stage_lines_are_plain_with_real_durations():
    out = io.StringIO()
    stage = console_stages(out)
    with stage("sleeping"):
        time.sleep(0.05)
    with stage("a stage with a long name that a narrow terminal would have to wrap"):
        pass
    first, second = out.getvalue().splitlines()
    assert re.fullmatch(r"sleeping: \d+ ms", first) and int(first.split()[1]) >= 50
    assert re.fullmatch(r"a stage with a long name .* wrap: \d+ ms", second)


def test_stage_lines_on_a_narrow_terminal_end_whole(monkeypatch):
    monkeypatch.setenv("COLUMNS", "40")
    out = Terminal()
    with console_stages(out)("k-core members, split trim, truncation to max_len"):
        time.sleep(0.02)
    last = out.getvalue().rsplit("\x1b[2K", 1)[-1]  # after the spinner line is erased
    assert re.fullmatch(r"k-core members, split trim, truncation to max_len: \d+ ms\n", last)


@pytest.mark.parametrize(
    "seconds, shown", [(0.0042, "4 ms"), (0.35, "350 ms"), (3.14, "3.1 s"), (125, "2 min 05 s")]
)
def test_durations_read_in_units_that_fit(seconds, shown):
    assert duration(seconds) == shown


@pytest.mark.parametrize(
    "path, name",
    [
        ("data/ml-100k/u.data", "ml-100k"),
        ("movielens-latest-small/ratings.csv", "movielens-latest-small"),
        ("shop/events.csv.gz", "shop"),
        ("s3rec/Beauty.txt", "Beauty"),
        ("downloads/UserBehavior.csv", "UserBehavior"),
        ("/u.data", "u"),  # no folder to name it after
    ],
)
def test_a_dataset_is_named_after_its_folder_when_its_file_name_is_generic(path, name):
    assert dataset_name(path) == name


def test_the_demo_is_demo_and_an_explicit_name_wins():
    assert resolve_paths({"input": None, "output": None, "name": None})["name"] == "demo"
    given = resolve_paths({"input": "ml-100k/u.data", "output": None, "name": "mine"})
    assert given["name"] == "mine" and given["output"] == str(Path("data/prepared/mine"))


class Task(L.LightningModule):
    """A task-like module: a network part beside metric objects of every shape."""

    def __init__(self) -> None:
        super().__init__()
        self.val_best = MaxMetric()
        self.model = nn.Sequential(nn.Linear(4, 4), nn.ReLU())
        self.val_metrics = MetricCollection({"mean": MeanMetric()})
        self.test_sampled = nn.ModuleDict({"a": MeanMetric(), "b": MaxMetric()})  # only metrics


def summary_of(module: nn.Module, max_depth: int):
    class Trainer:
        strategy = object()

    return NetworkSummary(max_depth=max_depth)._summary(Trainer(), module)


@pytest.mark.parametrize("depth", [1, -1])
def test_the_model_summary_lists_the_network_not_the_metrics(depth):
    summary = summary_of(Task(), depth)
    expected = ["model"] if depth == 1 else ["model", "model.0", "model.1"]
    assert summary.layer_names == expected
    assert summary.total_parameters == 20 and summary.total_training_modes["train"] == 3


def test_the_real_tasks_summary_is_its_model_and_loss():
    encoder = {"name": "self_attention", "max_len": 8, "num_layers": 1, "num_heads": 1}
    task = build_model(model_spec({"name": "sasrec", "encoder": encoder, "num_items": 10}))
    summary = summary_of(task, 1)
    assert summary.layer_names == ["model", "loss"]
    assert summary.total_parameters == sum(p.numel() for p in task.parameters())


def run(cwd: Path, command: str, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [str(BIN / command), *args], cwd=cwd, capture_output=True, text=True, timeout=600
    )


@pytest.mark.slow
def test_prep_output_in_a_log(tmp_path):
    """Through a pipe: one plain line per stage on stderr, a markdown summary on stdout, and a
    dataset named after the folder of its generic file name."""
    log = tmp_path / "shop" / "events.csv"
    log.parent.mkdir()
    log.write_text(
        "user_id,item_id,timestamp\n"
        + "".join(f"{u},{(u * 7 + i) % 13},{i}\n" for u in range(20) for i in range(6))
    )
    done = run(tmp_path, "recsys-prep", f"input={log}", f"output={tmp_path / 'out'}")
    assert done.returncode == 0, done.stderr[-2000:]
    stages = done.stderr.splitlines()
    assert stages and all(re.fullmatch(r"[^:]+: \d+(\.\d)? (ms|s)", s) for s in stages), stages
    assert done.stdout.startswith("prepared shop\n\n| figure ")
    assert "| users " in done.stdout and "…" not in done.stdout
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out", "shop"]  # nothing of Hydra's


@pytest.mark.slow
def test_a_train_run_folder_and_its_output_in_a_log(tmp_path):
    """A real run through a pipe: results as a markdown table, a model summary without metric
    objects, and a run folder holding one config (Hydra's) and no empty log file."""
    data = prepare_demo(tmp_path / "demo")
    run_dir = tmp_path / "run"
    done = run(
        tmp_path,
        "recsys-train",
        f"data.path={data}",
        "trainer.max_epochs=1",
        "trainer.limit_train_batches=2",
        "trainer.limit_val_batches=1",
        "trainer.limit_test_batches=1",
        "callbacks.progress_bar=null",
        f"hydra.run.dir={run_dir}",
    )
    assert done.returncode == 0, done.stderr[-3000:]
    assert re.search(r"^\| metric +\| +sasrec \| +popularity \| +ratio \|$", done.stdout, re.M)
    assert "…" not in done.stdout
    assert "val_metrics" not in done.stdout and re.search(r"│ \d+ │ model ", done.stdout)
    entries = sorted(p.name for p in run_dir.iterdir())
    assert entries == [".hydra", ".recsys-seq.json", "checkpoints", "csv", "metrics.json"]
    assert (run_dir / ".hydra" / "config.yaml").is_file()
