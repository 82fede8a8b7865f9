"""The prep job: raw behaviour log -> prepared dataset folder (see :mod:`data_prep.schema`).

:func:`prepare` resolves and checks the options, checks the input (:mod:`data_prep.checks`)
and the item table (``items=``, :mod:`data_prep.item_table`), runs the steps
(:mod:`data_prep.steps`) over user partitions (:mod:`data_prep.job`) in a temporary folder next
to the output, joins the item table's attributes to the items
(:mod:`data_prep.item_attributes`), adds ``meta.json`` and the length histogram, and
publishes the folder with :mod:`recsys_seq.core.publish`: a failed or killed job leaves the previous
output intact (or nothing), and an existing output is replaced only when it is a prepared
dataset the project wrote, never the input, a folder holding it or a user's folder.
"""

from __future__ import annotations

import hashlib
import itertools
import json
import re
import shutil
from collections.abc import Iterator, Mapping
from contextlib import ExitStack, contextmanager
from pathlib import Path
from typing import Any

import polars as pl
from omegaconf import OmegaConf

from data_prep import cluster, input_tasks, inputs, item_attributes, job, schema, stats
from data_prep.formats import TIME_UNITS, has_clock, load_format, option_time
from data_prep.item_formats import load_item_format
from data_prep.item_table import ItemTable, read_item_table
from data_prep.prep_error import PrepError
from data_prep.progress import quiet
from recsys_seq.core import artifacts, publish, refusals, temporaries
from recsys_seq.core.conf import CONF_DIR
from recsys_seq.core.option_checks import option_flag, option_int, option_list, option_number

PREPARED_DATASET = "prepared_dataset"
"""The artifact kind of a prepared folder (see :mod:`recsys_seq.core.artifacts`)."""
artifacts.register_folder_kind(
    PREPARED_DATASET,
    "|".join(
        re.escape(name)
        for name in (
            schema.SEQUENCES_FILE,
            schema.ITEMS_FILE,
            schema.USERS_FILE,
            schema.META_FILE,
            schema.HISTOGRAM_FILE,
        )
    ),
)

PREP_CONFIG = CONF_DIR / "prep.yaml"
CHOICES = {
    "null_ids": ("error", "drop"),
    "dedup": ("none", "consecutive", "all"),
    "split": ("leave_one_out", "temporal"),
}
# options that do not change the result (left out of the fingerprint)
NOT_FINGERPRINTED = (
    "input", "output", "name", "reuse_existing", "partitions", "features", "cluster", "items",
)  # fmt: skip
# options that change nothing without an item table (left out of its fingerprint then)
ITEM_OPTIONS = ("items_format", "item_buckets")


def defaults() -> dict[str, Any]:
    """Every prep option with its default, read from ``conf/prep.yaml``: the one owner of the
    options and of their documentation, for the command line and the Python API alike.

    The format, the item table's format and the cluster are the yaml's defaults-list choices
    (``format: csv``, ``items_format: null``, ``cluster: null``), by name, first as Hydra
    composes them; the rest of the defaults list and the ``hydra:`` section configure Hydra,
    not the job (and are left out before resolving: their interpolations need Hydra).
    """
    cfg = OmegaConf.load(PREP_CONFIG)
    choices = {k: v for c in cfg.pop("defaults") if isinstance(c, Mapping) for k, v in c.items()}
    cfg.pop("hydra")
    groups = {key: choices[key] for key in ("format", "items_format", "cluster")}
    return {**groups, **OmegaConf.to_container(cfg, resolve=True)}


