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
    prepared = tmp_path_factory.getbasetemp() / "prepared"  # shared by the experiments
    cfg = compose_config(
        "train",
        tmp_path_factory.mktemp(experiment),
        [
            f"experiment={experiment}",
            f"paths.data_dir={prepared.parent}",
            "debug=fast",
            "data.eval_batch_size=32",  # one batch per stage; DIN ranks every item for it
            "callbacks.progress_bar=null",
            "callbacks.model_summary=null",
            "baselines=false",  # the baseline ranks every user: minutes on big catalogues
        ],
    )
    metrics, objects = train(cfg)
    assert 0.0 <= metrics["test/ndcg@10"] <= 1.0
    assert objects["datamodule"].path.is_relative_to(prepared)
