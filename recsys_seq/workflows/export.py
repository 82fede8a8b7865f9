"""Export a trained encoder + scorer as one self-contained program for serving; the library
behind ``recsys-export``:

    recsys-export ckpt_path=<ckpt> output=model.pt2     # torch.export (sasrec)
    recsys-export ckpt_path=<ckpt> output=model.pt      # TorchScript trace (sasrec, gru)
    recsys-export ckpt_path=<ckpt> output=model.onnx    # needs `pip install onnx onnxscript`

The exported function is :class:`NextItemScorer`::

    scores = program(items, mask)          # items (B, T) long, mask (B, T) bool, right-padded
                                           # -> (B, N + 1) float32 scores of every item as the
                                           #    next event after each sequence

It takes item *indices* (1..N, 0 is PAD), not original ids. Every exported file also carries,
as plain JSON (never pickle), the item catalogue (original ids in index order, training
counts, item-level features) and the serving contract (window ``max_len``, the
``exclude_history`` rule, side feature names in input order, the output layout with PAD at
column 0, the model name, a format version): the extra files ``recsys_seq_contract`` and
``recsys_seq_catalogue`` of a ``.pt2``/``.pt`` archive, the ``metadata_props`` of an ``.onnx``
(:mod:`recsys_seq.exported` describes both and reads them back). So
``recsys_seq.load(<exported file>)`` serves original ids with the API of a checkpoint, and
plain torch can map ids itself. The archive's root folder is named after the output file
(``model/`` inside ``model.pt2``), not the temporary it was written to (:func:`named_like`).

Batch size B and sequence length T are dynamic (T up to the model's ``max_len``). Scores are
:func:`~recsys_seq.models.ranking.rankable_scores` of the plain network
(:class:`~recsys_seq.models.NextItemModel`, no Lightning inside): PAD (column 0) is ``-inf``;
with ``exclude_history=true`` the input items are ``-inf`` too (a caller who leaves out a
history longer than the window sets the older items -inf itself). Models with side features
take them as further ``(B, T)`` long inputs, in the order of ``NextItemScorer.feature_names``.
Supported: models with the dot-product scorer (sasrec, gru, and any encoder), and two-stage
models (``rerank=topk``), exported as :class:`TwoStageRanker`:
``program(items, mask, exclude, *features)`` -> ``(candidates (B, K), scores (B, K))``, the
retriever's top-K in the ranker's order, never an ``exclude`` item ``(B, S)`` (0 for none),
with the side features either stage reads. DIN alone scores the catalogue in a loop of
chunks, which is not exported.

Formats. ``.pt2`` (torch.export, preferred) keeps B and T symbolic for the self-attention
encoder; ``nn.GRU`` is unrolled over time by torch.export, which fixes T, so a GRU model is
refused for ``.pt2`` with a pointer to ``.pt``: a TorchScript trace records ``aten::gru`` as
one op and stays valid for any B and T (also fine for sasrec; its ``T <= max_len`` check is
not traced, longer inputs fail on the position table instead). The same holds for ``.onnx``
(made by torch.export) and for a two-stage model with a gru retriever. ``.onnx`` needs the
``onnx`` extra and holds one-stage models only (ONNX has no stable sort for the two-stage
order); the command refuses what a format cannot hold before any work, naming one that can.
Load a ``.pt2`` with ``torch.export.load(path).module()``, a ``.pt`` with
``torch.jit.load(path)``, either with the catalogue and contract through
``recsys_seq.load(path)``.
"""

from __future__ import annotations

import importlib.util
import os
import shutil
import warnings
import zipfile
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from omegaconf import DictConfig
from torch import nn
from torch.export import Dim

from recsys_seq import checkpoint
from recsys_seq.core.options import OptionError, option
from recsys_seq.core.publish import publishing, register_kind
from recsys_seq.exported import (
    ITEM_SCORES,
    RANKED_CANDIDATES,
    ServingContract,
    extra_texts,
    input_names,
)
from recsys_seq.models import NextItemModel, TwoStageTask
from recsys_seq.models.encoders.gru import GRUEncoder
from recsys_seq.models.ranking import rankable_scores
from recsys_seq.models.scorers import DotProductScorer
from recsys_seq.models.two_stage import feature_tables
from recsys_seq.workflows import runs

