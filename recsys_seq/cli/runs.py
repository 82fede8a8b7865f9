"""What train and eval runs share: building objects from config, running the baseline,
and writing and printing results."""

from __future__ import annotations

import json
import logging
import warnings
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import torch
from hydra.core.hydra_config import HydraConfig
from hydra.utils import instantiate
from lightning.pytorch.utilities import rank_zero_only
from omegaconf import DictConfig, OmegaConf
from rich.console import Console
from rich.table import Table

from recsys_seq.data import SequenceDataModule
from recsys_seq.models import PopularityRecommender

CONF_DIR = str(Path(__file__).resolve().parents[2] / "conf")
METRICS_FILE = "metrics.json"
CONFIG_FILE = "config.yaml"


LIGHTNING_INFO = logging.getLogger("lightning.pytorch.utilities.rank_zero")


def _not_a_tip(record: logging.LogRecord) -> bool:
    return not str(record.msg).startswith("💡")


def quiet_console() -> None:
    """Drop Lightning's advertising tip and an internal deprecation warning from a run's
    output; everything else Lightning says is kept. Idempotent."""
    LIGHTNING_INFO.addFilter(_not_a_tip)
    warnings.filterwarnings("ignore", message=".*LeafSpec.*is deprecated")
    # metric values are torchmetrics results, already reduced across ranks before logging
    warnings.filterwarnings("ignore", message=".*when logging on epoch level in distributed")


def instantiate_group(group: DictConfig | None) -> list[Any]:
    """Instantiate every non-null entry of a config group like ``callbacks`` or ``logger``."""
    return [instantiate(c) for c in (group or {}).values() if c is not None]


def build_datamodule(data_cfg: DictConfig) -> SequenceDataModule:
    """The datamodule, with its dataset prepared and loaded (the model needs its size)."""
    datamodule: SequenceDataModule = instantiate(data_cfg)
    datamodule.prepare_data()
    return datamodule


def build_model(model_cfg: DictConfig, datamodule: SequenceDataModule, run_config: str) -> Any:
    """Instantiate ``model_cfg`` for this data: catalogue size, item fingerprint and the sizes
    of the side features the config names (``model.side_features``)."""
    available = datamodule.meta.get("side_features", {})
    wanted = list(model_cfg.get("side_features") or [])
    missing = [name for name in wanted if name not in available]
    if missing:
        raise ValueError(
            f"model.side_features names {missing}, but {datamodule.path} has "
            + (f"only {sorted(available)}" if available else "no side features")
        )
    model_cfg = model_cfg.copy()
    model_cfg.side_features = {name: available[name] for name in wanted}  # names -> sizes
    return instantiate(
        model_cfg,
        num_items=datamodule.num_items,
        item_fingerprint=datamodule.meta["item_fingerprint"],
        run_config=run_config,
        _convert_="all",
    )


def popularity_metrics(
    datamodule: SequenceDataModule, ks: list[int], exclude_history: bool
) -> dict[str, float]:
    """Validation and test metrics of the most-popular baseline, keyed ``popularity/...``.

    Computed in this process over every user (no Trainer, so it also runs unchanged on rank
    zero of a DDP job)."""
    baseline = PopularityRecommender(datamodule.data.train_item_counts(), ks, exclude_history)
    metrics: dict[str, float] = {}
    for stage in ("val", "test"):
        loader = datamodule.dataloader(stage, num_replicas=1, rank=0)
        metrics |= baseline.evaluate(loader, stage)
    return metrics


def model_name(model: Any) -> str:
    """The model's config name (``sasrec``) inside a Hydra run, else the encoder's class."""
    if HydraConfig.initialized():
        choice = HydraConfig.get().runtime.choices.get("model")
        if choice:
            return choice
    return type(getattr(model, "encoder", model)).__name__


def to_floats(metrics: Mapping[str, Any]) -> dict[str, float]:
    return {k: float(v.item() if isinstance(v, torch.Tensor) else v) for k, v in metrics.items()}


@rank_zero_only
def write_results(run_dir: Path, metrics: dict[str, Any], cfg: DictConfig) -> Path:
    """Write ``metrics.json`` (flat ``<stage>/<metric>@<k>`` keys) and the resolved config."""
    run_dir.mkdir(parents=True, exist_ok=True)
    (run_dir / CONFIG_FILE).write_text(OmegaConf.to_yaml(cfg, resolve=True))
    path = run_dir / METRICS_FILE
    path.write_text(json.dumps(metrics, indent=2, sort_keys=True) + "\n")
    return path


def _metric_order(name: str) -> tuple:
    """All-item metrics first, then sampled ones; by metric, then by cut-off."""
    group, _, metric = name.rpartition("/")
    base, _, k = metric.partition("@")
    return (group, base, int(k) if k else 0)


@rank_zero_only
def print_results(metrics: Mapping[str, Any], model_name: str, stage: str = "test") -> None:
    """A table of ``stage`` metrics for the model beside the popularity baseline; sampled
    metrics (``sampled<n>/...``) follow the all-item ones, labelled as such."""
    names = sorted(
        (k.split("/", 1)[1] for k in metrics if k.startswith(f"{stage}/") and "best_" not in k),
        key=_metric_order,
    )
    title = f"{stage}: next item ranked against all items"
    if any("sampled" in name for name in names):
        title += "\n(sampled<n>/ rows: against n fixed sampled negatives instead)"
    table = Table(title=title)
    table.add_column("metric")
    table.add_column(model_name, justify="right")
    baseline = any(k.startswith("popularity/") for k in metrics)
    if baseline:
        table.add_column("popularity", justify="right")
        table.add_column("ratio", justify="right")
    for name in names:
        ours = metrics[f"{stage}/{name}"]
        row = [name, f"{ours:.4f}"]
        if baseline:
            pop = metrics.get(f"popularity/{stage}/{name}", float("nan"))
            row += [f"{pop:.4f}", f"{ours / pop:.1f}x" if pop > 0 else "-"]
        table.add_row(*row)
    Console().print(table)
