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

import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

import hydra
import numpy as np
import polars as pl
import torch
from omegaconf import DictConfig
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeRemainingColumn
from torch.utils.data import Dataset

from data_prep import schema
from data_prep.errors import UserError, exit_on_user_error, run_command
from data_prep.ids import canonical_series, read_id_list
from data_prep.publish import check_target, publishing, register_kind
from recsys_seq.cli import runs
from recsys_seq.cli.evaluate import restore
from recsys_seq.data import PreparedSequences
from recsys_seq.data.batch import JaggedWindows, PaddedBatchCollator
from recsys_seq.data.dataset import Stage
from recsys_seq.options import OptionError, option

SERVE = "serve"
RECOMMENDATIONS = "recommendations"
ARTIFACT_KEY = "recsys_seq_artifact"  # parquet metadata: which artifact wrote the file
DEFAULT_OUTPUT = "recommendations.parquet"  # in the run folder, when no output= is given
STAGES = (SERVE, Stage.TEST.value, Stage.VAL.value)
COLUMNS = ("user_id", "rank", "item_id", "score")


@dataclass(frozen=True)
class RecommendOptions:
    """The command's own options (``conf/recommend.yaml``), checked before any work."""

    ckpt_path: str
    users: str = "all"
    k: int = option(10, min=1)
    stage: Literal["serve", "test", "val"] = SERVE
    exclude_history: bool = True
    output: str | None = None
    batch_size: int = option(512, min=1)
    device: str = "auto"


class UnknownUsers(UserError):
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
    """User indices for the original ids listed in ``path``, in file order, each once.

    The file is read and its ids compared with ``users.parquet`` under the id policy of
    :mod:`data_prep.ids` (whitespace, leading zeros and ``14.0`` name the same user as
    ``14``; a BOM, CRLF, a header line and quoted ids are fine).

    Raises:
        UnknownUsers: naming the ids (up to 10) that ``users.parquet`` does not hold.
    """
    wanted = pl.DataFrame({"id": read_id_list(path, "user")}, schema={"id": pl.String})
    known = pl.DataFrame(
        {
            "id": canonical_series(users_frame[schema.ORIGINAL_ID]),
            schema.USER: users_frame[schema.USER],
        }
    )
    found = wanted.join(known, on="id", how="left", maintain_order="left")
    unknown = found.filter(pl.col(schema.USER).is_null())["id"]
    if unknown.len():
        shown = ", ".join(unknown.head(10).to_list()) + (", ..." if unknown.len() > 10 else "")
        raise UnknownUsers(
            f"{unknown.len()} user id(s) in {path} are not in the dataset's "
            f"{schema.USERS_FILE}: {shown}"
        )
    return found[schema.USER].to_numpy().astype(np.int64)


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
    return model.spec.num_items


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


def is_recommendations(path: Path) -> bool:
    """Whether ``path`` is a recommendation file this command wrote (parquet: its metadata
    key; csv: exactly its header line)."""
    try:
        if path.suffix == ".parquet":
            return pl.read_parquet_metadata(path).get(ARTIFACT_KEY) == RECOMMENDATIONS
        with open(path, encoding="utf-8") as file:
            return file.readline().rstrip("\r\n") == ",".join(COLUMNS)
    except (OSError, UnicodeDecodeError, pl.exceptions.PolarsError):
        return False


register_kind(RECOMMENDATIONS, is_recommendations)


def write_recommendations(frame: pl.DataFrame, output: Path, inputs: list[Path]) -> Path:
    """Publish ``frame`` as parquet or csv (by suffix): a reader never sees a half-written
    file, a failure leaves the previous one intact, and only a recommendation file this
    command wrote is ever replaced."""
    with publishing(output, RECOMMENDATIONS, folder=False, inputs=inputs) as tmp:
        if output.suffix == ".parquet":
            frame.write_parquet(tmp, metadata={ARTIFACT_KEY: RECOMMENDATIONS})
        else:
            frame.write_csv(tmp)
    return output


