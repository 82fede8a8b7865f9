"""What rebuilds a model, as checked plain values: :class:`ModelSpec`.

``conf/model`` composes into it (:func:`model_spec`); every checkpoint stores it
(:func:`checkpoint_record`) and :mod:`recsys_seq.checkpoint` reads it back through the same
checks. Parts are named, never imported by path: ``encoder.name``, ``scorer.name`` and
``loss.name`` pick entries of the project's registries (:mod:`recsys_seq.models.components`).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

from recsys_seq.core.options import OptionError, as_plain, checked, option
from recsys_seq.models.embedder import AttributeShape
from recsys_seq.models.encoders import ENCODERS
from recsys_seq.models.losses import LOSSES
from recsys_seq.models.scorers import SCORERS
from recsys_seq.optimized_metric import DEFAULT as DEFAULT_OPTIMIZED_METRIC
from recsys_seq.optimized_metric import best_key, check_optimized_metric, cutoff

RECORD_KEY = "recsys_seq"
RECORD_FORMAT = 3


@dataclass(frozen=True)
class OptimizerOptions:
    """Weight decay applies to weight matrices only (see ``NextItemTask``)."""

    name: Literal["adamw", "adam"] = "adamw"
    lr: float = option(0.003, min=0.0)
    weight_decay: float = option(0.01, min=0.0)


@dataclass(frozen=True)
class PlateauOptions:
    """Reduce the learning rate when ``optimized_metric`` stops improving."""

    name: Literal["reduce_on_plateau"] = "reduce_on_plateau"
    factor: float = option(0.5, min=0.0, below=1.0)
    patience: int = option(2, min=0)


@dataclass(frozen=True)
class WarmupCosineOptions:
    """Raise the learning rate linearly over the first ``warmup`` fraction of the run's
    training steps, then decay it along a cosine to ``min_lr_ratio`` x lr at the last step
    (``trainer.max_epochs`` sets the length; early stopping may end the run sooner)."""

    name: Literal["warmup_cosine"] = "warmup_cosine"
    warmup: float = option(0.05, min=0.0, below=1.0)
    min_lr_ratio: float = option(0.0, min=0.0, max=1.0)


SchedulerOptions = PlateauOptions | WarmupCosineOptions


@dataclass(frozen=True)
class ModelSpec:
    """Everything that rebuilds a trained model.

    ``num_items``, ``item_fingerprint``, the side-feature vocabulary sizes and the item
    attributes' shapes come from the data (never from a config); the rest from
    ``conf/model``. ``name`` is a label (reports, tables); what the model is comes from its
    parts.
    """

    name: str
    encoder: Any  # options of a registered encoder
    num_items: int = option(min=1)
    scorer: Any = None  # options of a registered scorer; None: dot_product
    loss: Any = None  # options of a registered loss; None: full_softmax
    item_fingerprint: str = ""
    embedding_dim: int = option(64, min=1)
    # std of the embedding tables at initialisation; None: embedding_dim ** -0.5 (unit norm)
    embedding_std: float | None = option(None, min=0.0)
    # std of every linear layer's weights and the encoder's position table at
    # initialisation, biases zero (BERT's initializer range); None: PyTorch's own starts
    layer_std: float | None = option(None, min=0.0)
    side_features: dict[str, int] = field(default_factory=dict)  # name -> vocabulary size
    # the item table's attributes the embedder adds to every item's vector (recsys-prep items=)
    item_attributes: dict[str, AttributeShape] = field(default_factory=dict)
    ks: list[int] = option([1, 5, 10, 20], min=1)
    # the run's one optimised metric (train.yaml): best checkpoint, early stop, scheduler
    optimized_metric: str = DEFAULT_OPTIMIZED_METRIC
    exclude_history: bool = False
    optimizer: OptimizerOptions = field(default_factory=OptimizerOptions)
    scheduler: SchedulerOptions | None = None

    @property
    def evaluated_ks(self) -> tuple[int, ...]:
        """The cut-offs validation and test compute: ``ks`` and the optimised metric's."""
        return tuple(sorted({*self.ks, cutoff(self.optimized_metric)}))

    @property
    def best_key(self) -> str:
        """The logged best value so far of the optimised metric, e.g. ``val/best_ndcg@10``."""
        return best_key(self.optimized_metric)


PARTS = {"encoder": ENCODERS, "scorer": SCORERS, "loss": LOSSES}
PART_DEFAULTS = {"scorer": {"name": "dot_product"}, "loss": {"name": "full_softmax"}}


