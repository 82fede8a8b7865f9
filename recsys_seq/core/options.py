"""Typed, range-checked options: the one validation step for configs and checkpoints.

Every option a command reads (from the command line, a config file or a checkpoint) is turned
into a frozen dataclass by :func:`checked` before any work starts. A wrong value is one
paragraph naming the option (``data.batch_size must be an integer >= 1, got 'abc'``), an
unknown key is refused (so a ``_target_`` planted in a checkpoint is an error, never a call),
and what comes out holds only plain values: ``int``, ``float``, ``bool``, ``str``, lists and
dicts of them, and nested option classes.

Declare a range with :func:`option`::

    @dataclass(frozen=True)
    class Loader:
        batch_size: int = option(128, min=1)
        dropout: float = option(0.1, min=0.0, below=1.0)
"""

from __future__ import annotations

import dataclasses
import math
import types
import typing
from collections.abc import Mapping
from typing import Any, Literal, TypeVar, Union, get_args, get_origin

from recsys_seq.core.errors import UserError
from recsys_seq.core.typos import unknown_names

Options = TypeVar("Options")


class OptionError(UserError):
    """An option has a wrong type or value, or is unknown."""


def option(default: Any = dataclasses.MISSING, *, min=None, max=None, below=None, **kwargs):
    """A dataclass field with a range: ``min <= value <= max``, ``value < below``."""
    bounds = {"min": min, "max": max, "below": below}
    if isinstance(default, list):
        values = tuple(default)
        kwargs["default_factory"] = lambda: list(values)
        default = dataclasses.MISSING
    return dataclasses.field(default=default, metadata={"bounds": bounds}, **kwargs)


def checked(cls: type[Options], values: Mapping[str, Any] | None, where: str) -> Options:
    """``cls`` built from ``values``, every field checked; ``where`` names the section
    (``data``, ``model.encoder``; empty for a command's top-level options) in messages."""
    if values is None:
        values = {}
    if not isinstance(values, Mapping):
        raise OptionError(f"{where} must be a mapping of options, got {_show(values)}.")
    fields = {f.name: f for f in dataclasses.fields(cls) if f.init}
    unknown = [str(k) for k in values if k not in fields]
    if unknown:
        raise OptionError(
            f"{unknown_names(unknown, fields, where)}; "
            f"{where or 'the command'} takes: {', '.join(fields)}."
        )
    hints = typing.get_type_hints(cls)
    kwargs = {}
    for name, field in fields.items():
        if name not in values:
            if (
                field.default is dataclasses.MISSING
                and field.default_factory is dataclasses.MISSING
            ):
                raise OptionError(f"{_key(where, name)} is required.")
            continue
        kwargs[name] = _value(hints[name], values[name], _key(where, name))
        _check_bounds(kwargs[name], field.metadata.get("bounds") or {}, _key(where, name))
    return cls(**kwargs)


def _key(where: str, name: str) -> str:
    return f"{where}.{name}" if where else name


def checked_arguments(
    function: typing.Callable, values: Mapping[str, Any], where: str
) -> dict[str, Any]:
    """``values`` checked against ``function``'s annotated keyword parameters (for commands
    whose options are a function's arguments, like the benchmarks)."""
    hints = typing.get_type_hints(function)
    hints.pop("return", None)
    unknown = [str(k) for k in values if k not in hints]
    if unknown:
        raise OptionError(f"{unknown_names(unknown, hints)}; {where} takes: {', '.join(hints)}.")
    return {name: _value(hints[name], value, name) for name, value in values.items()}


def as_plain(options: Any) -> dict[str, Any]:
    """The options as plain, JSON-like values (what a checkpoint stores)."""
    return dataclasses.asdict(options)


def _show(value: Any) -> str:
    return repr(value) if not isinstance(value, Mapping) else "a mapping"


def _value(hint: Any, value: Any, where: str) -> Any:
    """``value`` converted to ``hint``'s type, or :class:`OptionError`."""
    origin, args = get_origin(hint), get_args(hint)
    if origin in (Union, types.UnionType):
        if value is None and type(None) in args:
            return None
        choices = [a for a in args if a is not type(None)]
        errors = []
        for choice in choices:
            try:
                return _value(choice, value, where)
            except OptionError as error:
                errors.append(error)
        if len(choices) == 1:
            raise errors[0]
        raise OptionError(f"{where} must be {' or '.join(_name(c) for c in args)}, got {value!r}.")
    if origin is Literal:
        if value in args and not isinstance(value, bool):
            return value
        raise OptionError(f"{where} must be one of {', '.join(map(str, args))}, got {value!r}.")
    if origin in (list, tuple) or hint in (list, tuple):
        if isinstance(value, (str, bytes, Mapping)) or not isinstance(value, (list, tuple)):
            raise OptionError(f"{where} must be a list, e.g. [a, b], got {_show(value)}.")
        item = args[0] if args else Any
        return [_value(item, v, f"{where}[{i}]") for i, v in enumerate(value)]
    if origin is dict or hint is dict:
        if not isinstance(value, Mapping):
            raise OptionError(f"{where} must be a mapping, got {_show(value)}.")
        key_hint, value_hint = args or (str, Any)
        return {
            _value(key_hint, k, f"{where} key"): _value(value_hint, v, f"{where}.{k}")
            for k, v in value.items()
        }
    if dataclasses.is_dataclass(hint):
        return value if isinstance(value, hint) else checked(hint, value, where)
    return _scalar(hint, value, where)


def _scalar(hint: Any, value: Any, where: str) -> Any:
    if hint is Any:
        if isinstance(value, (Mapping, list, tuple)):
            raise OptionError(f"{where} must be a plain value, got {_show(value)}.")
        return value
    if hint is bool:
        if isinstance(value, bool):
            return value
        raise OptionError(f"{where} must be true or false, got {value!r}.")
    if hint is int:
        if isinstance(value, int) and not isinstance(value, bool):
            return value
        raise OptionError(f"{where} must be an integer, got {value!r}.")
    if hint is float:
        if isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value):
            return float(value)
        raise OptionError(f"{where} must be a finite number, got {value!r}.")
    if hint is str:
        if isinstance(value, str):
            return value
        raise OptionError(f"{where} must be a string, got {value!r}.")
    raise TypeError(f"unsupported option type {hint!r} for {where}")


def _check_bounds(value: Any, bounds: Mapping[str, Any], where: str) -> None:
    low, high, below = bounds.get("min"), bounds.get("max"), bounds.get("below")
    values = value if isinstance(value, list) else [value]
    for v in values:
        if not isinstance(v, (int, float)) or isinstance(v, bool):
            continue
        if (
            (low is not None and v < low)
            or (high is not None and v > high)
            or (below is not None and v >= below)
        ):
            rule = " and ".join(
                part
                for part in (
                    f">= {low}" if low is not None else "",
                    f"<= {high}" if high is not None else "",
                    f"< {below}" if below is not None else "",
                )
                if part
            )
            raise OptionError(f"{where} must be {rule}, got {value!r}.")


def _name(hint: Any) -> str:
    if hint is type(None):
        return "null"
    if get_origin(hint) is Literal:
        return " or ".join(str(a) for a in get_args(hint))
    if get_origin(hint) in (list, tuple) or hint in (list, tuple):
        return "a list"
    return {int: "an integer", float: "a number", str: "a string", bool: "true/false"}.get(
        hint, getattr(hint, "__name__", str(hint))
    )
