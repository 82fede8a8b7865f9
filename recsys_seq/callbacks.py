"""Lightning callbacks of the project."""

from __future__ import annotations

from typing import Any

import lightning as L
import torch


class RNGStateCheckpoint(L.Callback):
    """Saves the random generators' state in checkpoints and restores it on resume.

    Lightning restores weights, optimiser and loop progress but not the generators that drive
    dropout and negative sampling, so a resumed run would draw different numbers than an
    uninterrupted one. The state is applied at the first training batch after resuming, after
    the data loader's own set-up has consumed its draws, exactly where the interrupted run
    stood when it saved. States are tensors, so checkpoints still load with ``weights_only``.
    """

    def __init__(self) -> None:
        self._pending: dict[str, Any] | None = None

    def on_save_checkpoint(self, trainer, pl_module, checkpoint: dict[str, Any]) -> None:
        checkpoint["rng_state"] = {
            "torch": torch.get_rng_state(),
            "cuda": torch.cuda.get_rng_state_all() if torch.cuda.is_available() else [],
        }

    def on_load_checkpoint(self, trainer, pl_module, checkpoint: dict[str, Any]) -> None:
        self._pending = checkpoint.get("rng_state")

    def on_train_batch_start(self, trainer, pl_module, batch, batch_idx: int) -> None:
        if self._pending is None:
            return
        torch.set_rng_state(self._pending["torch"])
        if self._pending["cuda"]:
            torch.cuda.set_rng_state_all(self._pending["cuda"])
        self._pending = None
