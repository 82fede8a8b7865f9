"""The ``cluster=`` options of the prep job, checked before any cluster starts or any input is
read, so that a value Dask, SLURM or the network would refuse later (after minutes in a queue,
or as a traceback from a background thread) is one paragraph naming the option now.

Each kind's options and defaults are ``conf/cluster/<kind>.yaml``. Sizes are read with Dask's
own parser (``dask.utils.parse_bytes``: ``4GiB``, ``500MB``, ``8e9``), durations with Dask's
``parse_timedelta`` (``90s``, ``10m``, a number of seconds), a walltime in one of SLURM's
``--time`` forms and a scheduler address as Dask's comms read it (``tcp://host:8786``,
``host:8786``, ``tls://...``). :mod:`data_prep.cluster` then starts what these describe.
"""

from __future__ import annotations

import numbers
import re
from collections.abc import Callable, Mapping
from typing import Any

from omegaconf import OmegaConf

from data_prep.prep_error import PrepError
from recsys_seq.core.conf import CONF_DIR
from recsys_seq.core.option_checks import option_int

CLUSTER_DIR = CONF_DIR / "cluster"
KINDS = ("local", "slurm", "address")
INSTALL = "pip install 'recsys-seq[cluster]' (Dask distributed and dask-jobqueue)"
# a Dask worker process with Polars loaded holds about 90 MiB before it reads a part; below
# this it is restarted for memory before its first task, forever
WORKER_FLOOR = 256 * 2**20
FLOOR_TEXT = "256 MiB"
# counts of each kind, with their least value
COUNTS = {
    "local": {"workers": 1, "threads_per_worker": 1, "retries": 0},
    "slurm": {"jobs": 1, "workers_per_job": 1, "cores_per_job": 1, "retries": 0},
    "address": {"retries": 0},
}
TEXTS = {
    "slurm": {"queue": True, "account": True, "local_directory": True},
}  # text option -> whether it may be null
LISTS = {"slurm": ("job_directives", "prologue")}
# SLURM's --time forms: minutes, minutes:seconds, hours:minutes:seconds, days-hours[:min[:s]]
WALLTIME = re.compile(r"\d+(:\d{1,2}){0,2}|\d+-\d{1,2}(:\d{1,2}){0,2}")
EXAMPLES = {
    "address": "cluster=tcp://10.0.0.5:8786",
    "walltime": "cluster.walltime=04:00:00 (or 2-00:00:00 for two days)",
    "start_timeout": "cluster.start_timeout=10m",
    "memory_per_worker": "cluster.memory_per_worker=4GiB",
    "memory_per_job": "cluster.memory_per_job=64GiB",
}


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
    value of the wrong type or form is a :class:`PrepError` naming it with a valid example.
    Durations come back in seconds; sizes as given (Dask and dask-jobqueue read them).
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
    _needs_dask(kind)
    for key, least in COUNTS[kind].items():
        out[key] = option_int(f"cluster.{key}", out[key], least)
    for key, nullable in TEXTS.get(kind, {}).items():
        if (out[key] is None and not nullable) or not isinstance(out[key], (str, type(None))):
            raise PrepError(f"Option cluster.{key} must be text, got {out[key]!r}.")
    for key in LISTS.get(kind, ()):
        if not isinstance(out[key], list) or not all(isinstance(v, str) for v in out[key]):
            raise PrepError(f"Option cluster.{key} must be a list of text, got {out[key]!r}.")
    out["start_timeout"] = _seconds("start_timeout", out["start_timeout"])
    CHECKS[kind](out)
    return out


def _needs_dask(kind: str) -> None:
    try:
        import distributed  # noqa: F401
    except ImportError:
        raise PrepError(f"cluster={kind} needs Dask: {INSTALL}.") from None


def _check_local(out: dict[str, Any]) -> None:
    if out["memory_per_worker"] is not None:
        _bytes("memory_per_worker", out["memory_per_worker"], "each worker")


def _check_slurm(out: dict[str, Any]) -> None:
    workers = out["workers_per_job"]
    if out["cores_per_job"] < workers:
        raise PrepError(
            f"cluster.cores_per_job ({out['cores_per_job']}) must be at least "
            f"cluster.workers_per_job ({workers}): each worker needs a core."
        )
    memory = _bytes("memory_per_job", out["memory_per_job"], f"each of its {workers} worker(s)")
    if memory // workers < WORKER_FLOOR:
        raise _refused(
            "memory_per_job",
            out["memory_per_job"],
            f"shared by cluster.workers_per_job={workers} workers it gives each less than "
            f"the {FLOOR_TEXT} a worker needs to start",
        )
    walltime = out["walltime"]
    if isinstance(walltime, numbers.Integral) and not isinstance(walltime, bool):
        walltime = out["walltime"] = str(walltime)  # minutes, as SLURM reads a bare number
    if not isinstance(walltime, str) or not WALLTIME.fullmatch(walltime.strip()):
        raise _refused("walltime", walltime, "it is not one of SLURM's --time forms")
    out["walltime"] = walltime.strip()


def _check_address(out: dict[str, Any]) -> None:
    from distributed.comm import parse_address, parse_host_port
    from distributed.comm.registry import backends

    address = out["address"]
    try:
        if not isinstance(address, str):
            raise ValueError("not text")
        scheme, location = parse_address(address.strip(), strict=False)
        host, port = parse_host_port(location)
        if scheme not in backends or not host or not 0 < int(port) < 65536:
            raise ValueError("no such scheme, host or port")
    except (ValueError, TypeError):
        raise _refused(
            "address",
            address,
            "a scheduler address is [tcp://]host:port (e.g. as `dask scheduler` prints it)",
        ) from None
    out["address"] = address.strip()


CHECKS: dict[str, Callable[[dict[str, Any]], None]] = {
    "local": _check_local,
    "slurm": _check_slurm,
    "address": _check_address,
}


def _bytes(key: str, value: Any, whom: str) -> int:
    """A memory size as Dask reads it (``4GiB``, ``500MB``, a number of bytes), at least what
    a worker needs to start."""
    from dask.utils import parse_bytes

    try:
        if isinstance(value, bool) or not isinstance(value, (str, numbers.Integral)):
            raise ValueError(value)
        size = parse_bytes(value)
    except (ValueError, TypeError):
        raise _refused(key, value, "it is not a size (a number and a unit)") from None
    if size < WORKER_FLOOR:
        raise _refused(key, value, f"{whom} needs at least {FLOOR_TEXT} to start")
    return size


def _seconds(key: str, value: Any) -> float:
    """A duration as Dask reads it (``90s``, ``10m``, ``1h``, a number of seconds), > 0."""
    from dask.utils import parse_timedelta

    try:
        if isinstance(value, bool) or value is None:
            raise ValueError(value)
        seconds = parse_timedelta(value, default="seconds")
    except (ValueError, TypeError, KeyError):
        seconds = None
    if seconds is None or not seconds > 0:
        raise _refused(key, value, "it is not a positive duration")
    return float(seconds)


def _refused(key: str, value: Any, why: str) -> PrepError:
    return PrepError(
        f"Option cluster.{key}={value!r} cannot be used: {why}; give e.g. {EXAMPLES[key]}."
    )
