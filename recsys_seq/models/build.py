"""The one builder: a checked :class:`ModelSpec` and the data's facts -> a task.

Train, evaluation, serving, export and resuming all build models here (a checkpoint through
:func:`recsys_seq.checkpoint.load`), so a model is always made of the registered parts its
spec names, with nothing named by a file imported or called.
"""

from __future__ import annotations

from torch import nn

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
    encoder = ENCODERS.build(spec.encoder, d_model=width)
    scorer = SCORERS.build(spec.scorer, d_model=width)
    if spec.layer_std is not None:
        start_small(encoder, spec.layer_std)
        start_small(scorer, spec.layer_std)
    return NextItemModel(
        ItemEmbedder(
            spec.num_items, width, spec.side_features, spec.embedding_std, spec.item_attributes
        ),
        encoder,
        scorer,
    )


def start_small(module: nn.Module, std: float) -> None:
    """Redraw every linear weight and embedding table of ``module`` from ``N(0, std)`` and
    zero the linear biases: BERT's start, which post-norm stacks of the S3-Rec line train
    from. Recurrent cells and normalisations keep their own starts."""
    for layer in module.modules():
        if isinstance(layer, nn.Linear | nn.Embedding):
            nn.init.normal_(layer.weight, std=std)
        if isinstance(layer, nn.Embedding) and layer.padding_idx is not None:
            nn.init.zeros_(layer.weight[layer.padding_idx])
        if isinstance(layer, nn.Linear) and layer.bias is not None:
            nn.init.zeros_(layer.bias)


def build_model(
    spec: ModelSpec, facts: DataFacts | None = None, rerank: RerankSpec | None = None
) -> NextItemTask:
    """A freshly initialised task for ``spec`` (load a state dict into it to restore one), its
    item attributes coded as ``facts``' catalogue codes them; with ``rerank``, the two-stage
    task whose ranker is ``spec`` (:class:`~recsys_seq.models.two_stage.TwoStageTask`)."""
    facts = facts or DataFacts()
    loss = LOSSES.build(spec.loss, num_items=spec.num_items, item_counts=facts.item_counts)
    network = with_codes(build_network(spec), facts)
    if rerank is None:
        return NextItemTask(spec, network, loss, facts)
    retriever, *folds = (
        with_codes(build_network(rerank.retriever), facts)
        for _ in range(1 + rerank.options.cross_fit)
    )
    return TwoStageTask(spec, network, loss, facts, retriever, rerank, folds)


def with_codes(network: NextItemModel, facts: DataFacts) -> NextItemModel:
    """``network`` with its item attributes' codes from the data's catalogue (those it has:
    a checkpoint's own codes replace them when its weights are loaded)."""
    attributes = network.embedder.attributes
    if attributes is not None and facts.catalogue is not None:
        attributes.set_codes(facts.catalogue.attributes)
    return network
