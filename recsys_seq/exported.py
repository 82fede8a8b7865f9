"""A program written by ``recsys-export``, read back to serve: :func:`open_export` gives its
scorer (:mod:`recsys_seq.exported_scorers`), catalogue and serving contract
(:mod:`recsys_seq.exported_contract`, which says what the file carries and where), for
``recsys_seq.load`` given an exported file instead of a checkpoint.

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
from pathlib import Path
from typing import Any

import torch

from recsys_seq.core.errors import first_line
from recsys_seq.data.catalogue import Catalogue, CatalogueError
from recsys_seq.exported_contract import (
    CATALOGUE_KEY,
    CONTRACT_KEY,
    ExportError,
    ServingContract,
)
from recsys_seq.exported_scorers import SCORERS, ExportedScorer

SUFFIXES = (".pt2", ".pt", ".onnx")  # read as exported programs by recsys_seq.load
ONNX_EXTRA = "pip install 'recsys-seq[onnx]'"


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
