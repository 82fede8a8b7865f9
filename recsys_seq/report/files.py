"""Each file of a run folder read as plain data, refused when it is not what runs write.

Run folders may come from anyone, so this module is the one place their files are opened:
YAML with ``yaml.safe_load`` (no tags, no objects; interpolations stay unresolved strings),
JSON with ``json``, the CSV log with Polars. Nothing read is imported or called. A file that
cannot be read, or does not hold the shape recsys-train / recsys-eval write, raises
:class:`UnreadableRun` with a short reason; :mod:`recsys_seq.report.runs` then skips that run.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import polars as pl
import yaml

from data_prep.run_folders import CONFIG_FILE, METRICS_FILE

OVERRIDES_FILE = ".hydra/overrides.yaml"
CHECKPOINT = "checkpoint"  # the one metrics.json entry that is not a number (a path or null)
FLOAT_MAX = sys.float_info.max


class UnreadableRun(Exception):
    """A run folder whose files cannot be read as a run; the report skips it with a warning."""


def load_yaml(run: Path, name: str) -> object:
    """The run's YAML file ``name`` as plain data: ``yaml.safe_load`` builds only mappings,
    lists and scalars (a ``!!python/...`` tag is an error, not a call) and leaves ``${...}``
    interpolations as the strings they are."""
    try:
        return yaml.safe_load((run / name).read_text(encoding="utf-8"))
    except OSError as error:
        raise UnreadableRun(f"{name} cannot be read ({error.strerror or error})") from None
    except (yaml.YAMLError, ValueError, RecursionError) as error:  # ValueError: not UTF-8
        raise UnreadableRun(f"{name} is not valid YAML ({one_line(error)})") from None


def load_config(run: Path) -> dict:
    """The run's config.yaml: a mapping."""
    config = load_yaml(run, CONFIG_FILE)
    if not isinstance(config, dict):
        raise UnreadableRun(f"{CONFIG_FILE} holds {_kind(config)}, not a mapping")
    return config


def load_overrides(run: Path) -> list[str]:
    """The Hydra overrides that made the run (``.hydra/overrides.yaml``); none without it."""
    overrides = (load_yaml(run, OVERRIDES_FILE) if (run / OVERRIDES_FILE).exists() else None) or []
    if not isinstance(overrides, list) or not all(isinstance(o, str) for o in overrides):
        raise UnreadableRun(f"{OVERRIDES_FILE} is not a list of strings")
    return overrides


def load_metrics(run: Path) -> dict[str, float | str | None]:
    """The run's metrics.json: a JSON object of finite numbers, plus the checkpoint path (or
    null)."""
    try:
        metrics = json.loads((run / METRICS_FILE).read_text(encoding="utf-8"))
    except OSError as error:
        raise UnreadableRun(f"{METRICS_FILE} cannot be read ({error.strerror or error})") from None
    except (ValueError, RecursionError) as error:  # not UTF-8, not JSON
        raise UnreadableRun(f"{METRICS_FILE} is not valid JSON ({one_line(error)})") from None
    if not isinstance(metrics, dict):
        raise UnreadableRun(f"{METRICS_FILE} holds {_kind(metrics)}, not a JSON object")
    for key, value in metrics.items():
        if key == CHECKPOINT:
            ok = value is None or isinstance(value, str)
        else:  # not bool (an int to Python); finite as a float (NaN fails any comparison):
            # NaN, inf or a 400-digit integer would break the table and the plots
            ok = type(value) in (int, float) and -FLOAT_MAX <= value <= FLOAT_MAX
        if not ok:
            raise UnreadableRun(f"{METRICS_FILE}: {key!r} is {_shown(value)}, not a finite number")
    return metrics


def read_curve(run: Path, monitor: str) -> pl.DataFrame | None:
    """``epoch, value`` rows of ``val/<monitor>`` in the run's CSV log (``csv/metrics.csv``),
    if any."""
    metric = f"val/{monitor}"
    files = sorted((run / "csv").rglob("metrics.csv")) if (run / "csv").is_dir() else []
    if not files:
        return None
    name = files[-1].relative_to(run)
    try:
        frame = pl.read_csv(files[-1], infer_schema_length=None)
    except (OSError, pl.exceptions.PolarsError, pl.exceptions.PanicException) as error:
        raise UnreadableRun(f"{name} cannot be read as CSV ({one_line(error)})") from None
    if metric not in frame.columns or "epoch" not in frame.columns:
        return None
    curve = frame.select("epoch", pl.col(metric).alias("value")).filter(
        pl.col("value").is_not_null()
    )
    if curve.is_empty():  # validation never logged (an all-empty column reads as strings)
        return None
    if not (curve.schema["epoch"].is_integer() and curve.schema["value"].is_numeric()):
        raise UnreadableRun(f"{name} has a non-numeric epoch or {metric} column")
    if curve["epoch"].null_count() or not curve["value"].cast(pl.Float64).is_finite().all():
        raise UnreadableRun(f"{name} has a {metric} row without an epoch or a finite value")
    return (
        curve.group_by("epoch")
        .agg(pl.col("value").last())  # one value per epoch (resumed runs log twice)
        .sort("epoch")
    )


def one_line(error: BaseException) -> str:
    """``error``'s message on one line, at most 300 characters (a warning line names it)."""
    return " ".join(str(error).split())[:300]


def _kind(value: object) -> str:
    kinds = {dict: "a mapping", list: "a list", str: "a string", type(None): "nothing"}
    return kinds.get(type(value), f"a {type(value).__name__}")


def _shown(value: object) -> str:
    text = json.dumps(value)
    return text if len(text) <= 40 else text[:37] + "..."
