"""A run's curves (the optimised validation metric, and the training loss, per epoch), from
whichever log the run wrote.

The loggers of ``conf/logger`` write to three places, tried in this order:

* CSV (``logger=csv``): ``<run>/csv/metrics.csv``, one column per metric and an ``epoch``
  column.
* TensorBoard (``logger=tensorboard``): event files under ``<run>/tensorboard/``, read with
  the ``tensorboard`` package's own reader (an optional extra); without it the run's curve is
  reported as unread, with the package to install.
* MLflow (``logger=mlflow``): the file store named by the run's ``logger.mlflow.tracking_uri``
  (``file:./mlruns``, relative to where the run started), whose runs are folders
  ``<store>/<experiment id>/<run id>/`` holding ``tags/<name>`` (the value as text) and
  ``metrics/<name>`` (one ``timestamp value step`` line per logged value). The MLflow run of
  a run folder is the one tagged ``run_dir`` with that folder (the run's
  ``paths.output_dir``). MLflow drops characters other than letters, digits and ``_/. -``
  from metric names (Lightning's logger does it), so ``val/ndcg@10`` is stored as
  ``val/ndcg10``.

TensorBoard and MLflow log against the global step; each also logs ``epoch`` at the same
steps, which maps a value to its epoch. Every curve is one value per epoch: a validation
metric's last (a resumed run logs an epoch twice), the training loss's mean over the steps
logged in the epoch (``per_epoch="mean"``). Nothing in a log is evaluated: numbers are parsed as
numbers, and a log that does not parse makes the run unreadable (:class:`UnreadableRun`).
"""

from __future__ import annotations

import importlib.util
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

import polars as pl

from recsys_seq.report.files import UnreadableRun, lookup, one_line

CSV_DIR = "csv"
TENSORBOARD_EVENTS = "events.out.tfevents.*"
MLFLOW_RUN_TAG = "run_dir"  # conf/logger/mlflow.yaml tags each MLflow run with its run folder
MLFLOW_DROPPED = re.compile(r"[^a-zA-Z0-9_/. -]+")
MLFLOW_COLUMNS = {"timestamp": pl.Int64, "value": pl.Float64, "step": pl.Int64}
READ_ERRORS = (OSError, pl.exceptions.PolarsError, pl.exceptions.PanicException)
LOSS = "train/loss"  # logged every few steps by the tasks
PerEpoch = Literal["last", "mean"]


@dataclass(frozen=True)
class Curve:
    """What a run's logs gave: the curve and the log it came from, or why there is none."""

    points: pl.DataFrame | None = None  # epoch (int), value (float); one row per epoch
    source: str | None = None  # "csv", "tensorboard" or "mlflow"
    unread: str | None = None  # a log that exists but cannot be read here, and why


def read_curve(
    run: Path, metric: str, config: dict, runtime_cwd: str | None, per_epoch: PerEpoch = "last"
) -> Curve:
    """``metric`` (``val/ndcg@10``, :data:`LOSS`) per epoch from the run's first log that
    holds it.

    Args:
        run: the run folder.
        metric: the metric's full key.
        config: the run's config.yaml (for the MLflow store).
        runtime_cwd: where the run was started (``hydra.runtime.cwd``), which a relative
            tracking URI is relative to.
        per_epoch: the epoch's ``last`` value (a metric logged once an epoch) or the ``mean``
            of its values (one logged every few steps).

    Raises:
        UnreadableRun: a log file that does not parse as its logger writes it.
    """
    points = _csv_curve(run, metric, per_epoch)
    if points is not None:
        return Curve(points, "csv")
    unread = None
    events = sorted({p.parent for p in run.rglob(TENSORBOARD_EVENTS) if p.is_file()})
    if events:
        if not tensorboard_installed():
            unread = (
                "it logged to TensorBoard, and the tensorboard package that reads its event files "
                'is not installed (pip install tensorboard, or pip install -e ".[tensorboard]")'
            )
        else:
            points = _tensorboard_curve(events[-1], metric, run, per_epoch)
            if points is not None:
                return Curve(points, "tensorboard")
    tracking_uri = lookup(config, "logger", "mlflow", "tracking_uri")
    if tracking_uri is not None:
        store = _mlflow_store(tracking_uri, run, runtime_cwd)
        if isinstance(store, str):
            unread = unread or store
        else:
            points = _mlflow_curve(store, metric, run, config, per_epoch)
            if points is not None:
                return Curve(points, "mlflow")
    return Curve(unread=unread)


def tensorboard_installed() -> bool:
    """Whether the ``tensorboard`` package (the reader of its event files) is installed."""
    return importlib.util.find_spec("tensorboard") is not None


def _csv_curve(run: Path, metric: str, per_epoch: PerEpoch) -> pl.DataFrame | None:
    files = sorted((run / CSV_DIR).rglob("metrics.csv")) if (run / CSV_DIR).is_dir() else []
    if not files:
        return None
    name = files[-1].relative_to(run)
    try:
        frame = pl.read_csv(files[-1], infer_schema_length=None)
    except READ_ERRORS as error:
        raise UnreadableRun(f"{name} cannot be read as CSV ({one_line(error)})") from None
    if metric not in frame.columns or "epoch" not in frame.columns:
        return None
    curve = frame.select("epoch", pl.col(metric).alias("value")).filter(
        pl.col("value").is_not_null()
    )
    if curve.is_empty():  # validation never logged (an all-empty column reads as strings)
        return None  # (checked before the types: such a column has no numeric type)
    if not (curve.schema["epoch"].is_integer() and curve.schema["value"].is_numeric()):
        raise UnreadableRun(f"{name} has a non-numeric epoch or {metric} column")
    return _per_epoch(curve, name, metric, per_epoch)


