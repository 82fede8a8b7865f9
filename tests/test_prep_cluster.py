"""The prep job on a Dask cluster and on logs in many files: the same tables as one process.

Most tests share one local Dask cluster of two worker processes (started once per module and
reached by its address, as ``recsys-prep cluster=tcp://...`` does); the acceptance tests start
their own with ``cluster=local cluster.workers=2``.
"""

from __future__ import annotations

import json
import logging
import os
import subprocess
import sys
from pathlib import Path

import distributed
import numpy as np
import polars as pl
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from polars.testing import assert_frame_equal

from data_prep import PrepError, cluster, inputs, prepare, schema, stages, steps
from data_prep.cli import address_overrides
from data_prep.cluster import InProcess
from data_prep.parts import Store
from data_prep.progress import quiet
from data_prep.synthetic import BUNDLED_CLICKS, SyntheticConfig, generate
from recsys_seq.core.errors import UserError

pytestmark = pytest.mark.slow  # end-to-end runs and real commands: not in make test-quick

TABLES = (schema.SEQUENCES_FILE, schema.ITEMS_FILE, schema.USERS_FILE)
LOCAL_2 = {"kind": "local", "workers": 2}
# the per-run keys of meta.json: where it was written and how many parts it ran in
RUN_KEYS = ("partitions",)
INPUT_KEYS = (schema.META_FINGERPRINT, schema.META_INPUT_SHA256)


@pytest.fixture(scope="module")
def dask_cluster():
    with distributed.LocalCluster(
        n_workers=2,
        threads_per_worker=1,
        processes=True,
        dashboard_address=":0",
        silence_logs=logging.ERROR,  # the scheduler's INFO lines outlive pytest's captured stderr
    ) as running:
        yield running.scheduler_address


def assert_same_dataset(a: Path, b: Path, same_input: bool = True) -> None:
    """Every table equal, and meta.json equal but for the output, the part count and, for
    other input files, what identifies them."""
    for name in TABLES:
        assert_frame_equal(pl.read_parquet(a / name), pl.read_parquet(b / name))
    meta_a, meta_b = (json.loads((p / schema.META_FILE).read_text()) for p in (a, b))
    for meta in (meta_a, meta_b):
        for key in ("name", *RUN_KEYS, *(() if same_input else INPUT_KEYS)):
            meta.pop(key)
        for key in ("output", "name", *RUN_KEYS, *(() if same_input else ("input",))):
            meta["config"].pop(key)
    assert meta_a == meta_b


def synthetic_log(n_users: int = 400, seed: int = 3) -> pl.DataFrame:
    """A log with side features, timestamp ties and rows not in time order."""
    cfg = SyntheticConfig(seed=seed, n_users=n_users, n_items=300, n_categories=12, p_tie=0.2)
    return pl.DataFrame(generate(cfg))


def write_parts(log: pl.DataFrame, folder: Path, parts: int, kind: str) -> Path:
    """``log`` as ``parts`` files of consecutive rows (each user's events spread over
    several files), plus engine bookkeeping that is not data."""
    folder.mkdir(parents=True)
    cuts = np.linspace(0, log.height, parts + 1).astype(int)
    for j, (lo, hi) in enumerate(zip(cuts[:-1], cuts[1:], strict=True)):
        part = log.slice(lo, hi - lo)
        sub = folder / f"day={j // 2}"  # Hive-style sub-folders, read in path order
        sub.mkdir(exist_ok=True)
        path = sub / f"part-{j:03d}.{kind}"
        {"csv": part.write_csv, "parquet": part.write_parquet, "jsonl": part.write_ndjson}[kind](
            path
        )
    (folder / "_SUCCESS").write_text("")
    (folder / ".part-000.crc").write_bytes(b"\x00\x01")
    (folder / "day=0" / "empty.csv").write_text("")
    return folder


