"""The loss step at any catalogue size: dense logits against chunked, and the sampled pools.

One forward and backward step of the full-catalogue cross-entropy on synthetic states
``(rows, dim)`` (``rows`` stands for ``batch x window``, e.g. 128 x 50) and a random item table
``(items + 1, dim)``, for each catalogue size, method and precision:

* ``plain``: today's dense path, the ``(rows, items + 1)`` logits and ``F.cross_entropy``;
* ``chunked``: :func:`~recsys_seq.models.chunked_ce.chunked_cross_entropy`, blocks of
  ``row_chunk_size x chunk_size`` logits;
* ``compiled``: the plain path through ``torch.compile``;
* ``in_batch``, ``mixed``: :class:`~recsys_seq.models.sampled_losses.SampledSoftmaxLoss` over the
  step's own targets (plus ``POOLED["mixed"]`` uniform items for ``mixed``), with the log-Q
  correction from Zipf-like training counts: the estimate of the full softmax whose cost
  does not grow with the catalogue.

Each configuration takes one warm-up step first (for ``compiled``, the compilation), reported
as ``first_step_s`` and kept out of the figures.

Every configuration runs in a fresh process, so one cannot inherit another's memory and a
failure (out of memory, a compiler missing) is that row's note, not the end of the run.
Peak memory is the step's own growth: on CUDA ``torch.cuda.max_memory_allocated`` above what
was allocated before the step; on CPU the growth of the process's peak resident set
(``VmHWM``, reset before each step through ``/proc/self/clear_refs``) above its resident set
before the step, with glibc told to return every block of 64 KiB or more to the system when
freed (``MALLOC_MMAP_THRESHOLD_``) so that a step cannot hide its peak in memory an earlier
step left cached. A configuration whose estimated peak exceeds ``max_gb`` is not run; its row
says the estimate.

    recsys-bench task=loss output=outputs/bench/loss.json threads=1
    recsys-bench task=loss items=[1000000] rows=1024 methods=[chunked] repeats=1
"""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
import time
from contextlib import nullcontext
from types import SimpleNamespace

import torch
import torch.nn.functional as F

from recsys_seq.bench.report import check_names, print_rows, write_rows
from recsys_seq.core.errors import UserError
from recsys_seq.data.batch import IGNORE_INDEX
from recsys_seq.models.chunked_ce import chunked_cross_entropy
from recsys_seq.models.sampled_losses import SampledSoftmaxLoss
from recsys_seq.models.scorers import with_pad_at_minimum

METHODS = ("plain", "chunked", "compiled", "in_batch", "mixed")
POOLED = {"in_batch": 0, "mixed": 256}  # drawn negatives of each pooled method
PRECISIONS = {"fp32": None, "bf16": torch.bfloat16}
ITEMS = (12_000, 54_000, 1_000_000)
DENSE_COPIES = 4  # (rows, N + 1) float32 blocks at the dense peak (measured: 2.9, fp32 and bf16)


def estimated_bytes(method: str, items: int, rows: int, dim: int, block: int) -> int:
    """A generous estimate of a step's peak: the dense logits' copies, or for the chunked
    loss a few blocks, plus the table, its gradient and the states (float32)."""
    tables = 4 * (3 * (items + 1) * dim + 3 * rows * dim)
    if method == "chunked":
        return tables + 4 * 4 * block
    if method in POOLED:
        return tables + 4 * DENSE_COPIES * rows * (rows + POOLED[method])
    return tables + 4 * DENSE_COPIES * rows * (items + 1)


