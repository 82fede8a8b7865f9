"""Top-K lists from ``Trainer.predict``, in original ids.

The datamodule's serving stage supplies the windows (batched by the same sampler as
evaluation), :meth:`NextItemTask.predict_step` the top-K of each batch, and
:class:`TopKWriter` collects them, so devices, precision and DDP are Lightning's: under DDP
every rank writes its users to a part file of a shared staging folder and rank zero joins them.
"""

from __future__ import annotations

import contextlib
import re
from pathlib import Path

import lightning as L
import numpy as np
import polars as pl
import torch
from lightning.pytorch.callbacks import BasePredictionWriter

from data_prep import schema
from recsys_seq.core.errors import UserError
from recsys_seq.data.catalogue import Catalogue

# source: "model" (the model's score) or "popular" (an unknown user's fallback: the score is
# the item's training count, on another scale than the model's)
COLUMNS = ("user_id", "rank", "item_id", "score", "source")
PART_KEY = "recsys_seq_artifact"  # parquet metadata marking a part this module wrote
PART = "recommendation_part"
PART_NAME = re.compile(r"part-\d+\.parquet")


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
    """A :func:`long_frame` as ``user_id, rank, item_id, score, source`` in the log's own
    ids, every row ``source="model"``."""
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
        .with_columns(source=pl.lit("model"))
        .select(COLUMNS)
    )


def popular_frame(
    user_ids: pl.Series, catalogue: Catalogue, k: int, id_type: pl.DataType
) -> pl.DataFrame:
    """The published table's rows for users the data does not know: each of ``user_ids``
    (canonical text) gets the catalogue's ``k`` most popular items, scored by training
    count (``source="popular"``). The ids take the dataset's ``id_type`` when they all fit
    it, else stay text."""
    top = catalogue.most_popular(k)
    users = user_ids.cast(id_type, strict=False)
    if users.null_count():
        users = user_ids
    n, each = user_ids.len(), len(top)
    return pl.DataFrame(
        {
            "user_id": users.gather(np.repeat(np.arange(n), each)),
            "rank": np.tile(np.arange(1, each + 1, dtype=np.int32), n),
            "item_id": catalogue.ids(np.tile(top, n)),
            "score": np.tile(catalogue.counts[top].astype(np.float32), n),
            "source": "popular",
        }
    )


def to_frame(
    users: torch.Tensor, items: torch.Tensor, scores: torch.Tensor, data_path: Path
) -> pl.DataFrame:
    """Top-K tensors -> the published table, in original ids."""
    return to_original_ids(long_frame(users, items, scores), data_path)


class TopKWriter(BasePredictionWriter):
    """Collects each predicted batch on its device (no host sync per step) and writes this
    rank's users to ``parts/part-<rank>.parquet`` at the end (``parts`` must be one folder
    all ranks see; :func:`clear_parts` it before and after).

    Use :func:`read_parts` on rank zero after ``trainer.predict`` to get the whole table.
    """

    def __init__(self, parts: Path) -> None:
        super().__init__(write_interval="batch")
        self.parts = parts
        self._batches: list[dict[str, torch.Tensor]] = []

    def write_on_batch_end(
        self, trainer, pl_module, prediction, batch_indices, batch, batch_idx, dataloader_idx=0
    ) -> None:
        self._batches.append(prediction)

    def on_predict_epoch_end(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        keys = ("user", "items", "scores")
        if self._batches:  # one transfer to the host for the whole epoch
            frame = long_frame(*(torch.cat([b[k] for b in self._batches]).cpu() for k in keys))
        else:  # a rank without users writes no rows
            frame = no_rows()
        self.parts.mkdir(parents=True, exist_ok=True)
        frame.write_parquet(
            self.parts / f"part-{trainer.global_rank}.parquet", metadata={PART_KEY: PART}
        )
        self._batches = []


def no_rows() -> pl.DataFrame:
    """An empty :func:`long_frame`."""
    none = torch.zeros(0, 1, dtype=torch.long)
    return long_frame(none[:, 0], none, none)


def read_parts(parts: Path) -> pl.DataFrame:
    """Every rank's part, as one :func:`long_frame`; no rows when none was written (no user
    to score: Lightning runs no prediction epoch at all)."""
    frames = [pl.read_parquet(p) for p in sorted(parts.glob("part-*.parquet"))]
    return pl.concat(frames) if frames else no_rows()


def _is_part(path: Path) -> bool:
    try:
        return bool(PART_NAME.fullmatch(path.name)) and (
            pl.read_parquet_metadata(path).get(PART_KEY) == PART
        )
    except (OSError, pl.exceptions.PolarsError):
        return False


def clear_parts(parts: Path) -> None:
    """Remove a parts folder this module left (a killed run's parts would otherwise join the
    next table); a folder of that name holding anything else is refused, never deleted.
    Safe when several ranks clear at once."""
    if not parts.exists():
        return
    entries = list(parts.iterdir()) if parts.is_dir() else None
    if entries is None or not all(_is_part(p) for p in entries):
        raise UserError(
            f"{parts} is in the way of recsys-recommend's temporary parts and is not one it "
            "left behind; move it away or pick another output."
        )
    for entry in entries:
        entry.unlink(missing_ok=True)
    with contextlib.suppress(OSError):  # another rank cleared it first, or wrote meanwhile
        parts.rmdir()