JOBS = {
    "defaults": {},
    "k_core": {"min_user_events": 5, "min_item_events": 5, "dedup": "consecutive"},
    "temporal": {"split": "temporal", "split_cut_quantile": 0.8, "min_item_events": 2},
    "gap_short": {"side_features": ["category", "event", "gap"], "max_len": 7, "dedup": "all"},
    "filters": {"event_types": ["click", "cart"], "start_time": 1_700_500_000, "partitions": 5},
}


@pytest.mark.parametrize("kind", ["csv", "parquet", "jsonl"])
def test_a_folder_of_parts_is_the_log_it_splits(tmp_path, kind):
    """Row order across files is path order: the parts prepare exactly as the whole file."""
    log = synthetic_log()
    whole = tmp_path / f"whole.{kind}"
    {"csv": log.write_csv, "parquet": log.write_parquet, "jsonl": log.write_ndjson}[kind](whole)
    folder = write_parts(log, tmp_path / "parts", 5, kind)
    job = {"format": kind, **JOBS["temporal"]}
    prepare({**job, "input": str(whole), "output": str(tmp_path / "one")})
    prepare({**job, "input": str(folder), "output": str(tmp_path / "many")})
    assert_same_dataset(tmp_path / "one", tmp_path / "many", same_input=False)


def test_a_glob_reads_the_files_it_matches(tmp_path):
    log = synthetic_log()
    folder = write_parts(log, tmp_path / "parts", 4, "csv")
    (folder / "day=0" / "notes.txt").write_text("not a part\n")
    prepare({"input": str(folder / "day=*" / "part-*.csv"), "output": str(tmp_path / "g")})
    log.write_csv(tmp_path / "whole.csv")
    prepare({"input": str(tmp_path / "whole.csv"), "output": str(tmp_path / "w")})
    assert_same_dataset(tmp_path / "g", tmp_path / "w", same_input=False)


@pytest.mark.parametrize("job", list(JOBS))
def test_cluster_equals_one_process(tmp_path, dask_cluster, job):
    folder = write_parts(synthetic_log(), tmp_path / "parts", 6, "csv")
    options = {"input": str(folder), **JOBS[job]}
    prepare({**options, "output": str(tmp_path / "one")})
    meta = prepare({**options, "output": str(tmp_path / "dask"), "cluster": dask_cluster})
    assert_same_dataset(tmp_path / "one", tmp_path / "dask")
    assert meta["partitions"] == options.get("partitions", 2)  # auto: a part per worker


def test_cluster_local_two_workers_on_a_multi_file_log(tmp_path):
    """The acceptance case: cluster=local cluster.workers=2 on a log in many csv files."""
    folder = write_parts(synthetic_log(n_users=1500, seed=8), tmp_path / "parts", 8, "csv")
    options = {"input": str(folder), **JOBS["k_core"], "side_features": ["category", "gap"]}
    prepare({**options, "output": str(tmp_path / "one")})
    prepare({**options, "output": str(tmp_path / "dask"), "cluster": LOCAL_2, "partitions": 3})
    assert_same_dataset(tmp_path / "one", tmp_path / "dask")


@pytest.mark.shared_data
def test_bert4rec_beauty_on_a_local_cluster(tmp_path, shared_data):
    """BERT4Rec's beauty.txt (no clock: row order is time), as one file and as four parts, in
    one process and on cluster=local cluster.workers=2: the same tables every way."""
    beauty = shared_data / "bert4rec" / "beauty.txt"
    lines = beauty.read_bytes().splitlines(keepends=True)
    parts = tmp_path / "parts"
    parts.mkdir()
    for j, chunk in enumerate(np.array_split(np.arange(len(lines)), 4)):
        (parts / f"part-{j}.txt").write_bytes(b"".join(lines[i] for i in chunk))
    job = {"format": "sasrec_txt", "min_item_events": 5, "max_len": 50}
    one = prepare({**job, "input": str(beauty), "output": str(tmp_path / "one")})
    prepare({**job, "input": str(beauty), "output": str(tmp_path / "dask"), "cluster": LOCAL_2})
    prepare({**job, "input": str(parts), "output": str(tmp_path / "many"), "cluster": LOCAL_2})
    assert_same_dataset(tmp_path / "one", tmp_path / "dask")
    assert_same_dataset(tmp_path / "one", tmp_path / "many", same_input=False)
    assert one["users"] > 20_000 and one["items"] > 10_000