FORMATS = (".pt2", ".pt", ".onnx")
EXPORT = "export"
ARTIFACT_KEY = "recsys_seq_artifact"  # stored inside every exported file: which artifact
DEFAULT_OUTPUT = "model.pt2"  # in the run folder, when no output= is given


@dataclass(frozen=True)
class ExportOptions:
    """The command's options (``conf/export.yaml``), checked before any work."""

    ckpt_path: str
    output: str | None = None
    exclude_history: bool | None = None  # None: as the checkpoint was trained
    blend: float | None = option(None, min=0.0, max=1.0)  # a blend's ranker share; None: trained


class NextItemScorer(nn.Module):
    """``(items, mask, *side features) -> (B, N + 1)`` next-item scores of a trained network.

    Args:
        model: a trained :class:`NextItemModel` with the dot-product scorer (put in eval mode).
        exclude_history: score the input items ``-inf`` (as evaluation with
            ``model.exclude_history=true``).
    """

    layout = ITEM_SCORES  # what the program gives (recsys_seq.exported)

    def __init__(self, model: NextItemModel, exclude_history: bool = False) -> None:
        super().__init__()
        if not isinstance(model.scorer, DotProductScorer):
            raise TypeError(
                f"export supports the dot-product scorer, not {type(model.scorer).__name__}"
            )
        self.model = model.eval()
        self.exclude_history = exclude_history
        self.feature_tables = dict(model.embedder.features)
        self.feature_names = list(self.feature_tables)

    def forward(self, items: torch.Tensor, mask: torch.Tensor, *features: torch.Tensor):
        """
        Args:
            items: ``(B, T)`` long item indices, right-padded with 0.
            mask: ``(B, T)`` bool, True for a real event (every row has at least one).
            features: ``(B, T)`` long side features named by :attr:`feature_names`.

        Returns:
            ``(B, N + 1)`` float32 scores; PAD (and excluded history) at ``-inf``.
        """
        batch = {"items": items, "mask": mask, "lengths": mask.sum(1)}
        batch |= dict(zip(self.feature_names, features, strict=True))
        exclude = items if self.exclude_history else None
        return rankable_scores(self.model.score_next(batch), exclude)


class TwoStageRanker(nn.Module):
    """``(items, mask, exclude, *side features) -> (candidates (B, K), scores (B, K))`` of a
    two-stage model: the retriever's top-K, never an ``exclude`` item (nor, with
    ``exclude_history``, an input item), in the ranker's order, with the ranker's scores
    (:meth:`Candidates.ranked`). ``exclude`` is an input because the candidates are chosen
    inside: a caller who leaves out a history longer than the window must say so before
    the top-K is taken, not filter it afterwards.

    Holds the task's plain :class:`Reranker` (no Lightning: TorchScript cannot trace a
    module that is not attached to a Trainer).

    Args:
        task: a trained :class:`TwoStageTask` (put in eval mode).
        exclude_history: never return an input item; None: as the task was trained.
    """

    layout = RANKED_CANDIDATES

    def __init__(self, task: TwoStageTask, exclude_history: bool | None = None) -> None:
        super().__init__()
        self.reranker = task.eval().reranker
        self.model = task.retriever  # what sizes the inputs (items, max_len)
        self.num_candidates = task.num_candidates
        self.exclude_history = task.exclude_history if exclude_history is None else exclude_history
        self.feature_tables = feature_tables(task)  # the side features either stage reads
        self.feature_names = list(self.feature_tables)

    def forward(
        self,
        items: torch.Tensor,
        mask: torch.Tensor,
        exclude: torch.Tensor,
        *features: torch.Tensor,
    ):
        """
        Args:
            items, mask, features: as for :meth:`NextItemScorer.forward`.
            exclude: ``(B, S)`` long item indices never to return, 0 for none.
        """
        batch = {"items": items, "mask": mask, "lengths": mask.sum(1)}
        batch |= dict(zip(self.feature_names, features, strict=True))
        if self.exclude_history:
            exclude = torch.cat([items, exclude], 1)  # (B, T + S)
        return self.reranker.candidates(batch, exclude).ranked()


