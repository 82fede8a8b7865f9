"""recsys-eval: test a checkpoint on a prepared dataset.

    recsys-eval ckpt_path=outputs/train/runs/<run>/checkpoints/best.ckpt
    recsys-eval ckpt_path=<ckpt> data.path=<another prepared dir with the same items>
    recsys-eval ckpt_path=<ckpt> exclude_history=true   # rank without the user's history

The model is rebuilt from the configuration stored inside the checkpoint, and the checkpoint is
read with ``weights_only=True``: it can hold tensors and plain values, never code.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import hydra
import torch
from hydra.utils import instantiate
from omegaconf import DictConfig, OmegaConf

from recsys_seq.cli import runs
from recsys_seq.data import SequenceDataModule


class VocabularyMismatch(ValueError):
    """The checkpoint was trained on a different item vocabulary than the data."""


def load_checkpoint(path: str | Path) -> dict[str, Any]:
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"checkpoint {path} does not exist")
    return torch.load(path, map_location="cpu", weights_only=True)


def restore(
    ckpt_path: str | Path, data_overrides: DictConfig | dict | None = None
) -> tuple[Any, SequenceDataModule, DictConfig]:
    """Rebuild a checkpoint's model and its datamodule (the trained data config with the
    non-null ``data_overrides`` merged in), refusing data with another item vocabulary.

    Returns:
        ``(model, datamodule, trained_config)``; the model holds the checkpoint's weights.
    """
    checkpoint = load_checkpoint(ckpt_path)
    hparams = checkpoint["hyper_parameters"]
    trained = OmegaConf.create(hparams["run_config"])
    overrides = {k: v for k, v in (data_overrides or {}).items() if v is not None}
    data_cfg = OmegaConf.merge(trained.data, overrides)
    datamodule = runs.build_datamodule(data_cfg)
    fingerprint = datamodule.meta["item_fingerprint"]
    if fingerprint != hparams["item_fingerprint"]:
        raise VocabularyMismatch(
            f"{ckpt_path} was trained on items with fingerprint "
            f"{hparams['item_fingerprint'][:12]}..., but {datamodule.path} has "
            f"{fingerprint[:12]}...: item indices would mean different items. Use the "
            "dataset the model was trained on (or one prepared with the same item vocabulary)."
        )
    model = runs.build_model(trained.model, datamodule, hparams["run_config"])
    model.load_state_dict(checkpoint["state_dict"])
    return model, datamodule, trained


def evaluate(cfg: DictConfig) -> tuple[dict[str, Any], dict[str, Any]]:
    """Test the checkpoint ``cfg.ckpt_path``; returns ``(metrics, objects)`` like ``train``."""
    runs.quiet_console()
    model, datamodule, trained = restore(cfg.ckpt_path, cfg.get("data"))
    if cfg.get("exclude_history") is not None:
        model.exclude_history = bool(cfg.exclude_history)
    trainer = instantiate(cfg.trainer, logger=False, enable_checkpointing=False)
    metrics: dict[str, Any] = {}
    for result in trainer.test(model, datamodule=datamodule, verbose=False):
        metrics.update(runs.to_floats(result))
    if cfg.get("baselines"):
        metrics.update(
            runs.popularity_metrics(datamodule, list(trained.model.ks), model.exclude_history)
        )
    metrics["checkpoint"] = str(cfg.ckpt_path)
    return metrics, {"datamodule": datamodule, "model": model, "trainer": trainer}


@hydra.main(version_base="1.3", config_path=runs.CONF_DIR, config_name="eval")
def main(cfg: DictConfig) -> None:
    try:
        metrics, objects = evaluate(cfg)
    except (FileNotFoundError, VocabularyMismatch) as error:
        raise SystemExit(f"recsys-eval: {error}") from None
    run_dir = Path(cfg.paths.output_dir)
    path = runs.write_results(run_dir, metrics, cfg)
    runs.print_results(metrics, model_name=runs.model_name(objects["model"]))
    print(f"Results: {path}")


if __name__ == "__main__":
    main()
