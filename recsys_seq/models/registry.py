"""The project's own registry: a checked :class:`~recsys_seq.spec.ModelSpec` -> a model.

This is the only place where names from a config or a checkpoint turn into code, and every
name maps to a class of this package: nothing named by a file is ever imported or called.
"""

from __future__ import annotations

from functools import partial

import torch
from torch import nn

from recsys_seq.models.din import TargetAttention, TargetAttentionRecommender
from recsys_seq.models.gru import GRUEncoder
from recsys_seq.models.losses import BinaryCrossEntropyLoss, FullSoftmaxLoss, SampledSoftmaxLoss
from recsys_seq.models.ranking import RankingModule
from recsys_seq.models.recommender import SequentialRecommender
from recsys_seq.models.self_attention import SelfAttentionEncoder
from recsys_seq.spec import (
    GRUOptions,
    LossOptions,
    ModelSpec,
    OptimizerOptions,
    SchedulerOptions,
    SelfAttentionOptions,
    TargetAttentionOptions,
)

OPTIMIZERS = {"adamw": torch.optim.AdamW, "adam": torch.optim.Adam}


def build_model(spec: ModelSpec) -> RankingModule:
    """A freshly initialised model for ``spec`` (load a state dict into it to restore one).

    The spec is kept on the model as ``model.spec``: checkpoints store it, and serving reads
    the catalogue size and fingerprint from it.
    """
    common = dict(
        num_items=spec.num_items,
        embedding_dim=spec.embedding_dim,
        side_features=dict(spec.side_features),
        optimizer=_optimizer(spec.optimizer),
        scheduler=_scheduler(spec.scheduler),
        ks=list(spec.ks),
        exclude_history=spec.exclude_history,
    )
    if spec.name == "din":
        model: RankingModule = TargetAttentionRecommender(
            encoder=_encoder(spec.encoder, spec.embedding_dim),
            mlp_hidden=list(spec.mlp_hidden),
            mlp_activation=spec.mlp_activation,
            dropout=spec.dropout,
            side_embedding_dim=spec.side_embedding_dim,
            num_negatives=spec.num_negatives,
            cuts_per_window=spec.cuts_per_window,
            exclude_positive=spec.exclude_positive,
            eval_chunk_size=spec.eval_chunk_size,
            **common,
        )
    else:
        model = SequentialRecommender(
            encoder=_encoder(spec.encoder, spec.embedding_dim), loss=_loss(spec.loss), **common
        )
    model.spec = spec
    return model


def _encoder(
    options: SelfAttentionOptions | GRUOptions | TargetAttentionOptions, d_model: int
) -> nn.Module:
    if isinstance(options, SelfAttentionOptions):
        return SelfAttentionEncoder(
            d_model=d_model,
            max_len=options.max_len,
            num_layers=options.num_layers,
            num_heads=options.num_heads,
            ffn_multiplier=options.ffn_multiplier,
            dropout=options.dropout,
            positions=options.positions,
        )
    if isinstance(options, GRUOptions):
        return GRUEncoder(
            d_model=d_model,
            hidden_size=options.hidden_size,
            num_layers=options.num_layers,
            dropout=options.dropout,
        )
    return TargetAttention(
        d_model=d_model,
        hidden=list(options.hidden),
        activation=options.activation,
        attention=options.attention,
    )


def _loss(options: LossOptions) -> nn.Module:
    if options.name == "sampled_softmax":
        return SampledSoftmaxLoss(options.num_negatives, options.distribution or "uniform")
    if options.name == "bce":
        return BinaryCrossEntropyLoss(options.num_negatives)
    return FullSoftmaxLoss()


def _optimizer(options: OptimizerOptions):
    return partial(OPTIMIZERS[options.name], lr=options.lr, weight_decay=options.weight_decay)


def _scheduler(options: SchedulerOptions | None):
    if options is None:
        return None
    return partial(
        torch.optim.lr_scheduler.ReduceLROnPlateau,
        mode="max",  # it watches validation MONITOR, higher is better
        factor=options.factor,
        patience=options.patience,
    )
