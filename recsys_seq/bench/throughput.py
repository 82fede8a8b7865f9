"""Training throughput per encoder and precision, and how long steps wait for data.

For each model (sasrec, gru, din) and precision (fp32, bf16 autocast), a model is built through
the real ``conf/`` (so the figures describe what ``recsys-train`` runs) and trained for a fixed
number of steps on one dataset's token-budget batches. Reported per row: ``sequences_per_s``,
``tokens_per_s`` (real events), and ``data_wait_share``, the fraction of wall time spent
waiting for the next batch. Device work is synchronised only at the end of the timed window,
so the figures include no per-step host-device sync.

    recsys-bench task=throughput dataset=bert4rec_beauty device=cuda output=outputs/bench/gpu.json
"""

from __future__ import annotations

import time
from contextlib import nullcontext
from pathlib import Path

import torch
from hydra import compose, initialize_config_dir

from recsys_seq import configs
from recsys_seq.bench.report import check_names, print_rows, write_rows
from recsys_seq.data import SequenceDataModule
from recsys_seq.data.shared import by_name, prepared
from recsys_seq.models import build_model

PRECISIONS = {"fp32": None, "bf16": torch.bfloat16}
MODELS = ("sasrec", "gru", "din")


def build(model_name: str, datamodule: SequenceDataModule, device: str):
    with initialize_config_dir(configs.CONF_DIR, version_base="1.3"):
        cfg = compose(
            "train", overrides=[f"model={model_name}", f"data.max_len={datamodule.max_len}"]
        )
    spec = configs.spec_for_data(configs.model_values(cfg), datamodule)
    model = build_model(spec, datamodule.facts())
    model.log = lambda *args, **kwargs: None  # no Trainer: measure the step itself
    return model.to(device).train()


def measure(model, loader, device: str, precision: str, steps: int) -> dict:
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
    autocast = (
        torch.autocast(device_type=device.split(":")[0], dtype=PRECISIONS[precision])
        if PRECISIONS[precision]
        else nullcontext()
    )
    batches = iter(loader)
    sequences = tokens = 0
    waited = 0.0
    for step in range(steps + 2):  # two warm-up steps
        if step == 2:
            if device.startswith("cuda"):
                torch.cuda.synchronize()
            start, sequences, tokens, waited = time.perf_counter(), 0, 0, 0.0
        fetch = time.perf_counter()
        try:
            batch = next(batches)
        except StopIteration:
            batches = iter(loader)
            batch = next(batches)
        batch = {k: v.to(device, non_blocking=True) for k, v in batch.items()}
        waited += time.perf_counter() - fetch
        with autocast:
            loss = model.training_step(batch, step)
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        optimizer.step()
        sequences += batch["items"].shape[0]
        tokens += batch["mask"].sum()  # stays on the device: no sync per step
    if device.startswith("cuda"):
        torch.cuda.synchronize()
    elapsed = time.perf_counter() - start
    return {
        "sequences_per_s": sequences / elapsed,
        "tokens_per_s": float(tokens) / elapsed,
        "data_wait_share": waited / elapsed,
    }


def run(
    dataset: str = "bert4rec_beauty",
    device: str = "cuda" if torch.cuda.is_available() else "cpu",
    models: list[str] | None = None,
    precisions: list[str] | None = None,
    max_tokens: int = 16384,
    steps: int = 30,
    num_workers: int = 2,
    cache: str = "data/prepared",
    output: str | None = None,
) -> list[dict]:
    """Train each of ``models`` (None: :data:`MODELS`) in each of ``precisions`` (None: all of
    :data:`PRECISIONS`) for ``steps`` steps on ``dataset``; print and return one row each."""
    models, precisions = models or list(MODELS), precisions or list(PRECISIONS)
    check_names("model", models, MODELS)
    check_names("precision", precisions, PRECISIONS)
    info = by_name(dataset)
    datamodule = SequenceDataModule(
        prepared(info, Path(cache)),
        max_len=info.max_len,
        max_tokens=max_tokens,
        num_workers=num_workers,
        pin_memory=device.startswith("cuda"),
        persistent_workers=num_workers > 0,
    )
    loader = datamodule.dataloader("train", num_replicas=1, rank=0)
    name = torch.cuda.get_device_name() if device.startswith("cuda") else "cpu"
    rows = []
    for model_name in models:
        for precision in precisions:
            model = build(model_name, datamodule, device)
            figures = measure(model, loader, device, precision, steps)
            rows.append(
                {
                    "dataset": dataset,
                    "device": name,
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
