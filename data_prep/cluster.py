"""Where the prep job's tasks run: in this process, or on a Dask cluster.

The job (:mod:`data_prep.job`) is a list of stages, each a map of one task per input file or
per user part, followed by a small reduction in the calling process. An *executor* runs the
maps: :class:`InProcess` one task after another here (the single-machine job), or
:class:`DaskExecutor` on the workers of a Dask cluster (``recsys-prep cluster=...``). The
tasks and the reductions are the same code either way, so both give the same tables.

Why Dask distributed: it is a small pure-Python install, runs a Polars function as a task
with no conversion (Polars stays the kernel inside each task), retries tasks of a worker that
dies and reruns them elsewhere, and reaches SLURM through its own ``dask-jobqueue`` (one
batch job per group of workers). The options (``conf/cluster/<kind>.yaml``)::

    cluster=local   cluster.workers=2             worker processes on this machine
    cluster=slurm   cluster.jobs=8 ...            workers in SLURM batch jobs (dask-jobqueue)
    cluster=tcp://scheduler:8786                  a running cluster (``dask scheduler``)

Every task reads and writes files under the job's work folder, which sits beside the output:
on a cluster, the output (and the input) must be on storage that every worker sees. The
options are checked before anything starts (:mod:`data_prep.cluster_options`); what can only
go wrong once it runs (no ``sbatch``, a scheduler out of reach, jobs that never leave the
queue, workers lost for memory) ends the job with one paragraph and exit status 2, and a
task's own user error comes back from its worker as that error.
"""

from __future__ import annotations

import logging
import os
import pickle
import shutil
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from data_prep.cluster_options import INSTALL, is_address, resolve_cluster
from data_prep.prep_error import PrepError
from recsys_seq.core.errors import UserError

__all__ = ["DaskExecutor", "InProcess", "is_address", "open_executor", "resolve_cluster"]
SCATTER_BYTES = 1 << 16  # task arguments above this size are sent to each worker once
POLL_SECONDS = 2.0  # how often a waiting map checks that the cluster still has workers


@dataclass
class Refused:
    """A task's :class:`UserError`, returned instead of raised: bad data is not retried, and
    the caller re-raises it as the user error it is."""

    error: UserError


def _guarded(item: Any, fn: Callable, args: tuple) -> Any:
    try:
        return fn(item, *args)
    except UserError as err:
        return Refused(err)


def _raise_refusals(results: list[Any]) -> list[Any]:
    for result in results:
        if isinstance(result, Refused):
            raise result.error
    return results


class InProcess:
    """Runs the tasks one after another in this process: the single-machine job."""

    shares_memory = True  # tasks may hand frames on in memory (see data_prep.parts.Store)
    slots = 1

    def map(self, fn: Callable, items: Sequence[Any], *args: Any) -> list[Any]:
        return [fn(item, *args) for item in items]

    def check_shared(self, folder: Path) -> None:
        """Nothing to check: the tasks run where the folder is."""


class DaskExecutor:
    """Runs each map as one Dask task per item, retried ``retries`` times when it fails for
    another reason than the data (a lost worker is rerun elsewhere by Dask itself).

    A task whose workers keep dying (the nanny restarts a worker above its memory limit, the
    kernel or SLURM kills one) and a cluster left with no workers at all (a walltime, a
    preemption) end the map with one paragraph saying what to set, instead of a traceback
    or a wait that never ends."""

    shares_memory = False

    def __init__(self, client: Any, slots: int, options: Mapping[str, Any]):
        self.client, self.slots, self.options = client, slots, options

    def map(self, fn: Callable, items: Sequence[Any], *args: Any) -> list[Any]:
        from distributed import KilledWorker
        from distributed.comm import CommClosedError

        shared = tuple(self._shared(a) for a in args)
        futures = self.client.map(
            _guarded, list(items), fn=fn, args=shared, retries=self.options["retries"], pure=False
        )
        try:
            return _raise_refusals(self._gather(futures))
        except (KilledWorker, CommClosedError):
            raise PrepError(
                f"The prep job's {fn.__name__.strip('_')} task lost the Dask worker that ran "
                f"it {self.options['retries'] + 1} time(s): what it holds (one input file or "
                f"one user part) needs more memory than a worker's limit "
                f"({memory_limit(self.options)}), or the workers were killed. Give each "
                f"worker more memory ({memory_setting(self.options)}) or cut the log into "
                "more, smaller user parts (partitions=N, more than the workers)."
            ) from None

    def _gather(self, futures: list[Any]) -> list[Any]:
        """The futures' results, checking while they wait that the cluster still has workers
        (tasks of a cluster with none would wait for ever)."""
        from distributed import wait

        workerless_since = None
        while True:
            try:
                wait(futures, timeout=POLL_SECONDS)
                return self.client.gather(futures)
            except TimeoutError:
                pass
            if self.client.nthreads():
                workerless_since = None
            elif workerless_since is None:
                workerless_since = time.monotonic()
            elif time.monotonic() - workerless_since > self.options["start_timeout"]:
                raise PrepError(
                    f"The Dask cluster (cluster={self.options['kind']}) has had no workers for "
                    f"{self.options['start_timeout']:g} s (cluster.start_timeout) while the "
                    "prep job's tasks waited: its workers ended (a walltime, a preemption, or "
                    f"killed for memory: {memory_setting(self.options)}). Start it again."
                )

    def _shared(self, arg: Any) -> Any:
        """A large argument that every task reads (the item codes, the k-core's items) as a
        future sent to each worker once, instead of a copy in every task. Containers stay as
        they are (Dask would scatter their elements one by one); the job passes frames and
        objects that hold them."""
        if isinstance(arg, (dict, list, tuple)) or len(pickle.dumps(arg)) < SCATTER_BYTES:
            return arg
        return self.client.scatter(arg, broadcast=True, hash=False)

    def check_shared(self, folder: Path) -> None:
        """Refuse to start when a worker cannot see ``folder`` (the job's work folder beside
        the output): its tasks would fail on files that are there."""
        seen = self.client.run(os.path.isdir, str(folder))
        blind = sorted(worker for worker, ok in seen.items() if not ok)
        if blind:
            raise PrepError(
                f"{len(blind)} of {len(seen)} Dask worker(s) (e.g. {blind[0]}) cannot see "
                f"{folder.parent}: the output folder, like the input, must be on storage "
                "that every worker sees (a shared file system)."
            )


