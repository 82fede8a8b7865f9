"""What goes wrong around a cluster or in a damaged input part is one paragraph and exit status
2, never a traceback or a wait without end, in one process and on a cluster, and the previous
output stays as it was.

The console script runs in a subprocess where the exit status and stderr are the point; the
option refusals and the corrupt parts run in this process (fast), the parts also on the shared
two-worker cluster of :mod:`test_prep_cluster`.
"""

# ruff: noqa: F811 (the shared cluster fixture, imported, is a test's argument)
from __future__ import annotations

import gzip
import os
import subprocess
import sys
from pathlib import Path

import polars as pl
import pytest
from test_prep_cluster import dask_cluster, synthetic_log, write_parts  # noqa: F401 (fixture)

from data_prep import PrepError, cluster, input_tasks, prepare
from data_prep.synthetic import BUNDLED_CLICKS
from recsys_seq.core.errors import UserError

pytestmark = pytest.mark.slow  # end-to-end runs and real commands: not in make test-quick

RECSYS_PREP = Path(sys.executable).with_name("recsys-prep")
ERROR = "recsys-prep: error: "


def run_prep(tmp_path: Path, *args: str, env: dict | None = None, script: Path | None = None):
    """recsys-prep (or a script that wraps it) in a subprocess; its status and stderr."""
    command = [sys.executable, str(script)] if script else [str(RECSYS_PREP)]
    return subprocess.run(
        [*command, f"output={tmp_path / 'out'}", *args],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        env=env or os.environ.copy(),
        timeout=120,
    )


def one_paragraph(res: subprocess.CompletedProcess, *fragments: str) -> str:
    """Exit status 2 and exactly one error line holding ``fragments``, no traceback."""
    assert res.returncode == 2, res.stderr
    assert "Traceback" not in res.stderr, res.stderr
    errors = [line for line in res.stderr.splitlines() if line.startswith(ERROR)]
    assert len(errors) == 1, res.stderr
    for fragment in fragments:
        assert fragment in errors[0], errors[0]
    return errors[0]


# --- options refused before any cluster starts --------------------------------------------

LOCAL, SLURM = {"kind": "local"}, {"kind": "slurm"}
BAD_OPTIONS = {
    "memory_word": ({**LOCAL, "memory_per_worker": "lots"}, "memory_per_worker='lots'"),
    "memory_unit": ({**LOCAL, "memory_per_worker": "4 parsecs"}, "not a size"),
    "memory_tiny": ({**LOCAL, "memory_per_worker": "50MB"}, "needs at least 256 MiB"),
    "memory_zero": ({**LOCAL, "memory_per_worker": "0"}, "needs at least 256 MiB"),
    "memory_negative": ({**LOCAL, "memory_per_worker": "-4GiB"}, "needs at least"),
    "memory_bool": ({**LOCAL, "memory_per_worker": True}, "not a size"),
    "memory_list": ({**LOCAL, "memory_per_worker": ["4GiB"]}, "not a size"),
    "job_memory_word": ({**SLURM, "memory_per_job": "plenty"}, "memory_per_job='plenty'"),
    "job_memory_shared_thin": (
        {**SLURM, "memory_per_job": "1GiB", "workers_per_job": 8, "cores_per_job": 8},
        "workers_per_job=8",
    ),
    "walltime_word": ({**SLURM, "walltime": "forever"}, "--time forms"),
    "walltime_too_many_fields": ({**SLURM, "walltime": "1:2:3:4"}, "--time forms"),
    "walltime_negative": ({**SLURM, "walltime": -5}, "--time forms"),
    "timeout_word": ({**LOCAL, "start_timeout": "soon"}, "positive duration"),
    "timeout_zero": ({**LOCAL, "start_timeout": 0}, "positive duration"),
    "timeout_negative": ({**SLURM, "start_timeout": "-3m"}, "positive duration"),
    "workers_zero": ({**LOCAL, "workers": 0}, "cluster.workers must be >= 1"),
    "threads_fraction": ({**LOCAL, "threads_per_worker": 1.5}, "threads_per_worker"),
    "jobs_zero": ({**SLURM, "jobs": 0}, "cluster.jobs must be >= 1"),
    "retries_negative": ({**LOCAL, "retries": -1}, "cluster.retries must be >= 0"),
    "address_no_port": ("tcp://nohost", "[tcp://]host:port"),
    "address_port_too_big": ("tcp://10.0.0.5:99999", "[tcp://]host:port"),
    "address_port_zero": ("node7:0", "[tcp://]host:port"),
    "address_scheme": ("ftp://node7:8786", "[tcp://]host:port"),
    "address_no_host": ("tcp://:8786", "[tcp://]host:port"),
    "address_word": ({"kind": "address", "address": "nonsense"}, "[tcp://]host:port"),
    "address_number": ({"kind": "address", "address": 8786}, "[tcp://]host:port"),
}


@pytest.mark.parametrize("case", list(BAD_OPTIONS))
def test_a_bad_cluster_option_is_refused_naming_it_with_an_example(case):
    value, message = BAD_OPTIONS[case]
    with pytest.raises(UserError, match="e.g.|must be") as refused:
        cluster.resolve_cluster(value)
    assert message in str(refused.value)


