"""Two CPU processes (gloo DDP) train, evaluate and recommend exactly like one."""

import json
import os
import subprocess
import sys
from pathlib import Path

import polars as pl
import pytest

from recsys_seq.workflows.evaluate import evaluate
from recsys_seq.workflows.recommend import recommend
from recsys_seq.workflows.train import train
from tests.helpers import compose_config, short_checkpoint, train_config

pytestmark = pytest.mark.slow  # end-to-end runs and real commands: not in make test-quick

DDP_SPAWN = ["trainer=ddp_cpu", "trainer.devices=2", "trainer.strategy=ddp_spawn"]
SHORT = ["trainer.max_epochs=1", "trainer.limit_train_batches=4", "callbacks.early_stopping=null"]


@pytest.mark.slow
def test_two_processes_train_and_match_one_process_evaluation(tmp_path, demo_dir):
    run_dir = tmp_path / "ddp"
    metrics, objects = train(train_config(run_dir, demo_dir, *DDP_SPAWN, *SHORT))
    assert objects["trainer"].world_size == 2
    written = json.loads((run_dir / "metrics.json").read_text())
    assert written["test/ndcg@10"] == pytest.approx(metrics["test/ndcg@10"])
    checkpoint = metrics["checkpoint"]

    one, _ = evaluate(compose_config("eval", tmp_path / "one", [f"ckpt_path={checkpoint}"]))
    two, _ = evaluate(
        compose_config("eval", tmp_path / "two", [f"ckpt_path={checkpoint}", *DDP_SPAWN])
    )
    test_keys = [k for k in one if k.startswith("test/")]
    assert test_keys
    for key in test_keys:
        assert two[key] == pytest.approx(one[key], abs=1e-6), key
        # the DDP training run tested the same checkpoint on the same users
        assert written[key] == pytest.approx(one[key], abs=1e-6), key


@pytest.mark.slow
def test_command_line_ddp_writes_one_run_folder(tmp_path, demo_dir):
    """`trainer=ddp_cpu` re-launches the script per rank: children must reuse the parent's
    run folder, and rank zero's extra work (baselines) must not wait on the other rank."""
    root = Path(__file__).resolve().parents[1]
    run_dir = tmp_path / "run"
    command = [
        sys.executable,
        "-m",
        "recsys_seq.cli.train",
        "trainer=ddp_cpu",
        f"hydra.run.dir={run_dir}",
        f"paths.log_dir={tmp_path / 'outputs'}",
        f"data.path={demo_dir}",
        *SHORT,
        "callbacks.progress_bar=null",
    ]
    done = subprocess.run(
        command,
        cwd=root,
        env={**os.environ, "PYTHONPATH": str(root)},
        capture_output=True,
        text=True,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    metrics = json.loads((run_dir / "metrics.json").read_text())
    assert {"test/ndcg@10", "popularity/test/ndcg@10"} <= metrics.keys()
    assert not (tmp_path / "outputs").exists(), "a child process created its own run folder"


@pytest.mark.slow
def test_two_processes_recommend_exactly_what_one_does(tmp_path, demo_dir):
    """Trainer.predict shards the users over the ranks; the parts join into the same table."""
    checkpoint = short_checkpoint(tmp_path / "run", demo_dir)
    frames = {}
    for name, extra in (("one", []), ("two", DDP_SPAWN)):
        output = tmp_path / name / "recs.parquet"
        cfg = compose_config(
            "recommend", tmp_path / name, [f"ckpt_path={checkpoint}", f"output={output}", *extra]
        )
        frames[name], info = recommend(cfg, show_progress=False)
        assert pl.read_parquet(output).equals(frames[name])
        assert [p.name for p in output.parent.iterdir()] == ["recs.parquet"]  # no parts left
    assert frames["two"]["user_id"].n_unique() == info["users"] > 0
    assert frames["two"].drop("score").equals(frames["one"].drop("score"))
    assert frames["two"]["score"].to_numpy() == pytest.approx(frames["one"]["score"].to_numpy())
