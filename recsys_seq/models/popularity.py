"""Most-popular baseline: the same ranking for every user, from training-event counts."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import torch

from recsys_seq.metrics.ranking import DEFAULT_KS
from recsys_seq.models.ranking import RankingModule


class PopularityRecommender(RankingModule):
    """Scores each item by how often it occurs in the training events.

    Evaluated by exactly the same code as the trained models, so its figures are comparable.

    Args:
        item_counts: ``(N + 1,)`` training counts per item index (index 0 is PAD).
    """

    def __init__(
        self,
        item_counts: np.ndarray | torch.Tensor,
        ks: Sequence[int] = DEFAULT_KS,
        exclude_history: bool = False,
    ) -> None:
        super().__init__(ks, exclude_history, metric_prefix="popularity/", item_counts=item_counts)
        self.register_buffer("counts", torch.as_tensor(item_counts, dtype=torch.float32))

    def score_next(self, batch: dict[str, torch.Tensor]) -> torch.Tensor:
        return self.counts.expand(batch["lengths"].shape[0], -1)  # (B, N + 1)
