"""Named model parts: the only map from a name in a config or checkpoint to code.

Each kind of part (encoders, scorers, losses) has one :class:`Components` registry. A part is
registered with its options class, a frozen dataclass whose ``name`` field is a ``Literal``
holding the registered name::

    @dataclass(frozen=True)
    class MeanOptions:
        name: Literal["mean"] = "mean"

    @ENCODERS.register(MeanOptions)
    class MeanEncoder(nn.Module): ...

Configs and checkpoints give a mapping (``{name: mean, ...}``); :meth:`Components.checked`
turns it into the options class (every value type- and range-checked) and
:meth:`Components.build` constructs the part with those options as keyword arguments plus the
sizes the builder knows (``d_model``, ``num_items``, ...). Nothing named by a file is imported.
"""

from __future__ import annotations

import dataclasses
import inspect
from collections.abc import Callable, Mapping
from typing import Any, get_args, get_type_hints

from torch import nn

from recsys_seq.core.options import OptionError, checked


class Components:
    """A registry of one kind of model part.

    Args:
        kind: what the parts are, in messages (``encoder``).
        discover: called once before the first lookup, to import parts that register
            themselves (see :mod:`recsys_seq.models.encoders`).
    """

    def __init__(self, kind: str, discover: Callable[[], None] | None = None) -> None:
        self.kind = kind
        self._discover = discover
        self._entries: dict[str, tuple[type, type[nn.Module]]] = {}

    def register(self, options: type) -> Callable[[type[nn.Module]], type[nn.Module]]:
        """Class decorator: register a part under its options' ``name``."""
        name = _registered_name(options)

        def add(module: type[nn.Module]) -> type[nn.Module]:
            if name in self._entries and self._entries[name][1] is not module:
                raise ValueError(f"two {self.kind}s are registered as {name!r}")
            self._entries[name] = (options, module)
            return module

        return add

    def names(self) -> list[str]:
        self._load()
        return sorted(self._entries)

    def options(self, name: str) -> type:
        self._load()
        return self._entries[name][0]

    def checked(self, values: Any, where: str) -> Any:
        """The options of the part ``values`` names, checked; or an :class:`OptionError`."""
        if dataclasses.is_dataclass(values) and not isinstance(values, type):
            values = dataclasses.asdict(values)
        if not isinstance(values, Mapping):
            raise OptionError(f"{where} must be a mapping with a name, got {values!r}.")
        name = values.get("name")
        if name not in self.names():
            raise OptionError(
                f"{where}.name must be one of {', '.join(self.names())}, got {name!r}."
            )
        return checked(self.options(name), values, where)

    def build(self, options: Any, **sizes: Any) -> nn.Module:
        """The part for ``options``; ``sizes`` it does not take are not passed."""
        self._load()
        module = self._entries[options.name][1]
        accepted = inspect.signature(module).parameters
        fields = {f.name: getattr(options, f.name) for f in dataclasses.fields(options)}
        fields.pop("name")
        return module(**{k: v for k, v in sizes.items() if k in accepted}, **fields)

    def _load(self) -> None:
        """Run discovery once it succeeds; after a failure every lookup fails the same way
        (never a silently partial registry)."""
        if self._discover is not None:
            self._discover()
            self._discover = None


def _registered_name(options: type) -> str:
    hint = get_type_hints(options).get("name")
    names = get_args(hint)
    if len(names) != 1 or not isinstance(names[0], str):
        raise TypeError(f"{options.__name__}.name must be a Literal of one name")
    return names[0]
