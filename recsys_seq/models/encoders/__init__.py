"""Sequence encoders: embedded events in, one state per event out.

Every encoder follows :class:`SequenceEncoder` and is registered in :data:`ENCODERS` with its
options class (see :mod:`recsys_seq.models.components`). Encoders are found without a list to
keep up to date: every module of this package is imported on the first lookup, and so is every
entry point of the group ``recsys_seq.encoders`` (an encoder in your own package)::

    [project.entry-points."recsys_seq.encoders"]
    mean = "my_package.mean_encoder"
"""

from __future__ import annotations

import importlib
import pkgutil
from importlib.metadata import entry_points
from typing import Protocol

import torch

from recsys_seq.core.errors import UserError
from recsys_seq.models.components import Components

ENTRY_POINTS = "recsys_seq.encoders"


class SequenceEncoder(Protocol):
    """What the task needs of an encoder.

    Inputs are right-padded (see :mod:`recsys_seq.data.batch`). The state at position t may
    depend on events ``0..t`` only: the task reads the state at ``t`` to predict the event at
    ``t + 1`` in training and at ``lengths - 1`` to predict the unseen next one. States at PAD
    positions must be exactly 0, and a real position's state must not depend on how far the
    batch is padded or on its batch mates.
    """

    def __call__(self, x: torch.Tensor, mask: torch.Tensor, lengths: torch.Tensor) -> torch.Tensor:
        """``x (B, T, D)`` embedded events, ``mask (B, T)`` bool True for a real event,
        ``lengths (B,)`` real events per row -> ``(B, T, D)`` states."""
        ...


def _discover() -> None:
    for module in pkgutil.iter_modules(__path__):
        importlib.import_module(f"{__name__}.{module.name}")
    for entry in entry_points(group=ENTRY_POINTS):
        try:
            entry.load()
        except Exception as error:  # noqa: BLE001 - a plugin fails in any way it likes
            package = entry.dist.name if entry.dist else "an installed package"
            raise UserError(
                f"The encoder plugin {entry.name!r} ({entry.value}, from {package}) cannot be "
                f"loaded: {type(error).__name__}: {error}. Fix or uninstall that package."
            ) from None


ENCODERS = Components("encoder", discover=_discover)
