"""Helpers that tests load into real runs through config overrides."""

import os
import signal

import lightning as L


class KillAtStep(L.Callback):
    """SIGKILLs its own process after training step ``step``: an abrupt, unclean death."""

    def __init__(self, step: int) -> None:
        self.step = step

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx) -> None:
        if trainer.global_step == self.step:
            os.kill(os.getpid(), signal.SIGKILL)
