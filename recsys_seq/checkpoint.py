"""The one checkpoint loader: a checkpoint is data, never a program.

recsys-eval, recsys-recommend, recsys-export and resuming a run all read checkpoints here.
A checkpoint is opened with ``torch.load(weights_only=True)`` (tensors and plain containers
only, no unpickling of objects) and must carry the project's record, written at every save
by the task (:meth:`NextItemTask.on_save_checkpoint`)::

    checkpoint["recsys_seq"] = {
        "format": 3,
        "model": {...},      # a ModelSpec as plain values: names of its parts, sizes, options
        "data": {...},       # the DataOptions it was trained with (absolute data path)
        "catalogue": {...},  # the items' original ids, counts, item features (tensors, strings)
        "rerank": {...},     # two-stage models only: the retriever's spec, the rerank options
    }

Both are read back through the same checks as a config (:mod:`recsys_seq.core.options`), the
model is built by the project's one builder (:func:`recsys_seq.models.build_model`) on the meta
device first, so a spec that does not fit its weights is refused before anything is
allocated, and then filled with the weights strictly. Nothing named by the file is imported,
instantiated or called.
"""

from __future__ import annotations

import dataclasses
import pickle
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from recsys_seq.core.errors import UserError, first_line
from recsys_seq.core.options import as_plain
from recsys_seq.data.catalogue import Catalogue, CatalogueError
from recsys_seq.data.facts import DataFacts
from recsys_seq.data.options import DataOptions, data_options
from recsys_seq.models import (
    ModelSpec,
    NextItemTask,
    RerankSpec,
    build_model,
    model_spec,
    rerank_spec,
)
from recsys_seq.models.embedder import ItemAttributes
from recsys_seq.models.spec import RECORD_FORMAT, RECORD_KEY, RerankOptions, spec_values
from recsys_seq.models.two_stage import BLEND_SHARES


class CheckpointError(UserError):
    """A checkpoint that cannot be used: unreadable, foreign, or inconsistent."""


class VocabularyMismatch(CheckpointError):
    """The checkpoint was trained on a different item vocabulary than the data."""


@dataclass(frozen=True)
class Checkpoint:
    """A checked checkpoint: the spec and data options it was trained with, weights whose
    names and shapes fit that spec, and the item catalogue that gives its item indices their
    original ids (None when the model was trained on data held in memory); for a two-stage
    model also its retriever's spec and the rerank options."""

    path: Path
    spec: ModelSpec
    data: DataOptions
    weights: dict[str, torch.Tensor]
    catalogue: Catalogue | None
    rerank: RerankSpec | None = None

    def build(
        self,
        facts: DataFacts | None = None,
        exclude_history: bool | None = None,
        blend: float | None = None,
    ) -> NextItemTask:
        """The model with these weights, in eval mode, for data with ``facts`` (None: as a
        model that only evaluates or serves needs). Its rankings leave out the user's history
        as the model was trained to, unless ``exclude_history`` says otherwise for this use;
        a blended two-stage model orders its candidates with the trained shares, unless
        ``blend`` gives the ranker's share for this use (its ranker trains on its own loss,
        whatever the share, so one trained pipeline can be evaluated at every share)."""
        spec = self.spec
        if exclude_history is not None:
            spec = dataclasses.replace(spec, exclude_history=exclude_history)
        rerank = self.rerank and self.rerank.served()
        if blend is not None:
            rerank = self.reblended(blend)
        model = build_model(spec, facts, rerank)
        weights = self.weights
        if blend is not None:  # the shares asked for, not the trained ones
            weights = weights | {name: getattr(model, name).clone() for name in BLEND_SHARES}
        model.load_state_dict(weights)
        for part in model.modules():
            if isinstance(part, ItemAttributes):
                try:
                    part.check_codes()
                except ValueError as error:
                    raise CheckpointError(f"Checkpoint {self.path}: {error}.") from None
        return model.eval()

    def reblended(self, blend: float) -> RerankSpec:
        """The served rerank spec with the ranker's share ``blend``, or :class:`CheckpointError`
        for a model that was not trained as a blend."""
        if isinstance(blend, bool) or not isinstance(blend, int | float) or not 0 <= blend <= 1:
            raise ValueError(f"blend must be a share in [0, 1], got {blend!r}")
        if self.rerank is None or self.rerank.options.blend is None:
            kind = "a single model" if self.rerank is None else "a ranker trained on candidates"
            raise CheckpointError(
                f"blend={blend} sets the shares of a blended two-stage model (trained with "
                f"rerank.blend); checkpoint {self.path} holds {kind}. Leave blend=null."
            )
        served = self.rerank.served()
        options = dataclasses.replace(served.options, blend=float(blend))
        return dataclasses.replace(served, options=options)

    def served_catalogue(self) -> Catalogue:
        """The item catalogue, which serving in original ids needs (the Python API, an
        exported program), or :class:`CheckpointError`."""
        if self.catalogue is None:
            raise CheckpointError(
                f"Checkpoint {self.path} carries no item catalogue (its model was trained on "
                "data held in memory), so it cannot name items by their original ids."
            )
        return self.catalogue


