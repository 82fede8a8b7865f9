"""The files ``recsys-export`` writes a program to, and how such a file is known as ours.

``.pt2`` (torch.export, preferred) keeps the batch size B and the sequence length T symbolic
(T up to the model's ``max_len``) for the self-attention encoder; ``nn.GRU`` is unrolled over
time by torch.export, which fixes T, so a GRU model is refused for ``.pt2`` with a pointer to
``.pt``: a TorchScript trace records ``aten::gru`` as one op and stays valid for any B and T
(also fine for sasrec; its ``T <= max_len`` check is not traced, longer inputs fail on the
position table instead). The same holds for ``.onnx`` (made by torch.export) and for a
two-stage model with a gru retriever. ``.onnx`` needs the ``onnx`` extra and holds one-stage
models only (ONNX has no stable sort for the two-stage order); :func:`check_format` refuses
what a format cannot hold before any work, naming one that can.

Every file carries plain JSON texts (the serving contract and the item catalogue,
:mod:`recsys_seq.exported_contract`) and the marker :data:`ARTIFACT_KEY`, by which
publishing recognises a file it may replace: the extra files of a ``.pt2``/``.pt`` archive,
the ``metadata_props`` of an ``.onnx``. The archive's root folder is named after the output
file (``model/`` inside ``model.pt2``), not the temporary it was written to
(:func:`named_like`).
"""

from __future__ import annotations

import importlib.util
import os
import shutil
import warnings
import zipfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import torch
from torch.export import Dim

from recsys_seq.core.options import OptionError
from recsys_seq.core.publish import register_kind
from recsys_seq.exported_contract import input_names
from recsys_seq.models.encoders.gru import GRUEncoder
from recsys_seq.workflows.export_programs import (
    ServingProgram,
    TwoStageRanker,
    example_inputs,
    max_length,
)

FORMATS = (".pt2", ".pt", ".onnx")
EXPORT = "export"  # the published files' kind
ARTIFACT_KEY = "recsys_seq_artifact"  # stored inside every exported file: which artifact


def check_format(scorer: ServingProgram, suffix: str) -> None:
    """Refuse, before any work, a format that cannot hold ``scorer``, naming one that can:
    torch.export (also under ``.onnx``) unrolls ``nn.GRU`` over time, which fixes the
    sequence length; ONNX has no stable sort for the two-stage order; ONNX needs packages
    the project does not install by default."""
    two_stage = isinstance(scorer, TwoStageRanker)
    if suffix in (".pt2", ".onnx") and isinstance(scorer.model.encoder, GRUEncoder):
        which = "a two-stage model of a gru retriever" if two_stage else "the gru model"
        raise OptionError(
            f"{suffix} goes through torch.export, which unrolls nn.GRU over time and so fixes "
            f"the sequence length: export {which} with output=<file>.pt (TorchScript trace, "
            "any length)"
        )
    if suffix == ".onnx" and two_stage:
        raise OptionError(
            "ONNX has no stable sort, which the two-stage order needs (ties in the retriever's "
            "order): export a two-stage model with output=<file>.pt2 (torch.export) or "
            "output=<file>.pt (TorchScript)"
        )
    if suffix == ".onnx" and not all(map(importlib.util.find_spec, ("onnx", "onnxscript"))):
        raise OptionError(
            "ONNX export needs the onnx and onnxscript packages (`pip install "
            "'recsys-seq[onnx]'`); or export to .pt2 (torch.export) or .pt (TorchScript), "
            "which need nothing extra"
        )


def write_program(scorer: ServingProgram, output: Path, tmp: Path, texts: dict[str, str]) -> None:
    """Write ``scorer``'s program in the format of ``output``'s suffix to publishing's
    temporary ``tmp``, carrying ``texts`` (the contract and the catalogue) and the marker."""
    texts = {ARTIFACT_KEY: EXPORT} | texts
    if output.suffix == ".onnx":
        export_onnx(scorer, tmp, texts)
        return
    with named_like(output, tmp) as path:
        if output.suffix == ".pt2":
            torch.export.save(export_program(scorer), path, extra_files=texts)
        else:
            torch.jit.save(trace(scorer), path, _extra_files=texts)