def model_spec(values: Mapping[str, Any], where: str = "model") -> ModelSpec:
    """A checked :class:`ModelSpec`; each part is checked by its registered options class."""
    if not isinstance(values, Mapping):
        raise OptionError(f"{where} must be a mapping of options.")
    values = dict(values)
    if "encoder" not in values:
        raise OptionError(f"{where}.encoder is required (one of {', '.join(ENCODERS.names())}).")
    for part, registry in PARTS.items():
        given = values.get(part)
        values[part] = registry.checked(
            PART_DEFAULTS[part] if given is None else given, f"{where}.{part}"
        )
    spec = checked(ModelSpec, values, where)
    _check_parts(spec, where)
    return spec


def _check_parts(spec: ModelSpec, where: str) -> None:
    """What no single options class can see: how the parts and sizes fit together."""
    if not spec.name or not spec.name.replace("_", "").replace("-", "").isalnum():
        raise OptionError(f"{where}.name must be letters, digits, - or _, got {spec.name!r}.")
    check = getattr(spec.encoder, "check", None)
    if check is not None:
        check(spec.embedding_dim, where)
    check = getattr(spec.loss, "check", None)
    if check is not None:
        check(f"{where}.loss")
    if spec.scorer.name not in spec.loss.scorers:
        raise OptionError(
            f"{where}.loss {spec.loss.name} trains the {' or '.join(spec.loss.scorers)} scorer, "
            f"not {spec.scorer.name}; a target_attention scorer trains with loss=candidate_bce."
        )
    if spec.loss.name == "candidate_bce" and spec.num_items < 2:
        raise OptionError("loss candidate_bce needs at least 2 items to sample negatives.")
    if not spec.ks:
        raise OptionError(f"{where}.ks must list at least one cut-off, e.g. [10].")
    check_optimized_metric(spec.optimized_metric)


@dataclass(frozen=True)
class RerankOptions:
    """``rerank``: how a ranker re-scores a retriever's candidates (``conf/rerank``)."""

    candidates: int = option(100, min=1)  # K: the retriever's top-K the ranker re-scores
    # the share of the ranker's training negatives mined from the retriever's top-K for the
    # same cut (the rest uniform): what it will face, not random items
    hard_negatives: float = option(0.75, min=0.0, max=1.0)
    retriever_score: bool = True  # the retriever's score enters the ranker's logit (learned weight)
    # the ranker's item (and side-feature) embeddings start as the retriever's trained ones
    init_from_retriever: bool = False
    # each user's last n training events: the retriever never trains on them, the ranker only
    # on them (0: the ranker trains on the retriever's own training windows)
    holdout: int = option(0, min=0)
    # K >= 2: cross-fitting. K more retrievers, each trained without the users of one fold
    # (user index mod K), score the ranker's training windows: every user's by the retriever
    # that never saw that user, so the scores the ranker learns from are as honest as the
    # serving retriever's on new events (0: the serving retriever scores them)
    cross_fit: int = option(0, min=0)
    # the ranker's objective over (target, its negatives): a softmax cross-entropy over them
    # (listwise), or DIN's pointwise binary cross-entropy
    objective: Literal["bce", "softmax"] = "softmax"
    # w: order the candidates by w * ranker score + (1 - w) * retriever score, a blend with
    # shares fixed (chosen on validation), where the ranker is a second model of the whole
    # catalogue (a dot-product scorer: sasrec, gru) trained on its own loss over every item,
    # not on the candidates; None: the ranker (DIN) trains on the candidates, with the
    # retriever's score under a learned weight (retriever_score)
    blend: float | None = option(None, min=0.0, max=1.0)


@dataclass(frozen=True)
class RerankSpec:
    """A two-stage model's second half: the retriever's spec and the rerank options. The
    ranker is the run's own :class:`ModelSpec`."""

    retriever: ModelSpec
    options: RerankOptions

    def served(self) -> RerankSpec:
        """This spec as evaluation and serving build it: without fold retrievers, which
        score training windows only (``cross_fit``)."""
        return dataclasses.replace(self, options=dataclasses.replace(self.options, cross_fit=0))


