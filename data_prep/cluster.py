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
on a cluster, the output (and the input) must be on storage that every worker sees.
"""

from __future__ import annotations

import logging
import os
import pickle
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from omegaconf import OmegaConf

from data_prep.conf import CONF_DIR
from data_prep.option_checks import option_int
from data_prep.prep_error import PrepError

CLUSTER_DIR = CONF_DIR / "cluster"
KINDS = ("local", "slurm", "address")
SCATTER_BYTES = 1 << 16  # task arguments above this size are sent to each worker once
INSTALL = "pip install 'recsys-seq[cluster]' (Dask distributed and dask-jobqueue)"
# counts of each kind, with their least value
COUNTS = {
    "local": {"workers": 1, "threads_per_worker": 1, "retries": 0},
    "slurm": {"jobs": 1, "workers_per_job": 1, "cores_per_job": 1, "retries": 0},
    "address": {"retries": 0},
}
TEXTS = {
    "local": {"memory_per_worker": True},
    "slurm": {
        "memory_per_job": False,
        "walltime": False,
        "queue": True,
        "account": True,
        "local_directory": True,
    },
    "address": {"address": False},
}  # text option -> whether it may be null
LISTS = {"slurm": ("job_directives", "prologue")}


def kind_defaults(kind: str) -> dict[str, Any]:
    """The options of a cluster kind with their defaults: ``conf/cluster/<kind>.yaml``."""
    return OmegaConf.to_container(OmegaConf.load(CLUSTER_DIR / f"{kind}.yaml"), resolve=True)


def is_address(value: str) -> bool:
    """``tcp://host:8786``, ``host:8786``: a running cluster's scheduler, not a kind's name."""
    return "://" in value or (":" in value and value.rsplit(":", 1)[1].isdigit())


def resolve_cluster(value: Any) -> dict[str, Any] | None:
    """The checked cluster options: None (this process), a kind's name, a scheduler address,
    or a mapping with ``kind`` (as Hydra composes ``cluster=<kind>``).

    Every option of the kind is filled from its yaml and checked; an unknown option or a
    value of the wrong type is a :class:`PrepError` naming it.
    """
    if value is None:
        return None
    if isinstance(value, str):
        value = {"kind": "address", "address": value} if is_address(value) else {"kind": value}
    if not isinstance(value, Mapping) or value.get("kind") not in KINDS:
        shown = value.get("kind") if isinstance(value, Mapping) else value
        raise PrepError(
            f"cluster must be one of {', '.join(KINDS[:2])} or a scheduler address "
            f"(cluster=tcp://host:8786), not {shown!r}."
        )
    kind = value["kind"]
    known = kind_defaults(kind)
    unknown = sorted(set(value) - set(known))
    if unknown:
        raise PrepError(
            f"Unknown option(s) {unknown} for cluster={kind}; its options: "
            f"{', '.join(sorted(k for k in known if k != 'kind'))}."
        )
    out = {**known, **value}
    for key, least in COUNTS[kind].items():
        out[key] = option_int(f"cluster.{key}", out[key], least)
    for key, nullable in TEXTS[kind].items():
        if (out[key] is None and not nullable) or not isinstance(out[key], (str, type(None))):
            raise PrepError(
                f"Option cluster.{key} must be text (e.g. {_example(kind, key)}), got {out[key]!r}."
            )
    for key in LISTS.get(kind, ()):
        if not isinstance(out[key], list) or not all(isinstance(v, str) for v in out[key]):
            raise PrepError(f"Option cluster.{key} must be a list of text, got {out[key]!r}.")
    if kind == "slurm" and out["cores_per_job"] < out["workers_per_job"]:
        raise PrepError(
            f"cluster.cores_per_job ({out['cores_per_job']}) must be at least "
            f"cluster.workers_per_job ({out['workers_per_job']}): each worker needs a core."
        )
    return out


def _example(kind: str, key: str) -> str:
    return {"address": "tcp://host:8786", "walltime": "01:00:00"}.get(key, f"cluster.{key}=4GiB")


@dataclass
class Refused:
    """A task's :class:`PrepError`, returned instead of raised: bad data is not retried."""

    error: PrepError


def _guarded(item: Any, fn: Callable, args: tuple) -> Any:
    try:
        return fn(item, *args)
    except PrepError as err:
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
    another reason than the data (a lost worker is rerun elsewhere by Dask itself)."""

    shares_memory = False

    def __init__(self, client: Any, slots: int, retries: int):
        self.client, self.slots, self.retries = client, slots, retries

    def map(self, fn: Callable, items: Sequence[Any], *args: Any) -> list[Any]:
        from distributed import KilledWorker

        shared = tuple(self._shared(a) for a in args)
        futures = self.client.map(
            _guarded, list(items), fn=fn, args=shared, retries=self.retries, pure=False
        )
        try:
            return _raise_refusals(self.client.gather(futures))
        except KilledWorker as err:
            raise PrepError(
                f"A {fn.__name__} task of the prep job killed the workers that ran it ({err}); "
                "usually memory: give the workers more (cluster.memory_per_worker, "
                "cluster.memory_per_job) or the job more partitions (partitions=N)."
            ) from None

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
    """Dask's own INFO lines (workers registered, keys released) are not the job's progress
    (set after Dask is imported: its import configures its loggers)."""
    logger = logging.getLogger("distributed")
    level = logger.level
    logger.setLevel(logging.WARNING)
    try:
        yield
    finally:
        logger.setLevel(level)


@contextmanager
def _dask_executor(options: Mapping[str, Any], Client: Any) -> Iterator[DaskExecutor]:
    cluster, slots = None, 0
    if options["kind"] == "local":
        cluster, slots = local_cluster(options), options["workers"]
    elif options["kind"] == "slurm":
        cluster = slurm_cluster(options)
        cluster.scale(jobs=options["jobs"])
        slots = options["jobs"] * options["workers_per_job"]
    try:
        client = Client(cluster if cluster is not None else options["address"])
    except OSError as err:
        if cluster is not None:
            cluster.close()
        raise PrepError(
            f"Could not reach the Dask scheduler at {options['address']}: {err}."
        ) from None
    try:
        if cluster is None:  # a running cluster: its workers now
            slots = len(client.scheduler_info(n_workers=-1)["workers"])
            if not slots:
                raise PrepError(f"The Dask cluster at {options['address']} has no workers.")
        yield DaskExecutor(client, slots, options["retries"])
    finally:
        client.close()
        if cluster is not None:
            cluster.close()


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
        silence_logs=logging.ERROR,
        env={"POLARS_MAX_THREADS": str(options["threads_per_worker"])},
    )


def slurm_cluster(options: Mapping[str, Any]) -> Any:
    """A dask-jobqueue SLURM cluster, not yet scaled: each batch job books
    ``cores_per_job`` cores and ``memory_per_job`` and runs ``workers_per_job`` worker
    processes, one task at a time each, Polars sharing the job's cores among them."""
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
        ],
        local_directory=options["local_directory"],
        job_name="recsys-prep",
        silence_logs="error",
    )
