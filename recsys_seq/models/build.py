"""The one builder: a checked :class:`ModelSpec` and the data's facts -> a task.

Train, evaluation, serving, export and resuming all build models here (a checkpoint through
:func:`recsys_seq.checkpoint.load`), so a model is always made of the registered parts its
spec names, with nothing named by a file imported or called.
"""

from __future__ import annotations

from recsys_seq.data.facts import DataFacts
from recsys_seq.models.embedder import ItemEmbedder
from recsys_seq.models.encoders import ENCODERS
from recsys_seq.models.losses import LOSSES
from recsys_seq.models.network import NextItemModel
from recsys_seq.models.scorers import SCORERS
from recsys_seq.models.spec import ModelSpec
from recsys_seq.models.task import NextItemTask


def build_model(spec: ModelSpec, facts: DataFacts | None = None) -> NextItemTask:
    """A freshly initialised task for ``spec`` (load a state dict into it to restore one)."""
    facts = facts or DataFacts()
    width = spec.embedding_dim
    encoder = ENCODERS.build(spec.encoder, d_model=width)
    embedder = ItemEmbedder(spec.num_items, width, spec.side_features)
    scorer = SCORERS.build(spec.scorer, d_model=width)
    loss = LOSSES.build(spec.loss, num_items=spec.num_items, item_counts=facts.item_counts)
    return NextItemTask(spec, NextItemModel(embedder, encoder, scorer), loss, facts)