def memory_limit(options: Mapping[str, Any]) -> str:
    """A worker's memory limit as the options set it, for messages."""
    if options["kind"] == "local":
        given = options["memory_per_worker"]
        return f"cluster.memory_per_worker={given}" if given else "the machine's memory / workers"
    if options["kind"] == "slurm":
        return (
            f"cluster.memory_per_job={options['memory_per_job']} shared by "
            f"cluster.workers_per_job={options['workers_per_job']}"
        )
    return "the workers' own --memory-limit"


def memory_setting(options: Mapping[str, Any]) -> str:
    """What gives each worker more memory, for messages."""
    return {
        "local": "cluster.memory_per_worker=8GiB, or fewer cluster.workers",
        "slurm": "more cluster.memory_per_job, or fewer cluster.workers_per_job",
    }.get(options["kind"], "dask worker --memory-limit on the cluster")


@contextmanager
def open_executor(options: Mapping[str, Any] | None) -> Iterator[InProcess | DaskExecutor]:
    """The executor for checked cluster options (:func:`resolve_cluster`); a cluster that
    this call starts is stopped when the block ends, a running one is only disconnected."""
    if options is None:
        yield InProcess()
        return
    try:
        from distributed import Client
    except ImportError:
        raise PrepError(f"cluster={options['kind']} needs Dask: {INSTALL}.") from None
    with _quiet_scheduler(), _dask_executor(options, Client) as executor:
        yield executor


@contextmanager
def _quiet_scheduler() -> Iterator[None]:
    """Dask's own log lines (workers registered or restarted, tasks marked as failed) are not
    the job's progress: the job reports what ends it as one paragraph (set after Dask is
    imported: its import configures its loggers)."""
    logger = logging.getLogger("distributed")
    level = logger.level
    logger.setLevel(logging.CRITICAL)
    try:
        yield
    finally:
        logger.setLevel(level)


def _scheduler_config(options: Mapping[str, Any]) -> dict[str, Any]:
    """Dask settings for a cluster this process starts: a lost worker's task is rerun
    ``retries`` times, and a worker near its memory limit is restarted rather than paused (a
    paused worker never runs its task again: the prep's tasks hold frames Dask cannot
    spill)."""
    return {
        "distributed.scheduler.allowed-failures": options["retries"],
        "distributed.worker.memory.pause": False,
    }


@contextmanager
def _dask_executor(options: Mapping[str, Any], Client: Any) -> Iterator[DaskExecutor]:
    import dask

    with dask.config.set(_scheduler_config(options)), ExitStack() as stack:
        cluster = None
        if options["kind"] == "local":
            cluster = stack.enter_context(_started(options))
        elif options["kind"] == "slurm":
            _check_sbatch()
            cluster = stack.enter_context(slurm_cluster(options))
            cluster.scale(jobs=options["jobs"])
        client = _connected(Client, cluster or options["address"], options)
        stack.callback(client.close)
        slots = _wait_for_workers(client, options)
        yield DaskExecutor(client, slots, options)


