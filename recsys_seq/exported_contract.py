"""The serving contract of a program written by ``recsys-export``.

A program takes item *indices*; what turns original ids into them, and what the caller must
do around the call, travels inside the file as two plain JSON texts (never pickle):

``recsys_seq_contract``, the serving contract (format :data:`FORMAT`)::

    {"format": 1, "model": "sasrec", "layout": "item_scores", "features": ["category"],
     "max_len": 50, "exclude_history": false, "num_items": 1200, "num_candidates": null,
     "pad_index": 0, "item_fingerprint": "9f2c..."}

``recsys_seq_catalogue``, the item catalogue (:meth:`Catalogue.json_record`)::

    {"original_ids": [470256549, 359518691, ...],   # item index i is original_ids[i - 1]
     "counts": [0, 812, 640, ...],                  # N + 1 training counts, PAD first
     "features": {"category": [0, 3, 1, ...]}}      # N + 1 values per item-level feature

Where they are: in a ``.pt2`` and a ``.pt`` (zip archives) the extra files
``<root>/extra/<name>`` (``torch.export.load(path, extra_files={name: ""})``,
``torch.jit.load(path, _extra_files={name: ""})``; ``<root>`` is the file's stem); in an
``.onnx`` the model's ``metadata_props`` under the same keys (ONNX Runtime's
``get_modelmeta().custom_metadata_map``).

The program by ``layout`` (inputs in this order: :func:`input_names`)::

    item_scores        scores = program(items, mask, *features)
                       scores (B, num_items + 1): column i is item index i; column
                       pad_index (0) is PAD, always -inf
    ranked_candidates  candidates, scores = program(items, mask, exclude, *features)
                       each (B, K), K = num_candidates: the retriever's top K (never an
                       ``exclude`` item) in the ranker's order, best first

``items`` (B, T) long item indices, right-padded with 0, the most recent ``max_len`` known
events of each history, oldest first; ``mask`` (B, T) bool, True for a real event; each
feature (B, T) long, the catalogue's value for each event's item; ``exclude`` (B, S) long item
indices never to return (0: none). ``exclude_history`` is the rule the model serves by: when
true the program itself scores each window's items -inf, and a caller who follows the rule
also leaves out the history older than the window (the whole history is what the checkpoint
leaves out); such a program cannot rank the history (``exclude_history=False``).

The catalogue is JSON lists rather than a Parquet or Arrow blob so that ``json`` alone reads
it, with no pyarrow next to torch on a serving host; it costs about ten bytes per item, small
beside the item embedding table the program holds (``4 * embedding_dim`` bytes per item).
:mod:`recsys_seq.exported` reads both back and checks them.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, fields
from pathlib import Path

from recsys_seq.core.errors import UserError
from recsys_seq.data.catalogue import Catalogue

FORMAT = 1
CONTRACT_KEY = "recsys_seq_contract"
CATALOGUE_KEY = "recsys_seq_catalogue"
ITEM_SCORES, RANKED_CANDIDATES = "item_scores", "ranked_candidates"


class ExportError(UserError):
    """An exported program that cannot be served: unreadable, foreign, or inconsistent; or a
    call it cannot answer."""


def input_names(layout: str, features: list[str]) -> list[str]:
    """The program's inputs in call order (the table in the module docstring)."""
    return ["items", "mask", *(["exclude"] if layout == RANKED_CANDIDATES else []), *features]


def _positive_int(value: object) -> bool:
    """A JSON count: an int above 0, and not a bool (an int subclass in Python)."""
    return type(value) is int and value > 0


def _names(value: object) -> bool:
    """A list of distinct, non-empty names: the side features, each one input."""
    return (
        isinstance(value, list)
        and all(isinstance(v, str) and v for v in value)
        and len(set(value)) == len(value)
    )


@dataclass(frozen=True)
class ServingContract:
    """What a caller of an exported program must know (module docstring), as written by
    ``recsys-export`` and checked when read back."""

    model: str  # the model's config name (sasrec, gru, bsarec, din for a two-stage model)
    layout: str  # ITEM_SCORES or RANKED_CANDIDATES
    features: list[str]  # side features, in input order after items, mask (, exclude)
    max_len: int  # the window: the most recent events the model was trained on
    exclude_history: bool  # the history rule; True: the program excludes its window itself
    num_items: int  # N: item indices 1..N, 0 is PAD
    num_candidates: int | None  # K of RANKED_CANDIDATES, else None
    item_fingerprint: str  # hash of the original ids (recsys-prep's), checks the catalogue
    pad_index: int = 0
    format: int = FORMAT

    def to_json(self) -> str:
        """The text stored under :data:`CONTRACT_KEY` (:meth:`from_values` reads it back)."""
        return json.dumps(asdict(self))

    @classmethod
    def from_values(cls, values: object, path: Path) -> ServingContract:
        """The contract of parsed JSON ``values``, or :class:`ExportError` naming ``path``
        and every key that is missing, unexpected or of the wrong type."""
        where = f"Exported program {path}: its serving contract ({CONTRACT_KEY})"
        if not isinstance(values, dict):
            raise ExportError(f"{where} is not a JSON object.")
        if values.get("format") != FORMAT or type(values.get("format")) is not int:
            raise ExportError(
                f"{where} is of format {values.get('format')!r}; this recsys-seq reads format "
                f"{FORMAT}. Export the checkpoint again with this version's recsys-export."
            )
        expected = {f.name for f in fields(cls)}
        if set(values) != expected:
            missing, extra = sorted(expected - set(values)), sorted(set(values) - expected)
            raise ExportError(f"{where} lacks {missing or 'nothing'}, has unknown {extra or '-'}.")
        layout = values["layout"]
        checks = {
            "model": isinstance(values["model"], str) and values["model"] != "",
            "layout": layout in (ITEM_SCORES, RANKED_CANDIDATES),
            "features": _names(values["features"]),
            "max_len": _positive_int(values["max_len"]),
            "exclude_history": isinstance(values["exclude_history"], bool),
            "num_items": _positive_int(values["num_items"]),
            "num_candidates": _positive_int(values["num_candidates"])
            if layout == RANKED_CANDIDATES
            else values["num_candidates"] is None,
            "item_fingerprint": isinstance(values["item_fingerprint"], str),
            "pad_index": type(values["pad_index"]) is int and values["pad_index"] == 0,
        }
        wrong = [key for key, ok in checks.items() if not ok]
        if wrong:
            shown = ", ".join(f"{key}={values[key]!r}"[:80] for key in wrong)
            raise ExportError(f"{where} has wrong types or values: {shown}.")
        return cls(**values)


def extra_texts(contract: ServingContract, catalogue: Catalogue) -> dict[str, str]:
    """``{key: JSON text}`` to store inside an exported file (module docstring)."""
    return {
        CONTRACT_KEY: contract.to_json(),
        CATALOGUE_KEY: json.dumps(catalogue.json_record(), separators=(",", ":")),
    }
