"""Objects made from a config's ``_target_``, the one way the project does it.

The class is looked up in the fixed tables of :mod:`recsys_seq.core.targets` (a name outside them
is refused before anything is imported), checked to be a subclass of what the option takes,
and only then called, with the option's other keys, each one a parameter the class declares.
Values are passed as they are: nothing nested is made into an object.
"""

from __future__ import annotations

import importlib
import inspect
from collections.abc import Mapping
from typing import Any

from recsys_seq.core import targets
from recsys_seq.core.options import OptionError
from recsys_seq.core.typos import unknown_names


def make(option: str, values: Mapping[str, Any], base: type) -> Any:
    """The object that ``values`` (a plain mapping with ``_target_``) at ``option``
    (``callbacks.model_checkpoint``, ``tune.sampler``) describes; an :class:`OptionError`
    naming the option for a class outside the table, an unknown key, or a value the class
    refuses."""
    values = dict(values)
    cls = find_class(option, values.pop("_target_", None), base)
    check_keywords(option, cls, values)
    try:
        return cls(**values)
    except (TypeError, ValueError, ImportError) as error:
        raise OptionError(f"{option} cannot be made: {' '.join(str(error).split())}") from None


def find_class(option: str, target: Any, base: type) -> type:
    """The class the table allows at ``option`` under the name ``target``, a ``base``."""
    keys = tuple(option.split("."))
    refusal = targets.target_refusal(keys, target)
    if refusal:
        raise OptionError(refusal)
    plugin = targets.entry_point(targets.slot_of(keys), target)
    if plugin is None:
        module, _, name = target.rpartition(".")  # a name of the fixed table
        found = getattr(importlib.import_module(module), name)
    else:
        found = plugin.load()
    if not (isinstance(found, type) and issubclass(found, base)):
        raise OptionError(
            f"{option}._target_ names {target}, which is not a {base.__module__}.{base.__name__}."
        )
    return found


def check_keywords(option: str, cls: type, values: Mapping[str, Any]) -> None:
    """Refuse a key that ``cls`` takes no parameter for (unless it takes ``**kwargs``)."""
    parameters = inspect.signature(cls).parameters.values()
    if any(p.kind is p.VAR_KEYWORD for p in parameters):
        return
    names = {p.name for p in parameters if p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY)}
    unknown = sorted(set(values) - names)
    if unknown:
        raise OptionError(
            f"{unknown_names(unknown, names, option)}: "
            f"{cls.__name__} takes {', '.join(sorted(names)) or 'no options'}."
        )