def resolve_config(cfg: Mapping[str, Any]) -> dict[str, Any]:
    """Fill defaults (:func:`defaults`), resolve the format by name, check every option's type
    and range.

    Values may come from the command line as strings (``max_len=12`` may arrive as ``"12"``,
    which is 12) or from Python; a value of the wrong type (a bool for an integer, ``1.5``
    for a count, ``abc`` for a number) is a one-paragraph :class:`PrepError` naming the
    option, never a traceback. A list option given one name is that one name
    (``event_types=buy`` is ``['buy']``). Times (``start_time``, ``end_time``, ``split_cut``)
    are clock values or dates/ISO date-times, converted like the log's timestamps.
    """
    known = defaults()
    unknown = set(cfg) - set(known) - {"hydra"}
    if unknown:
        raise PrepError(f"Unknown prep option(s): {sorted(unknown)}; known: {sorted(known)}.")
    out = {**known, **{k: v for k, v in cfg.items() if k != "hydra"}}
    if not isinstance(out["format"], (str, Mapping)):
        raise PrepError(
            f"Option format must be a format name (e.g. format=taobao) or a mapping, got "
            f"{out['format']!r}."
        )
    out["format"] = load_format(out["format"])
    unit = out["format"].get("timestamp_unit", "s")
    if unit not in TIME_UNITS:
        raise PrepError(
            f"format.timestamp_unit must be one of {', '.join(TIME_UNITS)}, not {unit!r}."
        )
    for key in ("input", "output"):
        if out[key] is None:
            raise PrepError("Both input=<raw file> and output=<folder> must be given.")
        if not isinstance(out[key], (str, Path, int)) or isinstance(out[key], bool):
            raise PrepError(f"Option {key} must be a path, got {out[key]!r}.")
        out[key] = str(out[key])
    if out["name"] is not None:
        out["name"] = str(out["name"])
    out["side_features"] = option_list("side_features", out["side_features"]) or []
    known = [*schema.SIDE_FEATURE_SOURCES, *schema.DERIVED_SIDE_FEATURES]
    bad = [f for f in out["side_features"] if f not in known]
    if bad:
        raise PrepError(f"Unknown side feature(s) {bad}; known: {known}.")
    out["event_types"] = option_list("event_types", out["event_types"], allow_empty=False)
    for key, choices in CHOICES.items():
        if not isinstance(out[key], str) or out[key] not in choices:
            raise PrepError(f"{key} must be one of {', '.join(choices)}, not {out[key]!r}.")
    for key, least in (
        ("min_user_events", 1),
        ("min_item_events", 1),
        ("max_len", 2),  # one input event and one target
        ("max_buckets", 1),
    ):
        out[key] = option_int(key, out[key], least)
    if out["partitions"] not in (None, "auto"):
        out["partitions"] = option_int("partitions", out["partitions"], 1)
    out["split_cut_quantile"] = option_number(
        "split_cut_quantile", out["split_cut_quantile"], above=0, below=1
    )
    out["bucket_waste"] = option_number("bucket_waste", out["bucket_waste"], at_least=0)
    if out["min_rating"] is not None:
        out["min_rating"] = option_number("min_rating", out["min_rating"])
    for key in ("start_time", "end_time", "split_cut"):
        out[key] = option_time(key, out[key], unit)
    out["reuse_existing"] = option_flag("reuse_existing", out["reuse_existing"])
    _resolve_items(out)
    out["cluster"] = cluster.resolve_cluster(out["cluster"])
    if out["name"] is None:
        out["name"] = Path(out["output"]).name
    return out


def _resolve_items(out: dict[str, Any]) -> None:
    """The item table's options: ``items`` a path or None, ``items_format`` its checked
    mapping (:func:`data_prep.item_formats.load_item_format`; ``csv`` when a table is given
    without one), ``item_buckets`` a count."""
    fmt = out["items_format"]
    if out["items"] is None:
        if fmt is not None:
            name = fmt if isinstance(fmt, str) else fmt.get("name")
            raise PrepError(
                f"items_format={name} needs items=<item table file>; give the file, or leave "
                "items_format out."
            )
    else:
        if not isinstance(out["items"], (str, Path)) or not str(out["items"]).strip():
            raise PrepError(
                f"Option items must be the item table's path, got {out['items']!r}; give the "
                "file, or leave items out."
            )
        out["items"] = str(out["items"])
        out["items_format"] = load_item_format(fmt or "csv")
    out["item_buckets"] = option_int("item_buckets", out["item_buckets"], 1)


def _features(cfg: Mapping[str, Any], columns: Mapping[str, pl.DataType]) -> list[str]:
    """Requested side features the log can provide (gap needs a real clock)."""
    features = []
    for name in cfg["side_features"]:
        if name == "gap":
            if not has_clock(cfg["format"]):
                raise PrepError(
                    f"side feature 'gap' needs timestamps, and format "
                    f"{cfg['format'].get('name')!r} has only the row order."
                )
            features.append(name)
        elif schema.SIDE_FEATURE_SOURCES[name] in columns:
            features.append(name)
    return features


