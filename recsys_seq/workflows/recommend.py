"""Top-K next items per user from a checkpoint, in ORIGINAL user and item ids; the library
behind ``recsys-recommend``:

    recsys-recommend ckpt_path=<ckpt> users=all k=10 output=recs.parquet
    recsys-recommend ckpt_path=<ckpt> users=ids.txt output=recs.csv exclude_history=false
    recsys-recommend ckpt_path=<ckpt> stage=test      # the windows recsys-eval ranks

Which window is scored (``stage``):

* ``serve`` (default): the most recent ``data.max_len`` events of the user's WHOLE known
  history, test event included: the recommendation for "what comes next, now".
* ``test`` / ``val``: the evaluation input windows (``items[:test_index]`` /
  ``items[:val_index]``, most recent ``max_len``). These are exactly the windows recsys-eval
  ranks, so ``stage=test`` top-K lists agree with evaluation's ranks (a test checks this).

Scores come from :meth:`NextItemTask.predict_step`, run by ``Trainer.predict`` (devices,
precision and DDP from ``trainer=...``), over the code path evaluation ranks with: PAD is never
recommended, and with ``exclude_history=true`` the items of the input window score ``-inf``.
For ``stage=serve`` the items of the whole known history are excluded too (it can be longer
than the window); for ``test``/``val`` only the window, exactly as evaluation does.
Users with fewer than K rankable items get fewer rows. The output has one row per
(user, rank): ``user_id, rank, item_id, score, source`` (rank 1 = best; ``source`` says whose
score it is, as in the Python API), written atomically, users in the order of the users file.

User ids the dataset does not know follow ``unknown``: ``skip`` (default: counted and left
out), ``popular`` (the most frequent training items, scored by training count, after the
known users, ``source="popular"``) or ``error`` (nothing is written; the ids are named).
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

import numpy as np
import polars as pl
from lightning.pytorch.callbacks import RichProgressBar
from omegaconf import DictConfig

from data_prep import schema
from data_prep.ids import canonical_series, read_id_list
from recsys_seq import configs
from recsys_seq.core.errors import UserError
from recsys_seq.core.options import OptionError, option
from recsys_seq.core.publish import (
    check_run_folder,
    check_target,
    claim_run_folder,
    publishing,
    register_kind,
)
from recsys_seq.data import Stage
from recsys_seq.serving import (
    COLUMNS,
    TopKWriter,
    clear_parts,
    popular_frame,
    read_parts,
    to_original_ids,
)
from recsys_seq.workflows import runs
from recsys_seq.workflows.evaluate import restore
from recsys_seq.workflows.trainer import build_trainer, check_trainer, trainer_errors

RECOMMENDATIONS = "recommendations"
ARTIFACT_KEY = "recsys_seq_artifact"  # parquet metadata: which artifact wrote the file
DEFAULT_OUTPUT = "recommendations.parquet"  # in the run folder, when no output= is given


@dataclass(frozen=True)
class RecommendOptions:
    """The command's own options (``conf/recommend.yaml``), checked before any work."""

    ckpt_path: str
    users: str = "all"
    k: int = option(10, min=1)
    stage: Literal["serve", "test", "val"] = "serve"
    exclude_history: bool | None = None  # None: as the checkpoint was trained
    blend: float | None = option(None, min=0.0, max=1.0)  # a blend's ranker share; None: trained
    unknown: Literal["skip", "popular", "error"] = "skip"
    output: str | None = None
    batch_size: int = option(512, min=1)


class UnknownUsers(UserError):
    """The users file names ids that are not in the dataset (with ``unknown=error``)."""


def read_user_ids(path: str | Path, users_frame: pl.DataFrame) -> pl.DataFrame:
    """``id, user`` for the original ids listed in ``path``, in file order, each once:
    ``id`` the canonical id as text, ``user`` its index, null for an id the dataset lacks.

    The file is read and its ids compared with ``users.parquet`` under the id policy of
    :mod:`data_prep.ids` (whitespace, leading zeros and ``14.0`` name the same user as
    ``14``; a BOM, CRLF, a header line and quoted ids are fine).
    """
    wanted = pl.DataFrame({"id": read_id_list(path, "user")}, schema={"id": pl.String})
    known = pl.DataFrame(
        {
            "id": canonical_series(users_frame[schema.ORIGINAL_ID]),
            schema.USER: users_frame[schema.USER],
        }
    )
    return wanted.join(known, on="id", how="left", maintain_order="left")


def unknown_users(found: pl.DataFrame, policy: str, path: str | Path) -> pl.Series:
    """The ids of ``found`` that the dataset lacks, after applying ``policy``: ``error``
    raises :class:`UnknownUsers` naming them (up to 10); ``skip`` and ``popular`` say how
    many there are and what is done with them."""
    unknown = found.filter(pl.col(schema.USER).is_null())["id"]
    if unknown.len():
        shown = ", ".join(unknown.head(10).to_list()) + (", ..." if unknown.len() > 10 else "")
        what = (
            f"{unknown.len()} user id(s) in {path} are not in the dataset's "
            f"{schema.USERS_FILE}: {shown}"
        )
        if policy == "error":
            raise UnknownUsers(f"{what} (unknown=skip or unknown=popular serves the rest)")
        done = "skipped" if policy == "skip" else "given the most popular items"
        print(f"{what}: {done}")
    return unknown


