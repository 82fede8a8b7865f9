"""What a composed config becomes: plain values, and the model spec for a dataset.

Shared by the commands (:mod:`recsys_seq.cli`) and the benchmarks, which build models
exactly as ``recsys-train`` does.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from hydra import compose, initialize_config_dir
from hydra.core.global_hydra import GlobalHydra
from omegaconf import DictConfig, OmegaConf

from data_prep import schema
from recsys_seq.core import conf
from recsys_seq.core.options import OptionError
from recsys_seq.data import SequenceDataModule
from recsys_seq.data.dataset import SINGLE_TARGET
from recsys_seq.models import ModelSpec, model_spec
from recsys_seq.models.encoders import ENCODERS
from recsys_seq.optimized_metric import DEFAULT as DEFAULT_OPTIMIZED_METRIC
from recsys_seq.optimized_metric import check_optimized_metric

AUTO = "auto"  # model.exclude_history: decided by the data (:func:`excludes_history`)
CONF_DIR = str(conf.CONF_DIR)
"""The project's Hydra configs as a folder (for ``initialize_config_dir``)."""
CONF_SEARCH_PATH = conf.CONF_SEARCH_PATH
"""The same configs as ``@hydra.main`` finds them from an installed wheel."""


def compose_train(overrides: list[str]) -> DictConfig:
    """``recsys-train <overrides>``'s config, composed inside a running command (whose
    Hydra already knows the project's configs and the run's search path) or from Python."""
    if GlobalHydra.instance().is_initialized():
        return compose("train", overrides=overrides)
    with initialize_config_dir(CONF_DIR, version_base="1.3"):
        return compose("train", overrides=overrides)


def plain(section: DictConfig | Mapping | None) -> dict[str, Any]:
    """A config section as plain values, interpolations resolved."""
    if section is None:
        return {}
    if isinstance(section, DictConfig):
        return OmegaConf.to_container(section, resolve=True)  # type: ignore[return-value]
    return dict(section)


def model_values(cfg: DictConfig | Mapping) -> dict[str, Any]:
    """A run's ``model`` section and its ``optimized_metric`` as plain values for
    :func:`spec_for_data`, checked as far as they go without the data (so a bad option fails
    before the data is prepared)."""
    values = {
        **plain(cfg["model"]),
        "optimized_metric": check_optimized_metric(
            cfg.get("optimized_metric", DEFAULT_OPTIMIZED_METRIC)
        ),
    }
    names = values.get("side_features") or []
    if isinstance(names, str) or not isinstance(names, list):
        raise OptionError(f"model.side_features must be a list of names, got {names!r}.")
    exclude = values.get("exclude_history", AUTO)
    if exclude != AUTO and not isinstance(exclude, bool):
        raise OptionError(f"model.exclude_history must be true, false or auto, got {exclude!r}.")
    model_spec({**values, "exclude_history": False, "num_items": 2, "side_features": {}}, "model")
    return values


def excludes_history(values: Mapping[str, Any], datamodule: SequenceDataModule) -> bool:
    """``model.exclude_history``, with ``auto`` read off the data: rank without the user's
    history where no user repeats an item in training (ratings, de-duplicated logs: a seen
    item is never the next one, and ranking it only pushes the next one down), with it where
    repeats occur (clicks, plays, purchases of staples)."""
    exclude = values.get("exclude_history", AUTO)
    return not datamodule.data.repeats_in_training() if exclude == AUTO else exclude


def spec_for_data(values: Mapping[str, Any], datamodule: SequenceDataModule) -> ModelSpec:
    """The model spec for this data: catalogue size, item fingerprint, side-feature sizes
    (per-event features and item attributes, both named by ``model.side_features``), and
    whether rankings exclude the user's history (:func:`excludes_history`)."""
    per_event = datamodule.meta.get(schema.META_SIDE_FEATURES, {})
    attributes = datamodule.meta.get(schema.META_ITEM_ATTRIBUTES, {})
    wanted = list(values.get("side_features") or [])
    missing = [name for name in wanted if name not in per_event and name not in attributes]
    if missing:
        available = [*per_event, *attributes]
        raise OptionError(
            f"model.side_features names {missing}, but {datamodule.path} has "
            + (f"only {sorted(available)}" if available else "no side features")
            + "; drop them or prepare the data with them (recsys-prep side_features=[...] for "
            "the log's columns, items=<item table> for item attributes)."
        )
    both = [name for name in wanted if name in per_event and name in attributes]
    if both:
        raise OptionError(
            f"model.side_features names {both}, which {datamodule.path} has both as a log "
            "column and as an item attribute; rename the item table's column in items_format."
        )
    codes = {} if datamodule.data.catalogue is None else datamodule.data.catalogue.attributes
    if datamodule.train_windows == "prefixes" and (values.get("loss") or {}).get("name") == (
        "candidate_bce"
    ):
        raise OptionError(
            "data.train_windows=prefixes trains a model on the state after each window's last "
            "event; loss=candidate_bce (DIN) already trains on random cuts of every window: "
            "use data.train_windows=all with it."
        )
    encoder = (values.get("encoder") or {}).get("name")
    if (
        encoder in ENCODERS.names()
        and getattr(ENCODERS.options(encoder), "sees_whole_window", False)
        and datamodule.train_windows not in SINGLE_TARGET
    ):
        raise OptionError(
            f"model.encoder={encoder} lets each state read the whole window, so training on "
            f"every position of a window (data.train_windows={datamodule.train_windows}) would "
            "show it the events it must predict: use data.train_windows=prefixes."
        )
    return model_spec(
        {
            **values,
            "num_items": datamodule.num_items,
            "item_fingerprint": datamodule.meta["item_fingerprint"],
            "side_features": {name: int(per_event[name]) for name in wanted if name in per_event},
            "item_attributes": {
                name: {"size": int(attributes[name]["size"]), "values": codes[name].shape[1]}
                for name in wanted
                if name in attributes
            },
            "exclude_history": excludes_history(values, datamodule),
        }
    )


def check_max_len(spec: ModelSpec, max_len: int) -> None:
    """Refuse windows longer than the model's position table, before any work."""
    limit = getattr(spec.encoder, "max_len", None)
    if limit is not None and max_len > limit:
        raise OptionError(
            f"data.max_len={max_len} is above the model's longest sequence "
            f"(model.encoder.max_len={limit}); use data.max_len <= {limit}."
        )
