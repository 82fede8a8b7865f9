"""recsys-train: prepare (if needed), train, test with the best checkpoint, compare baselines.

recsys-train                                  # the bundled demo log, end to end
recsys-train data.path=<prepared dir> model=sasrec trainer.max_epochs=50
recsys-train -m model.encoder.num_layers=1,2  # a Hydra sweep
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import hydra
import lightning as L
from hydra.utils import instantiate
from lightning.pytorch.callbacks import ModelCheckpoint
from omegaconf import DictConfig, OmegaConf

from recsys_seq.cli import runs
from recsys_seq.models.ranking import MONITOR


def resolve_resume(ckpt_path: str | None, run_dir: Path) -> str | None:
    """The checkpoint to resume from: ``ckpt_path``; ``"last"`` means this run folder's most
    recent checkpoint (``last.ckpt`` at epoch ends, ``step.ckpt`` every N steps); with none
    given, that checkpoint is used when it exists, so re-running an interrupted command with
    the same ``hydra.run.dir`` continues it."""
    saved = [p for p in (run_dir / "checkpoints").glob("*.ckpt") if p.stem in ("last", "step")]
    if ckpt_path == "last" or (ckpt_path is None and saved):
        if not saved:
            raise FileNotFoundError(f"ckpt_path=last, but {run_dir / 'checkpoints'} has none")
        latest = max(saved, key=lambda p: p.stat().st_mtime)
        print(f"Resuming from {latest}")
        return str(latest)
    return ckpt_path


def train(cfg: DictConfig) -> tuple[dict[str, Any], dict[str, Any]]:
    """Train and test one configuration.

    Returns:
        ``(metrics, objects)``: the flat metrics written to ``metrics.json`` and the objects
        built on the way (datamodule, model, trainer), for tests and notebooks.
    """
    runs.quiet_console()
    L.seed_everything(cfg.seed, workers=True)
    run_dir = Path(cfg.paths.output_dir)
    datamodule = runs.build_datamodule(cfg.data)
    model = runs.build_model(cfg.model, datamodule, OmegaConf.to_yaml(cfg, resolve=True))
    callbacks = runs.instantiate_group(cfg.get("callbacks"))
    trainer: L.Trainer = instantiate(
        cfg.trainer, callbacks=callbacks, logger=runs.instantiate_group(cfg.get("logger"))
    )
    started = time.perf_counter()
    trainer.fit(
        model,
        datamodule=datamodule,
        ckpt_path=resolve_resume(cfg.get("ckpt_path"), run_dir),
        weights_only=True,
    )
    fit_time = {"fit/seconds": time.perf_counter() - started, "fit/epochs": trainer.current_epoch}
    checkpoint = next(
        (c for c in callbacks if isinstance(c, ModelCheckpoint) and c.monitor), None
    )  # the best-model checkpoint, not the step checkpoint
    best = checkpoint.best_model_path if checkpoint and checkpoint.best_model_path else None
    metrics = runs.to_floats(trainer.callback_metrics)
    metrics = {k: v for k, v in metrics.items() if k.startswith("val/") or k.startswith("train/")}
    metrics |= fit_time  # this invocation's training (with validation), not a resumed part
    tested = trainer.test(
        model, datamodule=datamodule, ckpt_path=best, weights_only=True, verbose=False
    )
    for result in tested:
        metrics.update(runs.to_floats(result))
    if cfg.get("baselines") and trainer.is_global_zero:
        metrics |= runs.popularity_metrics(
            datamodule, list(cfg.model.ks), cfg.model.exclude_history
        )
    metrics["checkpoint"] = best
    if trainer.is_global_zero:
        path = runs.write_results(run_dir, metrics, cfg)
        runs.print_results(metrics, model_name=runs.model_name(model))
        print(f"Results: {path}\nCheckpoints: {run_dir / 'checkpoints'}")
    return metrics, {"datamodule": datamodule, "model": model, "trainer": trainer}


@hydra.main(version_base="1.3", config_path=runs.CONF_DIR, config_name="train")
def main(cfg: DictConfig) -> float | None:
    metrics, _ = train(cfg)
    return metrics.get(f"val/best_{MONITOR}")


if __name__ == "__main__":
    main()
