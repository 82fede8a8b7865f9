"""The LightningModule every trained encoder shares: embeddings, encoder, scorer, loss."""

from __future__ import annotations

from collections.abc import Callable, Sequence

import torch
from torch import nn

from recsys_seq.metrics.ranking import DEFAULT_KS
from recsys_seq.models.losses import FullSoftmaxLoss
from recsys_seq.models.ranking import RankingModule

OptimizerFactory = Callable[..., torch.optim.Optimizer]
SchedulerFactory = Callable[..., torch.optim.lr_scheduler.LRScheduler]


class SequentialRecommender(RankingModule):
    """Next-item recommender: item embeddings -> sequence encoder -> dot-product scores.

    The item table is shared between input and output (tied embeddings), so an item's score
    for a user is ``<hidden state, item embedding>``. Training is next-item prediction at every
    real position (see :mod:`recsys_seq.models.losses`); PAD targets carry
    :data:`IGNORE_INDEX` and PAD is never a class a model can predict. Side features (e.g. the
    category and event type of each event) are embedded and added to the item embeddings.

    Args:
        num_items: N, the number of real items (indices 1..N; 0 is PAD).
        encoder: maps ``(x (B, T, D), mask (B, T))`` to hidden states ``(B, T, D)``.
        embedding_dim: D.
        loss: a loss from :mod:`recsys_seq.models.losses`; full softmax by default.
        side_features: ``{name: vocabulary size incl. PAD}`` of batch features to embed.
        optimizer: partial optimiser, completed with the parameters (Hydra ``_partial_``).
        scheduler: optional partial LR scheduler, completed with the optimiser.
        ks, exclude_history: see :class:`RankingModule`.
    """

    def __init__(
        self,
        num_items: int,
        encoder: nn.Module,
        embedding_dim: int = 64,
        loss: nn.Module | None = None,
        side_features: dict[str, int] | None = None,
        optimizer: OptimizerFactory | None = None,
        scheduler: SchedulerFactory | None = None,
        ks: Sequence[int] = DEFAULT_KS,
        exclude_history: bool = False,
    ) -> None:
        super().__init__(ks, exclude_history)
        self.save_hyperparameters(ignore=["encoder", "loss", "optimizer", "scheduler"])
        self.encoder = encoder
        self.loss = loss or FullSoftmaxLoss()
        self.feature_embeddings = nn.ModuleDict(
            {
                name: nn.Embedding(size, embedding_dim, padding_idx=0)
                for name, size in (side_features or {}).items()
            }
        )
        for table in self.feature_embeddings.values():
            nn.init.normal_(table.weight, std=embedding_dim**-0.5)
        self.optimizer_factory = optimizer or torch.optim.AdamW
        self.scheduler_factory = scheduler
        self.item_embedding = nn.Embedding(num_items + 1, embedding_dim, padding_idx=0)
        nn.init.normal_(self.item_embedding.weight, std=embedding_dim**-0.5)
        with torch.no_grad():
            self.item_embedding.weight[0].zero_()

    def encode(self, batch: dict[str, torch.Tensor]) -> torch.Tensor:
        """``(B, T, D)`` hidden states; position t has seen events ``0..t``."""
        x = self.item_embedding(batch["items"])  # (B, T, D)
        for name, table in self.feature_embeddings.items():
            x = x + table(batch[name])  # PAD rows are zero
        return self.encoder(x, batch["mask"])

    def score(self, hidden: torch.Tensor) -> torch.Tensor:
        """``(..., D)`` -> ``(..., N + 1)`` logits; PAD's column is the dtype's minimum."""
        logits = hidden @ self.item_embedding.weight.T
        return logits.index_fill(
            -1, logits.new_zeros(1, dtype=torch.long), torch.finfo(logits.dtype).min
        )

    def score_next(self, batch: dict[str, torch.Tensor]) -> torch.Tensor:
        hidden = self.encode(batch)  # (B, T, D)
        last = hidden[torch.arange(hidden.shape[0], device=hidden.device), batch["lengths"] - 1]
        return self.score(last)  # (B, N + 1)

    def setup(self, stage: str) -> None:
        """Negative-sampling losses draw from the training data's item distribution."""
        datamodule = self.trainer.datamodule if self._trainer else None
        if stage == "fit" and hasattr(self.loss, "fit_items") and datamodule is not None:
            self.loss.fit_items(datamodule.data.train_item_counts())

    def training_step(self, batch: dict[str, torch.Tensor], batch_idx: int) -> torch.Tensor:
        hidden = self.encode(batch)  # (B, T, D)
        # PAD positions are scored too and weighted out: no data-dependent boolean gather,
        # i.e. no host-device sync per step; bucketing keeps that waste small.
        loss = self.loss(hidden, batch["targets"], self.item_embedding.weight)
        self.log("train/loss", loss, prog_bar=True, batch_size=batch["items"].shape[0])
        return loss