def test_ids_of_one_user_in_files_of_different_types_are_one_user(tmp_path):
    """Integer ids in one file and text ids in another are compared as the id policy says."""
    folder = tmp_path / "log"
    folder.mkdir()
    pl.DataFrame({"user_id": [14, 14, 7], "item_id": [1, 2, 3], "timestamp": [1, 2, 3]}).write_csv(
        folder / "a.csv"
    )
    pl.DataFrame(
        {"user_id": ["014", "u9", "u9"], "item_id": ["3", "1", "2"], "timestamp": [4, 1, 2]}
    ).write_csv(folder / "b.csv")
    prepare({"input": str(folder), "output": str(tmp_path / "out"), "min_user_events": 1})
    users = pl.read_parquet(tmp_path / "out" / schema.USERS_FILE)
    seqs = pl.read_parquet(tmp_path / "out" / schema.SEQUENCES_FILE)
    assert users[schema.ORIGINAL_ID].to_list() == ["14", "7", "u9"]
    assert seqs[schema.ITEMS].list.len().to_list() == [3, 1, 2]


@pytest.mark.parametrize(
    ("dtypes", "expected"),
    [
        ([pl.Int32, pl.Int64], pl.Int64),
        ([pl.Int8, pl.UInt32], pl.Int64),
        ([pl.UInt32, pl.UInt64], pl.UInt64),
        ([pl.Int64, pl.UInt64], pl.String),
        ([pl.Int64, pl.Float32], pl.Float64),
        ([pl.UInt64, pl.Float64], pl.String),
        ([pl.Int64, pl.String], pl.String),
        ([pl.Int64, pl.Null], pl.Int64),
        ([pl.Boolean, pl.Int64], pl.String),
    ],
)
def test_unified_column_types_never_round_a_value(dtypes, expected):
    assert inputs.unify([{"user_id": d} for d in dtypes]) == {"user_id": expected}


def test_a_64_bit_id_in_parts_of_different_integer_widths_stays_exact(tmp_path):
    """Parquet parts written by different tools: Int32 ids in one, Int64 in the other."""
    big = 2**62 + 1  # not a float64: rounding would merge it with 2**62
    folder = tmp_path / "log"
    folder.mkdir()
    pl.DataFrame(
        {"user_id": [big, big, 2**62], "item_id": [1, 2, 3], "timestamp": [1, 2, 3]},
        schema={"user_id": pl.Int64, "item_id": pl.Int64, "timestamp": pl.Int64},
    ).write_parquet(folder / "a.parquet")
    pl.DataFrame(
        {"user_id": [5, 5], "item_id": [1, 3], "timestamp": [4, 5]},
        schema={"user_id": pl.Int32, "item_id": pl.Int32, "timestamp": pl.Int32},
    ).write_parquet(folder / "b.parquet")
    options = {"format": "parquet", "input": str(folder), "min_user_events": 1}
    prepare({**options, "output": str(tmp_path / "out")})
    users = pl.read_parquet(tmp_path / "out" / schema.USERS_FILE)
    assert sorted(users[schema.ORIGINAL_ID].to_list()) == [5, 2**62, big]


