"""recsys-recommend: top-K next items per user from a checkpoint, in ORIGINAL user and item ids.

    recsys-recommend ckpt_path=<ckpt> users=all k=10 output=recs.parquet
    recsys-recommend ckpt_path=<ckpt> users=ids.txt output=recs.csv exclude_history=false
    recsys-recommend ckpt_path=<ckpt> stage=test      # the windows recsys-eval ranks

Which window is scored (``stage``):

* ``serve`` (default): the most recent ``data.max_len`` events of the user's WHOLE known
  history, test event included: the recommendation for "what comes next, now".
* ``test`` / ``val``: the evaluation input windows (``items[:test_index]`` /
  ``items[:val_index]``, most recent ``max_len``). These are exactly the windows recsys-eval
  ranks, so ``stage=test`` top-K lists agree with evaluation's ranks (a test checks this).

Scores come from :meth:`RankingModule.ranking_scores`, the code path evaluation uses: PAD is
never recommended, and with ``exclude_history=true`` the items of the input window score
``-inf``. For ``stage=serve`` the items of the whole known history are excluded too (it can be
longer than the window); for ``test``/``val`` only the window, exactly as evaluation does.
Users with fewer than K rankable items get fewer rows. The output has one row per
(user, rank): ``user_id, rank, item_id, score`` (rank 1 = best), written atomically.
"""

from __future__ import annotations

import os
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import hydra
import numpy as np
import polars as pl
import torch
from omegaconf import DictConfig
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeRemainingColumn
from torch.utils.data import Dataset

from data_prep import schema
from recsys_seq.cli import runs
from recsys_seq.cli.evaluate import VocabularyMismatch, restore
from recsys_seq.data import PreparedSequences
from recsys_seq.data.batch import JaggedWindows, PaddedBatchCollator
from recsys_seq.data.dataset import Stage

SERVE = "serve"
STAGES = (SERVE, Stage.TEST.value, Stage.VAL.value)
COLUMNS = ("user_id", "rank", "item_id", "score")
HEADER_NAMES = {"user_id", "user", "original_id", "id", "userid"}


class UnknownUsers(ValueError):
    """The users file names ids that are not in the dataset."""


class HistoryWindows(Dataset):
    """Each user's most recent ``max_len`` events of the WHOLE known history (serving).

    Like :class:`~recsys_seq.data.dataset.WindowDataset` (same jagged gather, same
    :class:`JaggedWindows` output) but with no held-out target: the window ends at the last
    event.

    Args:
        data: the loaded prepared dataset.
        max_len: the longest input window the model reads.
    """

    def __init__(self, data: PreparedSequences, max_len: int) -> None:
        self.data = data
        total = np.diff(data.offsets)  # (U,) whole history lengths, all >= 1
        self.lengths = np.minimum(total, max_len)
        self.starts = data.offsets[1:] - self.lengths
        self.users = data.users

    def __len__(self) -> int:
        return len(self.lengths)

    def __getitems__(self, indices: Sequence[int]) -> JaggedWindows:
        indices = np.asarray(indices, dtype=np.int64)
        starts, lengths = self.starts[indices], self.lengths[indices]
        first_slot = np.cumsum(lengths) - lengths
        flat = np.repeat(starts - first_slot, lengths) + np.arange(lengths.sum())
        return JaggedWindows(
            items=torch.from_numpy(self.data.items[flat]),
            lengths=torch.from_numpy(lengths),
            user=torch.from_numpy(self.users[indices]),
            features={
                name: torch.from_numpy(values[flat]) for name, values in self.data.features.items()
            },
        )


def seen_items(data: PreparedSequences, users: torch.Tensor) -> torch.Tensor:
    """``(B, longest history)`` long: every item in each user's whole history, 0-padded."""
    rows = np.searchsorted(data.users, users.cpu().numpy())
    starts, ends = data.offsets[rows], data.offsets[rows + 1]
    lengths = torch.from_numpy(ends - starts)
    first_slot = np.cumsum(ends - starts) - (ends - starts)
    flat = np.repeat(starts - first_slot, ends - starts) + np.arange((ends - starts).sum())
    mask = torch.arange(int(lengths.max())) < lengths[:, None]
    dense = torch.zeros(mask.shape, dtype=torch.long)
    dense[mask] = torch.from_numpy(data.items[flat])
    return dense