@pytest.mark.parametrize(
    ("value", "key", "expected"),
    [
        ({**LOCAL, "memory_per_worker": "4GiB", "start_timeout": "2m"}, "start_timeout", 120.0),
        ({**LOCAL, "memory_per_worker": 2**30}, "memory_per_worker", 2**30),
        ({**SLURM, "walltime": "2-00:00:00"}, "walltime", "2-00:00:00"),
        ({**SLURM, "walltime": 90}, "walltime", "90"),
        ("tls://[::1]:8786", "address", "tls://[::1]:8786"),
    ],
)
def test_valid_cluster_options_pass(value, key, expected):
    assert cluster.resolve_cluster(value)[key] == expected


def test_a_bad_memory_size_on_the_command_line_is_one_paragraph(tmp_path):
    res = run_prep(tmp_path, "cluster=local", "cluster.memory_per_worker=lots")
    one_paragraph(res, "cluster.memory_per_worker='lots'", "cluster.memory_per_worker=4GiB")
    assert not (tmp_path / "out").exists()


# --- the cluster cannot be had ------------------------------------------------------------


def test_slurm_without_sbatch_is_refused_at_once(tmp_path):
    path = os.pathsep.join(
        p for p in os.environ["PATH"].split(os.pathsep) if not (Path(p) / "sbatch").exists()
    )
    res = run_prep(tmp_path, "cluster=slurm", env={**os.environ, "PATH": path})
    one_paragraph(res, "sbatch", "not on PATH", "cluster=local")


def test_slurm_jobs_that_never_start_end_the_wait(tmp_path):
    """An sbatch that accepts the jobs, which then never run (a queue that is full)."""
    fake = tmp_path / "bin"
    fake.mkdir()
    for name, body in (("sbatch", "echo 'Submitted batch job 4242'"), ("scancel", "exit 0")):
        (fake / name).write_text(f"#!/bin/sh\n{body}\n")
        (fake / name).chmod(0o755)
    env = {**os.environ, "PATH": f"{fake}{os.pathsep}{os.environ['PATH']}"}
    res = run_prep(tmp_path, "cluster=slurm", "cluster.start_timeout=2s", env=env)
    one_paragraph(res, "No SLURM batch job", "cluster.start_timeout=2 s", "squeue")


def test_an_unreachable_scheduler_is_one_paragraph(tmp_path):
    res = run_prep(tmp_path, "cluster=tcp://127.0.0.1:9", "cluster.start_timeout=1s")
    one_paragraph(res, "Could not reach the Dask scheduler at tcp://127.0.0.1:9")


HOG = '''
import sys, time
from data_prep import cli, stages

def _order_and_dedup_part(k, store, dedup):
    """A user part that needs far more memory than its worker may hold."""
    hog = bytearray(1 << 30)
    hog[::4096] = b"x" * len(hog[::4096])
    time.sleep(30)

if __name__ == "__main__":
    stages._order_and_dedup_part = _order_and_dedup_part  # shipped to the worker by value
    sys.argv = ["recsys-prep", *sys.argv[1:]]
    cli.main()
'''


def test_a_part_too_big_for_its_worker_is_one_paragraph(tmp_path):
    """The worker's nanny restarts it above its limit, until Dask gives the task up."""
    script = tmp_path / "hog.py"
    script.write_text(HOG)
    out = tmp_path / "out"
    args = ["cluster=local", "cluster.workers=1", "cluster.memory_per_worker=300MiB"]
    res = run_prep(tmp_path, *args, "cluster.retries=0", script=script)
    one_paragraph(res, "order_and_dedup", "more memory", "cluster.memory_per_worker=300MiB")
    assert "partitions=" in res.stderr
    assert not out.exists() and [p for p in tmp_path.iterdir() if p.name.startswith(".")] == []


# --- damaged input parts ------------------------------------------------------------------