def test_a_bad_value_names_its_file_and_line_on_the_cluster(tmp_path, dask_cluster):
    folder = write_parts(synthetic_log(), tmp_path / "parts", 4, "csv")
    bad = sorted(folder.rglob("part-*.csv"))[2]
    text = bad.read_text().splitlines()
    fields = text[5].split(",")
    fields[2] = "yesterday"  # the timestamp
    text[5] = ",".join(fields)
    bad.write_text("\n".join(text) + "\n")
    for where in (None, dask_cluster):
        with pytest.raises(PrepError, match=rf"{bad.name}, line 6: the timestamp"):
            prepare({"input": str(folder), "output": str(tmp_path / "o"), "cluster": where})


def test_a_failed_cluster_job_keeps_the_previous_output(tmp_path, dask_cluster):
    folder = write_parts(synthetic_log(), tmp_path / "parts", 3, "csv")
    out = tmp_path / "out"
    prepare({"input": str(folder), "output": str(out), "cluster": dask_cluster})
    before = {p.name: p.read_bytes() for p in out.iterdir()}
    (folder / "day=9").mkdir()
    (folder / "day=9" / "late.csv").write_text("user_id,item_id\n1,2\n")  # no timestamp column
    with pytest.raises(PrepError, match="timestamp"):
        prepare({"input": str(folder), "output": str(out), "cluster": dask_cluster})
    assert {p.name: p.read_bytes() for p in out.iterdir()} == before
    assert [p.name for p in tmp_path.iterdir() if p.name.startswith(".")] == []


@pytest.mark.parametrize(
    ("spec", "message"),
    [
        ("nothing-*.csv", "No input files in the pattern"),
        ("empty_folder", "No input files in the folder"),
        ("hidden_only", "No input files in the folder"),
    ],
)
def test_inputs_that_name_no_files_are_refused(tmp_path, monkeypatch, spec, message):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "empty_folder").mkdir()
    (tmp_path / "hidden_only").mkdir()
    (tmp_path / "hidden_only" / "_SUCCESS").write_text("x")
    (tmp_path / "hidden_only" / "zero.csv").write_text("")
    with pytest.raises(PrepError, match=message):
        prepare({"input": spec, "output": "out"})
    assert not (tmp_path / "out").exists()


def test_an_output_inside_the_input_folder_is_refused(tmp_path):
    folder = write_parts(synthetic_log(), tmp_path / "parts", 2, "csv")
    with pytest.raises(UserError, match="inside the input folder"):
        prepare({"input": str(folder), "output": str(folder / "prepared")})
    assert not (folder / "prepared").exists()


@pytest.mark.parametrize(
    ("value", "message"),
    [
        ("kubernetes", "cluster must be one of local, slurm or a scheduler address"),
        ({"kind": "local", "workers": 0}, "cluster.workers must be >= 1"),
        ({"kind": "local", "workers": "two"}, "cluster.workers"),
        ({"kind": "local", "worker": 2}, r"Unknown option\(s\) \['worker'\] for cluster=local"),
        ({"kind": "slurm", "cores_per_job": 2, "workers_per_job": 4}, "each worker needs a core"),
        ({"kind": "slurm", "job_directives": "--qos=x"}, "cluster.job_directives must be a list"),
        ({"kind": "slurm", "memory_per_job": None}, "cluster.memory_per_job=None cannot be"),
        ({"kind": "address"}, "cluster.address=None cannot be used"),
        (3, "cluster must be one of"),
    ],
)
def test_wrong_cluster_options_are_refused_before_any_work(tmp_path, value, message):
    with pytest.raises(UserError, match=message):  # an OptionError or, for the kind, a PrepError
        prepare({"input": "missing.csv", "output": str(tmp_path / "o"), "cluster": value})


def test_an_unreachable_scheduler_is_a_clear_error(tmp_path):
    unreachable = {"kind": "address", "address": "tcp://127.0.0.1:9", "start_timeout": "1s"}
    with pytest.raises(PrepError, match="Could not reach the Dask scheduler at tcp://127.0.0.1:9"):
        prepare({"output": str(tmp_path / "o"), "input": "x.csv", "cluster": unreachable})