def run(
    items: list[int] | None = None,
    rows: int = 6400,
    dim: int = 64,
    methods: list[str] | None = None,
    precisions: list[str] | None = None,
    chunk_size: int = 1024,
    row_chunk_size: int = 1024,
    repeats: int = 3,
    device: str = "cuda" if torch.cuda.is_available() else "cpu",
    threads: int | None = None,
    max_gb: float = 6.0,
    output: str | None = None,
) -> list[dict]:
    """Measure every (items, method, precision); print and return one row each.

    Args:
        items: catalogue sizes N (None: :data:`ITEMS`).
        rows: scored positions per step (batch x window).
        dim: D, the width of states and item vectors.
        methods, precisions: subsets of :data:`METHODS` and :data:`PRECISIONS` (None: all).
        chunk_size, row_chunk_size: the chunked loss's block (items, positions; 0 positions:
            all of them).
        repeats: timed steps per row; the row's time is their median.
        device: ``cpu``, ``cuda``, ``cuda:1``, ...
        threads: CPU threads per configuration (None: torch's default).
        max_gb: configurations estimated to need more are skipped, with the estimate.
    """
    items = items or list(ITEMS)
    methods, precisions = methods or list(METHODS), precisions or list(PRECISIONS)
    check_names("method", methods, METHODS)
    check_names("precision", precisions, PRECISIONS)
    if chunk_size < 1 or row_chunk_size < 0 or rows < 1 or dim < 1 or repeats < 1:
        raise UserError(
            "chunk_size, rows, dim and repeats must be >= 1 and row_chunk_size >= 0, got "
            f"{chunk_size}, {rows}, {dim}, {repeats} and {row_chunk_size}."
        )
    row_chunk_size = row_chunk_size or None
    block = min(rows, row_chunk_size or rows) * chunk_size
    rows_out = []
    for n in items:
        for precision in precisions:
            for method in methods:
                config = {
                    "items": n, "rows": rows, "dim": dim, "method": method,
                    "precision": precision, "chunk_size": chunk_size,
                    "row_chunk_size": row_chunk_size, "repeats": repeats, "device": device,
                    "threads": threads,
                }  # fmt: skip
                estimate = estimated_bytes(method, n, rows, dim, block)
                if estimate > max_gb * 1e9:
                    figures = {"note": f"skipped: needs ~{estimate / 1e9:.1f} GB > max_gb={max_gb}"}
                else:
                    figures = _in_fresh_process(config)
                rows_out.append(_row(config, figures))
                print(", ".join(f"{k}={v}" for k, v in figures.items()), config, flush=True)
    _compare_with_plain(rows_out)
    shown = [{k: "-" if v is None else v for k, v in row.items()} for row in rows_out]
    print_rows(shown, title=f"loss step on {_device_name(device)}")
    if output:
        write_rows(rows_out, output, "loss")
    return rows_out


def _row(config: dict, figures: dict) -> dict:
    return {
        "items": config["items"],
        "rows": config["rows"],
        "method": config["method"],
        "precision": config["precision"],
        "step_s": figures.get("step_s"),
        "peak_mb": figures.get("peak_mb"),
        "time_vs_plain": None,
        "memory_vs_plain": None,
        "first_step_s": figures.get("first_step_s"),
        "note": figures.get("note", ""),
    }


def _compare_with_plain(rows: list[dict]) -> None:
    """``time_vs_plain``, ``memory_vs_plain``: plain's figure over this row's (2.0: half;
    None where there is nothing to divide by)."""
    plain = {(r["items"], r["precision"]): r for r in rows if r["method"] == "plain"}
    for row in rows:
        base = plain.get((row["items"], row["precision"]))
        if base is None or row is base or row["step_s"] is None or base["step_s"] is None:
            continue
        row["time_vs_plain"] = base["step_s"] / row["step_s"]
        if row["peak_mb"] > 0:  # a tiny step may not grow the resident set by one page
            row["memory_vs_plain"] = base["peak_mb"] / row["peak_mb"]


def _in_fresh_process(config: dict) -> dict:
    env = {**os.environ, "MALLOC_MMAP_THRESHOLD_": "65536"}
    done = subprocess.run(
        [sys.executable, "-m", "recsys_seq.bench.loss", json.dumps(config)],
        capture_output=True,
        text=True,
        env=env,
    )
    if done.returncode != 0:
        last = (done.stderr.strip().splitlines() or [f"exit code {done.returncode}"])[-1]
        return {"note": f"failed: {last[:160]}"}
    return json.loads(done.stdout.strip().splitlines()[-1])


