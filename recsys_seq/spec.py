"""What a run is made of, as checked plain values: the data options and the model spec.

``conf/data`` and ``conf/model`` compose into these classes (:func:`data_options`,
:func:`model_spec`); a checkpoint stores them with :func:`~recsys_seq.options.as_plain` and
:mod:`recsys_seq.checkpoint` reads them back through the same checks. Components are named,
never imported by path: ``encoder.name``, ``loss.name``, ``optimizer.name`` pick entries of the
project's own registry (:mod:`recsys_seq.models.registry`).
"""

from __future__ import annotations

import inspect
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

import lightning as L

from recsys_seq.options import OptionError, as_plain, checked, option

# ------------------------------------------------------------------------------ data


@dataclass(frozen=True)
class DataOptions:
    """The datamodule's options (``conf/data``); see :class:`SequenceDataModule`."""

    path: str | None = None  # a prepared dataset folder; None: prepare ``source`` into cache
    source: str | None = None  # demo, or a shared dataset name (data=s3rec_beauty, ...)
    cache_dir: str = "data/prepared"  # where ``source`` is prepared, as <cache_dir>/<source>
    max_len: int = option(50, min=1)
    batch_size: int = option(128, min=1)
    max_tokens: int | None = option(None, min=1)
    eval_batch_size: int = option(256, min=1)
    boundaries: list[int] | None = option(None, min=1)
    pad_to_multiple_of: int | None = option(None, min=1)
    num_workers: int = option(0, min=0)
    pin_memory: bool = False
    persistent_workers: bool = False
    seed: int = 0
    sampled_negatives: int = option(0, min=0)
    negatives_from: Literal["uniform", "popularity"] = "uniform"
    negatives_seed: int = 0
    eval_users: int | None = option(None, min=1)
    eval_users_seed: int = 0


def data_options(values: Mapping[str, Any]) -> DataOptions:
    options = checked(DataOptions, values, "data")
    if options.path is None and options.source is None:
        raise OptionError(
            "No data: pass data.path=<prepared dataset folder> (made by recsys-prep), or pick "
            "a bundled or shared dataset with data=demo or data=<name> (conf/data/)."
        )
    return options


# ------------------------------------------------------------------------------ encoders


@dataclass(frozen=True)
class SelfAttentionOptions:
    """Causal self-attention (SASRec-like): :class:`SelfAttentionEncoder`."""

    name: Literal["self_attention"] = "self_attention"
    max_len: int = option(50, min=1)
    num_layers: int = option(2, min=1)
    num_heads: int = option(2, min=1)
    ffn_multiplier: int = option(4, min=1)
    dropout: float = option(0.2, min=0.0, below=1.0)
    positions: Literal["from_start", "from_end"] = "from_start"


@dataclass(frozen=True)
class GRUOptions:
    """GRU4Rec-like recurrent encoder: :class:`GRUEncoder`."""

    name: Literal["gru"] = "gru"
    hidden_size: int = option(64, min=1)
    num_layers: int = option(1, min=1)
    dropout: float = option(0.2, min=0.0, below=1.0)


@dataclass(frozen=True)
class TargetAttentionOptions:
    """DIN's activation unit: :class:`TargetAttention`."""

    name: Literal["target_attention"] = "target_attention"
    hidden: list[int] = option([32, 16], min=1)
    activation: Literal["prelu", "relu", "sigmoid"] = "prelu"
    attention: Literal["sum", "sigmoid", "softmax"] = "softmax"


ENCODERS = {
    "self_attention": SelfAttentionOptions,
    "gru": GRUOptions,
    "target_attention": TargetAttentionOptions,
}

# ------------------------------------------------------------------------------ training


@dataclass(frozen=True)
class LossOptions:
    """``full_softmax``, ``sampled_softmax`` (log-Q corrected) or ``bce`` with negatives."""

    name: Literal["full_softmax", "sampled_softmax", "bce"] = "full_softmax"
    num_negatives: int | None = option(None, min=1)
    distribution: Literal["uniform", "popularity"] | None = None


