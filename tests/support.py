"""Helpers that tests load into real runs through config overrides."""

import os
import signal
from pathlib import Path

import lightning as L

from recsys_seq.core.targets import ENTRY_POINT_GROUPS


def callback_plugin(folder: Path, *classes: type) -> Path:
    """An installed package's metadata in ``folder`` (put it on ``sys.path`` or PYTHONPATH)
    that registers ``classes`` as entry points of the callbacks group, so that a config may
    name them (``+callbacks.<name>._target_=<module>.<Class>``)."""
    info = folder / "recsys_seq_test_callbacks-0.dist-info"
    info.mkdir(parents=True, exist_ok=True)
    (info / "METADATA").write_text(
        "Metadata-Version: 2.1\nName: recsys-seq-test-callbacks\nVersion: 0\n"
    )
    lines = [f"{c.__name__} = {c.__module__}:{c.__qualname__}" for c in classes]
    group = ENTRY_POINT_GROUPS[("callbacks", "*")]
    (info / "entry_points.txt").write_text(f"[{group}]\n" + "\n".join(lines) + "\n")
    return folder


class KillAtStep(L.Callback):
    """SIGKILLs its own process after training step ``step``: an abrupt, unclean death."""

    def __init__(self, step: int) -> None:
        self.step = step

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx) -> None:
        if trainer.global_step == self.step:
            os.kill(os.getpid(), signal.SIGKILL)
