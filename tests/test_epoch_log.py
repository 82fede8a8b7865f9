"""``recsys-train`` piped to a file prints one plain line per epoch, with the figures the run
also records in ``csv/metrics.csv``."""

import csv
import re

import pytest

from tests.helpers import must_succeed, run_cli

pytestmark = pytest.mark.slow  # a real command

LINE = re.compile(
    r"^epoch (\d+)/(\d+)  loss (\d+\.\d{4})  val/ndcg@10 (\d\.\d{4})  best (\d\.\d{4})  \d+ s$"
)


def test_a_log_file_gets_one_line_per_epoch_matching_the_recorded_metrics(tmp_path, demo_dir):
    epochs = 3
    proc = run_cli(
        "recsys-train",
        [
            f"data.path={demo_dir}",
            f"trainer.max_epochs={epochs}",
            "trainer.limit_train_batches=4",
            "trainer.limit_val_batches=2",
            "trainer.limit_test_batches=1",
            "callbacks.early_stopping=null",
            "baselines=false",
            f"hydra.run.dir={tmp_path / 'run'}",
        ],
        tmp_path,
    )  # stdout is a pipe, as in a SLURM job or `make demo > log`
    must_succeed(proc)
    lines = [m for m in map(LINE.match, proc.stdout.splitlines()) if m]
    assert [(int(m[1]), int(m[2])) for m in lines] == [(e, epochs) for e in range(1, epochs + 1)]
    assert "\x1b[" not in proc.stdout  # no terminal escapes in a file
    assert "it/s" not in proc.stdout + proc.stderr  # no progress bar frames either

    with open(tmp_path / "run" / "csv" / "metrics.csv") as file:
        rows = list(csv.DictReader(file))
    val = [float(r["val/ndcg@10"]) for r in rows if r["val/ndcg@10"]]
    assert [float(m[4]) for m in lines] == pytest.approx(val, abs=5e-5)
    best = [max(val[: i + 1]) for i in range(len(val))]
    assert [float(m[5]) for m in lines] == pytest.approx(best, abs=5e-5)
    losses = [float(m[3]) for m in lines]
    assert all(0 < loss < 20 for loss in losses) and losses[-1] < losses[0]  # it trains


def test_a_log_file_starts_with_what_the_run_is_and_has_each_line_once(tmp_path, demo_dir):
    run_dir = tmp_path / "run"
    given = [
        f"data.path={demo_dir}",
        "trainer.max_epochs=2",
        "trainer.limit_train_batches=2",
        "trainer.limit_val_batches=1",
        "trainer.limit_test_batches=1",
        "model=gru",
        "data.batch_size=64",
        f"hydra.run.dir={run_dir}",
    ]
    proc = run_cli("recsys-train", given, tmp_path)
    must_succeed(proc)
    lines = proc.stdout.splitlines()
    first_epoch = next(i for i, line in enumerate(lines) if LINE.match(line))
    before = "\n".join(lines[:first_epoch])
    assert "model  gru: encoder gru, loss full_softmax" in before
    assert f"data   {demo_dir}: 3,000 users, 2,000 items" in before
    assert "batches of 64" in before and "up to 2 epochs" in before
    assert "best checkpoint by val/ndcg@10" in before
    assert f"run    {run_dir}" in before
    assert f"given  {' '.join(given[:-1])}" in before  # hydra.* is Hydra's own
    # Lightning's lines reach the log once, not once per stream
    both = proc.stdout + proc.stderr
    assert both.count("Seed set to 42") == 1
    assert both.count("GPU available:") == 1
