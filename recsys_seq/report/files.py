"""Each file of a run folder read as plain data, refused when it is not what runs write.

Run folders may come from anyone, so their files are opened here (the loggers' files in
:mod:`recsys_seq.report.curves`) and nowhere else: YAML with ``yaml.safe_load`` (no tags, no
objects; interpolations stay unresolved strings), JSON with ``json``. Nothing read is
imported or called. A file that cannot be read, or does not hold the shape recsys-train /
recsys-eval write, raises :class:`UnreadableRun` with a short reason;
:mod:`recsys_seq.report.runs` then skips that run.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import yaml

from recsys_seq.core.run_folders import CONFIG_FILE, METRICS_FILE
from recsys_seq.report.interpolation import resolve

OVERRIDES_FILE = ".hydra/overrides.yaml"
HYDRA_CONFIG_FILE = ".hydra/config.yaml"  # the composed config, interpolations unresolved
HYDRA_FILE = ".hydra/hydra.yaml"
CHECKPOINT = "checkpoint"  # the one metrics.json entry that is not a number (a path or null)
FLOAT_MAX = sys.float_info.max


class UnreadableRun(Exception):
    """A run folder whose files cannot be read as a run; the report skips it with a warning."""


def load_yaml(run: Path, name: str) -> object:
    """The run's YAML file ``name`` as plain data: ``yaml.safe_load`` builds only mappings,
    lists and scalars (a ``!!python/...`` tag is an error, not a call) and leaves ``${...}``
    interpolations as the strings they are."""
    try:
        return yaml.safe_load((run / name).read_text(encoding="utf-8"))
    except OSError as error:
        raise UnreadableRun(f"{name} cannot be read ({error.strerror or error})") from None
    except (yaml.YAMLError, ValueError, RecursionError) as error:  # ValueError: not UTF-8
        raise UnreadableRun(f"{name} is not valid YAML ({one_line(error)})") from None


def config_file(run: Path) -> str | None:
    """The run's config: ``config.yaml`` (resolved, written by older runs) where there is one,
    else Hydra's ``.hydra/config.yaml``; None without either."""
    for name in (CONFIG_FILE, HYDRA_CONFIG_FILE):
        if os.path.lexists(run / name):  # a dangling link is found, then refused when read
            return name
    return None


def load_config(run: Path, hydra: object) -> dict:
    """The run's config (:func:`config_file`): a mapping, its ``${...}`` references filled in
    from itself and ``hydra`` (the run's ``.hydra/hydra.yaml``) as plain data."""
    name = config_file(run) or CONFIG_FILE
    config = load_yaml(run, name)
    if not isinstance(config, dict):
        raise UnreadableRun(f"{name} holds {_kind(config)}, not a mapping")
    return resolve(config, hydra)


def load_overrides(run: Path) -> list[str]:
    """The Hydra overrides that made the run (``.hydra/overrides.yaml``); none without it."""
    overrides = (load_yaml(run, OVERRIDES_FILE) if (run / OVERRIDES_FILE).exists() else None) or []
    if not isinstance(overrides, list) or not all(isinstance(o, str) for o in overrides):
        raise UnreadableRun(f"{OVERRIDES_FILE} is not a list of strings")
    return overrides


def load_metrics(run: Path) -> dict[str, float | str | None]:
    """The run's metrics.json: a JSON object of finite numbers, plus the checkpoint path (or
    null)."""
    try:
        metrics = json.loads((run / METRICS_FILE).read_text(encoding="utf-8"))
    except OSError as error:
        raise UnreadableRun(f"{METRICS_FILE} cannot be read ({error.strerror or error})") from None
    except (ValueError, RecursionError) as error:  # not UTF-8, not JSON
        raise UnreadableRun(f"{METRICS_FILE} is not valid JSON ({one_line(error)})") from None
    if not isinstance(metrics, dict):
        raise UnreadableRun(f"{METRICS_FILE} holds {_kind(metrics)}, not a JSON object")
    for key, value in metrics.items():
        if key == CHECKPOINT:
            ok = value is None or isinstance(value, str)
        else:  # not bool (an int to Python); finite as a float (NaN fails any comparison):
            # NaN, inf or a 400-digit integer would break the table and the plots
            ok = type(value) in (int, float) and -FLOAT_MAX <= value <= FLOAT_MAX
        if not ok:
            raise UnreadableRun(f"{METRICS_FILE}: {key!r} is {shown(value)}, not a finite number")
    return metrics


def lookup(data: object, *keys: str) -> str | None:
    """The string at ``data[k1][k2]...``; None where a level is missing or not a mapping, or
    the value is not a string."""
    for key in keys:
        data = data.get(key) if isinstance(data, dict) else None
    return data if isinstance(data, str) else None


def one_line(error: BaseException) -> str:
    """``error``'s message on one line, at most 300 characters (a warning line names it)."""
    return " ".join(str(error).split())[:300]


def _kind(value: object) -> str:
    kinds = {dict: "a mapping", list: "a list", str: "a string", type(None): "nothing"}
    return kinds.get(type(value), f"a {type(value).__name__}")


def shown(value: object) -> str:
    """``value`` as JSON, cut to 40 characters (a warning line names it)."""
    text = json.dumps(value)
    return text if len(text) <= 40 else text[:37] + "..."