def rerank_spec(
    retriever: Mapping[str, Any] | ModelSpec, options: Mapping[str, Any], ranker: ModelSpec
) -> RerankSpec:
    """A checked :class:`RerankSpec` whose retriever fits ``ranker``: the same items, a
    dot-product scorer (it ranks the whole catalogue in one product) and room for K."""
    if not isinstance(retriever, ModelSpec):
        retriever = model_spec(retriever, "rerank.retriever")
    chosen = checked(RerankOptions, options, "rerank")
    if retriever.scorer.name != "dot_product":
        raise OptionError(
            f"rerank.retriever must score with a dot product (sasrec, gru), not "
            f"{retriever.scorer.name}: it ranks the whole catalogue for every user."
        )
    if (retriever.num_items, retriever.item_fingerprint) != (
        ranker.num_items,
        ranker.item_fingerprint,
    ):
        raise OptionError(
            "rerank.retriever was trained on other items than the ranker's data (item "
            f"fingerprint {retriever.item_fingerprint[:12]}... vs {ranker.item_fingerprint[:12]}"
            "...); train both on the same prepared dataset."
        )
    check_ranker(ranker, chosen)
    same_tables = _tables(retriever) == _tables(ranker)
    if chosen.init_from_retriever and not same_tables:
        raise OptionError(
            "rerank.init_from_retriever needs the ranker's embedding_dim and side_features to "
            f"be the retriever's ({retriever.embedding_dim}, {sorted(_features(retriever))})."
        )
    return RerankSpec(retriever, chosen)


def _features(spec: ModelSpec) -> list[str]:
    """``model.side_features`` as given: per-event features and item attributes."""
    return [*spec.side_features, *spec.item_attributes]


def _tables(spec: ModelSpec) -> tuple:
    return spec.embedding_dim, spec.side_features, spec.item_attributes


def check_ranker(ranker: ModelSpec, options: RerankOptions) -> None:
    """Refuse a ranker that cannot re-rank ``options.candidates`` (before any retriever)."""
    if options.blend is not None:
        check_blended_ranker(ranker, options)
    elif ranker.loss.name != "candidate_bce":
        raise OptionError(
            f"the ranker of a two-stage model trains with loss candidate_bce (mined "
            f"negatives), not {ranker.loss.name}; use model=din, or rerank.blend=<share> for "
            "a ranker that scores every item."
        )
    if options.candidates > ranker.num_items:
        raise OptionError(
            f"rerank.candidates={options.candidates} is more than the {ranker.num_items} items."
        )


def check_blended_ranker(ranker: ModelSpec, options: RerankOptions) -> None:
    """Refuse what a blended ranker (``rerank.blend``) cannot be: it trains on its own loss
    over every item, so it scores the catalogue, and nothing of the candidate training
    (held-out events, cross-fitted scores, a learned weight) applies to it."""
    if ranker.scorer.name != "dot_product" or ranker.loss.name == "candidate_bce":
        raise OptionError(
            f"rerank.blend={options.blend} blends two models of the whole catalogue: the ranker "
            f"must score with a dot product and train on a loss over every item (sasrec, gru), "
            f"not scorer {ranker.scorer.name} with loss {ranker.loss.name}; a DIN ranker "
            "trains on the candidates (rerank.blend=null)."
        )
    unused = {
        "holdout": options.holdout != 0,
        "cross_fit": options.cross_fit != 0,
        "retriever_score": not options.retriever_score,
    }
    given = [name for name, set_ in unused.items() if set_]
    if given:
        raise OptionError(
            f"rerank.{given[0]} shapes a ranker trained on the candidates; with "
            f"rerank.blend={options.blend} the ranker trains on every training window with its "
            "own loss (rerank.blend=1.0 ranks the candidates by the ranker alone)."
        )


def spec_values(spec: ModelSpec) -> dict[str, Any]:
    """``spec`` as plain values (what checkpoints store, what :func:`model_spec` reads)."""
    return as_plain(spec)


def checkpoint_record(
    spec: ModelSpec,
    data: Mapping[str, Any] | None,
    catalogue: Mapping[str, Any] | None,
    rerank: RerankSpec | None = None,
) -> dict[str, Any]:
    """The project's record in a checkpoint: the model spec, the data options, the item
    catalogue (:meth:`recsys_seq.data.catalogue.Catalogue.record`; None when the model was
    built on data held in memory) and, for a two-stage model, the retriever's spec and the
    rerank options."""
    record = {
        "format": RECORD_FORMAT,
        "model": spec_values(spec),
        "data": dict(data or {}),
        "catalogue": None if catalogue is None else dict(catalogue),
    }
    if rerank is not None:
        record["rerank"] = {
            "retriever": spec_values(rerank.retriever),
            "options": as_plain(rerank.options),
        }
    return record