def _cut_in_half(path: Path) -> None:
    data = path.read_bytes()
    path.write_bytes(data[: len(data) // 2])


def _flip_middle(path: Path) -> None:
    data = bytearray(path.read_bytes())
    middle = len(data) // 2
    data[middle : middle + 64] = bytes(range(64))
    path.write_bytes(bytes(data))


def _flip_footer(path: Path) -> None:
    data = bytearray(path.read_bytes())
    data[-40:-8] = bytes(range(32))
    path.write_bytes(bytes(data))


def _garbage_past_the_sniff(path: Path) -> None:
    text = path.read_bytes()
    path.write_bytes(text[:70_000] + bytes(range(256)) * 8 + text[70_000:])


def _not_utf8_past_the_sniff(path: Path) -> None:
    text = path.read_bytes()
    path.write_bytes(text[:70_000] + b"\xff\xfe\xfd," + text[70_000:])


# part kind, damage, what the message says besides the file's name
DAMAGES = {
    "gzip_cut_in_half": ("csv.gz", _cut_in_half, "incomplete or damaged"),
    "gzip_bytes_flipped": ("csv.gz", _flip_middle, "Could not read"),
    "parquet_cut_in_half": ("parquet", _cut_in_half, "Could not read"),
    "parquet_footer_flipped": ("parquet", _flip_footer, "Could not read"),
    "csv_binary_garbage": ("csv", _garbage_past_the_sniff, "Could not read"),
    "csv_not_utf8": ("csv", _not_utf8_past_the_sniff, "Could not read"),
    "csv_nul_bytes": ("csv", lambda p: p.write_bytes(b"\x00" * 4096), "binary"),
    "jsonl_cut_mid_object": ("jsonl", _cut_in_half, ""),
}


def log_of_parts(tmp_path: Path, kind: str) -> tuple[list[Path], dict]:
    """A log of four parts of one kind (``csv.gz``: gzipped csv); the job's options."""
    written = "csv" if kind == "csv.gz" else kind
    folder = write_parts(synthetic_log(n_users=1500), tmp_path / "parts", 4, written)
    parts = sorted(folder.rglob(f"part-*.{written}"))
    if kind == "csv.gz":
        for part in parts:
            part.with_suffix(".csv.gz").write_bytes(gzip.compress(part.read_bytes()))
            part.unlink()
        parts = [p.with_suffix(".csv.gz") for p in parts]
    return parts, {"format": {"csv.gz": "csv"}.get(kind, kind), "input": str(folder)}


@pytest.mark.parametrize("where", ["one_process", "cluster"])
@pytest.mark.parametrize("case", list(DAMAGES))
def test_a_damaged_part_is_named_and_the_previous_output_kept(tmp_path, dask_cluster, case, where):
    kind, damage, said = DAMAGES[case]
    parts, job = log_of_parts(tmp_path, kind)
    job = {**job, "output": str(tmp_path / "out")}
    prepare(job)
    before = {p.name: p.read_bytes() for p in (tmp_path / "out").iterdir()}
    damage(parts[2])
    with pytest.raises(PrepError) as refused:
        prepare({**job, "cluster": dask_cluster if where == "cluster" else None})
    message = str(refused.value)
    assert str(parts[2]) in message and said in message
    assert "\n" not in message.strip()
    assert {p.name: p.read_bytes() for p in (tmp_path / "out").iterdir()} == before
    assert [p.name for p in tmp_path.iterdir() if p.name.startswith(".")] == []


def test_a_truncated_gzip_is_one_paragraph_in_one_process_and_on_the_cluster(
    tmp_path, dask_cluster
):
    part = tmp_path / "clicks.csv.gz"
    part.write_bytes(BUNDLED_CLICKS.read_bytes())
    _cut_in_half(part)
    for where in ([], [f"cluster={dask_cluster}"]):
        res = run_prep(tmp_path, f"input={part}", *where)
        one_paragraph(res, str(part), "incomplete or damaged")


def test_a_file_that_disappears_after_the_listing_is_named(tmp_path, monkeypatch):
    folder = write_parts(synthetic_log(), tmp_path / "parts", 3, "csv")
    gone = sorted(folder.rglob("part-*.csv"))[1]
    split = input_tasks.split_by_user

    def vanishing(*args, **kwargs):
        gone.unlink()  # after the checks, before the events are read
        return split(*args, **kwargs)

    monkeypatch.setattr(input_tasks, "split_by_user", vanishing)
    with pytest.raises(PrepError, match=f"{gone}"):
        prepare({"input": str(folder), "output": str(tmp_path / "out")})
    assert not (tmp_path / "out").exists()


@pytest.mark.skipif(os.geteuid() == 0, reason="root reads files without read permission")
def test_an_unreadable_part_is_named(tmp_path):
    folder = write_parts(synthetic_log(), tmp_path / "parts", 3, "csv")
    locked = sorted(folder.rglob("part-*.csv"))[1]
    locked.chmod(0)
    with pytest.raises(PrepError, match=f"{locked}.*permission denied"):
        prepare({"input": str(folder), "output": str(tmp_path / "out")})


def test_a_read_failure_is_a_user_error_naming_the_file(tmp_path):
    """The reading guard itself: every failure kind of a read becomes a PrepError."""
    path = tmp_path / "part.csv"
    path.write_text("user_id,item_id,timestamp\n1,2,3\n")
    fmt = {"name": "csv"}
    for raised in (OSError("unexpected end of file"), pl.exceptions.ComputeError("bad page")):
        with pytest.raises(PrepError, match=str(path)), input_tasks.reading(path, fmt):
            raise raised


# --- a worker's user error comes back as that error --------------------------------------


def _refuses_as_user(marker: str) -> None:
    path = Path(marker)
    path.write_text(str(int(path.read_text()) + 1 if path.exists() else 1))
    raise UserError(f"{marker}: not the project's file")


def test_a_worker_side_user_error_is_re_raised_as_itself(tmp_path, dask_cluster):
    marker = tmp_path / "m"
    options = cluster.resolve_cluster(dask_cluster)
    with cluster.open_executor(options) as executor, pytest.raises(UserError) as refused:
        executor.map(_refuses_as_user, [str(marker)])
    assert type(refused.value) is UserError and "not the project's file" in str(refused.value)
    assert marker.read_text() == "1"  # not retried