def test_an_address_on_the_command_line_selects_the_address_kind():
    assert address_overrides(["cluster=tcp://10.0.0.5:8786", "max_len=5"]) == [
        "cluster=address",
        "cluster.address=tcp://10.0.0.5:8786",
        "max_len=5",
    ]
    assert address_overrides(["cluster=local", "cluster.workers=3"]) == [
        "cluster=local",
        "cluster.workers=3",
    ]
    assert cluster.resolve_cluster("node7:8786") == {
        "kind": "address",
        "address": "node7:8786",
        "start_timeout": 30.0,
        "retries": 2,
    }


def test_recsys_prep_runs_on_a_running_cluster(tmp_path, dask_cluster):
    res = subprocess.run(
        [sys.executable, "-m", "data_prep", f"cluster={dask_cluster}", f"output={tmp_path / 'o'}"],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        env={**os.environ, "PYTHONPATH": str(Path(__file__).parents[1])},
    )
    assert res.returncode == 0, res.stderr
    assert "starting the Dask cluster (cluster=address)" in res.stderr
    assert "distributed" not in res.stderr.lower()  # Dask's own log lines stay out of the way
    prepare({"input": str(BUNDLED_CLICKS), "output": str(tmp_path / "local")})
    assert_same_dataset(tmp_path / "o", tmp_path / "local")


def test_slurm_config_composes_into_a_job_script():
    """cluster=slurm as Hydra composes it becomes dask-jobqueue's batch script, no cluster
    needed: the booked cores and memory, one task at a time per worker, Polars' threads."""
    from hydra import compose, initialize_config_dir
    from omegaconf import OmegaConf

    from recsys_seq.core.conf import CONF_DIR

    overrides = [
        "cluster=slurm",
        "cluster.jobs=8",
        "cluster.workers_per_job=4",
        "cluster.cores_per_job=32",
        "cluster.memory_per_job=128GiB",
        "cluster.queue=cpu",
        "cluster.account=recsys",
        "cluster.job_directives=['--qos=normal']",
        "cluster.prologue=['source /shared/venv/bin/activate']",
    ]
    with initialize_config_dir(str(CONF_DIR), version_base="1.3"):
        composed = OmegaConf.to_container(compose("prep", overrides=overrides), resolve=True)
    options = cluster.resolve_cluster(composed["cluster"])
    with cluster.slurm_cluster(options) as slurm:
        script = slurm.job_script()
    for line in (
        "#SBATCH --cpus-per-task=32",
        "#SBATCH --mem=128G",
        "#SBATCH -p cpu",
        "#SBATCH -A recsys",
        "#SBATCH -t 01:00:00",
        "#SBATCH --qos=normal",
        "source /shared/venv/bin/activate",
        "export POLARS_MAX_THREADS=8",
        "--nworkers 4",
        "--nthreads 1",
    ):
        assert line in script, line


# --- the executor: retries, lost workers, user errors ------------------------------------


def _flaky(marker: str) -> str:
    """Fails the first time it runs for ``marker`` (a file records the attempt)."""
    path = Path(marker)
    attempts = int(path.read_text()) + 1 if path.exists() else 1
    path.write_text(str(attempts))
    if attempts == 1:
        raise OSError("a transient storage error")
    return f"done after {attempts}"


def _dies_once(marker: str) -> int:
    """Kills its worker process the first time (as an out-of-memory kill would)."""
    path = Path(marker)
    if not path.exists():
        path.write_text("died")
        os._exit(1)
    return os.getpid()


def _refuses(marker: str) -> None:
    path = Path(marker)
    path.write_text(str(int(path.read_text()) + 1 if path.exists() else 1))
    raise PrepError(f"{marker}: bad data")


def _executor(address: str):
    return cluster.open_executor(cluster.resolve_cluster(address))


def test_a_failed_task_is_retried(tmp_path, dask_cluster):
    markers = [str(tmp_path / f"m{i}") for i in range(3)]
    with _executor(dask_cluster) as executor:
        assert executor.map(_flaky, markers) == ["done after 2"] * 3