def _tensorboard_curve(
    folder: Path, metric: str, run: Path, per_epoch: PerEpoch
) -> pl.DataFrame | None:
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    name = folder.relative_to(run)
    try:
        events = EventAccumulator(str(folder), size_guidance={"scalars": 0})  # 0: keep all
        events.Reload()
        tags = events.Tags().get("scalars", [])
        if metric not in tags or "epoch" not in tags:
            return None
        values, epochs = events.Scalars(metric), events.Scalars("epoch")
    except Exception as error:  # noqa: BLE001 - the reader's errors have no common base
        raise UnreadableRun(
            f"{name}/ cannot be read as TensorBoard events ({one_line(error)})"
        ) from None
    curve = _with_epochs(
        pl.DataFrame(
            {"step": [e.step for e in values], "value": [e.value for e in values]},
            schema={"step": pl.Int64, "value": pl.Float64},
        ),
        pl.DataFrame(
            {"step": [e.step for e in epochs], "epoch": [e.value for e in epochs]},
            schema={"step": pl.Int64, "epoch": pl.Float64},
        ),
    )
    return _per_epoch(curve, f"{name}/", metric, per_epoch)


def _mlflow_store(tracking_uri: str, run: Path, runtime_cwd: str | None) -> Path | str:
    """The file store's folder, or why it cannot be read (a server, or not found)."""
    scheme = re.match(r"^([a-zA-Z][a-zA-Z0-9+.-]+):", tracking_uri)
    if scheme and scheme.group(1) != "file":
        return f"it logged to MLflow at {tracking_uri}, which is not a file store"
    path = Path(re.sub(r"^file:(//)?", "", tracking_uri))
    bases = [Path(runtime_cwd)] if runtime_cwd else []
    bases += [Path.cwd(), *run.resolve().parents]
    for base in [Path("/")] if path.is_absolute() else bases:
        if (base / path).is_dir():
            return base / path
    return f"it logged to MLflow at {tracking_uri}, which is not found"


def _mlflow_curve(
    store: Path, metric: str, run: Path, config: dict, per_epoch: PerEpoch
) -> pl.DataFrame | None:
    """The metric from every MLflow run tagged with this run folder (a resumed run starts a
    new MLflow run), later values last."""
    wanted = {str(run.resolve()), lookup(config, "paths", "output_dir")} - {None}
    parts = []
    for tag in sorted(store.glob(f"*/*/tags/{MLFLOW_RUN_TAG}")):
        if not (tag.is_file() and _text(tag) in wanted):
            continue
        metrics = tag.parent.parent / "metrics"
        values = _mlflow_metric(metrics / MLFLOW_DROPPED.sub("", metric), store)
        epochs = _mlflow_metric(metrics / "epoch", store)
        if values is not None and epochs is not None:
            parts.append(_with_epochs(values, epochs.rename({"value": "epoch"})))
    if not parts:
        return None
    where = f"the MLflow store {store}"
    curve = pl.concat(parts).sort("timestamp").drop("timestamp")
    return _per_epoch(curve, where, metric, per_epoch)


def _mlflow_metric(path: Path, store: Path) -> pl.DataFrame | None:
    if not path.is_file():
        return None
    try:
        return pl.read_csv(
            path,
            has_header=False,
            separator=" ",
            schema=MLFLOW_COLUMNS,
        )
    except READ_ERRORS as error:
        raise UnreadableRun(
            f"{path.relative_to(store)} in the MLflow store {store} is not lines of "
            f"'timestamp value step' ({one_line(error)})"
        ) from None


def _text(path: Path) -> str | None:
    try:
        return path.read_text(encoding="utf-8").strip()
    except (OSError, ValueError):
        return None


def _with_epochs(values: pl.DataFrame, epochs: pl.DataFrame) -> pl.DataFrame:
    """``step, value`` rows (and any other columns) given the epoch logged at their step
    (``step, epoch`` rows); the step itself dropped."""
    epoch_at = epochs.group_by("step").agg(pl.col("epoch").last())
    return (
        values.join(epoch_at, on="step", how="left")
        .with_columns(pl.col("epoch").cast(pl.Int64, strict=False))
        .drop("step")
    )


def _per_epoch(
    curve: pl.DataFrame, where: object, metric: str, per_epoch: PerEpoch
) -> pl.DataFrame | None:
    """``epoch, value`` rows, one per epoch (see :func:`read_curve`); None without any."""
    if curve.is_empty():
        return None
    if curve["epoch"].null_count() or not curve["value"].cast(pl.Float64).is_finite().all():
        raise UnreadableRun(f"{where} has a {metric} row without an epoch or a finite value")
    return (
        curve.group_by("epoch")
        .agg(pl.col("value").mean() if per_epoch == "mean" else pl.col("value").last())
        .sort("epoch")
    )
