"""Models: plain ``nn.Module`` parts (embedder, encoders, scorers, losses) composed into one
network, trained and evaluated by one LightningModule task.

Layout::

    components.py  the registries that map names in configs and checkpoints to parts
    encoders/      sequence encoders (one module each, found automatically)
    embedder.py    items + side features -> event vectors
    scorers.py     states -> item logits (dot product; DIN's target attention)
    losses.py      training objectives: the table of them (full_softmax.py, sampled_losses.py,
                   candidate_bce.py)
    network.py     NextItemModel: embedder -> encoder -> scorer (plain PyTorch)
    ranking.py     evaluation every recommender shares (all-item and sampled metrics)
    task.py        NextItemTask: training, optimiser groups, prediction, checkpoint record
    two_stage.py   TwoStageTask: a retriever's top-K re-ranked by the ranker (DIN)
    reranker.py    Reranker: both stages as plain PyTorch;  candidates.py  their final ranking
    spec.py        ModelSpec (and RerankSpec): the checked values that rebuild a model
    build.py       build_model: spec + data facts (+ rerank spec) -> task
    popularity.py  the most-popular baseline
"""

from recsys_seq.models.build import build_model
from recsys_seq.models.embedder import ItemEmbedder
from recsys_seq.models.encoders import ENCODERS, SequenceEncoder
from recsys_seq.models.network import NextItemModel
from recsys_seq.models.popularity import PopularityRecommender
from recsys_seq.models.spec import ModelSpec, RerankSpec, model_spec, rerank_spec
from recsys_seq.models.task import NextItemTask
from recsys_seq.models.two_stage import TwoStageTask

__all__ = [
    "ENCODERS",
    "ItemEmbedder",
    "ModelSpec",
    "NextItemModel",
    "NextItemTask",
    "PopularityRecommender",
    "RerankSpec",
    "SequenceEncoder",
    "TwoStageTask",
    "build_model",
    "model_spec",
    "rerank_spec",
]
