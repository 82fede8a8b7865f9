"""Hydra multiruns from the command line: a model sweep on the local parallel launcher, its
summary table (printed and in summary.md), and recsys-report over the sweep folder. Optuna
studies are recsys-tune's (tests/test_tune_*.py)."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow  # end-to-end runs and real commands: not in make test-quick

ROOT = Path(__file__).resolve().parents[1]
TINY = [
    "trainer.max_epochs=1",
    "trainer.limit_train_batches=2",
    "trainer.limit_val_batches=2",
    "trainer.limit_test_batches=2",
    "callbacks.progress_bar=null",
    "callbacks.model_summary=null",
    "baselines=false",
]


def sweep(sweep_dir: Path, data_dir: Path, *overrides: str) -> subprocess.CompletedProcess:
    command = [
        sys.executable,
        "-m",
        "recsys_seq.cli.train",
        "--multirun",
        f"hydra.sweep.dir={sweep_dir}",
        f"data.path={data_dir}",
        *TINY,
        *overrides,
    ]
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    return subprocess.run(command, cwd=ROOT, env=env, capture_output=True, text=True)


@pytest.mark.slow
def test_model_sweep_in_parallel_then_report(tmp_path, demo_dir):
    done = sweep(tmp_path / "sweep", demo_dir, "hydra/launcher=local_parallel", "model=sasrec,gru")
    assert done.returncode == 0, done.stderr[-3000:]
    runs = sorted(p.parent.name for p in (tmp_path / "sweep").glob("*/metrics.json"))
    assert runs == ["0", "1"]
    summary = (tmp_path / "sweep" / "summary.md").read_text()
    assert summary in done.stdout  # printed whole, as written
    rows = [line for line in summary.splitlines() if line.startswith("| ") and "model=" in line]
    assert len(rows) == 2 and "model=sasrec" in rows[0] and "model=gru" in rows[1]
    best = max(
        json.loads((tmp_path / "sweep" / run / "metrics.json").read_text())["val/best_ndcg@10"]
        for run in runs
    )
    assert f"val/ndcg@10 best {best:.4f}" in summary
    report = subprocess.run(
        [
            sys.executable,
            "-m",
            "recsys_seq.cli.report",
            f"folder={tmp_path / 'sweep'}",
            "include_debug=true",  # a few batches per run
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
    )
    assert report.returncode == 0, report.stderr[-3000:]
    table = (tmp_path / "sweep" / "report" / "report.csv").read_text()
    assert "model=sasrec" in table and "model=gru" in table
