"""Training throughput per encoder and precision, and how long steps wait for data.

For each model (sasrec, gru, din) and precision (fp32, bf16 autocast), a model is built through
the real ``conf/`` (so the figures describe what ``recsys-train`` runs) and trained for a fixed
number of steps on one dataset's token-budget batches. Reported per row: ``sequences_per_s``,
``tokens_per_s`` (real events), and ``data_wait_share``, the fraction of wall time spent
waiting for the next batch. Device work is synchronised only at the end of the timed window,
so the figures include no per-step host-device sync.

With ``ranks`` above 1 the row is a DistributedDataParallel job of that many processes on this
node (one GPU each, NCCL; gloo on CPU), each training its share of the batches (the
distributed bucket sampler, as ``recsys-train``): throughput is every rank's work over the
slowest rank's time, and the data-wait share the largest rank's. On a node with several GPUs
the default rows are 1 rank and all of them, which shows how the step scales.

    recsys-bench task=throughput dataset=bert4rec_beauty device=cuda output=outputs/bench/gpu.json
"""

from __future__ import annotations

import gc
import tempfile
import time
from contextlib import nullcontext
from pathlib import Path

import torch
import torch.distributed as dist
import torch.multiprocessing as mp
from torch import nn
from torch.nn.parallel import DistributedDataParallel

from recsys_seq import configs
from recsys_seq.bench.report import check_names, print_rows, write_rows
from recsys_seq.core.errors import UserError
from recsys_seq.data import SequenceDataModule
from recsys_seq.data.shared import by_name, prepared
from recsys_seq.models import build_model

PRECISIONS = {"fp32": None, "bf16": torch.bfloat16}
MODELS = ("sasrec", "gru", "din")


def build(model_name: str, datamodule: SequenceDataModule, device: str):
    cfg = configs.compose_train([f"model={model_name}", f"data.max_len={datamodule.max_len}"])
    spec = configs.spec_for_data(configs.model_values(cfg), datamodule)
    model = build_model(spec, datamodule.facts())
    model.log = lambda *args, **kwargs: None  # no Trainer: measure the step itself
    return model.to(device).train()


class TrainingStep(nn.Module):
    """A task's ``training_step`` as ``forward``, so DistributedDataParallel sees the step
    it wraps (its gradient hooks are armed in ``forward``)."""

    def __init__(self, task: nn.Module) -> None:
        super().__init__()
        self.task = task

    def forward(self, batch: dict[str, torch.Tensor], index: int) -> torch.Tensor:
        return self.task.training_step(batch, index)


def measure(step: nn.Module, loader, device: str, precision: str, steps: int) -> dict:
    """Train ``step`` for ``steps`` timed steps (after two warm-up ones); the figures of this
    process: ``sequences``, ``tokens``, ``elapsed_s``, ``waited_s``."""
    optimizer = torch.optim.AdamW(step.parameters(), lr=1e-3)
    autocast = (
        torch.autocast(device_type=device.split(":")[0], dtype=PRECISIONS[precision])
        if PRECISIONS[precision]
        else nullcontext()
    )
    batches = iter(loader)
    sequences = 0
    tokens = torch.zeros((), dtype=torch.long, device=device)
    waited = 0.0
    for index in range(steps + 2):  # two warm-up steps
        if index == 2:
            if device.startswith("cuda"):
                torch.cuda.synchronize()
            start, sequences, waited = time.perf_counter(), 0, 0.0
            tokens.zero_()
        fetch = time.perf_counter()
        try:
            batch = next(batches)
        except StopIteration:
            batches = iter(loader)
            batch = next(batches)
        batch = {k: v.to(device, non_blocking=True) for k, v in batch.items()}
        waited += time.perf_counter() - fetch
        with autocast:
            loss = step(batch, index)
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        optimizer.step()
        sequences += batch["items"].shape[0]
        tokens += batch["mask"].sum()  # stays on the device: no sync per step
    if device.startswith("cuda"):
        torch.cuda.synchronize()
    elapsed = time.perf_counter() - start
    return {"sequences": sequences, "tokens": int(tokens), "elapsed_s": elapsed, "waited_s": waited}


def rates(sequences: float, tokens: float, elapsed: float, wait_share: float) -> dict:
    return {
        "sequences_per_s": sequences / elapsed,
        "tokens_per_s": tokens / elapsed,
        "data_wait_share": wait_share,
    }


def datamodule_for(dataset: str, cache: str, max_tokens: int, num_workers: int, device: str):
    info = by_name(dataset)
    return SequenceDataModule(
        prepared(info, Path(cache)),
        max_len=info.max_len,
        max_tokens=max_tokens,
        num_workers=num_workers,
        pin_memory=device.startswith("cuda"),
        persistent_workers=num_workers > 0,
    )


def _train_share(rank: int, world: int, device: str, job: dict) -> dict:
    """This rank's shard of the batches through the DDP-wrapped step: :func:`measure`'s
    figures. Everything DDP holds dies with this frame."""
    datamodule = datamodule_for(
        job["dataset"], job["cache"], job["max_tokens"], job["num_workers"], device
    )
    loader = datamodule.dataloader("train", num_replicas=world, rank=rank)
    task = build(job["model"], datamodule, device)
    cuda = device.startswith("cuda")
    step = DistributedDataParallel(TrainingStep(task), device_ids=[rank] if cuda else None)
    return measure(step, loader, device, job["precision"], job["steps"])