def example_inputs(
    scorer: NextItemScorer | TwoStageRanker, batch_size: int, length: int, seed: int = 0
) -> tuple[torch.Tensor, ...]:
    """Random right-padded inputs in :func:`~recsys_seq.exported.input_names` order: one row
    of full length, the others shorter (and for a two-stage model two items to exclude per
    row, some of them 0)."""
    generator = torch.Generator().manual_seed(seed)
    num_items = scorer.model.embedder.num_items
    lengths = torch.randint(1, length + 1, (batch_size,), generator=generator)
    lengths[0] = length
    mask = torch.arange(length) < lengths[:, None]  # (B, T)
    items = torch.randint(1, num_items + 1, (batch_size, length), generator=generator) * mask
    exclude = torch.randint(0, num_items + 1, (batch_size, 2), generator=generator)  # (B, S)
    features = [
        torch.randint(1, table.num_embeddings, (batch_size, length), generator=generator) * mask
        for table in scorer.feature_tables.values()
    ]
    head = (items, mask, exclude) if scorer.layout == RANKED_CANDIDATES else (items, mask)
    return (*head, *features)


def max_length(model: NextItemModel) -> int | None:
    """The longest sequence the encoder accepts (learned positions), or None (any)."""
    return getattr(model.encoder, "max_len", None)


def check_format(scorer: NextItemScorer | TwoStageRanker, suffix: str) -> None:
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


def dynamic_shapes(
    scorer: NextItemScorer | TwoStageRanker, batch: Any, seq: Any, seen: Any
) -> tuple:
    """Batch size, sequence length (and the width of ``exclude``) dynamic for the inputs of
    :func:`~recsys_seq.exported.input_names`: torch.export binds the features to the one
    variadic argument, so theirs are one nested tuple (absent without features)."""
    names = input_names(scorer.layout, scorer.feature_names)
    shapes = [{0: batch, 1: seen if name == "exclude" else seq} for name in names]
    fixed = len(names) - len(scorer.feature_names)
    features = tuple(shapes[fixed:])
    return (*shapes[:fixed], features) if features else tuple(shapes)


def export_program(scorer: NextItemScorer | TwoStageRanker) -> torch.export.ExportedProgram:
    """``torch.export`` with a dynamic batch size and sequence length."""
    check_format(scorer, ".pt2")
    batch = Dim("batch", min=1)
    seq = Dim("seq", min=1, max=max_length(scorer.model) or int(2**16))
    shapes = dynamic_shapes(scorer, batch, seq, Dim("seen", min=1))
    inputs = example_inputs(scorer, batch_size=3, length=min(5, max_length(scorer.model) or 5))
    with torch.no_grad():
        return torch.export.export(scorer, inputs, dynamic_shapes=shapes, strict=False)


def trace(scorer: NextItemScorer | TwoStageRanker) -> torch.jit.ScriptModule:
    """A TorchScript trace; shapes stay dynamic (every op used reads sizes from its inputs)."""
    inputs = example_inputs(scorer, batch_size=3, length=min(5, max_length(scorer.model) or 5))
    with torch.no_grad(), warnings.catch_warnings():
        # TracerWarning: the encoder's `T > max_len` check is evaluated once, not traced
        warnings.simplefilter("ignore", torch.jit.TracerWarning)
        warnings.simplefilter("ignore", DeprecationWarning)  # torch.jit's own notice
        return torch.jit.trace(scorer, inputs, check_trace=False)


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