def read(path: str | Path) -> dict[str, Any]:
    """The checkpoint's contents (tensors and plain values), or :class:`CheckpointError`."""
    path = Path(path)
    if not path.exists():
        raise CheckpointError(f"Checkpoint {path} does not exist.")
    if not path.is_file():
        raise CheckpointError(f"Checkpoint {path} is not a file (a .ckpt file is expected).")
    try:
        checkpoint = torch.load(path, map_location="cpu", weights_only=True)
    except pickle.UnpicklingError as error:
        raise CheckpointError(
            f"Checkpoint {path} holds more than tensors and plain values, or is not a "
            f"checkpoint at all ({first_line(error)}); it was not loaded. Only load "
            "checkpoints written by recsys-train."
        ) from None
    except Exception as error:  # noqa: BLE001 - corrupt bytes raise anything in the unpickler
        raise CheckpointError(
            f"Checkpoint {path} is not a readable checkpoint (truncated, corrupt or another "
            f"kind of file: {first_line(error)})."
        ) from None
    if not isinstance(checkpoint, dict):
        raise CheckpointError(f"Checkpoint {path} is not a recsys-seq checkpoint.")
    return checkpoint


def record(
    checkpoint: dict[str, Any], path: str | Path
) -> tuple[ModelSpec, DataOptions, Catalogue | None, RerankSpec | None]:
    """The checked model spec, data options, item catalogue and (two-stage models) rerank
    spec a checkpoint carries."""
    entry = checkpoint.get(RECORD_KEY)
    if not isinstance(entry, dict) or entry.get("format") != RECORD_FORMAT:
        raise CheckpointError(
            f"Checkpoint {path} has no recsys-seq record of format {RECORD_FORMAT} (written by "
            "another program or an older recsys-seq); train the model again with recsys-train."
        )
    try:
        spec = model_spec(entry.get("model"), "model")
        data = data_options(entry.get("data") or {})
        rerank = _rerank(entry, spec)
    except UserError as error:
        raise CheckpointError(f"Checkpoint {path} has an invalid record: {error}") from None
    stored = entry.get("catalogue")
    if stored is None:
        return spec, data, None, rerank
    try:
        catalogue = Catalogue.from_record(stored, spec.num_items, spec.item_fingerprint)
    except CatalogueError as error:
        raise CheckpointError(f"Checkpoint {path}: {error}.") from None
    for name, values in catalogue.features.items():
        size = spec.side_features.get(name)
        if size is not None and int(values.max()) >= size:
            raise CheckpointError(
                f"Checkpoint {path}: its catalogue's {name} values exceed the model's "
                f"vocabulary of {size}."
            )
    return spec, data, catalogue, rerank


