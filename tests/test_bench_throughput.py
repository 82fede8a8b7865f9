"""recsys-bench task=throughput: one process and a DDP job of two measure real training steps,
from Python and from the command line."""

import json
import math
import os
import subprocess
import sys

import pytest

from recsys_seq.bench.throughput import run
from recsys_seq.core.errors import UserError

pytestmark = [pytest.mark.slow, pytest.mark.shared_data]


@pytest.fixture(scope="module")
def cache(tmp_path_factory):
    return tmp_path_factory.mktemp("prepared")


def test_one_rank_and_a_ddp_job_of_two_each_give_a_row(shared_data, cache):
    rows = run(
        dataset="ml_100k",
        device="cpu",
        models=["sasrec"],
        precisions=["fp32"],
        max_tokens=2048,
        steps=3,
        num_workers=0,
        cache=str(cache),
        ranks=[1, 2],
    )
    assert [row["ranks"] for row in rows] == [1, 2]
    for row in rows:
        assert row["tokens_per_s"] > 0 and row["sequences_per_s"] > 0
        assert 0 <= row["data_wait_share"] < 1 and math.isfinite(row["tokens_per_s"])


def test_the_command_runs_inside_its_own_hydra_app_and_writes_rows(shared_data, cache, tmp_path):
    """The task composes the training config while recsys-bench's Hydra is running."""
    output = tmp_path / "throughput.json"
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "recsys_seq.cli.bench",
            "task=throughput",
            "dataset=ml_100k",
            "device=cpu",
            "models=[gru]",
            "precisions=[bf16]",
            "steps=2",
            "num_workers=0",
            "max_tokens=1024",
            f"cache={cache}",
            f"output={output}",
        ],
        capture_output=True,
        text=True,
        env={**os.environ, "RECSYS_SEQ_DATA": str(shared_data)},
    )
    assert done.returncode == 0, done.stderr[-3000:]
    (row,) = json.loads(output.read_text())["rows"]
    assert (row["model"], row["precision"], row["ranks"]) == ("gru", "bf16", 1)


@pytest.mark.parametrize("ranks", [[0], [1, -2]])
def test_ranks_below_one_are_refused_before_any_work(ranks, cache):
    with pytest.raises(UserError, match="ranks must be whole numbers >= 1"):
        run(dataset="ml_100k", device="cpu", ranks=ranks, cache=str(cache))
