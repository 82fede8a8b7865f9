"""The search space of a study: ``search.params`` of ``conf/search/<name>.yaml`` checked into
typed parameters, and a trial's values written as recsys-train overrides.

Each key is a recsys-train override key (``model.optimizer.lr``, or a config group such as
``loss@model.loss``) and each value says how Optuna draws it::

    model.optimizer.lr: {type: float, low: 3.0e-4, high: 1.0e-2, log: true}
    model.encoder.num_layers: {type: int, low: 1, high: 3}
    loss@model.loss: {type: categorical, choices: [full_softmax, sampled_softmax]}

A mistake is one error naming ``search.params.<key>`` before any trial runs. The shipped
spaces (:func:`named_spaces`) are also what ``recsys-tune --help`` lists (:func:`spaces_help`).
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping
from dataclasses import asdict, dataclass
from typing import Any, Protocol

from omegaconf import OmegaConf

from recsys_seq.core.conf import CONF_DIR
from recsys_seq.core.options import OptionError, checked, option

SEARCH_DIR = CONF_DIR / "search"  # the shipped spaces, one file each


class Trial(Protocol):
    """What a parameter needs of an Optuna trial (its ``suggest_*`` methods)."""

    def suggest_float(self, name: str, low: float, high: float, **kwargs: Any) -> float: ...
    def suggest_int(self, name: str, low: int, high: int, **kwargs: Any) -> int: ...
    def suggest_categorical(self, name: str, choices: list) -> Any: ...


@dataclass(frozen=True)
class FloatParam:
    """A real number in ``[low, high]``; ``log`` draws it log-uniformly (learning rates),
    ``step`` on a grid from ``low``."""

    low: float
    high: float
    log: bool = False
    step: float | None = option(None, min=0.0)

    def suggest(self, trial: Trial, name: str) -> float:
        return trial.suggest_float(name, self.low, self.high, log=self.log, step=self.step)

    def describe(self) -> str:
        """How it is drawn, in a few words (``float 0.0003 to 0.01, log``)."""
        step = f", step {self.step:g}" if self.step else ""
        return f"float {self.low:g} to {self.high:g}{', log' if self.log else ''}{step}"


@dataclass(frozen=True)
class IntParam:
    """An integer in ``[low, high]`` (both included), every ``step``; ``log`` for sizes."""

    low: int
    high: int
    step: int = option(1, min=1)
    log: bool = False

    def suggest(self, trial: Trial, name: str) -> int:
        return trial.suggest_int(name, self.low, self.high, step=self.step, log=self.log)

    def describe(self) -> str:
        """How it is drawn, in a few words (``int 1 to 3``)."""
        step = f", step {self.step}" if self.step != 1 else ""
        return f"int {self.low} to {self.high}{', log' if self.log else ''}{step}"


@dataclass(frozen=True)
class CategoricalParam:
    """One of ``choices``: plain values, or config names for a config group key."""

    choices: list[Any]

    def suggest(self, trial: Trial, name: str) -> Any:
        return trial.suggest_categorical(name, list(self.choices))

    def describe(self) -> str:
        """How it is drawn, in a few words (``one of 1, 2, 4``), each choice as typed."""
        return "one of " + ", ".join(map(_override_value, self.choices))


Param = FloatParam | IntParam | CategoricalParam
KINDS: dict[str, type] = {"float": FloatParam, "int": IntParam, "categorical": CategoricalParam}


def parse_space(params: Mapping[str, Any] | None, where: str = "search.params") -> dict[str, Param]:
    """The checked parameters of ``search.params``, in the file's order.

    Raises:
        OptionError: no parameter, or one that Optuna could not draw (naming its key).
    """
    if not isinstance(params, Mapping) or not params:
        raise OptionError(
            f"{where} must map recsys-train options to how they are drawn, e.g. "
            "model.optimizer.lr: {type: float, low: 1.0e-4, high: 1.0e-2, log: true}; got "
            f"{params!r}."
        )
    return {str(key): _param(spec, f"{where}.{key}") for key, spec in params.items()}


def named_spaces() -> dict[str, dict[str, Param]]:
    """The search spaces the project ships, checked, by name (``search=<name>`` picks
    ``conf/search/<name>.yaml``)."""
    return {
        path.stem: parse_space(
            OmegaConf.to_container(OmegaConf.load(path)).get("params"), f"{path}: params"
        )
        for path in sorted(SEARCH_DIR.glob("*.yaml"))
    }


def spaces_help() -> str:
    """The shipped search spaces as ``recsys-tune --help`` lists them
    (``conf/hydra/help/tune.yaml``): read from the files, so the page cannot drift from them."""
    spaces = named_spaces()
    width = max(len(key) for space in spaces.values() for key in space)
    lines = ["Search spaces (search=<name>: conf/search/<name>.yaml; copy one to change it):"]
    for name, space in spaces.items():
        lines += [f"  {name}", *(f"    {k:<{width}}  {p.describe()}" for k, p in space.items())]
    return "\n".join(lines)


def _param(spec: Any, where: str) -> Param:
    if not isinstance(spec, Mapping):
        raise OptionError(f"{where} must be a mapping with a type, got {spec!r}.")
    values = dict(spec)
    kind = values.pop("type", None)
    if kind not in KINDS:
        raise OptionError(f"{where}.type must be one of {', '.join(KINDS)}, got {kind!r}.")
    param = checked(KINDS[kind], values, where)
    if isinstance(param, CategoricalParam):
        if not param.choices or not all(_is_plain(c) for c in param.choices):
            raise OptionError(
                f"{where}.choices must be a non-empty list of plain values (numbers, strings, "
                f"true/false, null), got {param.choices!r}."
            )
        return param
    if not param.low < param.high:
        raise OptionError(f"{where}: low must be below high, got {param.low} and {param.high}.")
    if param.log and param.low <= 0:
        raise OptionError(f"{where}: log: true needs low > 0, got {param.low}.")
    if param.log and (param.step or 1) != 1:
        raise OptionError(f"{where}: log: true draws without a step; drop step={param.step}.")
    if isinstance(param, FloatParam) and param.step == 0:
        raise OptionError(f"{where}.step must be > 0 (or null), got 0.")
    return param


def _is_plain(value: Any) -> bool:
    return (
        value is None
        or (isinstance(value, bool | int | str))
        or (isinstance(value, float) and math.isfinite(value))
    )


def space_as_plain(space: Mapping[str, Param]) -> dict[str, dict[str, Any]]:
    """The space as plain values with each ``type`` (stored in the study, so that a resumed
    study is known to search the same space)."""
    names = {cls: name for name, cls in KINDS.items()}
    return {key: {"type": names[type(p)], **asdict(p)} for key, p in space.items()}


def suggest(space: Mapping[str, Param], trial: Trial) -> dict[str, Any]:
    """One value for every parameter, drawn by the trial (whose sampler picks them)."""
    return {name: param.suggest(trial, name) for name, param in space.items()}


def rounded(value: Any) -> Any:
    """A float to 12 significant digits (0.35, not a step's 0.35000000000000003); any other
    value as it is."""
    return float(f"{value:.12g}") if isinstance(value, float) else value


_BARE = re.compile(r"[A-Za-z_][\w.\-/]*")
_WORDS = {"true", "false", "null", "nan", "inf"}


def as_overrides(values: Mapping[str, Any]) -> list[str]:
    """``{"model.optimizer.lr": 0.001}`` as ``["model.optimizer.lr=0.001"]``: Hydra overrides
    that give recsys-train these values (floats to 12 significant digits, strings that would
    read as another type quoted)."""
    return [f"{key}={_override_value(value)}" for key, value in values.items()]


def _override_value(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float):
        return repr(rounded(value))
    text = str(value)
    if _BARE.fullmatch(text) and text.lower() not in _WORDS:
        return text
    return "'" + text.replace("\\", "\\\\").replace("'", "\\'") + "'"
