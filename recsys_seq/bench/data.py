"""Benchmark of the training data loaders (not a test): what each DDP rank pays, in start-up
time and memory, with ``data.loader=memory`` (every rank decodes the prepared folder into
private arrays) and ``data.loader=mapped`` (every rank maps one shared cache of them).

``recsys-bench task=data events=[2000000,20000000] ranks=[1,2] output=FILE.json``

For each ``events`` count a synthetic click log (:mod:`~recsys_seq.bench.prep_log`) is
prepared with recsys-prep's benchmark job (:data:`~recsys_seq.bench.prep_jobs.JOB`), once:
the prepared folder is kept under ``cache`` (``outputs/bench/data/events-<n>``) for reruns.
For the mapped loader the array cache is then built afresh in this process, as Lightning's
``prepare_data`` builds it once per node (``prepare_s``). Each row starts ``ranks``
processes at once, each a fresh interpreter that imports the project, builds the datamodule
and iterates its shard of the training batches (all of one epoch, or ``steps``), as a DDP rank
of that world size would; no model runs.

Columns (each the largest over the row's ranks): ``setup_s``, datamodule built to first batch
in hand; ``rank_rss_growth_mb``, peak resident memory (``VmHWM``) beyond the interpreter after
its imports, which counts the mapped pages a rank touched although every rank shares them;
``rank_private_mb``, the rank's private memory after the epoch beyond the same baseline:
``Anonymous`` of ``/proc/self/smaps_rollup``, the pages no file backs (the decoded arrays,
the windows, the batches), which are multiplied by the ranks of a node and are the figure
the goal reads. The ``Private_*`` fields would mislead here: they count the file pages that
only this process maps at that moment (a lone rank, or one whose sibling has exited) and,
while the freshly built ``.npy`` files are not yet written back, count them as dirty; all of
that is page cache, shared with every rank that maps it, and reclaimable. ``arrays_mb`` is the
flat arrays' size (the ``.npy`` files), the same for both loaders.
"""

from __future__ import annotations

import itertools
import json
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from data_prep import schema
from recsys_seq.bench.prep import _own_peak_mb
from recsys_seq.bench.prep_jobs import polars_job
from recsys_seq.bench.prep_log import generate_log
from recsys_seq.bench.report import print_rows, write_rows

LOADERS = ("memory", "mapped")
DEFAULT_CACHE = "outputs/bench/data"


def _memory_mb() -> tuple[float, float]:
    """This process's resident and anonymous (private) memory now, in MB (``smaps_rollup``)."""
    fields = {}
    for line in Path("/proc/self/smaps_rollup").read_text().splitlines()[1:]:
        name, value = line.split(":", 1)
        fields[name] = int(value.split()[0]) / 1024  # kB
    return fields["Rss"], fields["Anonymous"]


def _rank(
    path: str, loader: str, cache: str, world: int, rank: int, steps: int | None, batch: int
) -> None:
    """Subprocess entry: one rank's start-up and shard of an epoch, printed as JSON."""
    from recsys_seq.data import SequenceDataModule, Stage

    base_rss, base_private = _memory_mb()  # the interpreter after its imports
    start = time.perf_counter()
    datamodule = SequenceDataModule(path, loader=loader, array_cache=cache, batch_size=batch)
    batches = iter(datamodule.dataloader(Stage.TRAIN, num_replicas=world, rank=rank))
    next(batches)
    setup = time.perf_counter() - start
    count = 1 + sum(1 for _ in itertools.islice(batches, None if steps is None else steps - 1))
    private = _memory_mb()[1]
    row = {
        "setup_s": setup,
        "epoch_s": time.perf_counter() - start - setup,
        "batches": count,
        "rank_rss_growth_mb": _own_peak_mb() - base_rss,
        "rank_private_mb": private - base_private,
    }
    print(json.dumps(row))


def _ranks(path: Path, loader: str, cache: Path, world: int, steps: int | None, batch: int):
    """Start ``world`` rank processes at once and return their rows."""
    procs = [
        subprocess.Popen(
            [
                sys.executable,
                "-c",
                "from recsys_seq.bench.data import _rank; "
                f"_rank({str(path)!r}, {loader!r}, {str(cache)!r}, {world}, {rank}, {steps}, "
                f"{batch})",
            ],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for rank in range(world)
    ]
    rows = []
    for proc in procs:
        out, err = proc.communicate()
        if proc.returncode != 0:
            raise RuntimeError(f"a {loader} rank failed:\n{err[-3000:]}")
        rows.append(json.loads(out.strip().splitlines()[-1]))
    return rows


def prepared_log(events: int, cache: Path) -> Path:
    """The prepared folder of the ``events``-event synthetic log, made on first use (its
    publish is atomic, so a folder with meta.json is complete)."""
    folder = cache / f"events-{events}"
    if not (folder / schema.META_FILE).is_file():
        with tempfile.TemporaryDirectory(prefix="recsys-data-bench-") as tmp:
            log = generate_log(Path(tmp) / "log.parquet", events, seed=0)
            polars_job(str(log), str(folder))
    return folder


def build_arrays(folder: Path, arrays: Path) -> tuple[float, float]:
    """Build the array cache into the empty folder ``arrays`` (seconds) and return its size
    in MB."""
    from recsys_seq.data import SequenceDataModule

    start = time.perf_counter()
    SequenceDataModule(folder, loader="mapped", array_cache=str(arrays)).prepare_data()
    seconds = time.perf_counter() - start
    size = sum(f.stat().st_size for f in arrays.glob("*/*.npy"))
    return seconds, size / 2**20


def run(
    events: list[int] | None = None,
    ranks: list[int] | None = None,
    steps: int | None = None,
    batch_size: int = 128,
    cache: str | None = None,
    output: str | None = None,
) -> list[dict[str, Any]]:
    """Measure both loaders at every ``events`` x ``ranks``; print a table, write JSON rows.

    Args:
        events: synthetic log sizes (input events, before recsys-prep's 5-core and 200
            events per user); default 2M.
        ranks: processes per row (the ranks of one node); default 1 and 2.
        steps: training batches per rank; None: its whole shard of one epoch.
        batch_size: windows per batch (max_len 50, the default).
        cache: where the prepared logs and the array caches are kept.
    """
    root = Path(cache or DEFAULT_CACHE)
    rows = []
    for count in events or [2_000_000]:
        folder = prepared_log(count, root)
        # a folder of its own, made here, so removing it can never take a user's files
        arrays = Path(tempfile.mkdtemp(prefix=".bench-arrays-", dir=root))
        try:
            prepare_s, arrays_mb = build_arrays(folder, arrays)
            measured_rows = [
                (loader, world, _ranks(folder, loader, arrays, world, steps, batch_size))
                for loader, world in itertools.product(LOADERS, ranks or [1, 2])
            ]
        finally:
            shutil.rmtree(arrays, ignore_errors=True)
        kept = json.loads((folder / schema.META_FILE).read_text())["events"]
        for loader, world, measured in measured_rows:
            rows.append(
                {
                    "loader": loader,
                    "events": count,
                    "kept_events": kept,
                    "ranks": world,
                    **{key: max(r[key] for r in measured) for key in measured[0]},
                    "arrays_mb": arrays_mb,
                    "prepare_s": prepare_s if loader == "mapped" else 0.0,
                }
            )
    print_rows(rows, "Training data per rank: memory vs mapped arrays (largest rank)")
    if output:
        write_rows(rows, output, "data")
    return rows