def tracing_inputs(scorer: ServingProgram) -> tuple[torch.Tensor, ...]:
    """The small batch every format is traced with: 3 rows of at most 5 events."""
    return example_inputs(scorer, batch_size=3, length=min(5, max_length(scorer.model) or 5))


def dynamic_shapes(scorer: ServingProgram, batch: Any, seq: Any, seen: Any) -> tuple:
    """Batch size, sequence length (and the width of ``exclude``) dynamic for the inputs of
    :func:`~recsys_seq.exported_contract.input_names`: torch.export binds the features to the
    one variadic argument, so theirs are one nested tuple (absent without features)."""
    names = input_names(scorer.layout, scorer.feature_names)
    shapes = [{0: batch, 1: seen if name == "exclude" else seq} for name in names]
    fixed = len(names) - len(scorer.feature_names)
    features = tuple(shapes[fixed:])
    return (*shapes[:fixed], features) if features else tuple(shapes)


def export_program(scorer: ServingProgram) -> torch.export.ExportedProgram:
    """``torch.export`` with a dynamic batch size and sequence length."""
    check_format(scorer, ".pt2")
    batch = Dim("batch", min=1)
    seq = Dim("seq", min=1, max=max_length(scorer.model) or int(2**16))
    shapes = dynamic_shapes(scorer, batch, seq, Dim("seen", min=1))
    inputs = tracing_inputs(scorer)
    with torch.no_grad():
        return torch.export.export(scorer, inputs, dynamic_shapes=shapes, strict=False)


def trace(scorer: ServingProgram) -> torch.jit.ScriptModule:
    """A TorchScript trace; shapes stay dynamic (every op used reads sizes from its inputs)."""
    inputs = tracing_inputs(scorer)
    with torch.no_grad(), warnings.catch_warnings():
        # TracerWarning: the encoder's `T > max_len` check is evaluated once, not traced
        warnings.simplefilter("ignore", torch.jit.TracerWarning)
        warnings.simplefilter("ignore", DeprecationWarning)  # torch.jit's own notice
        return torch.jit.trace(scorer, inputs, check_trace=False)


def export_onnx(scorer: ServingProgram, path: Path, texts: dict[str, str]) -> None:
    """An ONNX program (``torch.onnx`` over torch.export; :func:`check_format` first) with
    ``texts`` (the marker, the contract, the catalogue) as its ``metadata_props``: ONNX has
    no extra files, and a sidecar file could be left behind when the model is copied."""
    check_format(scorer, ".onnx")
    program = torch.onnx.export(
        scorer,
        tracing_inputs(scorer),
        dynamo=True,
        input_names=input_names(scorer.layout, scorer.feature_names),
        output_names=["candidates", "scores"] if isinstance(scorer, TwoStageRanker) else ["scores"],
        dynamic_shapes=dynamic_shapes(scorer, "batch", "seq", "seen"),
    )
    program.model.metadata_props.update(texts)
    program.save(str(path))


@contextmanager
def named_like(output: Path, tmp: Path) -> Iterator[Path]:
    """A path named ``output.name`` for a zip writer, moved onto publishing's temporary
    ``tmp`` when the block ends. torch.export.save and torch.jit.save name the archive's one
    root folder after the file they write (``model/`` for ``model.pt2``), so writing ``tmp``
    itself would put its name (``.model.pt2.tmp-<host>-<pid>-<hex>/``) inside the published
    file. The folder holding the path is named after ``tmp``, so publishing's
    :func:`~recsys_seq.core.publish.recover` removes it after a kill like ``tmp`` itself."""
    folder = tmp.with_name(f"{tmp.name}.d")
    folder.mkdir()
    try:
        yield folder / output.name
        os.replace(folder / output.name, tmp)
    finally:
        shutil.rmtree(folder, ignore_errors=True)


def is_export(path: Path) -> bool:
    """Whether ``path`` is a program this command exported (by the marker stored inside)."""
    try:
        if path.suffix == ".onnx":
            import onnx

            model = onnx.load(str(path), load_external_data=False)
            return any(p.key == ARTIFACT_KEY for p in model.metadata_props)
        with zipfile.ZipFile(path) as archive:
            return any(name.endswith(f"/extra/{ARTIFACT_KEY}") for name in archive.namelist())
    except Exception:  # noqa: BLE001 - anything unreadable is not ours
        return False


register_kind(EXPORT, is_export)
