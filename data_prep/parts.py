"""Where the prep job keeps the log's user parts between its stages (:mod:`data_prep.stages`).

A *part* holds ALL events of a disjoint range of users, so every per-user step can run on one
part at a time and memory is bounded by the largest part instead of the log. This module owns
the two things that make that so, apart from what the stages compute:

* :func:`partition` streams the log once into parts ``0..parts-1`` by ranges of the sorted
  distinct user ids (cut at every U/parts-th id) rather than a hash of them: equally balanced
  in users, and because user indices follow the original-id order, part k's users precede
  part k+1's (the sequences are written in user order part by part, with no global sort).
* :class:`Store` holds each stage's frame per part: scratch parquet under the job's work
  folder, or, for a job with a single part, in memory (the log is then read once, sorted once
  and never written back: the bounded-memory argument is moot for a log that fits in one part).
"""

from __future__ import annotations

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
        # queries over all parts: streamed from scratch files in bounded memory, else in memory
        self.engine = "in-memory" if in_memory else "streaming"

    def _path(self, name: str, k: int) -> Path:
        if name == "raw":
            return self.work / "raw" / f"{PART}={k}"
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
        return _scan(self._path(name, k))

    def get_frame(self, name: str, k: int) -> pl.DataFrame:
        if self.in_memory:
            return self.frames[name, k]
        return self.get(name, k).collect()

    def scan_all(self, name: str, parts: list[int]) -> pl.LazyFrame:
        if self.in_memory:
            return pl.concat([self.frames[name, k] for k in parts], rechunk=False).lazy()
        return pl.scan_parquet([self._path(name, k) for k in parts])

    def drop(self, name: str, k: int) -> None:
        """Free a part that later stages no longer read (scratch files stay until the end)."""
        self.frames.pop((name, k), None)


def _scan(path: Path) -> pl.LazyFrame:
    return pl.scan_parquet(path / "*.parquet" if path.is_dir() else path)


def partition(events: pl.LazyFrame, parts: int, folder: Path) -> None:
    """Stream the events into parts ``0..parts-1`` (``parts`` > 1) by ranges of the sorted
    distinct user ids."""
    distinct = (
        events.select(pl.col(steps.USER).unique()).sort(steps.USER).collect(engine="streaming")
    )[steps.USER]
    bounds = distinct.gather([i * distinct.len() // parts for i in range(1, parts)])
    part = pl.lit(bounds).search_sorted(pl.col(steps.USER), side="right")
    events.with_columns(part.alias(PART)).sink_parquet(
        pl.PartitionBy(folder, key=PART, include_key=False), mkdir=True, **SCRATCH
    )