@dataclass(frozen=True)
class OptimizerOptions:
    name: Literal["adamw", "adam"] = "adamw"
    lr: float = option(0.001, min=0.0)
    weight_decay: float = option(0.0, min=0.0)


@dataclass(frozen=True)
class SchedulerOptions:
    """Reduce the learning rate when validation NDCG stops improving."""

    name: Literal["reduce_on_plateau"] = "reduce_on_plateau"
    factor: float = option(0.5, min=0.0, below=1.0)
    patience: int = option(2, min=0)


# ------------------------------------------------------------------------------ models


@dataclass(frozen=True)
class ModelSpec:
    """Everything that rebuilds a trained model: its registry name, sizes and options.

    ``num_items``, ``item_fingerprint`` and the side-feature vocabulary sizes come from the
    data (never from a config); the rest from ``conf/model``.
    """

    name: Literal["sasrec", "gru", "din"]
    encoder: SelfAttentionOptions | GRUOptions | TargetAttentionOptions
    num_items: int = option(min=1)
    item_fingerprint: str = ""
    embedding_dim: int = option(64, min=1)
    side_features: dict[str, int] = field(default_factory=dict)  # name -> vocabulary size
    ks: list[int] = option([1, 5, 10, 20], min=1)
    exclude_history: bool = False
    loss: LossOptions = field(default_factory=LossOptions)
    optimizer: OptimizerOptions = field(default_factory=OptimizerOptions)
    scheduler: SchedulerOptions | None = None
    # DIN only
    mlp_hidden: list[int] = option([200, 80], min=1)
    mlp_activation: Literal["prelu", "relu", "sigmoid"] = "prelu"
    dropout: float = option(0.0, min=0.0, below=1.0)
    side_embedding_dim: int = option(16, min=1)
    num_negatives: int = option(16, min=1)
    cuts_per_window: int = option(4, min=1)
    exclude_positive: bool = True
    eval_chunk_size: int = option(128, min=1)


MODEL_ENCODERS = {"sasrec": "self_attention", "gru": "gru", "din": "target_attention"}
"""The encoder each model is built around."""
DIN_ONLY = (
    "mlp_hidden",
    "mlp_activation",
    "dropout",
    "side_embedding_dim",
    "num_negatives",
    "cuts_per_window",
    "exclude_positive",
    "eval_chunk_size",
)


def spec_values(spec: ModelSpec) -> dict[str, Any]:
    """``spec`` as plain values holding only what applies to its model (what checkpoints
    store, and what :func:`model_spec` reads back)."""
    values = as_plain(spec)
    for key in ("loss",) if spec.name == "din" else DIN_ONLY:
        values.pop(key)
    return values


def model_spec(values: Mapping[str, Any], where: str = "model") -> ModelSpec:
    """A checked :class:`ModelSpec`; the encoder section is checked by its own class."""
    if not isinstance(values, Mapping):
        raise OptionError(f"{where} must be a mapping of options.")
    values = dict(values)
    name = values.get("name")
    if name not in MODEL_ENCODERS:
        raise OptionError(f"{where}.name must be one of {', '.join(MODEL_ENCODERS)}, got {name!r}.")
    encoder = values.get("encoder")
    encoder_name = MODEL_ENCODERS[name]
    if not isinstance(encoder, Mapping) or encoder.get("name", encoder_name) != encoder_name:
        found = encoder.get("name") if isinstance(encoder, Mapping) else encoder
        raise OptionError(
            f"{where}.encoder must be the {encoder_name} encoder for model {name}, got {found!r}."
        )
    values["encoder"] = checked(ENCODERS[encoder_name], encoder, f"{where}.encoder")
    if name == "din":
        values.pop("loss", None)  # DIN trains pointwise on its own sampled negatives
    else:
        given = [k for k in DIN_ONLY if k in values]
        if given:
            raise OptionError(f"{where}: {', '.join(given)} apply to model=din only.")
    spec = checked(ModelSpec, values, where)
    _check_loss(spec.loss, f"{where}.loss")
    encoder_options = spec.encoder
    if isinstance(encoder_options, SelfAttentionOptions) and spec.embedding_dim % (
        encoder_options.num_heads
    ):
        raise OptionError(
            f"{where}.embedding_dim ({spec.embedding_dim}) must be divisible by "
            f"{where}.encoder.num_heads ({encoder_options.num_heads})."
        )
    if not spec.ks:
        raise OptionError(f"{where}.ks must list at least one cut-off, e.g. [10].")
    if name == "din" and spec.num_items < 2:
        raise OptionError("DIN needs at least 2 items to sample negatives.")
    return spec