def _check_columns(cfg: Mapping[str, Any], columns: Mapping[str, pl.DataType]) -> None:
    needs = {"event_types": schema.RAW_EVENT, "min_rating": schema.RAW_RATING}
    for key, column in needs.items():
        if cfg[key] is not None and column not in columns:
            raise PrepError(
                f"{key} needs a {column!r} column, and format {cfg['format'].get('name')!r} "
                f"maps none for {cfg['input']}; set format.columns.{column}=<column>."
            )


def fingerprint(cfg: Mapping[str, Any], input_sha256: str) -> str:
    """Hash of the input bytes (the log's, and the item table's after them) and every option
    that changes the result (not paths/names; the item table's options only with a table)."""
    ignored = (*NOT_FINGERPRINTED, *(ITEM_OPTIONS if cfg.get("items") is None else ()))
    relevant = {k: v for k, v in cfg.items() if k not in ignored}
    payload = json.dumps(relevant, sort_keys=True, default=str)
    return hashlib.sha256((input_sha256 + payload).encode()).hexdigest()


def item_fingerprint(original_ids: pl.Series) -> str:
    """Hash of the original item ids in index order: equal iff the item vocabulary is equal.

    Hashed as text (an integer as its decimal digits), so one id hashes alike whether a
    column holds it as Int64, UInt64, Int128 or canonical text: the forms a stored catalogue
    may give it back in (:mod:`recsys_seq.data.catalogue`)."""
    return hashlib.sha256("\n".join(original_ids.cast(pl.String).to_list()).encode()).hexdigest()


def is_same_dataset(folder: Path, fp: str) -> bool:
    """Whether ``folder`` is a prepared dataset of the project with fingerprint ``fp``."""
    if not (folder.is_dir() and artifacts.owns_folder(folder, PREPARED_DATASET)):
        return False
    meta = read_meta(folder)
    return meta is not None and meta.get(schema.META_FINGERPRINT) == fp


def read_meta(folder: str | Path) -> dict[str, Any] | None:
    path = Path(folder) / schema.META_FILE
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError):
        return None


def prepare(cfg: Mapping[str, Any], stage=quiet) -> dict[str, Any]:
    """Run the prep job for ``cfg`` (the keys of ``conf/prep.yaml``) and return ``meta.json``.

    Args:
        stage: progress reporter, ``stage(name)`` -> context manager (see :mod:`progress`).
    Raises:
        PrepError: a user error (bad file, value, column or option; nothing left after the
            filters), with a message naming the file and, where it applies, the line.
    """
    cfg = resolve_config(cfg)
    out = Path(cfg["output"])
    files = inputs.log_files(cfg["input"])
    read = [*files, *inputs.read_folders(cfg["input"])]
    table = _item_table(cfg, stage)
    read += [table.path] if table else []
    temporaries.recover(out)
    with _executor(cfg["cluster"], stage) as executor:
        described = executor.map(input_tasks.describe_file, files, cfg["format"])
        sha = inputs.combined_sha256([digest for digest, _ in described])
        fp = fingerprint(cfg, sha + (table.sha256 if table else ""))
        if cfg["reuse_existing"] and is_same_dataset(out, fp):
            return read_meta(out)
        refusals.check_target(out, PREPARED_DATASET, folder=True, inputs=read)  # before the work
        columns = inputs.unify([columns for _, columns in described])
        _check_columns(cfg, columns)
        cfg["features"] = _features(cfg, columns)
        with stage(f"checking {_what(cfg['input'], files)}"):
            checked = executor.map(input_tasks.check_file, files, cfg)
        starts = [0, *itertools.accumulate(c.rows for c in checked)]
        log = [inputs.LogFile(p, first, columns) for p, first in zip(files, starts, strict=False)]
        keep = (lambda existing: is_same_dataset(existing, fp)) if cfg["reuse_existing"] else None
        with publish.publishing(
            out, PREPARED_DATASET, folder=True, inputs=read, keep_existing=keep
        ) as tmp:
            executor.check_shared(tmp)
            result = job.run(
                log, cfg, starts[-1], _time_range(checked), tmp / "_work", tmp, stage, executor
            )
            shutil.rmtree(tmp / "_work", ignore_errors=True)
            if result.lengths.len() == 0:
                raise PrepError(
                    f"No users left in {cfg['input']} after the filters (event_types="
                    f"{cfg['event_types']}, min_rating={cfg['min_rating']}, time window "
                    f"[{cfg['start_time']}, {cfg['end_time']}), min_user_events="
                    f"{cfg['min_user_events']}, min_item_events={cfg['min_item_events']}); "
                    "loosen them or check the column mapping."
                )
            items, meta = result.items, make_meta(cfg, result, fp, sha)
            meta["rows_read"] = starts[-1]  # before ids, filters, dedup and truncation
            meta["rows_without_ids"] = sum(c.without_ids for c in checked)  # null_ids=drop
            if table is not None:
                with stage(f"joining the item table {table.path.name}"):
                    attached = item_attributes.attach(
                        items, table, cfg["item_buckets"], cfg["input"]
                    )
                items = attached.items
                meta[schema.META_ITEM_ATTRIBUTES] = attached.attributes
                meta[schema.META_ITEM_TABLE] = attached.report
            with stage("items, users, meta.json, histogram"):
                items.write_parquet(tmp / schema.ITEMS_FILE)
                result.users.write_parquet(tmp / schema.USERS_FILE)
                stats.write_histogram(result.lengths, meta, tmp / schema.HISTOGRAM_FILE)
                (tmp / schema.META_FILE).write_text(json.dumps(meta, indent=2, default=str) + "\n")
    return read_meta(out) or meta


