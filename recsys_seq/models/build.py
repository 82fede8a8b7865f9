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
from recsys_seq.models.spec import ModelSpec, RerankSpec
from recsys_seq.models.task import NextItemTask
from recsys_seq.models.two_stage import TwoStageTask


def build_network(spec: ModelSpec) -> NextItemModel:
    """The freshly initialised network ``spec`` names: embedder, encoder, scorer."""
    width = spec.embedding_dim
    return NextItemModel(
        ItemEmbedder(spec.num_items, width, spec.side_features, spec.embedding_std),
        ENCODERS.build(spec.encoder, d_model=width),
        SCORERS.build(spec.scorer, d_model=width),
    )


def build_model(
    spec: ModelSpec, facts: DataFacts | None = None, rerank: RerankSpec | None = None
) -> NextItemTask:
    """A freshly initialised task for ``spec`` (load a state dict into it to restore one);
    with ``rerank``, the two-stage task whose ranker is ``spec``
    (:class:`~recsys_seq.models.two_stage.TwoStageTask`)."""
    facts = facts or DataFacts()
    loss = LOSSES.build(spec.loss, num_items=spec.num_items, item_counts=facts.item_counts)
    if rerank is None:
        return NextItemTask(spec, build_network(spec), loss, facts)
    return TwoStageTask(
        spec, build_network(spec), loss, facts, build_network(rerank.retriever), rerank
    )
