"""The scorers an exported program serves through, one per layout of its serving contract
(:mod:`recsys_seq.exported_contract`): what :class:`~recsys_seq.recommender.Recommender`
calls when ``recsys_seq.load`` is given an exported file instead of a checkpoint, with the
checkpoint's own serving rules around the program's call.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch

from recsys_seq.core.errors import first_line
from recsys_seq.data.catalogue import Catalogue
from recsys_seq.exported_contract import (
    ITEM_SCORES,
    RANKED_CANDIDATES,
    ExportError,
    ServingContract,
    input_names,
)
from recsys_seq.models import NextItemTask


class ExportedScorer:
    """What both layouts share: a program, its contract and its history rule, as
    :class:`~recsys_seq.recommender.WindowScorer` wants them.

    Args:
        program: the loaded program (a callable over tensors).
        contract: its checked contract.
        path: the file, named in refusals.
        device: where its inputs go.
    """

    def __init__(
        self,
        program: Callable[..., Any],
        contract: ServingContract,
        path: Path,
        device: torch.device,
    ) -> None:
        self.program = program
        self.contract = contract
        self.path = path
        self.device = device
        self.exclude_history = contract.exclude_history  # the rule it serves by default

    def inputs(self, batch: dict[str, torch.Tensor]) -> list[torch.Tensor]:
        """The side features of ``batch`` in the program's input order."""
        return [batch[name] for name in self.contract.features]

    def check_rule(self, exclude_history: bool) -> None:
        """Refuse to rank the history with a program that scores its window -inf."""
        if self.contract.exclude_history and not exclude_history:
            raise ExportError(
                f"Exported program {self.path} was exported with exclude_history=true: it "
                "scores each history's own items -inf, so it cannot rank them "
                "(exclude_history=False). Export the checkpoint with exclude_history=false "
                "to serve both rules."
            )

    def outputs_fit(self, outputs: Any) -> bool:
        """Whether one call's ``outputs`` for a batch of one are what the layout promises."""
        raise NotImplementedError

    def check_program(self, catalogue: Catalogue) -> None:
        """Refuse a contract that does not describe its program (one call on item 1)."""
        items = torch.ones(1, 1, dtype=torch.long)
        batch = {name: torch.zeros_like(items) for name in self.contract.features}
        batch |= {
            name: torch.from_numpy(values[1:2])[None]
            for name, values in catalogue.features.items()
            if name in batch
        }
        batch |= {"items": items, "mask": items.bool(), "seen": items, "user": items[:, 0]}
        try:
            with torch.inference_mode():
                fits = self.outputs_fit(
                    self.call({k: v.to(self.device) for k, v in batch.items()}, True)
                )
            why = ""
        except Exception as error:  # noqa: BLE001 - a program of other inputs raises anything
            fits, why = False, f" ({first_line(error)})"
        if not fits:
            raise ExportError(
                f"Exported program {self.path}: its program does not take or give what its "
                f"serving contract says ({self.contract.layout} over "
                f"{self.contract.num_items} items, inputs "
                f"{', '.join(input_names(self.contract.layout, self.contract.features))}){why}."
            )

    def call(self, batch: dict[str, torch.Tensor], exclude_history: bool) -> Any:
        """The program's outputs for ``batch``."""
        raise NotImplementedError


class ExportedItemScores(ExportedScorer):
    """``item_scores``: the program scores every item, and the checkpoint's own top-k
    (:meth:`NextItemTask.serve`) ranks its scores."""

    def score_next(self, batch: dict[str, torch.Tensor]) -> torch.Tensor:
        """``(B, N + 1)`` scores of every item after each window (what NextItemTask.serve
        reads)."""
        return self.program(batch["items"], batch["mask"], *self.inputs(batch))

    def call(self, batch: dict[str, torch.Tensor], exclude_history: bool) -> torch.Tensor:
        return self.score_next(batch)

    def outputs_fit(self, outputs: Any) -> bool:
        return isinstance(outputs, torch.Tensor) and outputs.shape == (
            1,
            self.contract.num_items + 1,
        )

    def serve(self, batch: dict[str, torch.Tensor], k: int, exclude_history: bool) -> dict:
        """Top-``k`` as :meth:`NextItemTask.serve` gives it: that very method, which reads
        only :meth:`score_next`, so the exclusion of the whole ``seen`` history and the
        top-k are the checkpoint's own code, not a copy."""
        self.check_rule(exclude_history)
        return NextItemTask.serve(self, batch, k, exclude_history)  # type: ignore[arg-type]


class ExportedRanking(ExportedScorer):
    """``ranked_candidates``: a two-stage program, which returns its K re-ranked candidates
    and is told which items to leave out (the history beyond its window as well)."""

    def call(self, batch: dict[str, torch.Tensor], exclude_history: bool) -> Any:
        none = torch.zeros_like(batch["items"][:, :1])
        exclude = batch["seen"] if exclude_history else none
        return self.program(batch["items"], batch["mask"], exclude, *self.inputs(batch))

    def outputs_fit(self, outputs: Any) -> bool:
        width = min(self.contract.num_candidates, self.contract.num_items)
        return (
            isinstance(outputs, tuple)
            and len(outputs) == 2
            and all(isinstance(t, torch.Tensor) and t.shape == (1, width) for t in outputs)
        )

    def serve(self, batch: dict[str, torch.Tensor], k: int, exclude_history: bool) -> dict:
        """Top-``k`` of the final ranking, as :meth:`TwoStageTask.serve` gives it for
        ``k <= K``; a longer list (the retriever's order after the K) is not in the program."""
        self.check_rule(exclude_history)
        if k > self.contract.num_candidates:
            raise ExportError(
                f"Exported program {self.path} is a two-stage model that returns its "
                f"{self.contract.num_candidates} re-ranked candidates: ask for k <= "
                f"{self.contract.num_candidates} (got {k}), or serve the checkpoint for longer "
                "lists."
            )
        items, scores = self.call(batch, exclude_history)
        return {"user": batch["user"], "items": items[:, :k], "scores": scores[:, :k]}


SCORERS = {ITEM_SCORES: ExportedItemScores, RANKED_CANDIDATES: ExportedRanking}
