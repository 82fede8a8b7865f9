"""The prep job's tasks that read the log's files, and the first stage, which does little else:
each of them turns a failed read into one :class:`PrepError` naming the file.

The files were listed and sniffed (:mod:`data_prep.sniff`) before, yet a full read can still
fail: a gzip file cut short, a Parquet file with a corrupt page, bytes that are not text past
the sniffed head, a file that is removed or made unreadable between the listing and the read.
Polars reports those as an ``OSError``, one of its own errors or a panic, on whichever process
ran the task; :func:`reading` makes each a :class:`PrepError` in the task itself, so that on a
cluster it comes back from the worker as the user error it is (and is not retried), and the
job stops before anything is published. Tasks are module-level functions of picklable
arguments, as a cluster ships them (see :mod:`data_prep.stages`).
"""

from __future__ import annotations

import os
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import polars as pl

from data_prep import checks, steps
from data_prep.formats import scan
from data_prep.inputs import LogFile, file_sha256
from data_prep.lines import parse_error
from data_prep.parts import Store, part_bounds, partition, user_sample
from data_prep.prep_error import PrepError
from data_prep.schema import ROW
from data_prep.stages import PER_PART, Stage
from recsys_seq.core.errors import UserError
from recsys_seq.core.refusals import is_disk_error

SAMPLE_PER_PART = 1_000  # user ids each file contributes per part to the part bounds
# what reading a damaged or vanished file raises (Polars panics on some corrupt Parquet)
READ_ERRORS = (OSError, pl.exceptions.PolarsError, pl.exceptions.PanicException)


@contextmanager
def reading(path: Path, fmt: Mapping[str, Any]) -> Iterator[None]:
    """Run a task's read of the input file ``path``: a failure of the file is a
    :class:`PrepError` naming it (and its line, where one can be found); a full disk or a
    read-only scratch folder, while the file itself stays readable, is the output's fault and
    goes on to the publisher, which reports it as such."""
    try:
        yield
    except UserError:
        raise
    except READ_ERRORS as err:
        if is_disk_error(err) and os.access(path, os.R_OK):
            raise
        raise _unreadable(err, path, fmt) from None


def _unreadable(err: BaseException, path: Path, fmt: Mapping[str, Any]) -> PrepError:
    if not path.is_file():
        return PrepError(
            f"Input file {path} disappeared while the job read it (it was listed, then not "
            "found): keep the log's files in place until recsys-prep ends, then run it again."
        )
    if not os.access(path, os.R_OK):
        return PrepError(f"Input file {path} cannot be read (permission denied): {err}.")
    return parse_error(err, path, fmt)


# --- the input files --------------------------------------------------------------------


def describe_file(path: Path, fmt: Mapping[str, Any]) -> tuple[str, dict[str, pl.DataType]]:
    """Task: the file's content hash and canonical columns (a file that is missing or that
    the format's reader cannot read is refused here, before any work)."""
    with reading(path, fmt):
        columns = dict(scan(path, fmt).collect_schema())
        digest = file_sha256(path)
    return digest, columns


@dataclass
class FileFacts:
    """What :func:`check_file` found in one input file."""

    rows: int
    without_ids: int  # rows missing a user or an item id (null_ids=drop drops them)
    min_time: int | None  # None for a log without a clock
    max_time: int | None


def check_file(path: Path, cfg: Mapping[str, Any]) -> FileFacts:
    """Task: the file's values checked (:func:`data_prep.checks.check_values`, and the ratings
    that ``min_rating`` will filter on), errors naming this file and its line."""
    fmt, drop = cfg["format"], cfg["null_ids"] == "drop"
    with reading(path, fmt):
        checks.check_records(path, fmt)
        raw = scan(path, fmt)
        profile = checks.check_values(raw.with_row_index(ROW), path, fmt, drop)
        if cfg["min_rating"] is not None:
            checks.check_ratings(raw, path, fmt, cfg["min_rating"], drop)
    return FileFacts(
        profile["rows"], profile["without_ids"], profile.get("min_time"), profile.get("max_time")
    )


def _selected(file: LogFile, cfg: Mapping[str, Any]) -> pl.LazyFrame:
    return steps.select_events(file.scan(cfg["format"]), cfg, first_row=file.first_row)


def _read_selected(file: LogFile, cfg: Mapping[str, Any]) -> pl.DataFrame:
    with reading(file.path, cfg["format"]):
        return _selected(file, cfg).collect(engine=PER_PART)


def _sample_users(file: LogFile, cfg: Mapping[str, Any], parts: int) -> pl.Series:
    with reading(file.path, cfg["format"]):
        return user_sample(_selected(file, cfg), SAMPLE_PER_PART * parts)


def _partition_file(
    j: int, files: Sequence[LogFile], cfg: Mapping[str, Any], bounds: pl.Series, work: Path
) -> None:
    with reading(files[j].path, cfg["format"]):
        partition(_selected(files[j], cfg), bounds, work / "raw" / str(j))


def split_by_user(
    files: Sequence[LogFile],
    cfg: Mapping[str, Any],
    parts: int,
    rows: int,
    store: Store,
    run: Any,
    stage: Stage,
) -> list[int]:
    """Run the row-wise filters into ``store``'s ``raw`` parts, each holding all events of a
    disjoint user range, and return the part numbers that hold any events.

    A single part in this process is read into memory (nothing to bound), file by file so
    that a file that fails is named; otherwise each file is streamed into the parts
    (:func:`data_prep.parts.partition`), cut at bounds sampled from every file's users, so
    no later task holds more than one part."""
    if store.in_memory:
        with stage(f"reading {rows:,} events"):
            frames = [_read_selected(file, cfg) for file in files]
            store.put("raw", 0, pl.concat(frames, rechunk=False))
        return [0] if store.get_frame("raw", 0).height else []
    with stage(f"partitioning {rows:,} events into {parts} user part(s)"):
        samples = run.map(_sample_users, files, cfg, parts)
        bounds = part_bounds(samples, parts)
        run.map(_partition_file, range(len(files)), files, cfg, bounds, store.work)
    return store.raw_parts(parts)