def pick_device(name: str) -> torch.device:
    """``auto`` (CUDA when available), ``cpu``, ``cuda``, ``cuda:<n>``, ``mps``; or an
    :class:`OptionError` naming what is wrong."""
    if name == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    try:
        device = torch.device(name)
    except RuntimeError:
        raise OptionError(
            f"device must be auto, cpu, cuda, cuda:<n> or mps, got {name!r}."
        ) from None
    available = {
        "cpu": True,
        "cuda": torch.cuda.is_available()
        and (device.index is None or device.index < torch.cuda.device_count()),
        "mps": torch.backends.mps.is_available(),
    }.get(device.type, False)
    if not available:
        raise OptionError(f"device={name}: no such device on this machine; use device=cpu.")
    return device


def recommend(cfg: DictConfig, show_progress: bool = True) -> tuple[pl.DataFrame, dict[str, Any]]:
    """Top-``cfg.k`` per selected user; returns ``(frame, info)`` where ``info`` holds the
    model, datamodule, output path, user count and throughput (users/s)."""
    runs.quiet_console()
    options = runs.command_options(RecommendOptions, cfg)
    output = Path(options.output or Path(cfg.paths.output_dir) / DEFAULT_OUTPUT)
    if output.suffix not in (".parquet", ".csv"):
        raise OptionError(f"output must end in .parquet or .csv, got {output}.")
    device = pick_device(options.device)
    model, datamodule, spec = restore(options.ckpt_path, cfg.get("data"))
    inputs = [Path(options.ckpt_path), datamodule.path]
    if options.users != "all":
        inputs.append(Path(options.users))
    check_target(output, RECOMMENDATIONS, folder=False, inputs=inputs)  # before the work
    model.to(device)
    model.exclude_history = options.exclude_history  # the window, via ranking_scores
    dataset = window_dataset(datamodule, options.stage)
    users_frame = pl.read_parquet(datamodule.path / schema.USERS_FILE)
    if options.users == "all":
        wanted = np.asarray(dataset.users)
    else:
        wanted = read_user_ids(options.users, users_frame)
    indices = window_positions(np.asarray(dataset.users), wanted)
    skipped = len(wanted) - len(indices)
    if skipped:
        print(
            f"{skipped} selected user(s) have no {options.stage} window (no held-out event): "
            "skipped"
        )
    exclude_seen = datamodule.data if options.exclude_history and options.stage == SERVE else None
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
            model, dataset, indices, options.k, options.batch_size, exclude_seen, device, progress
        )
    seconds = time.perf_counter() - start
    frame = to_frame(users, items, scores, datamodule.path)
    path = write_recommendations(frame, output, inputs)
    info = {
        "model": model,
        "datamodule": datamodule,
        "output": path,
        "users": len(indices),
        "seconds": seconds,
        "users_per_second": len(indices) / seconds if seconds > 0 else float("inf"),
        "device": str(device),
        "options": options,
    }
    return frame, info


def window_positions(window_users: np.ndarray, wanted: np.ndarray) -> np.ndarray:
    """Positions in ``window_users`` (sorted, unique) of the ``wanted`` users that have a
    window, in ``wanted``'s order."""
    position = np.searchsorted(window_users, wanted).clip(max=max(len(window_users) - 1, 0))
    found = (window_users[position] == wanted) if len(window_users) else np.zeros(0, bool)
    return position[found].astype(np.int64)


@hydra.main(version_base="1.3", config_path=runs.CONF_DIR, config_name="recommend")
@exit_on_user_error("recsys-recommend")
def _main(cfg: DictConfig) -> None:
    _, info = recommend(cfg)
    options = info["options"]
    print(
        f"Top-{options.k} for {info['users']:,} users ({options.stage} windows, history "
        f"{'excluded' if options.exclude_history else 'included'}) in {info['seconds']:.2f} s on "
        f"{info['device']}: {info['users_per_second']:,.0f} users/s\nRecommendations: "
        f"{info['output']}"
    )


def main() -> None:
    run_command(_main, "recsys-recommend")


if __name__ == "__main__":
    main()
