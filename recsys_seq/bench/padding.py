"""How much of each batch is padding, and what that costs a training step.

For every dataset and batching strategy, one training epoch of windows is batched and
measured:

* ``padding_efficiency``: real tokens / tensor slots over the epoch,
* ``batches_per_s``: the DataLoader alone (gather + collate, one process),
* ``sequences_per_s`` / ``tokens_per_s``: self-attention training steps (forward, full-softmax
  loss, backward, AdamW) over a sample of the epoch's batches, counting real windows/targets,
* ``loader_share``: loader time / (loader + step time).

Strategies: ``fixed_max_len`` pads every batch to the global max_len (what RecBole and
SASRec.pytorch do), ``random_dynamic`` pads random batches to their own longest, ``bucketed``
uses :class:`BucketBatchSampler` with a fixed batch size, ``bucketed_token_budget`` with a
token budget of ``batch_size x mean window length``: batches of the same average size as the
others but a constant amount of work per step (short windows come in large batches, long ones
in small batches).
"""

from __future__ import annotations

import time
from collections.abc import Iterable
from pathlib import Path

import torch
from torch.utils.data import BatchSampler, DataLoader, RandomSampler

from recsys_seq.bench.report import check_names, print_rows, write_rows
from recsys_seq.data import (
    BucketBatchSampler,
    PaddedBatchCollator,
    SequenceDataModule,
    WindowDataset,
)
from recsys_seq.data.shared import SHARED_DATASETS, prepared
from recsys_seq.models import build_model, model_spec

STRATEGIES = ("fixed_max_len", "random_dynamic", "bucketed", "bucketed_token_budget")


def loader(
    dataset: WindowDataset, strategy: str, batch_size: int, boundaries: list[int] | None, seed: int
) -> DataLoader:
    """``boundaries``: the buckets the datamodule uses (None: the sampler's own)."""
    generator = torch.Generator().manual_seed(seed)
    random_batches = BatchSampler(RandomSampler(dataset, generator=generator), batch_size, False)
    budget = int(batch_size * dataset.lengths.mean())
    samplers = {
        "fixed_max_len": random_batches,
        "random_dynamic": random_batches,
        "bucketed": BucketBatchSampler(
            dataset.lengths, batch_size=batch_size, boundaries=boundaries, seed=seed
        ),
        "bucketed_token_budget": BucketBatchSampler(
            dataset.lengths, max_tokens=budget, boundaries=boundaries, seed=seed
        ),
    }
    pad_to = dataset.max_len if strategy == "fixed_max_len" else None
    return DataLoader(
        dataset, batch_sampler=samplers[strategy], collate_fn=PaddedBatchCollator(pad_to)
    )


def train_step_rate(
    batches: list[dict[str, torch.Tensor]], num_items: int, max_len: int, budget_s: float
) -> tuple[float, float, float]:
    """Sequences/s, real tokens/s and seconds per step of SASRec training on ``batches``."""
    torch.manual_seed(0)
    encoder = {"name": "self_attention", "max_len": max_len, "num_layers": 2, "num_heads": 2}
    spec = model_spec({"name": "sasrec", "encoder": encoder, "num_items": num_items})
    model = build_model(spec)
    model.log = lambda *args, **kwargs: None  # no Trainer here: measure the step itself
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)

    def step(batch):
        optimizer.zero_grad(set_to_none=True)
        model.training_step(batch, 0).backward()
        optimizer.step()

    for batch in batches[:2]:  # warm-up
        step(batch)
    sequences = tokens = steps = 0
    start = time.perf_counter()
    for batch in batches[2:]:
        step(batch)
        sequences += batch["items"].shape[0]
        tokens += int(batch["lengths"].sum())
        steps += 1
        if time.perf_counter() - start > budget_s:
            break
    elapsed = time.perf_counter() - start
    return sequences / elapsed, tokens / elapsed, elapsed / max(steps, 1)


def measure(
    name: str, path: Path, max_len: int, batch_size: int, budget_s: float, strategies: Iterable[str]
) -> list[dict]:
    datamodule = SequenceDataModule(path, max_len=max_len)
    dataset, boundaries = datamodule.dataset("train"), datamodule.bucket_boundaries()
    rows = []
    for strategy in strategies:
        start = time.perf_counter()
        batches = list(loader(dataset, strategy, batch_size, boundaries, seed=0))
        load_s = time.perf_counter() - start
        real = sum(int(b["lengths"].sum()) for b in batches)
        slots = sum(b["items"].numel() for b in batches)
        seq_s, tok_s, step_s = train_step_rate(batches, datamodule.num_items, max_len, budget_s)
        load_per_batch = load_s / len(batches)
        rows.append(
            {
                "dataset": name,
                "strategy": strategy,
                "max_len": max_len,
                "batches": len(batches),
                "padding_efficiency": real / slots,
                "batches_per_s": len(batches) / load_s,
                "sequences_per_s": seq_s,
                "tokens_per_s": tok_s,
                "loader_share": load_per_batch / (load_per_batch + step_s),
            }
        )
        print(", ".join(f"{k}={_short(v)}" for k, v in rows[-1].items()), flush=True)
    return rows


def _short(value) -> str:
    return f"{value:.4g}" if isinstance(value, float) else str(value)


def run(
    output: str | None = None,
    datasets: list[str] | None = None,
    cache: str = "data/prepared",
    batch_size: int = 128,
    budget_s: float = 15.0,
    strategies: list[str] | None = None,
) -> list[dict]:
    """Run the benchmark on ``datasets`` (shared dataset names; None: all of them) with
    ``strategies`` (None: all of :data:`STRATEGIES`)."""
    known = [d.name for d in SHARED_DATASETS]
    check_names("dataset", datasets or [], known)
    check_names("strategy", strategies or [], STRATEGIES)
    rows: list[dict] = []
    for dataset in SHARED_DATASETS:
        if datasets and dataset.name not in datasets:
            continue
        path = prepared(dataset, Path(cache))
        rows += measure(
            dataset.name, path, dataset.max_len, batch_size, budget_s, strategies or STRATEGIES
        )
    print_rows(rows, title="padding and throughput (CPU, SASRec d=64, 2 layers, full softmax)")
    if output:
        write_rows(rows, output, "padding")
    return rows
