"""Benchmark of the prep job (not a test): events/s and peak memory at 50M events, and the
same steps written in pandas on a smaller log for a side-by-side ratio.

``recsys-bench task=prep output=FILE.json events=50000000 pandas_events=5000000 repeats=3
workers=[1,2]``
(:mod:`recsys_seq.cli.bench` checks the options and calls :func:`run_prep_benchmark`;
``events=0`` skips the big log). This module is the harness: it generates the logs
(:mod:`~recsys_seq.bench.prep_log`), times the two jobs
(:mod:`~recsys_seq.bench.prep_jobs`) and reports the rows.

Each measured job runs in its own subprocess, which reports its wall time and its peak
resident memory (the high-water mark of that process: Polars' threads included, the generator
and the parent excluded). The big log is a folder of parquet parts, as a cluster keeps its logs;
it is prepared in one process and then on a local Dask cluster of each of ``workers`` worker
processes (``cluster=local``, the machine's cores shared out to their Polars threads), whose
rows give the largest worker's peak memory (the figure that must stay bounded as the log
grows) beside the client's; starting the cluster is not timed.

Fairness: on the small log the two engines run alternately ``repeats`` times and the medians
are compared (a shared machine is noisy). The pandas version
(:func:`recsys_seq.bench.prep_jobs.pandas_job`) is the same steps in idiomatic vectorised pandas,
with no deliberate slowness, and must write the same ``sequences``, ``items`` and ``users``
tables as the Polars job: the bench checks that before it reports a ratio. The Polars job
additionally checks the input values, hashes the input file and draws the histogram (a few
tenths of a second at 5M events), which count against it.
"""

from __future__ import annotations

import json
import os
import resource
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from recsys_seq.bench.prep_jobs import (
    check_same_output,
    check_same_prepared,
    pandas_job,
    polars_job,
)
from recsys_seq.bench.prep_log import generate_log, generate_log_folder
from recsys_seq.core import publish
from recsys_seq.core.tables import Column, print_table


def _child(engine: str, log: str, out: str, workers: int = 0) -> None:
    """Subprocess entry: run one job, print its counts, seconds and peak RSS as JSON (with
    ``workers``, on a local Dask cluster of that many workers, and their largest peak)."""
    if engine == "polars":  # imports are not the job's work
        import matplotlib.figure  # noqa: F401

        import data_prep.prep  # noqa: F401
    else:
        import pandas  # noqa: F401
    if not workers:
        start = time.perf_counter()
        counts = (polars_job if engine == "polars" else pandas_job)(log, out)
        seconds, worker_peak = time.perf_counter() - start, None
    else:
        from distributed import Client

        from data_prep.cluster import local_cluster

        threads = max(1, (os.cpu_count() or 1) // workers)
        options = {"workers": workers, "threads_per_worker": threads, "memory_per_worker": None}
        with local_cluster(options) as running, Client(running) as client:
            start = time.perf_counter()
            counts = polars_job(log, out, cluster=running.scheduler_address)
            seconds = time.perf_counter() - start
            worker_peak = max(client.run(_own_peak_mb).values())
    print(json.dumps({**counts, "seconds": seconds, **_peaks(_own_peak_mb(), worker_peak)}))


def _own_peak_mb() -> float:
    """This process's peak resident memory: Linux's ``VmHWM``, which starts afresh at exec
    (``ru_maxrss`` keeps the forking parent's size, e.g. the harness's after comparing two
    outputs); ``ru_maxrss`` elsewhere."""
    status = Path("/proc/self/status")
    if status.is_file():
        for line in status.read_text().splitlines():
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) / 1024  # kB
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # KiB on Linux


def _peaks(own: float, worker: float | None) -> dict[str, float]:
    if worker is None:
        return {"peak_rss_mb": own}
    return {"peak_rss_mb": worker, "client_peak_rss_mb": own}


