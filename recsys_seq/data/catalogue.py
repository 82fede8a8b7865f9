"""The item vocabulary a model was trained on, carried by every checkpoint and every
exported program.

A model's item indices mean nothing without the prepared folder's ``items.parquet``; the
catalogue keeps what serving needs of it (original ids, training counts for the popularity
fallback, item-level side features) with the weights, so a checkpoint recommends in original
ids from any folder and without the data. It is stored as tensors and lists of strings only,
so ``torch.load(weights_only=True)`` reads it, and it is checked against the item fingerprint
the model spec carries (the same hash recsys-prep wrote), so a catalogue that was altered or
belongs to other items is refused. An exported program carries the same values as JSON
(:meth:`Catalogue.json_record`), read back through the same checks.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path
from typing import Any

import numpy as np
import polars as pl
import torch

from data_prep import schema
from data_prep.ids import canonical_series
from data_prep.prep import item_fingerprint

ITEM_LEVEL_FEATURES = ("category",)
"""Side features that belong to the item (one value per item in ``items.parquet``); the
others (``event``, ``gap``) belong to each event of a history."""
WIDE_ID_TYPES = {str(dtype): dtype for dtype in (pl.UInt64, pl.Int128, pl.UInt128)}
"""Integer id types that int64 does not hold (a parquet log's UInt64 hashes, a csv's larger
integers): a stored catalogue keeps their ids as decimal text under the type's name
(:data:`ID_TYPE_KEY`), so they come back as they were; an int64 vector would wrap them."""
ID_TYPE_KEY = "original_id_type"


class CatalogueError(ValueError):
    """A stored catalogue that is not what the project writes."""


@dataclass(frozen=True)
class Catalogue:
    """Items ``1..N`` of a prepared dataset.

    Attributes:
        original_ids: ``(N,)`` the original id of item ``i`` at position ``i - 1``, of the
            integer type or String of ``items.parquet`` (the canonical ids of
            :mod:`data_prep.ids`).
        counts: ``(N + 1,)`` int64 training occurrences per item, PAD 0.
        features: item-level side features present in the data, each ``(N + 1,)`` int64
            (PAD 0).
        attributes: the item table's attributes (``recsys-prep items=``), each ``(N + 1, V)``
            int64 codes, 0 = none (``V`` = 1, or the most values of any item for a
            multi-valued one). Read from the prepared folder only: a trained model holds the
            codes it embeds in its own weights (:class:`~recsys_seq.models.embedder.
            ItemAttributes`), so the stored catalogue leaves them out.
    """

    original_ids: pl.Series
    counts: np.ndarray
    features: dict[str, np.ndarray]
    attributes: dict[str, np.ndarray] = field(default_factory=dict)

    @property
    def num_items(self) -> int:
        return len(self.original_ids)

    @classmethod
    def load(cls, path: Path, num_items: int, attributes: Iterable[str] = ()) -> Catalogue:
        """Read ``path/items.parquet`` (already checked by the prepared-folder contract), with
        the item ``attributes`` meta.json lists."""
        frame = pl.read_parquet(path / schema.ITEMS_FILE)
        if not frame[schema.ITEM].is_sorted():  # prep writes it sorted; a sort copies it whole
            frame = frame.sort(schema.ITEM)
        index = frame[schema.ITEM].to_numpy()

        def by_item(column: str) -> np.ndarray:
            out = np.zeros(num_items + 1, dtype=np.int64)
            out[index] = frame[column].fill_null(0).to_numpy()
            return out

        features = {name: by_item(name) for name in ITEM_LEVEL_FEATURES if name in frame.columns}
        coded = {name: _codes_by_item(frame[name], index, num_items) for name in attributes}
        return cls(frame[schema.ORIGINAL_ID], by_item(schema.COUNT), features, coded)

    def record(self) -> dict[str, Any]:
        """Checkpoint-safe values: tensors, and ids as :func:`_id_record` stores them."""
        return {
            **_id_record(self.original_ids, torch.tensor),
            "counts": torch.from_numpy(self.counts),
            "features": {name: torch.from_numpy(v) for name, v in self.features.items()},
        }

    @classmethod
    def from_record(cls, record: object, num_items: int, fingerprint: str) -> Catalogue:
        """The catalogue of a checkpoint's record, refused unless it has exactly ``num_items``
        items whose ids hash to ``fingerprint`` and well-formed counts and features.

        Raises:
            CatalogueError: saying what is wrong.
        """
        if not isinstance(record, Mapping):
            raise CatalogueError("its item catalogue is not a mapping")
        ids = _original_ids(record.get("original_ids"), record.get(ID_TYPE_KEY))
        if len(ids) != num_items:
            raise CatalogueError(f"its catalogue lists {len(ids)} items, the model has {num_items}")
        if item_fingerprint(ids) != fingerprint:
            raise CatalogueError("its catalogue's item ids do not match the model's fingerprint")
        counts = _item_vector(record.get("counts"), num_items, "counts")
        features = record.get("features")
        if not isinstance(features, Mapping) or not set(features) <= set(ITEM_LEVEL_FEATURES):
            raise CatalogueError(f"its catalogue features must be among {ITEM_LEVEL_FEATURES}")
        return cls(
            ids,
            counts,
            {name: _item_vector(v, num_items, name) for name, v in features.items()},
        )

    def json_record(self) -> dict[str, Any]:
        """The catalogue as plain JSON values, for an exported program (read by ``json``
        alone, no torch or polars): ``original_ids`` a list of integers or strings in index
        order (item ``i`` at position ``i - 1``; :func:`_id_record`), ``counts`` and each
        feature a list of ``N + 1`` integers, PAD first."""
        return {
            **_id_record(self.original_ids, np.ndarray.tolist),
            "counts": self.counts.tolist(),
            "features": {name: values.tolist() for name, values in self.features.items()},
        }

    @classmethod
    def from_json_record(cls, record: object, num_items: int, fingerprint: str) -> Catalogue:
        """:meth:`json_record`'s values back, through the checks of :meth:`from_record`
        (lists of integers become the int64 vectors it checks; anything else is left for
        it to refuse).

        Raises:
            CatalogueError: saying what is wrong.
        """
        if not isinstance(record, Mapping):
            raise CatalogueError("its item catalogue is not a mapping")
        features = record.get("features")
        if isinstance(features, Mapping):
            features = {name: _int64_vector(values) for name, values in features.items()}
        return cls.from_record(
            {
                "original_ids": _int64_vector(record.get("original_ids")),
                ID_TYPE_KEY: record.get(ID_TYPE_KEY),
                "counts": _int64_vector(record.get("counts")),
                "features": features,
            },
            num_items,
            fingerprint,
        )

    @cached_property
    def _lookup(self) -> pl.DataFrame:
        """``id`` (canonical text) -> ``index``, built once: every request joins against it."""
        return pl.DataFrame(
            {"id": canonical_series(self.original_ids), "index": np.arange(1, self.num_items + 1)}
        )

    def indices(self, ids: pl.Series) -> np.ndarray:
        """Item indices of original ``ids`` (any id type; the id policy of
        :mod:`data_prep.ids` applies, so ``" 014"`` finds item ``14``); 0 where unknown."""
        asked = pl.DataFrame({"id": canonical_series(ids.rename("id"))})
        found = asked.join(self._lookup, on="id", how="left", maintain_order="left")
        return found["index"].fill_null(0).to_numpy().astype(np.int64)

    def most_popular(self, k: int) -> np.ndarray:
        """The ``k`` most frequent training items (ties: the lower index), best first: the
        recommendation for someone of whom nothing is known."""
        return np.argsort(-self.counts[1:], kind="stable")[:k] + 1

    def ids(self, indices: np.ndarray) -> pl.Series:
        """Original ids of item ``indices`` (1..N)."""
        return self.original_ids.gather(np.asarray(indices, dtype=np.int64) - 1)


def _codes_by_item(column: pl.Series, index: np.ndarray, num_items: int) -> np.ndarray:
    """``(N + 1, V)`` an attribute column's codes at the rows of items ``index``, a list column
    (multi-valued) left-aligned and padded with 0 (no loop over items)."""
    if not isinstance(column.dtype, pl.List):
        out = np.zeros((num_items + 1, 1), dtype=np.int64)
        out[index, 0] = column.fill_null(0).to_numpy()
        return out
    lengths = column.list.len().fill_null(0).to_numpy().astype(np.int64)
    out = np.zeros((num_items + 1, max(1, int(lengths.max(initial=0)))), dtype=np.int64)
    rows = np.repeat(index, lengths)
    slots = np.arange(lengths.sum()) - np.repeat(np.cumsum(lengths) - lengths, lengths)
    out[rows, slots] = column.explode().drop_nulls().to_numpy()
    return out


def _id_record(ids: pl.Series, vector: Callable[[np.ndarray], object]) -> dict[str, Any]:
    """The ``original_ids`` of a stored catalogue: integer ids that int64 holds as
    ``vector`` of their int64 array; text ids, and the integers of :data:`WIDE_ID_TYPES` as
    decimal text with their type's name (exact for any JSON reader too), as strings."""
    if ids.dtype.is_integer() and str(ids.dtype) not in WIDE_ID_TYPES:
        return {"original_ids": vector(ids.cast(pl.Int64).to_numpy())}
    wide = {ID_TYPE_KEY: str(ids.dtype)} if ids.dtype.is_integer() else {}
    return {"original_ids": ids.cast(pl.String).to_list(), **wide}