def _check_loss(loss: LossOptions, where: str) -> None:
    sampling = loss.name != "full_softmax"
    if sampling and loss.num_negatives is None:
        raise OptionError(f"{where}.num_negatives is required for loss {loss.name}.")
    if not sampling and (loss.num_negatives is not None or loss.distribution is not None):
        raise OptionError(f"{where}: full_softmax takes no num_negatives or distribution.")
    if loss.name == "bce" and loss.distribution is not None:
        raise OptionError(f"{where}: bce draws its negatives uniformly; remove distribution.")


# ------------------------------------------------------------------------------ trainer


@dataclass(frozen=True)
class TrainerOptions:
    """The Lightning Trainer options the project's configs set, checked before the run starts
    (any other ``+trainer.<key>`` goes to Lightning as it is, which checks it)."""

    accelerator: Literal["cpu", "gpu", "cuda", "mps", "tpu", "auto"] = "cpu"
    devices: int | Literal["auto"] | list[int] = 1
    num_nodes: int = option(1, min=1)
    strategy: str = "auto"
    precision: Literal[
        "64-true",
        "64",
        "32-true",
        "32",
        "16-mixed",
        "bf16-mixed",
        "bf16-true",
        "16-true",
        64,
        32,
        16,
    ] = "32-true"
    min_epochs: int | None = option(None, min=0)
    max_epochs: int = option(20, min=1)
    max_steps: int = option(-1, min=-1)
    check_val_every_n_epoch: int = option(1, min=1)
    log_every_n_steps: int = option(50, min=1)
    num_sanity_val_steps: int = option(0, min=-1)
    use_distributed_sampler: bool = False
    deterministic: bool | Literal["warn"] = False
    limit_train_batches: int | float | None = option(None, min=0, max=None)
    limit_val_batches: int | float | None = option(None, min=0)
    limit_test_batches: int | float | None = option(None, min=0)
    fast_dev_run: bool | int = False
    default_root_dir: str | None = None
    gradient_clip_val: float | None = option(None, min=0.0)
    accumulate_grad_batches: int = option(1, min=1)


def check_trainer(values: Mapping[str, Any]) -> None:
    """Check the known Trainer options (``trainer.<key>``) with one message per mistake."""
    values = {k: v for k, v in values.items() if k != "_target_"}
    accepted = set(inspect.signature(L.Trainer.__init__).parameters) - {"self"}
    unknown = sorted(set(values) - accepted)
    if unknown:
        raise OptionError(
            f"Unknown option(s) {', '.join(f'trainer.{k}' for k in unknown)}: Lightning's "
            "Trainer takes no such argument (see its documentation for the ones it takes)."
        )
    known = {f for f in TrainerOptions.__dataclass_fields__}
    options = checked(TrainerOptions, {k: v for k, v in values.items() if k in known}, "trainer")
    if options.devices == [] or (isinstance(options.devices, int) and options.devices < 1):
        raise OptionError(f"trainer.devices must be >= 1, 'auto' or a list, got {options.devices}.")
    for stage in ("train", "val", "test"):
        limit = getattr(options, f"limit_{stage}_batches")
        if limit is not None and (limit == 0 or (isinstance(limit, float) and limit > 1)):
            raise OptionError(
                f"trainer.limit_{stage}_batches must be a number of batches >= 1 or a fraction "
                f"in (0, 1], got {limit}."
            )
    if isinstance(options.fast_dev_run, int) and options.fast_dev_run < 0:
        raise OptionError(
            f"trainer.fast_dev_run must be true, false or >= 1, got {options.fast_dev_run}."
        )
