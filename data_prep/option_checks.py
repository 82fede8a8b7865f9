"""Checks of the prep options' types and ranges, so that a wrong option is one paragraph
naming it, never a traceback or a silently different job.

Options come from the command line (Hydra gives ints, floats, bools, strings or lists) or from
Python; :func:`data_prep.prep.resolve_config` checks each with the ``option_*`` function of its
type. The log's values are :mod:`data_prep.checks`'s.
"""

from __future__ import annotations

import datetime as dt
import math
import numbers
import re
from typing import Any

import polars as pl

from data_prep.formats import time_text
from data_prep.prep_error import PrepError


def option_int(key: str, value: Any, least: int) -> int:
    """An integer option >= ``least``: an int or a string of one (``"12"``); not a bool, not
    1.5 or 3.0, not a list."""
    integral = isinstance(value, numbers.Integral) and not isinstance(value, bool)
    digits = isinstance(value, str) and re.fullmatch(r"\s*[+-]?[0-9]+\s*", value)
    number = int(value) if integral or digits else None
    if number is None or number < least:
        raise PrepError(
            f"Option {key} must be >= {least} and a whole number (e.g. {key}={least + 4}), "
            f"got {_shown(value)}."
        )
    return number


def option_number(
    key: str,
    value: Any,
    above: float | None = None,
    below: float | None = None,
    at_least: float | None = None,
) -> int | float:
    """A finite number (an int stays an int) ``> above``, ``< below`` and ``>= at_least``
    where given; a string of one is accepted; not a bool, NaN, inf or a list."""
    number: int | float | None = None
    if isinstance(value, numbers.Real) and not isinstance(value, bool):
        number = value if isinstance(value, numbers.Integral) else float(value)
    elif isinstance(value, str):
        text = value.strip()
        if re.fullmatch(r"[+-]?[0-9]+", text):
            number = int(text)
        else:
            try:
                number = float(text)
            except ValueError:
                number = None
    in_range = (
        number is not None
        and math.isfinite(number)
        and (above is None or number > above)
        and (below is None or number < below)
        and (at_least is None or number >= at_least)
    )
    if not in_range:
        bounds = [
            f"{word} {bound}"
            for word, bound in ((">", above), ("<", below), (">=", at_least))
            if bound is not None
        ]
        raise PrepError(
            f"Option {key} must be a number{' ' + ' and '.join(bounds) if bounds else ''}, "
            f"got {_shown(value)}."
        )
    return number


def option_list(key: str, value: Any, allow_empty: bool = True) -> list[str] | None:
    """A list option of names: a list, or one name given alone (``event_types=buy`` is
    ``['buy']``, never split into characters); None stays None. Names are strings or ints."""
    if value is None:
        return None
    values = [value] if isinstance(value, (str, numbers.Integral)) else value
    if isinstance(value, bool) or not isinstance(values, (list, tuple)):
        raise PrepError(
            f"Option {key} must be a list of names (e.g. {key}=[a,b]) or one name, got "
            f"{_shown(value)}."
        )
    odd = [v for v in values if isinstance(v, bool) or not isinstance(v, (str, numbers.Integral))]
    if odd:
        raise PrepError(
            f"Option {key} must list names (strings or integers), got {_shown(odd[0])} in "
            f"{list(values)!r}; quote a name that looks like another type (e.g. {key}=['true'])."
        )
    if not values and not allow_empty:
        raise PrepError(f"Option {key}=[] would keep nothing; leave it null to keep everything.")
    return [str(v) for v in values]


def option_time(key: str, value: Any, unit: str) -> int | None:
    """A time option as a clock value in the log's ``unit``: an integer (or an integral float)
    is a clock value already; a date or ISO 8601 date-time (a string, or a Python date or
    datetime) is converted, an offset (``Z``, ``+08:00``) to UTC, a naive time taken as UTC,
    exactly as timestamps in the log are (:func:`data_prep.formats.time_text`)."""
    if value is None:
        return None
    if isinstance(value, numbers.Integral) and not isinstance(value, bool):
        return int(value)
    if isinstance(value, float) and math.isfinite(value) and value.is_integer():
        return int(value)
    text = value.isoformat() if isinstance(value, (dt.date, dt.datetime)) else value
    clock = None
    if isinstance(text, str):
        clock = pl.select(time_text(pl.lit(text, dtype=pl.String), unit)).item()
    if clock is None:
        raise PrepError(
            f"Option {key} must be a clock value in unit {unit!r} (an integer) or a date or "
            f"date-time (e.g. 2017-12-01, 2017-12-01T08:00:00Z or 2017-12-01T16:00:00+08:00), "
            f"got {_shown(value)}."
        )
    return int(clock)


def option_flag(key: str, value: Any) -> bool:
    if not isinstance(value, bool):
        raise PrepError(f"Option {key} must be true or false, got {_shown(value)}.")
    return value


def _shown(value: Any) -> str:
    """``'abc'``, ``True (a bool)``, ``[1] (a list)``: the value and, when it could be mistaken
    for another type, its type."""
    shown = repr(value)
    if isinstance(value, (bool, list, tuple, dict, float)) or value is None:
        shown += f" (a {type(value).__name__})"
    return shown
