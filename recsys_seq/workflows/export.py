"""Export a trained encoder + scorer as one self-contained program for serving; the library
behind ``recsys-export``:

    recsys-export ckpt_path=<ckpt> output=model.pt2     # torch.export (sasrec)
    recsys-export ckpt_path=<ckpt> output=model.pt      # TorchScript trace (sasrec, gru)
    recsys-export ckpt_path=<ckpt> output=model.onnx    # needs `pip install onnx onnxscript`

The exported function is a :class:`~recsys_seq.workflows.export_programs.NextItemScorer`
(``program(items, mask) -> (B, N + 1)`` scores of every item as the next event), or for a
two-stage model (``rerank=topk``) a
:class:`~recsys_seq.workflows.export_programs.TwoStageRanker` (``program(items, mask,
exclude) -> (candidates, scores)``, the re-ranked top-K), both described in
:mod:`recsys_seq.workflows.export_programs`. Batch size and sequence length are dynamic;
which format holds which model is told in :mod:`recsys_seq.workflows.export_formats`.

Every exported file also carries, as plain JSON (never pickle), the item catalogue (original
ids in index order, training counts, item-level features) and the serving contract (window
``max_len``, the ``exclude_history`` rule, side feature names in input order, the output
layout with PAD at column 0, the model name, a format version):
:mod:`recsys_seq.exported_contract` describes both, :mod:`recsys_seq.exported` reads them
back. So ``recsys_seq.load(<exported file>)`` serves original ids with the API of a
checkpoint, and plain torch can map ids itself. Load a ``.pt2`` with
``torch.export.load(path).module()``, a ``.pt`` with ``torch.jit.load(path)``, either with
the catalogue and contract through ``recsys_seq.load(path)``.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from omegaconf import DictConfig

from recsys_seq import checkpoint
from recsys_seq.core.options import OptionError, option
from recsys_seq.core.publish import publishing
from recsys_seq.exported_contract import ServingContract, extra_texts, input_names
from recsys_seq.workflows import runs
from recsys_seq.workflows.export_formats import EXPORT, FORMATS, check_format, write_program
from recsys_seq.workflows.export_programs import (
    NextItemScorer,
    ServingProgram,
    TwoStageRanker,
    max_length,
)

DEFAULT_OUTPUT = "model.pt2"  # in the run folder, when no output= is given


@dataclass(frozen=True)
class ExportOptions:
    """The command's options (``conf/export.yaml``), checked before any work."""

    ckpt_path: str
    output: str | None = None
    exclude_history: bool | None = None  # None: as the checkpoint was trained
    blend: float | None = option(None, min=0.0, max=1.0)  # a blend's ranker share; None: trained


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
    inputs = [Path(options.ckpt_path)]
    with publishing(output, EXPORT, folder=False, inputs=inputs) as tmp:
        write_program(scorer, output, tmp, extra_texts(contract, catalogue))
    return {
        "model": model,
        "spec": spec,
        "scorer": scorer,
        "output": output,
        "contract": contract,
        "blend": blend,
    }


def serving_contract(
    scorer: ServingProgram, trained: checkpoint.Checkpoint, exclude_history: bool
) -> ServingContract:
    """The rules a caller of ``scorer``'s program follows, as the checkpoint serves
    (:mod:`recsys_seq.exported_contract`): its window, history rule, inputs and outputs."""
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
