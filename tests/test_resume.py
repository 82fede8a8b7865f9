"""A run killed mid-epoch resumes from its last checkpoint and ends exactly where an
uninterrupted run of the same seed ends."""

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from tests.helpers import KillAtStep, callback_plugin

pytestmark = pytest.mark.slow  # end-to-end runs and real commands: not in make test-quick

ROOT = Path(__file__).resolve().parents[1]


def run_train(run_dir: Path, data_dir: Path, *extra: str) -> subprocess.CompletedProcess:
    command = [
        sys.executable,
        "-m",
        "recsys_seq.cli.train",
        f"hydra.run.dir={run_dir}",
        f"data.path={data_dir}",
        "trainer.max_epochs=2",
        "trainer.limit_train_batches=12",  # epoch = 12 steps; checkpoints at steps 5, 10, ...
        "callbacks.step_checkpoint.every_n_train_steps=5",
        "callbacks.early_stopping=null",
        "callbacks.progress_bar=null",
        "callbacks.model_summary=null",
        "baselines=false",
        *extra,
    ]
    plugin = callback_plugin(run_dir.parent / "plugin", KillAtStep)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), str(plugin)])}
    return subprocess.run(command, cwd=ROOT, env=env, capture_output=True, text=True)


@pytest.mark.slow
def test_killed_run_resumes_to_the_same_result(tmp_path, demo_dir):
    whole = run_train(tmp_path / "whole", demo_dir)
    assert whole.returncode == 0, whole.stderr[-2000:]

    interrupted = tmp_path / "interrupted"
    target = f"{KillAtStep.__module__}.{KillAtStep.__qualname__}"  # as its entry point names it
    kill = [f"+callbacks.kill._target_={target}", "+callbacks.kill.step=8"]
    killed = run_train(interrupted, demo_dir, *kill)
    assert killed.returncode == -signal.SIGKILL
    assert (interrupted / "checkpoints" / "step.ckpt").is_file()
    assert not (interrupted / "metrics.json").exists()

    resumed = run_train(interrupted, demo_dir)  # same run folder: picks up step.ckpt
    assert resumed.returncode == 0, resumed.stderr[-2000:]
    assert "Resuming from" in resumed.stdout

    expected = json.loads((tmp_path / "whole" / "metrics.json").read_text())
    got = json.loads((interrupted / "metrics.json").read_text())
    for key, value in expected.items():
        if key.startswith("test/"):
            assert got[key] == pytest.approx(value, abs=1e-6), key
