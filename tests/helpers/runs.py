"""Configs composed from the real conf/, short training and two-stage runs, and the callbacks
tests load into real runs (through an entry point)."""

import os
import signal
from pathlib import Path

import lightning as L
from hydra import compose, initialize_config_dir
from hydra.core.hydra_config import HydraConfig
from omegaconf import open_dict

from recsys_seq import configs
from recsys_seq.core.targets import ENTRY_POINT_GROUPS
from recsys_seq.workflows.train import train


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


# (tests/test_rerank_runs.py, tests/test_two_stage_paths.py)

SHORT = [
    "trainer.max_epochs=1",
    "trainer.limit_train_batches=3",
    "trainer.limit_val_batches=2",
    "trainer.limit_test_batches=2",
    "logger=[]",
]


def rerank_run(run_dir, demo_dir, *overrides, ranker: str = "din"):
    return train_config(
        run_dir,
        demo_dir,
        f"model={ranker}",
        "rerank=topk",
        "rerank.candidates=20",
        *SHORT,
        *overrides,
    )
