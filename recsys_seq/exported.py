"""A program written by ``recsys-export``, read back to serve: its serving contract, and the
scorer that :class:`~recsys_seq.recommender.Recommender` serves through when
``recsys_seq.load`` is given an exported file instead of a checkpoint.

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
Everything read is checked (keys, types, format, the catalogue against the contract's item
fingerprint, the program against the contract by one call) and refused with
:class:`ExportError` naming the file; programs are read by ``torch.export.load``,
``torch.jit.load`` or ONNX Runtime only.
"""

from __future__ import annotations

import json
import warnings
import zipfile
from collections.abc import Callable
from dataclasses import asdict, dataclass, fields
from pathlib import Path
from typing import Any

import torch

from recsys_seq.core.errors import UserError, first_line
from recsys_seq.data.catalogue import Catalogue, CatalogueError
from recsys_seq.models import NextItemTask

FORMAT = 1
CONTRACT_KEY = "recsys_seq_contract"
CATALOGUE_KEY = "recsys_seq_catalogue"
SUFFIXES = (".pt2", ".pt", ".onnx")  # read as exported programs by recsys_seq.load
ITEM_SCORES, RANKED_CANDIDATES = "item_scores", "ranked_candidates"
ONNX_EXTRA = "pip install 'recsys-seq[onnx]'"


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


# -- reading ---------------------------------------------------------------------------


def _zip_texts(path: Path) -> dict[str, bytes]:
    """The contract and catalogue stored as extra files of a ``.pt2``/``.pt`` archive."""
    keys = (CONTRACT_KEY, CATALOGUE_KEY)
    try:
        with zipfile.ZipFile(path) as archive:
            return {
                parts[2]: archive.read(name)
                for name in archive.namelist()
                if len(parts := name.split("/")) == 3 and parts[1] == "extra" and parts[2] in keys
            }
    except (OSError, zipfile.BadZipFile) as error:
        raise ExportError(
            f"Exported program {path} is not a readable {path.suffix} archive "
            f"({first_line(error)})."
        ) from None


def _onnx_session(path: Path) -> Any:
    """An ONNX Runtime session on ``path`` (CPU), or :class:`ExportError` saying what to
    install."""
    try:
        import onnxruntime
    except ImportError:
        raise ExportError(
            f"Serving {path} needs ONNX Runtime, which is not installed: {ONNX_EXTRA} (or "
            "`pip install onnxruntime`); or export the checkpoint to .pt2 or .pt, which torch "
            "loads."
        ) from None
    try:
        return onnxruntime.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    except Exception as error:  # noqa: BLE001 - a damaged model raises anything
        raise ExportError(
            f"Exported program {path} is not a readable ONNX model ({first_line(error)})."
        ) from None


def _json(texts: dict[str, str | bytes], key: str, path: Path) -> object:
    """The parsed JSON text ``key``, or :class:`ExportError` when it is absent or not JSON."""
    if key not in texts:
        raise ExportError(
            f"Exported program {path} carries no {key}: it was not written by recsys-export, "
            "or by an older recsys-seq. Export the checkpoint again with recsys-export."
        )
    try:
        return json.loads(texts[key])
    except ValueError as error:  # not UTF-8, or not JSON
        raise ExportError(
            f"Exported program {path}: its {key} is not JSON ({first_line(error)})."
        ) from None


class OnnxProgram:
    """An ONNX Runtime session called as the torch programs are: tensors in, one out."""

    def __init__(self, session: Any) -> None:
        self.session = session
        self.names = [node.name for node in session.get_inputs()]

    def __call__(self, *inputs: torch.Tensor) -> torch.Tensor:
        feeds = {name: t.numpy() for name, t in zip(self.names, inputs, strict=True)}
        (scores,) = self.session.run(None, feeds)
        return torch.from_numpy(scores)


def _torch_program(path: Path, device: torch.device) -> Callable[..., Any]:
    """The program of a ``.pt2`` (torch.export) or ``.pt`` (TorchScript), on ``device``."""
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", DeprecationWarning)  # torch.jit's own notice
            if path.suffix == ".pt":
                return torch.jit.load(path, map_location=device)
            program = torch.export.load(path)
            if device.type != "cpu":
                program = torch.export.passes.move_to_device_pass(program, device)
            return program.module()
    except Exception as error:  # noqa: BLE001 - a damaged archive raises anything
        raise ExportError(
            f"Exported program {path} could not be loaded ({first_line(error)})."
        ) from None


# -- serving -----------------------------------------------------------------------------


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


def open_export(
    path: str | Path, device: str | torch.device = "cpu"
) -> tuple[ExportedScorer, Catalogue, ServingContract]:
    """Read and check an exported file: its scorer (the program on ``device``), its
    catalogue and its contract."""
    path, device = Path(path), torch.device(device)
    if not path.is_file():
        raise ExportError(f"Exported program {path} does not exist (or is not a file).")
    session = _onnx_session(path) if path.suffix == ".onnx" else None
    if session is not None and device.type != "cpu":
        raise ExportError(f"{path}: ONNX programs are served on the CPU here; pass device='cpu'.")
    texts = _zip_texts(path) if session is None else session.get_modelmeta().custom_metadata_map
    contract = ServingContract.from_values(_json(texts, CONTRACT_KEY, path), path)
    try:
        catalogue = Catalogue.from_json_record(
            _json(texts, CATALOGUE_KEY, path), contract.num_items, contract.item_fingerprint
        )
    except CatalogueError as error:
        raise ExportError(f"Exported program {path}: {error}.") from None
    program = _torch_program(path, device) if session is None else OnnxProgram(session)
    scorer = SCORERS[contract.layout](program, contract, path, device)
    scorer.check_program(catalogue)
    return scorer, catalogue, contract