def export(cfg: DictConfig) -> dict[str, Any]:
    """Export ``cfg.ckpt_path`` to ``cfg.output`` (``.pt2``, ``.pt`` or ``.onnx``); returns the
    model, scorer, output path, serving contract and a blend's served share (else None)."""
    runs.quiet_console()
    options = runs.command_options(ExportOptions, cfg)
    output = Path(options.output or Path(cfg.paths.output_dir) / DEFAULT_OUTPUT)
    if output.suffix not in FORMATS:
        raise OptionError(f"output must end in one of {', '.join(FORMATS)}, got {output}.")
    trained = checkpoint.open_checkpoint(options.ckpt_path)
    if options.blend is not None:
        trained.reblended(options.blend)  # refused for a model that is not a blend
    catalogue = trained.served_catalogue()  # the program's id map travels with it
    spec = trained.spec
    exclude_history = (
        spec.exclude_history if options.exclude_history is None else options.exclude_history
    )
    if trained.rerank is not None:
        task = trained.build(blend=options.blend)
        scorer = TwoStageRanker(task, exclude_history=exclude_history)
        model = task.retriever
        blend = task.rerank.options.blend  # the share the program serves; None: not a blend
    elif spec.scorer.name != "dot_product":
        raise OptionError(
            f"recsys-export supports models with the dot_product scorer and two-stage models, "
            f"not {spec.name} alone (scorer {spec.scorer.name}: it scores the catalogue in a "
            "loop of chunks)."
        )
    else:
        model = trained.build().model
        scorer = NextItemScorer(model, exclude_history=exclude_history)
        blend = None
    check_format(scorer, output.suffix)
    contract = serving_contract(scorer, trained, exclude_history)
    extra = {ARTIFACT_KEY: EXPORT} | extra_texts(contract, catalogue)
    inputs = [Path(options.ckpt_path)]
    with publishing(output, EXPORT, folder=False, inputs=inputs) as tmp:
        if output.suffix == ".onnx":
            export_onnx(scorer, tmp, extra)
        else:
            with named_like(output, tmp) as path:
                if output.suffix == ".pt2":
                    torch.export.save(export_program(scorer), path, extra_files=extra)
                else:
                    torch.jit.save(trace(scorer), path, _extra_files=extra)
    return {
        "model": model,
        "spec": spec,
        "scorer": scorer,
        "output": output,
        "contract": contract,
        "blend": blend,
    }


def serving_contract(
    scorer: NextItemScorer | TwoStageRanker, trained: checkpoint.Checkpoint, exclude_history: bool
) -> ServingContract:
    """The rules a caller of ``scorer``'s program follows, as the checkpoint serves
    (:mod:`recsys_seq.exported`): its window, history rule, inputs and outputs."""
    return ServingContract(
        model=trained.spec.name,
        layout=scorer.layout,
        features=list(scorer.feature_names),
        max_len=trained.data.max_len,
        exclude_history=exclude_history,
        num_items=trained.spec.num_items,
        num_candidates=getattr(scorer, "num_candidates", None),
        item_fingerprint=trained.spec.item_fingerprint,
    )


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


def export_onnx(scorer: NextItemScorer | TwoStageRanker, path: Path, texts: dict[str, str]) -> None:
    """An ONNX program (``torch.onnx`` over torch.export; :func:`check_format` first) with
    ``texts`` (the marker, the contract, the catalogue) as its ``metadata_props``: ONNX has
    no extra files, and a sidecar file could be left behind when the model is copied."""
    check_format(scorer, ".onnx")
    inputs = example_inputs(scorer, batch_size=3, length=min(5, max_length(scorer.model) or 5))
    program = torch.onnx.export(
        scorer,
        inputs,
        dynamo=True,
        input_names=input_names(scorer.layout, scorer.feature_names),
        output_names=["candidates", "scores"] if isinstance(scorer, TwoStageRanker) else ["scores"],
        dynamic_shapes=dynamic_shapes(scorer, "batch", "seq", "seen"),
    )
    program.model.metadata_props.update(texts)
    program.save(str(path))


def summary(result: dict[str, Any]) -> str:
    """One paragraph on what was exported: the program's inputs and outputs, what it
    carries, and where."""
    scorer, spec = result["scorer"], result["spec"]
    inputs = ", ".join(input_names(scorer.layout, scorer.feature_names))
    carries = (
        f"; item ids and serving contract inside: recsys_seq.load('{result['output']}') "
        "serves original ids"
    )
    if isinstance(scorer, TwoStageRanker):
        blend = result["blend"]
        share = "" if blend is None else f" with the ranker's share {blend:g}"
        return (
            f"Exported the two-stage {spec.name} (retriever's top {scorer.num_candidates} "
            f"re-ranked{share}; inputs: {inputs}; outputs: candidates, scores in the final "
            f"order{carries}) to {result['output']}"
        )
    model = result["model"]
    return (
        f"Exported {spec.name} (encoder + scorer over {model.embedder.num_items:,} items; "
        f"batch and sequence length dynamic, length <= {max_length(model) or 'any'}; "
        f"inputs: {inputs}{carries}) to {result['output']}"
    )
