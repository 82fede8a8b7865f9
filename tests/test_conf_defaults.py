"""conf/ owns the defaults: every default an option class declares (for the Python API and
for reading checkpoints) is the value the composed config gives, so the two cannot drift."""

import dataclasses
from pathlib import Path

import pytest
from omegaconf import OmegaConf

from recsys_seq import configs
from recsys_seq.data.options import DataOptions
from recsys_seq.models import ModelSpec
from recsys_seq.models.encoders import ENCODERS
from recsys_seq.models.losses import LOSSES
from recsys_seq.models.scorers import SCORERS
from recsys_seq.models.spec import OptimizerOptions
from recsys_seq.workflows.evaluate import EvalOptions
from recsys_seq.workflows.export import ExportOptions
from recsys_seq.workflows.recommend import RecommendOptions
from tests.helpers import compose_config

# interpolated from other sections, or set per run
NOT_DEFAULTS = {
    "path",
    "source",
    "cache_dir",
    "array_cache",
    "seed",
    "name",
    "num_items",
    "item_fingerprint",
}
NOT_DEFAULTS |= {"side_features", "item_attributes"}  # names in conf, sizes from the data


def declared_defaults(cls) -> dict:
    out = {}
    for field in dataclasses.fields(cls):
        if field.name in NOT_DEFAULTS:
            continue
        if field.default is not dataclasses.MISSING:
            out[field.name] = field.default
        elif field.default_factory is not dataclasses.MISSING:
            out[field.name] = field.default_factory()
    return out


def disagreements(cls, section: dict) -> dict:
    return {
        name: (default, section.get(name, "<absent>"))
        for name, default in declared_defaults(cls).items()
        if not dataclasses.is_dataclass(default)
        and default is not None
        and section.get(name) != default
    }


def composed(name: str, tmp_path, *overrides: str) -> dict:
    return OmegaConf.to_container(compose_config(name, tmp_path, list(overrides)), resolve=True)


@pytest.mark.parametrize("model", ["recommender", "sasrec", "gru", "din"])
def test_model_and_data_defaults_are_the_configs(tmp_path, model):
    cfg = composed("train", tmp_path, f"model={model}")
    assert not disagreements(DataOptions, cfg["data"])
    # the spec takes the run's one optimised metric from the top level of the config, and
    # holds what exclude_history=auto decided for the data (configs.excludes_history)
    assert cfg["model"]["exclude_history"] == configs.AUTO
    spec_section = {**cfg["model"], "optimized_metric": cfg["optimized_metric"]}
    assert set(disagreements(ModelSpec, spec_section)) == {"exclude_history"}
    if model == "recommender":  # the base every model config starts from (din tunes its own)
        assert not disagreements(OptimizerOptions, cfg["model"]["optimizer"])
    for part, registry in (("encoder", ENCODERS), ("scorer", SCORERS), ("loss", LOSSES)):
        section = cfg["model"][part]
        assert not disagreements(registry.options(section["name"]), section), part


@pytest.mark.parametrize(
    "command, options",
    [("eval", EvalOptions), ("recommend", RecommendOptions), ("export", ExportOptions)],
)
def test_command_defaults_are_the_configs(tmp_path, command, options):
    assert not disagreements(options, composed(command, tmp_path, "ckpt_path=x.ckpt"))


def test_every_registered_part_has_a_config_with_its_defaults(tmp_path):
    for kind, registry in (("encoder", ENCODERS), ("scorer", SCORERS), ("loss", LOSSES)):
        for name in registry.names():
            cfg = composed("train", tmp_path, "model=recommender", f"{kind}@model.{kind}={name}")
            assert not disagreements(registry.options(name), cfg["model"][kind]), (kind, name)


def test_every_shared_dataset_has_a_data_config_and_every_data_config_a_source():
    """``data=<name>`` works for every dataset of the shared folder, with the window
    length the dataset's entry names (the benchmarks' fixed-length padding)."""
    from recsys_seq.configs import CONF_DIR
    from recsys_seq.data.shared import SHARED_DATASETS

    folder = Path(CONF_DIR) / "data"
    for dataset in SHARED_DATASETS:
        composed = compose_config("train", Path("unused"), [f"data={dataset.name}"]).data
        assert composed.source == dataset.name, dataset.name
        assert composed.max_len == dataset.max_len, dataset.name
    shipped = {p.stem for p in folder.glob("*.yaml")} - {"default", "shared", "demo"}
    assert shipped == {d.name for d in SHARED_DATASETS}
