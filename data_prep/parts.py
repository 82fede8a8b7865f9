"""Where the prep job keeps the log's user parts between its stages (:mod:`data_prep.stages`).

A *part* holds ALL events of a disjoint range of users, so every per-user step can run on one
part at a time and memory is bounded by the largest part instead of the log. This module owns
the two things that make that so, apart from what the stages compute:

* :func:`partition` streams one input file into parts ``0..parts-1`` by ranges of the user ids
  (cut at the ``bounds`` that :func:`part_bounds` takes from samples of the sorted distinct
  ids) rather than a hash of them: balanced in users, and because user indices follow the
  original-id order, part k's users precede part k+1's (the sequences are written in user order
  part by part, with no global sort). The bounds decide only how the users are shared out,
  never the result.
* :class:`Store` holds each stage's frame per part: scratch parquet under the job's work
  folder, or, for a job with a single part in one process, in memory (the log is then read
  once, sorted once and never written back: the bounded-memory argument is moot for a log that
  fits in one part). Every scratch file is written whole by one task, so a task that a cluster
  reruns rewrites it.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import polars as pl

from data_prep import steps

PART = "_part"
SCRATCH = {"compression": "lz4"}  # scratch parts are read once or twice: favour speed


class Store:
    """Per-part intermediate frames by stage name: in memory, or scratch parquet under ``work``
    (``raw`` parts come from :func:`partition`'s folders)."""

    def __init__(self, work: Path, in_memory: bool):
        self.work, self.in_memory = work, in_memory
        self.frames: dict[tuple[str, int], pl.DataFrame] = {}

    def _path(self, name: str, k: int) -> Path:
        return self.work / name / f"{k}.parquet"

    def put(self, name: str, k: int, frame: pl.DataFrame) -> None:
        if self.in_memory:
            self.frames[name, k] = frame
        else:
            path = self._path(name, k)
            path.parent.mkdir(parents=True, exist_ok=True)
            frame.write_parquet(path, **SCRATCH)

    def get(self, name: str, k: int) -> pl.LazyFrame:
        if self.in_memory:
            return self.frames[name, k].lazy()
        if name == "raw":  # one folder per input file (see partition)
            pattern = self.work / "raw" / "*" / f"{PART}={k}" / "*.parquet"
            return pl.scan_parquet(pattern, hive_partitioning=False)
        return pl.scan_parquet(self._path(name, k))

    def get_frame(self, name: str, k: int) -> pl.DataFrame:
        if self.in_memory:
            return self.frames[name, k]
        return self.get(name, k).collect()

    def drop(self, name: str, k: int) -> None:
        """Free a part that later stages no longer read (scratch files stay until the end)."""
        self.frames.pop((name, k), None)

    def raw_parts(self, parts: int) -> list[int]:
        """The parts that :func:`partition` wrote events into (ranges can end up empty)."""
        written = {p.name for p in (self.work / "raw").glob(f"*/{PART}=*")}
        return [k for k in range(parts) if f"{PART}={k}" in written]


def user_sample(events: pl.LazyFrame, size: int) -> pl.Series:
    """At most ``size`` of the events' distinct user ids, evenly spaced in sorted order."""
    distinct = (
        events.select(pl.col(steps.USER).unique()).sort(steps.USER).collect(engine="streaming")
    )[steps.USER]
    if distinct.len() <= size:
        return distinct
    return distinct.gather([i * distinct.len() // size for i in range(size)])


def part_bounds(samples: list[pl.Series], parts: int) -> pl.Series:
    """The ``parts - 1`` user ids that cut the users into ranges of about equal size, from
    the files' samples (:func:`user_sample`)."""
    ids = pl.concat(samples).unique().sort()
    return ids.gather([i * ids.len() // parts for i in range(1, parts)])


def partition(events: pl.LazyFrame, bounds: pl.Series, folder: Path) -> None:
    """Stream one file's events into ``folder/_part=<k>/`` by the user ranges that ``bounds``
    cut; a rerun replaces what an earlier, failed one wrote."""
    shutil.rmtree(folder, ignore_errors=True)
    part = pl.lit(bounds).search_sorted(pl.col(steps.USER), side="right")
    events.with_columns(part.alias(PART)).sink_parquet(
        pl.PartitionBy(folder, key=PART, include_key=False), mkdir=True, **SCRATCH
    )