def _rerank(entry: dict[str, Any], ranker: ModelSpec) -> RerankSpec | None:
    """The record's two-stage part, checked like a config; None for a one-stage model."""
    if "rerank" not in entry:
        return None
    stored = entry["rerank"]
    if not isinstance(stored, dict) or set(stored) != {"retriever", "options"}:
        raise CheckpointError("its rerank entry must hold exactly a retriever and options")
    return rerank_spec(stored["retriever"], stored["options"], ranker)


def open_checkpoint(path: str | Path) -> Checkpoint:
    """Read and check a checkpoint; nothing of it is built yet."""
    path = Path(path)
    contents = read(path)
    spec, data, catalogue, rerank = record(contents, path)
    weights = contents.get("state_dict")
    if not isinstance(weights, dict) or not all(
        isinstance(k, str) and isinstance(v, torch.Tensor) for k, v in weights.items()
    ):
        raise CheckpointError(f"Checkpoint {path} has no state_dict of named tensors.")
    with torch.device("meta"):  # shapes only: a spec that does not fit allocates nothing
        skeleton = build_model(spec, rerank=rerank and rerank.served())
    expected = {k: v.shape for k, v in skeleton.state_dict().items()}
    found = {k: v.shape for k, v in weights.items()}
    if expected != found:
        differing = sorted(set(expected) ^ set(found)) or sorted(
            k for k in expected if expected[k] != found[k]
        )
        raise CheckpointError(
            f"Checkpoint {path}: its weights do not fit its model spec (differing: "
            f"{', '.join(differing[:5])}{', ...' if len(differing) > 5 else ''})."
        )
    return Checkpoint(path, spec, data, weights, catalogue, rerank)


def load(path: str | Path, facts: DataFacts | None = None) -> NextItemTask:
    """The checkpoint's model with its weights, in eval mode (see :meth:`Checkpoint.build`)."""
    return open_checkpoint(path).build(facts)


def check_same_items(spec: ModelSpec, fingerprint: str, data_path: Path, ckpt: Path) -> None:
    """Refuse data whose item vocabulary differs from the one the model was trained on."""
    if spec.item_fingerprint != fingerprint:
        raise VocabularyMismatch(
            f"{ckpt} was trained on items with fingerprint {spec.item_fingerprint[:12]}..., but "
            f"{data_path} has {fingerprint[:12]}...: item indices would mean different items. "
            "Use the dataset the model was trained on (or one prepared with the same items)."
        )


ARCHITECTURE = (
    "encoder",
    "scorer",
    "num_items",
    "embedding_dim",
    "side_features",
    "item_attributes",
)


def check_resume(
    path: str | Path, spec: ModelSpec, data_path: Path, rerank: RerankOptions | None = None
) -> None:
    """Refuse to resume training from a checkpoint of other items, another architecture or
    other two-stage options (``rerank``: the run's; None for a one-stage run), before any
    retriever is trained for it."""
    trained = open_checkpoint(path)
    check_same_items(trained.spec, spec.item_fingerprint, data_path, Path(path))
    was = None if trained.rerank is None else as_plain(trained.rerank.options)
    now = None if rerank is None else as_plain(rerank)
    if was != now:
        changed = (
            "one stage or two"
            if None in (was, now)
            else ", ".join(f"rerank.{k}: {was[k]} vs {now[k]}" for k in was if was[k] != now[k])
        )
        raise CheckpointError(
            f"Cannot resume from {path}: it was trained with other two-stage options "
            f"({changed}). Resume with the options it was trained with, or start a new run."
        )
    old, new = spec_values(trained.spec), spec_values(spec)
    changed = [key for key in ARCHITECTURE if old[key] != new[key]]
    if changed:
        raise CheckpointError(
            f"Cannot resume from {path}: its model differs in {', '.join(changed)} "
            f"({'; '.join(f'{k}: {old[k]} vs {new[k]}' for k in changed)[:300]}). Resume with "
            "the options it was trained with, or start a new run."
        )