def _device_name(device: str) -> str:
    return torch.cuda.get_device_name(device) if device.startswith("cuda") else "cpu"


def _dense(hidden: torch.Tensor, items: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
    logits = with_pad_at_minimum(hidden @ items.T)  # (rows, N + 1)
    return F.cross_entropy(logits, targets, ignore_index=IGNORE_INDEX)


def _pooled(method: str, items: int, device: str):
    """The sampled softmax over the step's targets (and uniform draws), as ``loss(h, w, t)``."""
    counts = (1.0 / torch.arange(1, items + 2)).numpy()  # Zipf-like popularity, PAD's ignored
    loss = SampledSoftmaxLoss(POOLED[method], "uniform", in_batch=True, item_counts=counts)
    loss = loss.to(device)

    def loss_fn(h: torch.Tensor, w: torch.Tensor, t: torch.Tensor) -> torch.Tensor:
        return loss(h[None], {"targets": t[None]}, SimpleNamespace(item_table=w))

    return loss_fn


def measure(config: dict) -> dict:
    """One configuration's figures, in this process (see :func:`_in_fresh_process`)."""
    if config["threads"]:
        torch.set_num_threads(config["threads"])
    device, n, rows, dim = config["device"], config["items"], config["rows"], config["dim"]
    torch.manual_seed(0)
    hidden = torch.randn(rows, dim, device=device, requires_grad=True)
    items = (torch.randn(n + 1, dim, device=device) * dim**-0.5).requires_grad_()
    targets = torch.randint(1, n + 1, (rows,), device=device)
    targets[::10] = IGNORE_INDEX  # some padding, as in a real batch
    if config["method"] == "chunked":

        def loss_fn(h, w, t):
            return chunked_cross_entropy(h, w, t, config["chunk_size"], config["row_chunk_size"])

    elif config["method"] in POOLED:
        loss_fn = _pooled(config["method"], n, device)
    else:
        loss_fn = torch.compile(_dense) if config["method"] == "compiled" else _dense
    dtype = PRECISIONS[config["precision"]]
    autocast = torch.autocast(device.split(":")[0], dtype=dtype) if dtype else nullcontext()

    def step() -> None:
        with autocast:
            loss = loss_fn(hidden, items, targets)
        loss.backward()
        hidden.grad = items.grad = None
        _synchronize(device)

    start = time.perf_counter()
    step()  # warm-up: compilation, first-touch pages, lazily loaded kernels
    first_step_s = time.perf_counter() - start
    times, peaks = [], []
    for _ in range(config["repeats"]):
        before = _reset_peak(device)
        start = time.perf_counter()
        step()
        times.append(time.perf_counter() - start)
        peaks.append(_peak(device) - before)
    return {
        "step_s": statistics.median(times),
        "peak_mb": max(peaks) / 2**20,
        "first_step_s": first_step_s,
    }


def _synchronize(device: str) -> None:
    if device.startswith("cuda"):
        torch.cuda.synchronize(device)


def _reset_peak(device: str) -> int:
    """Start a new peak; what is in use now (bytes)."""
    if device.startswith("cuda"):
        torch.cuda.reset_peak_memory_stats(device)
        return torch.cuda.memory_allocated(device)
    with open("/proc/self/clear_refs", "w") as f:
        f.write("5")  # resets VmHWM to the current resident set
    return _status_bytes("VmRSS")


def _peak(device: str) -> int:
    if device.startswith("cuda"):
        return torch.cuda.max_memory_allocated(device)
    return _status_bytes("VmHWM")


def _status_bytes(key: str) -> int:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith(key + ":"):
                return int(line.split()[1]) * 1024  # kB
    raise RuntimeError(f"/proc/self/status has no {key}")


if __name__ == "__main__":  # one configuration, in the fresh process _in_fresh_process starts
    print(json.dumps(measure(json.loads(sys.argv[1]))))
