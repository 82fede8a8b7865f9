"""recsys-tune's search space: checked into parameters, each naming an option recsys-train has,
and its drawn values turned into the overrides a trial runs with, through the real conf/."""

import pytest
from hydra import initialize_config_dir

from recsys_seq import configs
from recsys_seq.core.options import OptionError
from recsys_seq.tune.space import (
    CategoricalParam,
    FloatParam,
    IntParam,
    as_overrides,
    parse_space,
)
from recsys_seq.tune.tuner import check_space, train_overrides
from tests.helpers.tune import SEARCHES

pytestmark = pytest.mark.slow  # end-to-end runs and real commands: not in make test-quick


def test_space_is_checked_into_params():
    space = parse_space(
        {
            "model.optimizer.lr": {"type": "float", "low": 1e-4, "high": 1e-2, "log": True},
            "model.encoder.num_layers": {"type": "int", "low": 1, "high": 3},
            "loss@model.loss": {"type": "categorical", "choices": ["bce", "full_softmax"]},
        }
    )
    assert space == {
        "model.optimizer.lr": FloatParam(1e-4, 1e-2, log=True),
        "model.encoder.num_layers": IntParam(1, 3),
        "loss@model.loss": CategoricalParam(["bce", "full_softmax"]),
    }


@pytest.mark.parametrize(
    "spec, message",
    [
        ({"type": "uniform", "low": 0, "high": 1}, "x.type must be one of float, int"),
        ({"type": "float", "low": 1, "high": 0}, "low must be below high"),
        ({"type": "float", "low": 0, "high": 1, "log": True}, "log: true needs low > 0"),
        ({"type": "int", "low": 1, "high": 8, "log": True, "step": 2}, "without a step"),
        ({"type": "int", "low": 1.5, "high": 3}, "x.low must be an integer"),
        (
            {"type": "float", "low": 0, "high": 1, "lo": 2},
            "x.lo (did you mean search.params.x.low?); search.params.x takes: low, high",
        ),
        ({"type": "categorical", "choices": []}, "x.choices must be a non-empty list"),
        ({"type": "categorical", "choices": [[1, 2]]}, "must be a plain value"),
        ("interval(0, 1)", "x must be a mapping with a type"),
    ],
)
def test_a_bad_space_names_its_key(spec, message):
    with pytest.raises(OptionError) as refused:
        parse_space({"x": spec})
    assert message in str(refused.value) and "search.params.x" in str(refused.value)


def test_an_empty_space_is_refused():
    with pytest.raises(OptionError, match="search.params must map"):
        parse_space(None)


def test_values_become_overrides_recsys_train_reads_back():
    values = {"a": 0.35000000000000003, "b": 3, "c": True, "d": None, "e": "gru", "f": "1e-3"}
    assert as_overrides(values) == ["a=0.35", "b=3", "c=true", "d=null", "e=gru", "f='1e-3'"]


def test_the_commands_own_overrides_are_not_the_trials():
    given = ["tune.n_trials=3", "search=gru", "+search.params.x=1", "model=gru", "debug=fast"]
    assert train_overrides(given) == ["model=gru", "debug=fast"]


@pytest.mark.parametrize("name", SEARCHES)
def test_every_search_space_names_options_its_model_has(name):
    """``search/<model>[_<variant>].yaml`` searches the options of ``model=<model>``."""
    model = name.partition("_")[0]
    with initialize_config_dir(configs.CONF_DIR, version_base="1.3"):
        from hydra import compose

        cfg = compose("tune", overrides=[f"search={name}", f"model={model}"])
        check_space(parse_space(configs.plain(cfg.search)["params"]), [f"model={model}"])


def test_a_parameter_recsys_train_lacks_fails_before_the_study():
    with (
        initialize_config_dir(configs.CONF_DIR, version_base="1.3"),
        pytest.raises(OptionError, match="model.encoder.num_heads"),
    ):
        check_space({"model.encoder.num_heads": CategoricalParam([1, 2])}, ["model=gru"])
