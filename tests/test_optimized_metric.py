"""One optimized_metric drives the best checkpoint, early stopping, the scheduler and sweeps;
any cut-offs work beside it."""

import pytest
from lightning.pytorch.callbacks import Callback

from recsys_seq.core.options import OptionError
from recsys_seq.workflows.train import train
from tests.helpers import callback_plugin, train_config

FEW_BATCHES = (
    "trainer.max_epochs=2",
    "trainer.limit_train_batches=2",
    "trainer.limit_val_batches=1",
    "trainer.limit_test_batches=1",
    "baselines=false",
    "logger=[]",
)


class ProgressBarKeys(Callback):
    """Records what the progress bar shows at each epoch end."""

    seen: list[set[str]] = []

    def on_train_epoch_end(self, trainer, pl_module) -> None:
        ProgressBarKeys.seen.append(set(trainer.progress_bar_metrics))


def test_cut_offs_without_the_optimised_one_still_train(tmp_path, demo_dir):
    cfg = train_config(tmp_path, demo_dir, *FEW_BATCHES, "model.ks=[5,20]")
    metrics, objects = train(cfg)
    assert {"val/ndcg@5", "val/ndcg@20", "val/ndcg@10", "val/best_ndcg@10"} <= set(metrics)
    assert {"test/hr@5", "test/hr@10", "test/hr@20"} <= set(metrics)
    assert not any(key.endswith("@1") for key in metrics)


def test_every_consumer_follows_the_one_key(tmp_path, tmp_path_factory, demo_dir, monkeypatch):
    plugin = callback_plugin(tmp_path_factory.mktemp("plugin"), ProgressBarKeys)
    monkeypatch.syspath_prepend(str(plugin))  # ProgressBarKeys, registered as a package's
    cfg = train_config(
        tmp_path,
        demo_dir,
        *FEW_BATCHES,
        "optimized_metric=val/hr@50",
        "model.ks=[10]",
        "+model.scheduler={name: reduce_on_plateau}",
        f"+callbacks.keys._target_={__name__}.ProgressBarKeys",
    )
    metrics, objects = train(cfg)
    assert metrics["val/best_hr@50"] == max(metrics["val/best_hr@50"], metrics["val/hr@50"])
    callbacks = objects["trainer"].callbacks
    monitors = {type(c).__name__: c.monitor for c in callbacks if getattr(c, "monitor", None)}
    assert monitors == {"ModelCheckpoint": "val/hr@50", "EarlyStopping": "val/hr@50"}
    scheduler = objects["trainer"].lr_scheduler_configs[0]
    assert scheduler.monitor == "val/hr@50"
    assert objects["model"].spec.best_key == "val/best_hr@50"
    assert ProgressBarKeys.seen and all("val/hr@50" in keys for keys in ProgressBarKeys.seen)


@pytest.mark.parametrize(
    "value", ["ndcg@10", "val/auc@10", "val/ndcg@0", "val/ndcg@10x", "test/ndcg@10", "5"]
)
def test_a_metric_no_model_logs_is_refused_before_any_work(tmp_path, value):
    cfg = train_config(tmp_path, tmp_path / "no-data-here", f"optimized_metric={value}")
    with pytest.raises(OptionError, match=r"optimized_metric must be a validation metric"):
        train(cfg)
