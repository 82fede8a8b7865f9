"""Every experiment config runs (one batch of each stage) on its real dataset."""

from pathlib import Path

import pytest

from recsys_seq import configs
from recsys_seq.workflows.train import train
from tests.helpers import compose_config

pytestmark = pytest.mark.slow  # end-to-end runs and real commands: not in make test-quick

EXPERIMENTS = sorted(p.stem for p in (Path(configs.CONF_DIR) / "experiment").glob("*.yaml"))


@pytest.mark.shared_data
@pytest.mark.parametrize("experiment", EXPERIMENTS)
def test_experiment_fast_dev_run(tmp_path_factory, shared_data, experiment):
    metrics, objects = one_batch(tmp_path_factory, f"experiment={experiment}")
    assert 0.0 <= metrics["test/ndcg@10"] <= 1.0


@pytest.mark.shared_data
@pytest.mark.parametrize(("data", "excluded"), [("s3rec_toys", True), ("s3rec_yelp", False)])
def test_the_recipe_on_another_file_ranks_by_that_files_history_rule(
    tmp_path_factory, shared_data, data, excluded
):
    """The Beauty recipe leaves the history out where no user repeats an item (Toys), and
    ranks it where users do (Yelp), as that file's own runs do."""
    _, objects = one_batch(tmp_path_factory, "experiment=s3rec_beauty_best", f"data={data}")
    assert objects["model"].exclude_history is excluded


def one_batch(tmp_path_factory, *overrides: str) -> tuple[dict, dict]:
    """``train`` over one batch of each stage, on shared data prepared once for the module."""
    prepared = tmp_path_factory.getbasetemp() / "prepared"  # shared by the experiments
    cfg = compose_config(
        "train",
        tmp_path_factory.mktemp("run"),
        [
            *overrides,
            f"paths.data_dir={prepared.parent}",
            "debug=fast",
            "data.eval_batch_size=32",  # one batch per stage; DIN ranks every item for it
            "callbacks.progress_bar=null",
            "callbacks.model_summary=null",
            "baselines=false",  # the baseline ranks every user: minutes on big catalogues
        ],
    )
    metrics, objects = train(cfg)
    assert objects["datamodule"].path.is_relative_to(prepared)
    return metrics, objects
