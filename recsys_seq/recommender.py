"""The Python API: a checkpoint, or a program exported from one, that recommends from
histories in original item ids.

    import recsys_seq

    model = recsys_seq.load("outputs/train/runs/<run>/checkpoints/best.ckpt")
    model.recommend(["470256549", "359518691"], k=10)             # one history
    model.recommend_batch([["470256549"], ["359518691", "x"]])     # many: one table
    served = recsys_seq.load("model.pt2")                          # recsys-export's file

The file is all it needs: the weights, the model spec and the item catalogue (original ids,
training counts, item categories) are stored in every checkpoint, and the catalogue and the
serving rules in every exported program (:mod:`recsys_seq.exported`), so neither the
prepared folder nor the working directory matter. Histories are scored in one batched pass:
for a checkpoint through the code path evaluation and ``recsys-recommend`` use
(:meth:`NextItemTask.serve`), for an exported program through the program. Everything else
(ids, windows, the history rule, unknown ids, the popularity fallback) is this module's one
code path for both (:class:`WindowScorer` is all that differs).

Ids follow the policy of :mod:`data_prep.ids` (``" 014"`` and ``14`` are the same item), read
value by value (:mod:`data_prep.id_values`): a boolean, a date, a missing id (None, NaN, "")
or a float that is not an integer is refused with one error naming it and its place. Items
the model does not know are dropped from a history and counted; a history left with no
known item follows ``unknown``: ``skip`` (no recommendations), ``popular`` (the most frequent
training items) or ``error``.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Literal, Protocol

import numpy as np
import polars as pl
import torch

from data_prep import schema
from data_prep.id_values import canonical_values
from recsys_seq import checkpoint, exported
from recsys_seq.core.errors import UserError
from recsys_seq.data.batch import JaggedWindows, PaddedBatchCollator
from recsys_seq.data.catalogue import Catalogue
from recsys_seq.data.dataset import jagged_positions
from recsys_seq.data.facts import DataFacts
from recsys_seq.models.two_stage import feature_tables
from recsys_seq.serving import long_frame

UnknownPolicy = Literal["skip", "popular", "error"]
UNKNOWN_POLICIES: tuple[str, ...] = UnknownPolicy.__args__
BATCH_COLUMNS = ("query", "rank", "item_id", "score", "source", "unknown_items")


@dataclass(frozen=True)
class Recommendation:
    """One history's top-K, best first.

    Attributes:
        items: original item ids.
        scores: the model's scores (popularity fallback: training counts).
        unknown: the history's ids that the model does not know (dropped).
        source: ``model``, ``popular`` (no known item, ``unknown="popular"``) or ``skipped``.
    """

    items: list
    scores: list[float]
    unknown: list
    source: Literal["model", "popular", "skipped"]


class WindowScorer(Protocol):
    """What a :class:`Recommender` scores its windows with: a checkpoint's
    :class:`~recsys_seq.models.NextItemTask` (:meth:`~NextItemTask.serve`, the predict path),
    or an exported program (:class:`recsys_seq.exported_scorers.ExportedScorer`)."""

    exclude_history: bool  # the history rule it serves by when a call does not say

    @property
    def device(self) -> torch.device: ...

    def serve(self, batch: dict[str, torch.Tensor], k: int, exclude_history: bool) -> dict:
        """Top-``k`` per window of a padded ``batch`` (with ``seen``, the whole history):
        ``user (B,)``, ``items (B, k)``, ``scores (B, k)``; ``-inf`` scores are dropped."""
        ...


def load(
    path: str | Path, device: str | torch.device = "cpu", blend: float | None = None
) -> Recommender:
    """The :class:`Recommender` of a checkpoint written by ``recsys-train``, or of a program
    written by ``recsys-export`` (a file ending in ``.pt2``, ``.pt`` or ``.onnx``; ``.onnx``
    needs ONNX Runtime, the ``onnx`` extra), with the same API and results.

    ``blend`` serves a blended two-stage checkpoint (trained with ``rerank.blend``) with the
    ranker's share ``blend`` in [0, 1] instead of the trained one, as ``recsys-recommend
    blend=w`` does; None: as trained. An exported program keeps the share it was exported
    with (``recsys-export blend=w``), so it takes none here.

    Raises:
        CheckpointError: the file is refused (:mod:`recsys_seq.checkpoint`), or ``blend`` is
            given for a checkpoint that is not a blend.
        ExportError: an exported file is refused (:mod:`recsys_seq.exported`).
        ValueError: ``blend`` is not a share in [0, 1], or is given with an exported file.

    A checkpoint is read as data only (:mod:`recsys_seq.checkpoint`: ``weights_only=True``,
    the model rebuilt from the project's registries, its catalogue checked against the
    model's item fingerprint); an exported file by torch.export, TorchScript or ONNX Runtime,
    with its JSON serving contract and catalogue checked first (:mod:`recsys_seq.exported`).
    """
    if Path(path).suffix in exported.SUFFIXES:
        if blend is not None:
            raise ValueError(
                f"blend={blend}: exported program {path} serves the share it was exported with; "
                "export the checkpoint with recsys-export blend=<share>, or load the checkpoint."
            )
        scorer, catalogue, contract = exported.open_export(path, device)
        return Recommender(scorer, catalogue, contract.max_len, contract.model, contract.features)
    trained = checkpoint.open_checkpoint(path)
    catalogue = trained.served_catalogue()
    facts = DataFacts(item_counts=catalogue.counts, catalogue=catalogue)
    task = trained.build(facts, blend=blend).to(device)
    # both stages' side features for a two-stage model
    features = list(feature_tables(task))
    return Recommender(task, catalogue, trained.data.max_len, trained.spec.name, features)


class Recommender:
    """A trained model that recommends next items for histories of original item ids.

    Args:
        scorer: what scores the windows (:class:`WindowScorer`).
        catalogue: its items (:class:`Catalogue`).
        max_len: the longest window the model was trained on; older events are dropped.
        name: the model's config name.
        features: the side features its batches carry (item-level ones are read from the
            catalogue; a model that reads per-event ones cannot serve lists of ids).
    """

    def __init__(
        self,
        scorer: WindowScorer,
        catalogue: Catalogue,
        max_len: int,
        name: str,
        features: Sequence[str],
    ) -> None:
        self.scorer = scorer
        self.catalogue = catalogue
        self.max_len = max_len
        self._name = name
        self._features = list(features)
        self._per_event = sorted(set(features) - set(catalogue.features))
        self._collate = PaddedBatchCollator()

    @property
    def name(self) -> str:
        """The model's config name (``sasrec``, ``gru``, ``din``, ...)."""
        return self._name

    @property
    def device(self) -> torch.device:
        return self.scorer.device

    @property
    def exclude_history(self) -> bool:
        """Whether the history is left out of the results when a call does not say (as the
        model was trained, or exported)."""
        return self.scorer.exclude_history

    def recommend(
        self,
        history: Sequence,
        k: int = 10,
        *,
        exclude_history: bool | None = None,
        unknown: UnknownPolicy = "skip",
    ) -> Recommendation:
        """The top-``k`` next items after ``history`` (oldest first), as a
        :class:`Recommendation`. See :meth:`recommend_batch` for the options."""
        frame, items = self._recommend([history], k, exclude_history, unknown, 1)
        unknown_ids = [history[i] for i in np.flatnonzero(items == 0)]
        if frame.is_empty():
            return Recommendation([], [], unknown_ids, "skipped")
        return Recommendation(
            frame["item_id"].to_list(), frame["score"].to_list(), unknown_ids, frame["source"][0]
        )

    def recommend_batch(
        self,
        histories: Sequence[Sequence],
        k: int = 10,
        *,
        exclude_history: bool | None = None,
        unknown: UnknownPolicy = "skip",
        batch_size: int = 256,
    ) -> pl.DataFrame:
        """Top-``k`` for each history, as one table.

        Args:
            histories: lists of original item ids, oldest first: integers or text under the
                id policy (:mod:`data_prep.id_values`: booleans, dates, missing ids and
                floats that are not integers are refused: ``IdValueError``).
            k: recommendations per history.
            exclude_history: never recommend an item of the history again; None (the
                default): as the model was trained (``model.exclude_history`` of its run,
                or the ``exclude_history`` it was exported with).
            unknown: a history with no known item: ``skip`` (no rows), ``popular`` (the most
                frequent training items) or ``error`` (:class:`UserError`).
            batch_size: histories scored at once.

        Returns:
            ``query, rank, item_id, score, source, unknown_items``: ``query`` is the history's
            position in ``histories``, ``source`` ``model`` or ``popular``, ``unknown_items``
            how many of its ids were dropped as unknown. No histories: no rows.
        """
        return self._recommend(histories, k, exclude_history, unknown, batch_size)[0]

    def _recommend(
        self,
        histories: Sequence[Sequence],
        k: int,
        exclude_history: bool | None,
        unknown: str,
        batch_size: int,
    ) -> tuple[pl.DataFrame, np.ndarray]:
        """:meth:`recommend_batch`'s table, and the item index of every history event (flat,
        in order; 0 for an id the model does not know)."""
        self._check(k, unknown, batch_size)
        lengths, items = self._known_items(histories)
        n = len(histories)
        query = np.repeat(np.arange(n, dtype=np.int64), lengths)
        known = items != 0
        dropped = np.bincount(query[~known], minlength=n)
        lengths = np.bincount(query[known], minlength=n)
        empty = np.flatnonzero(lengths == 0)
        if len(empty) and unknown == "error":
            shown = ", ".join(map(str, empty[:10])) + (", ..." if len(empty) > 10 else "")
            raise UserError(
                f"{len(empty)} histor{'y has' if len(empty) == 1 else 'ies have'} no item the "
                f"model knows (positions {shown}); pass unknown=skip or unknown=popular."
            )
        served = np.flatnonzero(lengths > 0)
        query, events = query[known], items[known]
        parts = [
            self._score(query, events, lengths, served[i : i + batch_size], k, exclude_history)
            for i in range(0, len(served), batch_size)
        ]
        if len(empty) and unknown == "popular":
            parts.append(self._popular(empty, k))
        frame = (pl.concat(parts) if parts else _empty_frame()).sort("query", "rank")
        frame = frame.with_columns(
            item_id=self.catalogue.ids(frame["item"].to_numpy()),
            unknown_items=pl.Series(dropped, dtype=pl.Int64).gather(frame["query"]),
        ).select(BATCH_COLUMNS)
        return frame, items

    def _check(self, k: int, unknown: str, batch_size: int) -> None:
        if isinstance(k, bool) or not isinstance(k, int) or k < 1:
            raise UserError(f"k must be a positive integer, got {k!r}.")
        if unknown not in UNKNOWN_POLICIES:
            raise UserError(
                f"unknown must be one of {', '.join(UNKNOWN_POLICIES)}, got {unknown!r}."
            )
        if isinstance(batch_size, bool) or not isinstance(batch_size, int) or batch_size < 1:
            raise UserError(f"batch_size must be a positive integer, got {batch_size!r}.")
        if self._per_event:
            raise UserError(
                f"The {self.name} model also reads per-event side features "
                f"({', '.join(self._per_event)}), which a list of item ids does not carry; "
                "recommend for the dataset's users with recsys-recommend."
            )

    def _known_items(self, histories: Sequence[Sequence]) -> tuple[np.ndarray, np.ndarray]:
        """``(lengths, items)``: each history's length, and the item index of every event,
        flat in order (0 where the model does not know the id)."""
        if isinstance(histories, (str, bytes)) or not isinstance(histories, Sequence):
            raise UserError("histories must be a list of lists of item ids.")
        if any(isinstance(h, (str, bytes)) or not isinstance(h, Sequence) for h in histories):
            raise UserError("each history must be a list of item ids (a string is one id).")
        lengths, ids = canonical_values(histories, "item")
        return lengths, self.catalogue.indices(ids)

    @torch.inference_mode()
    def _score(
        self,
        query: np.ndarray,
        items: np.ndarray,
        lengths: np.ndarray,
        chosen: np.ndarray,
        k: int,
        exclude_history: bool | None,
    ) -> pl.DataFrame:
        """The model's top-``k`` for the histories ``chosen`` (each with a known item)."""
        starts = np.searchsorted(query, chosen)  # query is sorted: histories in order
        seen = torch.from_numpy(items[jagged_positions(starts, lengths[chosen])])
        window = np.minimum(lengths[chosen], self.max_len)
        recent = items[jagged_positions(starts + lengths[chosen] - window, window)]
        windows = JaggedWindows(
            items=torch.from_numpy(recent),
            lengths=torch.from_numpy(window),
            user=torch.from_numpy(chosen),
            features={
                name: torch.from_numpy(values[recent])
                for name, values in self.catalogue.features.items()
                if name in self._features
            },
            seen=seen,
            seen_lengths=torch.from_numpy(lengths[chosen]),
        )
        batch = {name: t.to(self.device) for name, t in self._collate(windows).items()}
        if exclude_history is None:  # as the model was trained
            exclude_history = self.scorer.exclude_history
        top = self.scorer.serve(batch, k, exclude_history)
        frame = long_frame(top["user"].cpu(), top["items"].cpu(), top["scores"].cpu())
        return frame.select(
            pl.col(schema.USER).cast(pl.Int64).alias("query"),
            pl.col("rank").cast(pl.Int64),
            pl.col(schema.ITEM).cast(pl.Int64).alias("item"),
            pl.col("score").cast(pl.Float64),
            source=pl.lit("model"),
        )

    def _popular(self, queries: np.ndarray, k: int) -> pl.DataFrame:
        """The catalogue's ``k`` most popular items for each query."""
        top = self.catalogue.most_popular(k)
        return pl.DataFrame(
            {
                "query": np.repeat(queries, len(top)),
                "rank": np.tile(np.arange(1, len(top) + 1, dtype=np.int64), len(queries)),
                "item": np.tile(top, len(queries)),
                "score": np.tile(self.catalogue.counts[top].astype(np.float64), len(queries)),
                "source": "popular",
            }
        )


def _empty_frame() -> pl.DataFrame:
    return pl.DataFrame(
        schema={
            "query": pl.Int64,
            "rank": pl.Int64,
            "item": pl.Int64,
            "score": pl.Float64,
            "source": pl.String,
        }
    )