def _original_ids(value: object, id_type: object) -> pl.Series:
    """:func:`_id_record`'s ids back, as the Series they were stored from."""
    name = schema.ORIGINAL_ID
    if id_type is not None:
        return _wide_ids(value, id_type)
    if isinstance(value, torch.Tensor) and value.dtype == torch.int64 and value.dim() == 1:
        return pl.Series(name, value.numpy(), dtype=pl.Int64)
    if isinstance(value, list) and all(isinstance(v, str) for v in value):
        return pl.Series(name, value, dtype=pl.String)
    raise CatalogueError("its catalogue's original_ids are neither an int64 vector nor strings")


def _wide_ids(value: object, id_type: object) -> pl.Series:
    """Ids of a type of :data:`WIDE_ID_TYPES`, stored as decimal text."""
    dtype = WIDE_ID_TYPES.get(id_type) if isinstance(id_type, str) else None
    if dtype is None:
        raise CatalogueError(
            f"its catalogue's {ID_TYPE_KEY} {id_type!r} is none of {', '.join(WIDE_ID_TYPES)}"
        )
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise CatalogueError(f"its catalogue's {id_type} original_ids are not decimal strings")
    try:
        return pl.Series(schema.ORIGINAL_ID, value, dtype=pl.String).cast(dtype)
    except pl.exceptions.InvalidOperationError:
        raise CatalogueError(f"its catalogue's original_ids are not all {id_type} values") from None


def _item_vector(value: object, num_items: int, what: str) -> np.ndarray:
    if (
        not isinstance(value, torch.Tensor)
        or value.dtype != torch.int64
        or tuple(value.shape) != (num_items + 1,)
        or bool((value < 0).any())
    ):
        raise CatalogueError(
            f"its catalogue's {what} must be {num_items + 1} non-negative int64 values"
        )
    return value.numpy().copy()


def _int64_vector(value: object) -> object:
    """A JSON list of integers as an int64 tensor (booleans are not integers here); any
    other value unchanged."""
    if not isinstance(value, list) or not all(type(v) is int for v in value):
        return value
    try:
        return torch.tensor(value, dtype=torch.int64)
    except (OverflowError, RuntimeError):
        raise CatalogueError("its catalogue holds integers beyond int64") from None
