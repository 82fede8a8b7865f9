"""A run whose training loss turns NaN or infinite stops at the end of that epoch, on every
process, and keeps the best checkpoint from before it."""

import csv
import math

import lightning as L
import pytest
import torch
from lightning.pytorch.callbacks import ModelCheckpoint
from lightning.pytorch.strategies import SingleDeviceStrategy
from torch.utils.data import DataLoader, TensorDataset

from recsys_seq.callbacks import StopOnDivergence
from tests.helpers import must_succeed, run_cli

pytestmark = pytest.mark.slow  # real training loops


class DivergesAt(L.LightningModule):
    """A linear fit whose loss turns ``bad`` (NaN or inf) from epoch ``epoch`` on, at the
    epoch's second step."""

    def __init__(self, epoch: int, bad: float) -> None:
        super().__init__()
        self.layer = torch.nn.Linear(4, 1)
        self.epoch, self.bad = epoch, bad

    def training_step(self, batch, batch_idx):
        features, target = batch
        loss = torch.nn.functional.mse_loss(self.layer(features).squeeze(1), target)
        poisoned = self.current_epoch >= self.epoch and batch_idx >= 1
        if poisoned:
            loss = loss * self.bad
        return loss

    def validation_step(self, batch, batch_idx):
        self.log("val/score", float(-self.current_epoch), sync_dist=True)  # best: epoch 0

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=0.01)


def loader() -> DataLoader:
    generator = torch.Generator().manual_seed(0)
    data = TensorDataset(torch.randn(32, 4, generator=generator), torch.randn(32))
    return DataLoader(data, batch_size=8)


def fit(module: L.LightningModule, tmp_path, **options) -> tuple[L.Trainer, ModelCheckpoint]:
    best = ModelCheckpoint(dirpath=tmp_path, monitor="val/score", mode="max", filename="best")
    trainer = L.Trainer(
        max_epochs=6,
        callbacks=[StopOnDivergence(), best],
        logger=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        **options,
    )
    trainer.fit(module, loader(), loader())
    return trainer, best


@pytest.mark.parametrize("bad", [math.nan, math.inf, -math.inf])
def test_training_stops_after_the_first_epoch_with_a_non_finite_loss(tmp_path, bad, capsys):
    trainer, best = fit(DivergesAt(epoch=2, bad=bad), tmp_path, accelerator="cpu")
    assert trainer.current_epoch == 3  # epochs 0, 1 and 2 ran; 3 to 5 did not
    saved = torch.load(best.best_model_path, weights_only=True)
    assert saved["epoch"] == 0  # the best epoch, from before the divergence
    assert all(torch.isfinite(value).all() for value in saved["state_dict"].values())
    assert "training stopped after epoch 3" in capsys.readouterr().out


def test_a_finite_run_trains_to_its_last_epoch(tmp_path):
    trainer, _ = fit(DivergesAt(epoch=99, bad=math.nan), tmp_path, accelerator="cpu")
    assert trainer.current_epoch == 6


class OtherProcessDiverges(SingleDeviceStrategy):
    """One process that answers the processes' agreements (``all=True``) as a pair would
    whose other process saw a NaN loss from epoch ``epoch`` on; its own losses stay finite.
    (The gloo collective behind the real answer is Lightning's own.)"""

    def __init__(self, epoch: int) -> None:
        super().__init__(device=torch.device("cpu"))
        self.epoch = epoch

    def reduce_boolean_decision(self, decision: bool, all: bool = True) -> bool:  # noqa: A002
        if not all:
            return decision
        return decision and self.lightning_module.current_epoch < self.epoch


@pytest.mark.parametrize(("other", "epochs"), [(2, 3), (99, 6)])
def test_a_process_stops_when_another_diverges(tmp_path, other, epochs, capsys):
    """Under DDP every process must stop at the same epoch (else one waits in its next
    collective forever): a process with finite losses stops when the agreement says no."""
    trainer = L.Trainer(
        max_epochs=6,
        callbacks=[StopOnDivergence()],
        strategy=OtherProcessDiverges(epoch=other),
        logger=False,
        enable_checkpointing=False,
        enable_progress_bar=False,
        enable_model_summary=False,
    )
    trainer.fit(DivergesAt(epoch=99, bad=math.nan), loader(), loader())
    assert trainer.current_epoch == epochs
    stopped = capsys.readouterr().out
    assert ("training stopped after epoch 3" in stopped) == (epochs == 3)


def test_a_diverging_command_stops_says_why_and_tests_its_best_checkpoint(tmp_path, demo_dir):
    run_dir = tmp_path / "run"
    proc = run_cli(
        "recsys-train",
        [
            f"data.path={demo_dir}",
            "model.optimizer.lr=1e30",  # every weight to ~1e30 in one Adam step: inf logits
            "trainer.max_epochs=4",
            "trainer.limit_train_batches=4",
            "trainer.limit_val_batches=2",
            "trainer.limit_test_batches=1",
            "baselines=false",
            f"hydra.run.dir={run_dir}",
        ],
        tmp_path,
    )
    must_succeed(proc)
    assert "training stopped after epoch 1: the training loss was NaN or infinite" in proc.stdout
    assert "model.optimizer.lr" in proc.stdout
    with open(run_dir / "csv" / "metrics.csv") as file:
        epochs = {row["epoch"] for row in csv.DictReader(file) if row.get("val/ndcg@10")}
    assert epochs == {"0"}  # one validation, not four
    assert (run_dir / "metrics.json").is_file()  # the best checkpoint was still tested
