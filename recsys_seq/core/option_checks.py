"""Checks of single option values (a whole number, a finite number in range, a list, a
flag), so that a wrong option is one paragraph naming it, never a traceback or a silently
different job.

Options come from the command line (Hydra gives ints, floats, bools, strings or lists) or from
Python. Options grouped in a dataclass are checked field by field by
:func:`recsys_seq.core.options.checked`; the prep job's flat options
(:func:`data_prep.prep.resolve_config`) and the cluster's call these functions one by one. The
log's own values are :mod:`data_prep.checks`'s.
"""

from __future__ import annotations

import math
import numbers
import re
from typing import Any

from recsys_seq.core.options import OptionError


def option_int(key: str, value: Any, least: int) -> int:
    """An integer option >= ``least``: an int or a string of one (``"12"``); not a bool, not
    1.5 or 3.0, not a list."""
    integral = isinstance(value, numbers.Integral) and not isinstance(value, bool)
    digits = isinstance(value, str) and re.fullmatch(r"\s*[+-]?[0-9]+\s*", value)
    number = int(value) if integral or digits else None
    if number is None or number < least:
        raise OptionError(
            f"Option {key} must be >= {least} and a whole number (e.g. {key}={least + 4}), "
            f"got {shown(value)}."
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
        raise OptionError(
            f"Option {key} must be a number{' ' + ' and '.join(bounds) if bounds else ''}, "
            f"got {shown(value)}."
        )
    return number


def option_list(key: str, value: Any, allow_empty: bool = True) -> list[str] | None:
    """A list option of names: a list, or one name given alone (``event_types=buy`` is
    ``['buy']``, never split into characters); None stays None. Names are strings or ints."""
    if value is None:
        return None
    values = [value] if isinstance(value, (str, numbers.Integral)) else value
    if isinstance(value, bool) or not isinstance(values, (list, tuple)):
        raise OptionError(
            f"Option {key} must be a list of names (e.g. {key}=[a,b]) or one name, got "
            f"{shown(value)}."
        )
    odd = [v for v in values if isinstance(v, bool) or not isinstance(v, (str, numbers.Integral))]
    if odd:
        raise OptionError(
            f"Option {key} must list names (strings or integers), got {shown(odd[0])} in "
            f"{list(values)!r}; quote a name that looks like another type (e.g. {key}=['true'])."
        )
    if not values and not allow_empty:
        raise OptionError(f"Option {key}=[] would keep nothing; leave it null to keep everything.")
    return [str(v) for v in values]


def option_flag(key: str, value: Any) -> bool:
    if not isinstance(value, bool):
        raise OptionError(f"Option {key} must be true or false, got {shown(value)}.")
    return value


def shown(value: Any) -> str:
    """``'abc'``, ``True (a bool)``, ``[1] (a list)``: the value and, when it could be mistaken
    for another type, its type."""
    shown = repr(value)
    if isinstance(value, (bool, list, tuple, dict, float)) or value is None:
        shown += f" (a {type(value).__name__})"
    return shown