def measure(engine: str, log: Path, events: int, out: Path, workers: int = 0) -> dict[str, Any]:
    code = (
        f"from recsys_seq.bench.prep import _child; "
        f"_child({engine!r}, {str(log)!r}, {str(out)!r}, {workers})"
    )
    res = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    if res.returncode != 0:
        raise RuntimeError(f"{engine} job failed:\n{res.stderr[-3000:]}")
    row = json.loads(res.stdout.strip().splitlines()[-1])
    return {
        "engine": f"dask, {workers} worker{'s' if workers > 1 else ''}" if workers else engine,
        "workers": workers,
        "input_events": events,
        **row,
        "events_per_s": events / row["seconds"],
    }


def run_prep_benchmark(
    events: int = 50_000_000,
    pandas_events: int = 2_000_000,
    output: str | None = None,
    repeats: int = 1,
    workers: list[int] | None = None,
) -> list[dict[str, Any]]:
    """Generate the logs, run the jobs, print a table, write JSON rows to ``output``.

    Returns one row per measurement and, per engine and log, a ``median`` row (the ratio is
    the ratio of the small log's median events/s).

    Args:
        workers: the local Dask clusters the big log is also prepared on, by worker count
            (None: 1 and 2; ``[]``: none).
    """
    rows = []
    with tempfile.TemporaryDirectory(prefix="recsys-prep-bench-") as tmp:
        tmp = Path(tmp)
        small = generate_log(tmp / "small.parquet", pandas_events, seed=1)
        for repeat in range(repeats):
            for engine in ("polars", "pandas"):
                out = tmp / f"out-{engine}-small-{repeat}"
                rows.append({**measure(engine, small, pandas_events, out), "repeat": repeat})
            if repeat == 0:
                check_same_output(tmp / "out-polars-small-0", tmp / "out-pandas-small-0")
        medians = [_median([r for r in rows if r["engine"] == e]) for e in ("polars", "pandas")]
        if events:
            start = time.perf_counter()
            big = generate_log_folder(tmp / "big", events, seed=0)
            generated = time.perf_counter() - start
            for count in [0, *([1, 2] if workers is None else workers)]:
                out = tmp / f"out-polars-big-{count}"
                big_row = measure("polars", big, events, out, workers=count)
                rows.append({**big_row, "repeat": 0, "generate_seconds": generated})
                medians.append({**rows[-1], "repeat": "median"})
                if count:  # the same tables as in one process, before a figure is reported
                    check_same_prepared(tmp / "out-polars-big-0", out)
                    shutil.rmtree(out)
    rows += medians
    ratio = medians[0]["events_per_s"] / medians[1]["events_per_s"]
    for row in rows:
        row["polars_vs_pandas_same_log"] = ratio
    _print(rows)
    if output:
        publish.write_rows(output, rows, "prep")
    return rows


def _median(rows: list[dict[str, Any]]) -> dict[str, Any]:
    """The median run (by seconds) of one engine on one log; peak RSS is the largest."""
    ordered = sorted(rows, key=lambda r: r["seconds"])
    return {
        **ordered[(len(ordered) - 1) // 2],
        "repeat": "median",
        "runs_seconds": [round(r["seconds"], 2) for r in rows],
        "peak_rss_mb": max(r["peak_rss_mb"] for r in rows),
    }


def _print(rows: list[dict[str, Any]]) -> None:
    headings = ["engine", "run", "input events", "kept events", "users", "items", "s"]
    tail = ["events/s", "peak RSS (per worker)", "client RSS"]
    columns = [Column(h, right=True) for h in [*headings, *tail]]
    cells = [
        [
            r["engine"],
            str(r["repeat"]),
            f"{r['input_events']:,}",
            f"{r['events']:,}",
            f"{r['users']:,}",
            f"{r['items']:,}",
            f"{r['seconds']:.1f}",
            f"{r['events_per_s']:,.0f}",
            f"{r['peak_rss_mb']:,.0f} MB",
            f"{r['client_peak_rss_mb']:,.0f} MB" if "client_peak_rss_mb" in r else "",
        ]
        for r in rows
    ]
    title = "recsys-prep benchmark (same steps: dedup, 5-core, max_len 200, LOO)"
    print_table(columns, cells, title)
    print(
        f"polars / pandas median events/s on the same {rows[0]['input_events']:,}-event log: "
        f"{rows[0]['polars_vs_pandas_same_log']:.1f}x"
    )