def test_a_lost_worker_task_is_rerun_elsewhere(tmp_path, dask_cluster):
    with _executor(dask_cluster) as executor:
        (pid,) = executor.map(_dies_once, [str(tmp_path / "m")])
    assert pid != os.getpid()


def test_bad_data_is_not_retried(tmp_path, dask_cluster):
    marker = tmp_path / "m"
    with _executor(dask_cluster) as executor, pytest.raises(PrepError, match="bad data"):
        executor.map(_refuses, [str(marker)])
    assert marker.read_text() == "1"


# --- the temporal cut as a reduction ------------------------------------------------------


@settings(max_examples=60, deadline=None)
@given(
    times=st.lists(st.integers(0, 10**9), min_size=1, max_size=300),
    repeat=st.integers(1, 4),
    parts=st.integers(1, 4),
    quantile=st.floats(0.01, 0.99),
)
def test_the_cut_is_polars_nearest_quantile_of_the_members(times, repeat, parts, quantile):
    """Two passes of per-part counts find exactly ``quantile(q, "nearest")`` of all events,
    ties and one-bucket logs included."""
    ts = pl.Series(steps.TS, times * repeat, dtype=pl.Int64)
    events = pl.DataFrame({steps.USER: np.arange(ts.len()) % 7, steps.TS: ts})
    store = Store(Path("unused"), in_memory=True)
    for k in range(parts):
        store.put("dedup", k, events.filter(pl.col(steps.USER) % parts == k))
    cfg = {"split": "temporal", "split_cut": None, "split_cut_quantile": quantile}
    time_range = (int(ts.min()), int(ts.max()))
    cut = stages.split_cut(
        store, list(range(parts)), stages.Core(None, None), cfg, time_range, InProcess(), quiet
    )
    assert cut == ts.quantile(quantile, "nearest")


def test_a_column_only_some_files_have_is_missing_in_the_others(tmp_path):
    folder = tmp_path / "log"
    folder.mkdir()
    pl.DataFrame(
        {"user_id": [1, 1, 1], "item_id": [5, 6, 7], "timestamp": [1, 2, 3], "category": ["a"] * 3}
    ).write_csv(folder / "a.csv")
    pl.DataFrame({"user_id": [2, 2, 2], "item_id": [5, 6, 7], "timestamp": [1, 2, 3]}).write_csv(
        folder / "b.csv"
    )
    meta = prepare({"input": str(folder), "output": str(tmp_path / "out")})
    seqs = pl.read_parquet(tmp_path / "out" / schema.SEQUENCES_FILE)
    assert meta["vocab"]["category"] == ["<pad>", "a"]
    assert seqs["category"].to_list() == [[1, 1, 1], [schema.PAD] * 3]


def test_workers_that_cannot_see_the_output_are_refused(tmp_path, dask_cluster):
    with _executor(dask_cluster) as executor:
        executor.client.wait_for_workers(2, timeout=60)  # the one a test above killed is back
        executor.check_shared(tmp_path)  # a folder every local worker sees
        with pytest.raises(PrepError, match="2 of 2 Dask worker.*cannot see .*shared file system"):
            executor.check_shared(tmp_path / "on-another-machine")


def test_cluster_local_composes_with_its_defaults():
    from hydra import compose, initialize_config_dir
    from omegaconf import OmegaConf

    from recsys_seq.core.conf import CONF_DIR

    with initialize_config_dir(str(CONF_DIR), version_base="1.3"):
        cfg = compose("prep", overrides=["cluster=local", "cluster.workers=3"])
    options = cluster.resolve_cluster(OmegaConf.to_container(cfg, resolve=True)["cluster"])
    assert options == {
        "kind": "local",
        "workers": 3,
        "threads_per_worker": 1,
        "memory_per_worker": None,
        "start_timeout": 60.0,
        "retries": 2,
    }