def _rank(rank: int, world: int, store: str, job: dict, results) -> None:
    """One process of a DDP row: :func:`_train_share`, then the figures of all ranks merged."""
    cuda = job["device"].startswith("cuda")
    device = f"cuda:{rank}" if cuda else "cpu"
    if cuda:
        torch.cuda.set_device(rank)
    else:
        torch.set_num_threads(max(1, torch.get_num_threads() // world))
    dist.init_process_group(
        "nccl" if cuda else "gloo", init_method=f"file://{store}", rank=rank, world_size=world
    )
    try:
        mine = _train_share(rank, world, device, job)
        # DDP's reducer holds the process group from C++ and, freed, drops it without releasing
        # the GIL; were it the last holder, the group's destructor would wait for gloo workers
        # that need the GIL to free their tensors: a deadlock. Freed now, while the group is
        # still registered, it is never the last holder.
        gc.collect()
        sums = torch.tensor([mine["sequences"], mine["tokens"]], dtype=torch.float64)
        slowest = torch.tensor([mine["elapsed_s"], mine["waited_s"] / mine["elapsed_s"]])
        sums, slowest = sums.to(device), slowest.to(device)
        dist.all_reduce(sums)
        dist.all_reduce(slowest, op=dist.ReduceOp.MAX)
        if rank == 0:
            results.put(rates(*sums.tolist(), *slowest.tolist()))
    finally:
        dist.destroy_process_group()


def measure_ranks(world: int, job: dict) -> dict:
    """A DDP row of ``world`` processes on this node (:func:`_rank`)."""
    context = mp.get_context("spawn")
    results = context.SimpleQueue()
    with tempfile.TemporaryDirectory() as folder:
        store = str(Path(folder) / "store")
        mp.start_processes(
            _rank, args=(world, store, job, results), nprocs=world, start_method="spawn"
        )
    return results.get()


def default_ranks(device: str) -> list[int]:
    """One rank, and every GPU of the node when it has several."""
    gpus = torch.cuda.device_count() if device.startswith("cuda") else 1
    return [1, gpus] if gpus > 1 else [1]


def check_ranks(ranks: list[int], device: str) -> None:
    if any(world < 1 for world in ranks):
        raise UserError(f"ranks must be whole numbers >= 1, got {ranks}.")
    if device.startswith("cuda"):
        gpus = torch.cuda.device_count()
        if max(ranks) > gpus:
            raise UserError(
                f"ranks={ranks} needs {max(ranks)} GPUs (one per rank); this node has {gpus}."
            )


def run(
    dataset: str = "bert4rec_beauty",
    device: str = "cuda" if torch.cuda.is_available() else "cpu",
    models: list[str] | None = None,
    precisions: list[str] | None = None,
    max_tokens: int = 16384,
    steps: int = 30,
    num_workers: int = 2,
    cache: str = "data/prepared",
    ranks: list[int] | None = None,
    output: str | None = None,
) -> list[dict]:
    """Train each of ``models`` (None: :data:`MODELS`) in each of ``precisions`` (None: all of
    :data:`PRECISIONS`) on each number of ``ranks`` (None: :func:`default_ranks`) for
    ``steps`` steps on ``dataset``; print and return one row each."""
    models, precisions = models or list(MODELS), precisions or list(PRECISIONS)
    ranks = ranks or default_ranks(device)
    check_names("model", models, MODELS)
    check_names("precision", precisions, PRECISIONS)
    check_ranks(ranks, device)
    datamodule = datamodule_for(dataset, cache, max_tokens, num_workers, device)
    loader = datamodule.dataloader("train", num_replicas=1, rank=0)
    name = torch.cuda.get_device_name() if device.startswith("cuda") else "cpu"
    rows = []
    for world in ranks:
        for model_name in models:
            for precision in precisions:
                if world == 1:
                    step = TrainingStep(build(model_name, datamodule, device))
                    mine = measure(step, loader, device, precision, steps)
                    figures = rates(
                        mine["sequences"],
                        mine["tokens"],
                        mine["elapsed_s"],
                        mine["waited_s"] / mine["elapsed_s"],
                    )
                else:
                    job = {
                        "dataset": dataset,
                        "cache": cache,
                        "max_tokens": max_tokens,
                        "num_workers": num_workers,
                        "device": device,
                        "model": model_name,
                        "precision": precision,
                        "steps": steps,
                    }
                    figures = measure_ranks(world, job)
                rows.append(
                    {
                        "dataset": dataset,
                        "device": name,
                        "ranks": world,
                        "model": model_name,
                        "precision": precision,
                        "max_tokens": max_tokens,
                        **figures,
                    }
                )
                print(", ".join(f"{k}={v}" for k, v in rows[-1].items()), flush=True)
    print_rows(rows, title=f"training throughput on {name}")
    if output:
        write_rows(rows, output, "throughput")
    return rows
