"""Adding an encoder is one file plus one config, outside the project's tree.

A plugin package in ``tmp_path`` (the encoder module and the ``dist-info`` that declares its
entry point in the ``recsys_seq.encoders`` group) and a config folder with
``encoder/masked_mean.yaml`` are all it takes: the real ``recsys-train`` trains it, and the
checkpoint loads wherever the plugin is importable.
"""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from recsys_seq.checkpoint import CheckpointError, load

REPO = Path(__file__).resolve().parents[1]
BIN = REPO / ".venv" / "bin"
if not (BIN / "recsys-train").exists():  # installed elsewhere (CI): beside this interpreter
    BIN = Path(sys.executable).parent

ENCODER = '''
"""The causal masked mean: state t is the mean of the embedded events 0..t."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

import torch
from torch import nn

from recsys_seq.models.encoders import ENCODERS


@dataclass(frozen=True)
class MaskedMeanOptions:
    """``model.encoder`` for :class:`MaskedMeanEncoder` (no options)."""

    name: Literal["masked_mean"] = "masked_mean"


@ENCODERS.register(MaskedMeanOptions)
class MaskedMeanEncoder(nn.Module):
    def forward(self, x: torch.Tensor, mask: torch.Tensor, lengths: torch.Tensor) -> torch.Tensor:
        keep = mask[..., None].to(x.dtype)  # (B, T, 1)
        sums = (x * keep).cumsum(dim=1)  # (B, T, D)
        seen = keep.cumsum(dim=1).clamp(min=1)  # (B, T, 1) real events 0..t
        return sums / seen * keep  # (B, T, D), PAD 0
'''

# the checkpoint is loaded where the plugin is importable; the encoder is checked against a
# loop and against the contract every registered encoder is tested with
LOAD = """
import json, sys
import torch
from recsys_seq.checkpoint import load
from recsys_seq.models import ENCODERS
from tests.helpers import assert_encoder_contract, encoder_with

task = load(sys.argv[1])
encoder = task.model.encoder
x = torch.randn(3, 5, 4)
lengths = torch.tensor([5, 2, 1])
mask = torch.arange(5) < lengths[:, None]
states = encoder(x, mask, lengths)
expected = torch.zeros_like(x)
for b, n in enumerate(lengths.tolist()):
    for t in range(n):
        expected[b, t] = x[b, : t + 1].mean(0)
assert_encoder_contract(encoder_with("masked_mean"))
print(json.dumps({
    "registered": ENCODERS.names(),
    "spec": [task.spec.name, task.spec.encoder.name],
    "encoder": f"{type(encoder).__module__}.{type(encoder).__name__}",
    "is_the_mean": torch.allclose(states, expected, atol=1e-6),
}))
"""


def write_plugin(root: Path) -> tuple[Path, Path]:
    """``(package folder for PYTHONPATH, config folder for hydra.searchpath)``."""
    package, conf = root / "plugin", root / "conf"
    info = package / "mean_encoder-0.dist-info"
    info.mkdir(parents=True)
    (package / "mean_encoder.py").write_text(ENCODER.lstrip())
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: mean-encoder\nVersion: 0\n")
    (info / "entry_points.txt").write_text("[recsys_seq.encoders]\nmasked_mean = mean_encoder\n")
    (conf / "encoder").mkdir(parents=True)
    (conf / "encoder" / "masked_mean.yaml").write_text("name: masked_mean\n")
    return package, conf


def run(args: list[str], cwd: Path, pythonpath: str) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if k not in ("HYDRA_FULL_ERROR", "RECSYS_SEQ_ROOT")}
    env["PYTHONPATH"] = pythonpath
    done = subprocess.run(args, cwd=cwd, env=env, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, f"{args}: exit {done.returncode}\n{done.stderr[-3000:]}"
    return done


@pytest.mark.slow  # starts the training command, then a second interpreter to load its model
def test_an_encoder_plugin_trains_through_the_cli_and_its_checkpoint_loads(tmp_path, demo_dir):
    package, conf = write_plugin(tmp_path)
    run_dir = tmp_path / "run"
    run(
        [
            str(BIN / "recsys-train"),
            "model=recommender",
            "encoder@model.encoder=masked_mean",
            f"hydra.searchpath=[file://{conf}]",
            "data=demo",
            f"data.path={demo_dir}",
            f"hydra.run.dir={run_dir}",
            # a short run that still writes checkpoints (debug=fast writes none)
            "trainer.max_epochs=1",
            "trainer.limit_train_batches=2",
            "trainer.limit_val_batches=1",
            "trainer.limit_test_batches=1",
            "baselines=false",
            "logger=[]",
            "callbacks.progress_bar=null",
            "callbacks.model_summary=null",
        ],
        cwd=tmp_path,
        pythonpath=str(package),
    )
    metrics = json.loads((run_dir / "metrics.json").read_text())
    assert 0.0 <= metrics["test/ndcg@10"] <= 1.0
    checkpoint = Path(metrics["checkpoint"])
    assert checkpoint == run_dir / "checkpoints" / "best.ckpt" and checkpoint.is_file()

    loaded = run(
        [sys.executable, "-c", LOAD, str(checkpoint)],
        cwd=tmp_path,
        pythonpath=os.pathsep.join([str(package), str(REPO)]),
    )
    report = json.loads(loaded.stdout.strip().splitlines()[-1])
    assert "masked_mean" in report["registered"]
    assert report["spec"] == ["masked_mean", "masked_mean"]  # the label follows the encoder
    assert report["encoder"] == "mean_encoder.MaskedMeanEncoder"
    assert report["is_the_mean"]

    # without the plugin the checkpoint is refused by name, nothing imported from the file
    with pytest.raises(CheckpointError, match="masked_mean"):
        load(checkpoint)


@pytest.mark.slow
def test_a_broken_plugin_is_named_not_a_traceback(tmp_path, demo_dir):
    info = tmp_path / "plugin" / "broken-0.dist-info"
    info.mkdir(parents=True)
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: broken\nVersion: 0\n")
    (info / "entry_points.txt").write_text("[recsys_seq.encoders]\nbroken = no_such_module\n")
    env = {k: v for k, v in os.environ.items() if k != "HYDRA_FULL_ERROR"}
    env["PYTHONPATH"] = str(tmp_path / "plugin")
    done = subprocess.run(
        [str(BIN / "recsys-train"), "debug=fast", f"data.path={demo_dir}"],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert done.returncode == 2, done.stderr[-2000:]
    assert "broken" in done.stderr and "no_such_module" in done.stderr
    assert "Traceback" not in done.stderr