def read_user_ids(path: str | Path, users_frame: pl.DataFrame) -> np.ndarray:
    """User indices for the original ids listed in ``path`` (text or csv: first column, one id
    per line; an optional header line), in file order, duplicates dropped.

    Raises:
        UnknownUsers: naming the ids (up to 10) that ``users.parquet`` does not hold.
    """
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"users file {path} does not exist (or pass users=all)")
    lines = [line.split(",")[0].strip().strip('"') for line in path.read_text().splitlines()]
    lines = [line for line in lines if line]
    known = dict(
        zip(
            users_frame[schema.ORIGINAL_ID].cast(pl.String).to_list(),
            users_frame[schema.USER].to_list(),
            strict=True,
        )
    )
    if lines and lines[0] not in known and lines[0].lower() in HEADER_NAMES:
        lines = lines[1:]
    unknown = [line for line in dict.fromkeys(lines) if line not in known]
    if unknown:
        shown = ", ".join(unknown[:10]) + (", ..." if len(unknown) > 10 else "")
        raise UnknownUsers(
            f"{len(unknown)} user id(s) in {path} are not in the dataset's "
            f"{schema.USERS_FILE}: {shown}"
        )
    if not lines:
        raise ValueError(f"users file {path} lists no user ids")
    return np.array([known[line] for line in dict.fromkeys(lines)], dtype=np.int64)


def window_dataset(datamodule: Any, stage: str) -> Dataset:
    """The windows scored for ``stage`` (see the module docstring)."""
    if stage == SERVE:
        return HistoryWindows(datamodule.data, datamodule.max_len)
    if stage not in STAGES:
        raise ValueError(f"stage must be one of {STAGES}, got {stage!r}")
    return datamodule.dataset(stage)


