"""Top-K lists from ``Trainer.predict``, in original ids.

The datamodule's serving stage supplies the windows (batched by the same sampler as
evaluation), :meth:`NextItemTask.predict_step` the top-K of each batch, and
:class:`TopKWriter` collects them, so devices, precision and DDP are Lightning's: under DDP
every rank writes its users to a part file of a shared staging folder and rank zero joins them.
"""

from __future__ import annotations

from pathlib import Path

import lightning as L
import numpy as np
import polars as pl
import torch
from lightning.pytorch.callbacks import BasePredictionWriter

from data_prep import schema

COLUMNS = ("user_id", "rank", "item_id", "score")


def long_frame(users: torch.Tensor, items: torch.Tensor, scores: torch.Tensor) -> pl.DataFrame:
    """``user, rank, item, score`` (indices) from ``users (n,)``, ``items``/``scores (n, k)``;
    rows scored ``-inf`` (fewer than k rankable items) dropped."""
    n, k = items.shape
    return pl.DataFrame(
        {
            schema.USER: users.repeat_interleave(k).numpy(),
            "rank": np.tile(np.arange(1, k + 1, dtype=np.int32), n),
            schema.ITEM: items.reshape(-1).numpy(),
            "score": scores.reshape(-1).float().numpy(),
        }
    ).filter(pl.col("score").is_finite())


def to_original_ids(frame: pl.DataFrame, data_path: Path) -> pl.DataFrame:
    """A :func:`long_frame` as ``user_id, rank, item_id, score`` in the log's own ids."""
    user_ids = pl.read_parquet(data_path / schema.USERS_FILE)
    item_ids = pl.read_parquet(data_path / schema.ITEMS_FILE)
    return (
        frame.join(
            user_ids.select(schema.USER, pl.col(schema.ORIGINAL_ID).alias("user_id")),
            on=schema.USER,
            how="left",
            maintain_order="left",
        )
        .join(
            item_ids.select(schema.ITEM, pl.col(schema.ORIGINAL_ID).alias("item_id")),
            on=schema.ITEM,
            how="left",
            maintain_order="left",
        )
        .select(COLUMNS)
    )


def to_frame(
    users: torch.Tensor, items: torch.Tensor, scores: torch.Tensor, data_path: Path
) -> pl.DataFrame:
    """Top-K tensors -> the published table, in original ids."""
    return to_original_ids(long_frame(users, items, scores), data_path)


class TopKWriter(BasePredictionWriter):
    """Collects each predicted batch on the CPU and writes this rank's users to
    ``parts/part-<rank>.parquet`` at the end (``parts`` must be one folder all ranks see).

    Use :func:`read_parts` on rank zero after ``trainer.predict`` to get the whole table.
    """

    def __init__(self, parts: Path) -> None:
        super().__init__(write_interval="batch")
        self.parts = parts
        self._frames: list[pl.DataFrame] = []

    def write_on_batch_end(
        self, trainer, pl_module, prediction, batch_indices, batch, batch_idx, dataloader_idx=0
    ) -> None:
        self._frames.append(long_frame(*(prediction[k].cpu() for k in ("user", "items", "scores"))))

    def on_predict_epoch_end(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        none = torch.zeros(0, 1, dtype=torch.long)  # a rank without users writes no rows
        frame = pl.concat(self._frames) if self._frames else long_frame(none[:, 0], none, none)
        self.parts.mkdir(parents=True, exist_ok=True)
        frame.write_parquet(self.parts / f"part-{trainer.global_rank}.parquet")
        self._frames = []


def read_parts(parts: Path) -> pl.DataFrame:
    """Every rank's part, as one :func:`long_frame`."""
    return pl.concat([pl.read_parquet(p) for p in sorted(parts.glob("part-*.parquet"))])
