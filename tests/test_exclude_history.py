"""model.exclude_history=auto: rankings leave out the user's history exactly where the log's
training events never repeat an item, decided from the training events alone."""

from types import SimpleNamespace

import pytest
import torch
from hydra import compose, initialize_config_dir
from hypothesis import given, settings
from hypothesis import strategies as st

from data_prep.demo import demo_config
from data_prep.prep import prepare
from recsys_seq import configs
from recsys_seq.core.options import OptionError
from tests.helpers import sequences, short_checkpoint


def repeats_by_hand(histories: list[list[int]]) -> bool:
    """The reference: some user names one item twice before the validation target."""
    return any(len(set(h[:-2])) < len(h[:-2]) for h in histories)


@settings(max_examples=200, deadline=None)
@given(
    st.lists(st.lists(st.integers(1, 6), min_size=3, max_size=9), min_size=1, max_size=8),
)
def test_repeats_in_training_matches_a_reference(histories):
    assert sequences(histories, num_items=6).repeats_in_training() == repeats_by_hand(histories)


def test_the_held_out_targets_are_not_looked_at():
    # each target repeats an item of its user's history, and one user's items are another's
    assert not sequences([[1, 2, 1, 2], [2, 1, 3, 1], [1, 2, 3]]).repeats_in_training()
    assert sequences([[1, 2, 1, 3, 4]]).repeats_in_training()  # the third event repeats


@pytest.mark.parametrize(
    ("value", "repeats", "expected"),
    [
        ("auto", False, True),
        ("auto", True, False),
        (True, True, True),
        (False, False, False),
    ],
)
def test_auto_follows_the_data_and_a_given_value_wins(value, repeats, expected):
    histories = [[1, 2, 1, 3, 4]] if repeats else [[1, 2, 3, 4]]
    datamodule = SimpleNamespace(data=sequences(histories))
    assert configs.excludes_history({"exclude_history": value}, datamodule) is expected


def compose_model_values(*overrides: str) -> dict:
    with initialize_config_dir(configs.CONF_DIR, version_base="1.3"):
        cfg = compose("train", overrides=list(overrides))
    return configs.model_values(cfg)


@pytest.mark.parametrize("value", ["maybe", "1", "[true]", "null", "'true'"])
def test_other_values_are_refused_before_the_data(value):
    with pytest.raises(OptionError, match="exclude_history must be true, false or auto"):
        compose_model_values(f"model.exclude_history={value}")


@pytest.mark.parametrize("model", ["sasrec", "gru", "din"])
def test_every_model_defaults_to_auto(model):
    assert compose_model_values(f"model={model}")["exclude_history"] == "auto"


@pytest.mark.parametrize("dedup", ["none", "all"])
def test_a_run_records_what_auto_decided(tmp_path, dedup, capsys):
    """The bundled click log repeats items; de-duplicated (dedup=all) it no longer does: the
    checkpoint stores the decision, and the run says it."""
    data = tmp_path / "data"
    prepare({**demo_config(data), "dedup": dedup})
    checkpoint = short_checkpoint(tmp_path / "run", data)
    record = torch.load(checkpoint, map_location="cpu", weights_only=True)["recsys_seq"]
    assert record["model"]["exclude_history"] is (dedup == "all")
    said = capsys.readouterr().out
    assert ("leave out each user's history" in said) is (dedup == "all")
    assert ("include each user's history" in said) is (dedup == "none")