@torch.no_grad()
def top_k(
    model: Any,
    dataset: Dataset,
    indices: np.ndarray,
    k: int,
    batch_size: int = 512,
    exclude_seen: PreparedSequences | None = None,
    device: torch.device | str = "cpu",
    progress: Progress | None = None,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Top-``k`` items of :meth:`ranking_scores` for the windows ``dataset[indices]``.

    Windows are scored in batches of similar length (less padding); results come back in the
    order of ``indices``.

    Args:
        exclude_seen: when given, also score ``-inf`` every item of each user's whole history
            in this dataset (serving), on top of the model's own window exclusion.

    Returns:
        ``(users (n,), items (n, k), scores (n, k))``; items with score ``-inf`` (fewer than
        ``k`` rankable items) are unusable and left for the caller to drop.
    """
    model.eval()
    collate = PaddedBatchCollator()
    order = indices[np.argsort(dataset.lengths[indices], kind="stable")]
    k = min(k, model_num_items(model))
    users, items, scores = [], [], []
    task = progress.add_task("scoring", total=len(order)) if progress else None
    for start in range(0, len(order), batch_size):
        batch = collate(dataset.__getitems__(order[start : start + batch_size]))
        batch = {name: value.to(device) for name, value in batch.items()}
        ranking = model.ranking_scores(batch)  # (B, N + 1), PAD / excluded at -inf
        if exclude_seen is not None:
            ranking = ranking.scatter(
                1, seen_items(exclude_seen, batch["user"]).to(device), -torch.inf
            )
        values, top = torch.topk(ranking, k, dim=1)  # (B, k) best first
        users.append(batch["user"].cpu())
        items.append(top.cpu())
        scores.append(values.cpu())
        if progress:
            progress.advance(task, len(batch["user"]))
    inverse = torch.from_numpy(np.argsort(np.argsort(dataset.lengths[indices], kind="stable")))
    return torch.cat(users)[inverse], torch.cat(items)[inverse], torch.cat(scores)[inverse]


def model_num_items(model: Any) -> int:
    """N, the number of real items the model scores."""
    return int(model.hparams["num_items"])


def to_frame(
    users: torch.Tensor, items: torch.Tensor, scores: torch.Tensor, data_path: Path
) -> pl.DataFrame:
    """Long table ``user_id, rank, item_id, score`` in ORIGINAL ids; ``-inf`` rows dropped."""
    user_ids = pl.read_parquet(data_path / schema.USERS_FILE).sort(schema.USER)
    item_ids = pl.read_parquet(data_path / schema.ITEMS_FILE).sort(schema.ITEM)
    n, k = items.shape
    frame = pl.DataFrame(
        {
            schema.USER: users.repeat_interleave(k).numpy(),
            "rank": np.tile(np.arange(1, k + 1, dtype=np.int32), n),
            schema.ITEM: items.reshape(-1).numpy(),
            "score": scores.reshape(-1).numpy(),
        }
    )
    return (
        frame.filter(pl.col("score").is_finite())
        .join(
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


def write_atomic(frame: pl.DataFrame, output: str | Path) -> Path:
    """Write ``frame`` as parquet or csv (by suffix) to a temporary file, then rename it into
    place: a reader never sees a half-written file, a failure leaves the old one intact."""
    output = Path(output)
    output.parent.mkdir(parents=True, exist_ok=True)
    tmp = output.with_name(f".{output.name}.{os.getpid()}.tmp")
    try:
        if output.suffix == ".parquet":
            frame.write_parquet(tmp)
        else:
            frame.write_csv(tmp)
        os.replace(tmp, output)
    finally:
        tmp.unlink(missing_ok=True)
    return output


def pick_device(name: str) -> torch.device:
    if name == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    return torch.device(name)


def recommend(cfg: DictConfig, show_progress: bool = True) -> tuple[pl.DataFrame, dict[str, Any]]:
    """Top-``cfg.k`` per selected user; returns ``(frame, info)`` where ``info`` holds the
    model, datamodule, output path, user count and throughput (users/s)."""
    runs.quiet_console()
    output = Path(cfg.output)
    if output.suffix not in (".parquet", ".csv"):
        raise ValueError(f"output must end in .parquet or .csv, got {output}")
    if cfg.k < 1:
        raise ValueError(f"k must be >= 1, got {cfg.k}")
    model, datamodule, _ = restore(cfg.ckpt_path, cfg.get("data"))
    device = pick_device(cfg.device)
    model.to(device)
    model.exclude_history = bool(cfg.exclude_history)  # the window, via ranking_scores
    dataset = window_dataset(datamodule, cfg.stage)
    users_frame = pl.read_parquet(datamodule.path / schema.USERS_FILE)
    if str(cfg.users) == "all":
        wanted = np.asarray(dataset.users)
    else:
        wanted = read_user_ids(cfg.users, users_frame)
    position = {int(u): i for i, u in enumerate(dataset.users)}
    indices = np.array([position[int(u)] for u in wanted if int(u) in position], dtype=np.int64)
    skipped = len(wanted) - len(indices)
    if skipped:
        print(f"{skipped} selected user(s) have no {cfg.stage} window (no held-out event): skipped")
    exclude_seen = datamodule.data if cfg.exclude_history and cfg.stage == SERVE else None
    start = time.perf_counter()
    with Progress(
        TextColumn("[progress.description]{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        TextColumn("users"),
        TimeRemainingColumn(),
        disable=not show_progress,
    ) as progress:
        users, items, scores = top_k(
            model, dataset, indices, cfg.k, cfg.batch_size, exclude_seen, device, progress
        )
    seconds = time.perf_counter() - start
    frame = to_frame(users, items, scores, datamodule.path)
    path = write_atomic(frame, output)
    info = {
        "model": model,
        "datamodule": datamodule,
        "output": path,
        "users": len(indices),
        "seconds": seconds,
        "users_per_second": len(indices) / seconds if seconds > 0 else float("inf"),
        "device": str(device),
    }
    return frame, info


@hydra.main(version_base="1.3", config_path=runs.CONF_DIR, config_name="recommend")
def main(cfg: DictConfig) -> None:
    try:
        _, info = recommend(cfg)
    except (FileNotFoundError, VocabularyMismatch, UnknownUsers, ValueError) as error:
        raise SystemExit(f"recsys-recommend: {error}") from None
    print(
        f"Top-{cfg.k} for {info['users']:,} users ({cfg.stage} windows, history "
        f"{'excluded' if cfg.exclude_history else 'included'}) in {info['seconds']:.2f} s on "
        f"{info['device']}: {info['users_per_second']:,.0f} users/s\nRecommendations: "
        f"{info['output']}"
    )


if __name__ == "__main__":
    main()