def _item_table(cfg: Mapping[str, Any], stage) -> ItemTable | None:
    """The item table, read and checked in this process before any work (it is small), or
    None without ``items=``."""
    if cfg["items"] is None:
        return None
    with stage(f"reading the item table {Path(cfg['items']).name}"):
        return read_item_table(cfg["items"], cfg["items_format"])


@contextmanager
def _executor(options: Mapping[str, Any] | None, stage) -> Iterator[Any]:
    """The job's executor (:mod:`data_prep.cluster`); starting a cluster is a stage."""
    with ExitStack() as stack:
        if options is None:
            yield stack.enter_context(cluster.open_executor(None))
            return
        with stage(f"starting the Dask cluster (cluster={options['kind']})"):
            executor = stack.enter_context(cluster.open_executor(options))
        yield executor


def _what(spec: str, files: list[Path]) -> str:
    return files[0].name if len(files) == 1 else f"{len(files)} files of {spec}"


def _time_range(checked: list[input_tasks.FileFacts]) -> tuple[int, int]:
    """The log's first and last timestamps; without a clock, the row order's range."""
    if checked[0].min_time is None:
        return 0, sum(c.rows for c in checked)
    return min(c.min_time for c in checked), max(c.max_time for c in checked)


def make_meta(
    cfg: Mapping[str, Any], result: job.Result, fp: str, input_sha256: str
) -> dict[str, Any]:
    lengths = result.lengths
    buckets = stats.suggest_buckets(
        lengths.to_numpy(), int(cfg["max_buckets"]), float(cfg["bucket_waste"])
    )
    vocab = {name: [schema.PAD_TOKEN, *values] for name, values in result.vocab.items()}
    config = {k: v for k, v in cfg.items() if k not in ("features", "cluster")}
    return {
        schema.META_SCHEMA_VERSION: schema.SCHEMA_VERSION,
        "name": cfg["name"],
        "config": config,
        schema.META_FINGERPRINT: fp,
        schema.META_INPUT_SHA256: input_sha256,
        schema.META_ITEM_FINGERPRINT: item_fingerprint(result.items[schema.ORIGINAL_ID]),
        "users": result.users.height,
        "items": result.items.height,
        "events": int(lengths.sum()),
        "length_quantiles": stats.length_quantiles(lengths),
        schema.META_BUCKETS: buckets,
        "bucket_padding_waste": round(stats.padding_waste(lengths.to_numpy(), buckets), 4),
        schema.META_SIDE_FEATURES: {name: len(v) for name, v in vocab.items()},
        schema.META_VOCAB: vocab,
        schema.META_SPLIT: cfg["split"],
        schema.META_SPLIT_CUT: result.cut,
        "timestamp_unit": cfg["format"].get("timestamp_unit", "s")
        if has_clock(cfg["format"])
        else "row order",
        "partitions": result.partitions,
    }