def _started(options: Mapping[str, Any]) -> Any:
    try:
        return local_cluster(options)
    except (OSError, RuntimeError) as err:  # TimeoutError is an OSError
        raise PrepError(
            f"The local Dask cluster could not start within cluster.start_timeout="
            f"{options['start_timeout']:g} s ({type(err).__name__}: {err}); allow more time "
            "(cluster.start_timeout=5m) or start fewer workers (cluster.workers)."
        ) from None


def _connected(Client: Any, target: Any, options: Mapping[str, Any]) -> Any:
    try:
        return Client(target, timeout=options["start_timeout"])
    except OSError as err:  # TimeoutError is an OSError
        where = options.get("address") or f"cluster={options['kind']}"
        raise PrepError(
            f"Could not reach the Dask scheduler at {where} within cluster.start_timeout="
            f"{options['start_timeout']:g} s: {err}. Check that the scheduler runs and its "
            "address and port (as `dask scheduler` prints them)."
        ) from None


def _wait_for_workers(client: Any, options: Mapping[str, Any]) -> int:
    """The cluster's task slots, once a worker is there (a SLURM job may sit in the queue)."""
    timeout = options["start_timeout"]
    try:
        client.wait_for_workers(1, timeout=timeout)
    except TimeoutError:
        raise PrepError(NO_WORKERS[options["kind"]].format(timeout=timeout, **options)) from None
    if options["kind"] == "local":
        return options["workers"]
    if options["kind"] == "slurm":
        return options["jobs"] * options["workers_per_job"]
    return len(client.nthreads())


NO_WORKERS = {
    "local": (
        "No worker of the local Dask cluster started within cluster.start_timeout="
        "{timeout:g} s; allow more time (cluster.start_timeout=5m)."
    ),
    "slurm": (
        "No SLURM batch job of the Dask cluster started within cluster.start_timeout="
        "{timeout:g} s: the jobs wait in the queue or failed at once (see `squeue --me` and "
        "the jobs' output files). Check cluster.queue, cluster.account, cluster.walltime and "
        "cluster.memory_per_job against the cluster's limits, or allow more time "
        "(cluster.start_timeout=1h)."
    ),
    "address": (
        "The Dask cluster at {address} has no workers (none joined within "
        "cluster.start_timeout={timeout:g} s); start `dask worker {address}` processes."
    ),
}


def _check_sbatch() -> None:
    """dask-jobqueue submits the workers with ``sbatch``; without it, its submissions fail in
    a background thread and the job would wait for workers that never come."""
    if shutil.which("sbatch") is None:
        raise PrepError(
            "cluster=slurm submits its workers as batch jobs with sbatch, which is not on "
            "PATH here: run recsys-prep on a SLURM login node, or use cluster=local (this "
            "machine) or cluster=tcp://host:8786 (a running Dask cluster)."
        )


def local_cluster(options: Mapping[str, Any]) -> Any:
    """Worker processes on this machine, one task at a time each, Polars using
    ``threads_per_worker`` threads in each."""
    from distributed import LocalCluster

    return LocalCluster(
        n_workers=options["workers"],
        threads_per_worker=1,
        processes=True,
        memory_limit=options["memory_per_worker"] or "auto",
        scheduler_kwargs={"dashboard": False, "dashboard_address": ":0"},  # any free port
        silence_logs=logging.CRITICAL,
        timeout=options.get("start_timeout"),
        env={"POLARS_MAX_THREADS": str(options["threads_per_worker"])},
    )


def slurm_cluster(options: Mapping[str, Any]) -> Any:
    """A dask-jobqueue SLURM cluster, not yet scaled: each batch job books
    ``cores_per_job`` cores and ``memory_per_job`` and runs ``workers_per_job`` worker
    processes, one task at a time each, Polars sharing the job's cores among them (and the
    workers restarted, not paused, near their memory limit: see :func:`_scheduler_config`)."""
    try:
        from dask_jobqueue import SLURMCluster
    except ImportError:
        raise PrepError(f"cluster=slurm needs dask-jobqueue: {INSTALL}.") from None
    workers, cores = options["workers_per_job"], options["cores_per_job"]
    return SLURMCluster(
        cores=workers,  # Dask threads: one per worker process, so one part in memory each
        processes=workers,
        job_cpu=cores,
        memory=options["memory_per_job"],
        walltime=options["walltime"],
        queue=options["queue"],
        account=options["account"],
        job_extra_directives=list(options["job_directives"]),
        job_script_prologue=[
            *options["prologue"],
            f"export POLARS_MAX_THREADS={max(1, cores // workers)}",
            "export DASK_DISTRIBUTED__WORKER__MEMORY__PAUSE=False",
        ],
        local_directory=options["local_directory"],
        job_name="recsys-prep",
        silence_logs="error",
    )
