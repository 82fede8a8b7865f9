"""What a model needs to know about the data it is trained or evaluated on."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np

from recsys_seq.data.catalogue import Catalogue


@dataclass(frozen=True)
class DataFacts:
    """Handed to the model once, by the builder (:func:`recsys_seq.models.build_model`), so
    no model reaches into a datamodule at run time.

    Attributes:
        item_counts: ``(N + 1,)`` training occurrences per item (PAD 0), for losses that
            draw negatives by popularity and for the beyond-accuracy metrics (popularity,
            long tail); None when the model only serves (then no such metrics).
        sampled_negatives: fixed negatives per user in the evaluation batches (0: none).
        record: the data options as plain values, stored in every checkpoint.
        catalogue: the items' original ids, counts and item features, stored in every
            checkpoint so serving needs no prepared folder; None for data built in memory.
    """

    item_counts: np.ndarray | None = None
    sampled_negatives: int = 0
    record: dict[str, Any] = field(default_factory=dict)
    catalogue: Catalogue | None = None