def is_recommendations(path: Path) -> bool:
    """Whether ``path`` is a recommendation file this command wrote (parquet: its metadata
    key; csv: exactly its header line, with or without the ``source`` column that files
    written before it lack)."""
    try:
        if path.suffix == ".parquet":
            return pl.read_parquet_metadata(path).get(ARTIFACT_KEY) == RECOMMENDATIONS
        with open(path, encoding="utf-8") as file:
            return file.readline().rstrip("\r\n") in (",".join(COLUMNS), ",".join(COLUMNS[:-1]))
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


def in_wanted_order(frame: pl.DataFrame, wanted: np.ndarray) -> pl.DataFrame:
    """Rows of the users in ``wanted``'s order, each user's ranks ascending."""
    order = pl.DataFrame({schema.USER: wanted, "_order": np.arange(len(wanted))})
    return frame.join(order, on=schema.USER).sort("_order", "rank").drop("_order")


def recommend(cfg: DictConfig, show_progress: bool = True) -> tuple[pl.DataFrame, dict[str, Any]]:
    """Top-``cfg.k`` per selected user; returns ``(frame, info)`` where ``info`` holds the
    model, datamodule, output path, user count and throughput (users/s)."""
    runs.quiet_console()
    options = runs.command_options(RecommendOptions, cfg)
    check_trainer(configs.plain(cfg.trainer))
    output = Path(options.output or Path(cfg.paths.output_dir) / DEFAULT_OUTPUT)
    if output.suffix not in (".parquet", ".csv"):
        raise OptionError(f"output must end in .parquet or .csv, got {output}.")
    # no fixed negatives: serving ranks all items, and drawing them is work for nothing
    overrides = {
        **configs.plain(cfg.get("data")),
        "eval_batch_size": options.batch_size,
        "sampled_negatives": 0,
    }
    model, datamodule, _ = restore(
        options.ckpt_path, overrides, options.exclude_history, options.blend
    )
    inputs = [Path(options.ckpt_path), datamodule.path]
    if options.users != "all":
        inputs.append(Path(options.users))
    task = str(cfg.task_name)
    if options.output is None:  # the run folder's file: the run folder is checked as one
        check_run_folder(output.parent, inputs, task=task)
    check_target(output, RECOMMENDATIONS, folder=False, inputs=inputs)  # before the work
    scored = datamodule.dataset(options.stage).users  # users with a window in this stage
    unknown = pl.Series("id", [], dtype=pl.String)
    if options.users == "all":
        wanted = scored
    else:
        users_frame = pl.read_parquet(datamodule.path / schema.USERS_FILE)
        found = read_user_ids(options.users, users_frame)
        unknown = unknown_users(found, options.unknown, options.users)
        wanted = found[schema.USER].drop_nulls().to_numpy().astype(np.int64)
    skipped = int((~np.isin(wanted, scored)).sum())
    if skipped:
        print(
            f"{skipped} selected user(s) have no {options.stage} window (no held-out event): "
            "skipped"
        )
    model.predict_k = options.k
    datamodule.serve_users(Stage(options.stage), wanted)
    if options.output is None:  # all checked: the parts and the result go into it
        claim_run_folder(output.parent, inputs, task=task)
    parts = output.parent / f".{output.name}.parts"  # one folder every rank sees
    clear_parts(parts)  # before any rank writes: ranks meet only inside predict
    writer = TopKWriter(parts)
    callbacks = [writer, RichProgressBar()] if show_progress else [writer]
    trainer = build_trainer(
        cfg.trainer,
        logger=False,
        enable_checkpointing=False,
        enable_progress_bar=show_progress,
        enable_model_summary=False,
        callbacks=callbacks,
    )
    start = time.perf_counter()
    try:
        with trainer_errors():
            trainer.predict(model, datamodule=datamodule, return_predictions=False)
        trainer.strategy.barrier()
        seconds = time.perf_counter() - start
        frame = None
        if trainer.is_global_zero:
            frame = to_original_ids(in_wanted_order(read_parts(parts), wanted), datamodule.path)
            if options.unknown == "popular" and unknown.len():
                fallback = popular_frame(
                    unknown, datamodule.data.catalogue, options.k, frame["user_id"].dtype
                )
                frame = pl.concat([frame, fallback], how="vertical_relaxed")
            write_recommendations(frame, output, inputs)
    finally:
        if trainer.is_global_zero:
            clear_parts(parts)
    served = len(wanted) - skipped + (unknown.len() if options.unknown == "popular" else 0)
    info = {
        "model": model,
        "datamodule": datamodule,
        "output": output,
        "users": served,
        "seconds": seconds,
        "users_per_second": served / seconds if seconds > 0 else float("inf"),
        "device": str(trainer.strategy.root_device),
        "options": options,
        "exclude_history": model.exclude_history,
    }
    return frame, info
