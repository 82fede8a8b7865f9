"""Run folders written by hand, as recsys-train writes them, for the report's tests."""

import json
from pathlib import Path

import polars as pl
import yaml


def write_run(
    folder: Path,
    overrides: list[str],
    *,
    dataset: str = "demo",
    scale: float = 0.2,
    config: dict | None = None,
    curve: list[float] | None = (0.1, 0.15),
) -> Path:
    """A run folder as recsys-train writes it: metrics.json, config.yaml, .hydra/overrides.yaml
    and (unless ``curve`` is None) csv/metrics.csv with, per epoch, two training-loss rows
    (``4.5 - epoch`` and ``5 - epoch``: mean ``4.75 - epoch``) and one validation row."""
    folder.mkdir(parents=True)
    metric = str((config or {}).get("optimized_metric", "val/ndcg@10"))
    name = metric.removeprefix("val/")
    metrics = {
        f"test/{m}@{k}": scale * f for m, f in (("ndcg", 1.0), ("hr", 1.6)) for k in (10, 20)
    }
    metrics |= {f"popularity/{k}": v / 4 for k, v in metrics.items()}
    metrics |= {f"val/best_{name}": scale * 0.9, "fit/epochs": 2, "checkpoint": None}
    metrics |= {f"popularity/val/{name}": scale * 0.25}
    (folder / "metrics.json").write_text(json.dumps(metrics))
    model = next((o.split("=")[1] for o in overrides if o.startswith("model=")), "sasrec")
    base = {
        "data": {"path": f"/nowhere/{dataset}"},
        "model": {"name": model},
        "trainer": {"max_epochs": 2, "fast_dev_run": False, "limit_train_batches": None},
    }
    (folder / "config.yaml").write_text(yaml.safe_dump(base | (config or {})))
    (folder / ".hydra").mkdir()
    (folder / ".hydra" / "overrides.yaml").write_text(yaml.safe_dump(overrides))
    if curve is not None:
        (folder / "csv").mkdir()
        rows = [
            row
            for epoch, value in enumerate(curve)
            for row in (
                {"epoch": epoch, "step": 2 * epoch, "train/loss": 5.0 - epoch, metric: None},
                {"epoch": epoch, "step": 2 * epoch + 1, "train/loss": 4.5 - epoch, metric: None},
                {"epoch": epoch, "step": 2 * epoch + 1, "train/loss": None, metric: value},
            )
        ]
        pl.DataFrame(rows, schema_overrides={metric: pl.Float64}).write_csv(
            folder / "csv" / "metrics.csv"
        )
    return folder
