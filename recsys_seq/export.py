"""Export a trained encoder + scorer as one self-contained program for serving.

    recsys-export ckpt_path=<ckpt> output=model.pt2     # torch.export (sasrec)
    recsys-export ckpt_path=<ckpt> output=model.pt      # TorchScript trace (sasrec, gru)
    recsys-export ckpt_path=<ckpt> output=model.onnx    # needs `pip install onnx onnxscript`

The exported function is :class:`NextItemScorer`::

    scores = program(items, mask)          # items (B, T) long, mask (B, T) bool, right-padded
                                           # -> (B, N + 1) float32 scores of every item as the
                                           #    next event after each sequence

Batch size B and sequence length T are dynamic (T up to the model's ``max_len``). Scores are
:meth:`RankingModule.ranking_scores`: PAD (column 0) is ``-inf``; with
``exclude_history=true`` the input items are ``-inf`` too. Models with side features take them
as further ``(B, T)`` long inputs, in the order of ``NextItemScorer.feature_names``.
Supported: the ``sasrec`` and ``gru`` models (:class:`SequentialRecommender`).

Formats. ``.pt2`` (torch.export, preferred) keeps B and T symbolic for the self-attention
encoder; ``nn.GRU`` is unrolled over time by torch.export, which fixes T, so a GRU model is
refused for ``.pt2`` with a pointer to ``.pt``: a TorchScript trace records ``aten::gru`` as
one op and stays valid for any B and T (also fine for sasrec; its ``T <= max_len`` check is
not traced, longer inputs fail on the position table instead). Load a ``.pt2`` with
``torch.export.load(path).module()``, a ``.pt`` with ``torch.jit.load(path)``.
"""

from __future__ import annotations

import warnings
from pathlib import Path
from typing import Any

import hydra
import torch
from hydra.utils import instantiate
from lightning.pytorch.core.module import _jit_is_scripting
from omegaconf import DictConfig, OmegaConf
from torch import nn
from torch.export import Dim

from recsys_seq.cli import runs
from recsys_seq.cli.evaluate import load_checkpoint
from recsys_seq.models.gru import GRUEncoder
from recsys_seq.models.recommender import SequentialRecommender

FORMATS = (".pt2", ".pt", ".onnx")


class NextItemScorer(nn.Module):
    """``(items, mask, *side features) -> (B, N + 1)`` next-item scores of a trained model.

    Args:
        model: a trained :class:`SequentialRecommender` (put in eval mode here).
        exclude_history: score the input items ``-inf`` (as evaluation with
            ``model.exclude_history=true``).
    """

    def __init__(self, model: SequentialRecommender, exclude_history: bool = False) -> None:
        super().__init__()
        if not isinstance(model, SequentialRecommender):
            raise TypeError(
                f"export supports the sasrec and gru models (SequentialRecommender), not "
                f"{type(model).__name__}"
            )
        self.model = model.eval()
        self.model.exclude_history = exclude_history
        self.feature_names = list(model.feature_embeddings)

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
        return self.model.ranking_scores(batch)


def model_from_checkpoint(path: str | Path) -> tuple[SequentialRecommender, DictConfig]:
    """Rebuild a checkpoint's model from the checkpoint alone (no dataset needed: the catalogue
    and side-feature sizes are stored in its hyper-parameters). Returns ``(model, config)``."""
    checkpoint = load_checkpoint(path)
    hparams = checkpoint["hyper_parameters"]
    trained = OmegaConf.create(hparams["run_config"])
    model_cfg = trained.model.copy()
    model_cfg.side_features = dict(hparams.get("side_features") or {})  # names -> sizes
    model = instantiate(
        model_cfg,
        num_items=hparams["num_items"],
        item_fingerprint=hparams.get("item_fingerprint"),
        run_config=hparams["run_config"],
        _convert_="all",
    )
    model.load_state_dict(checkpoint["state_dict"])
    return model.eval(), trained


def example_inputs(
    scorer: NextItemScorer, batch_size: int, length: int, seed: int = 0
) -> tuple[torch.Tensor, ...]:
    """Random right-padded inputs: one row of full length, the others shorter."""
    generator = torch.Generator().manual_seed(seed)
    num_items = scorer.model.item_embedding.num_embeddings - 1
    lengths = torch.randint(1, length + 1, (batch_size,), generator=generator)
    lengths[0] = length
    mask = torch.arange(length) < lengths[:, None]  # (B, T)
    items = torch.randint(1, num_items + 1, (batch_size, length), generator=generator) * mask
    features = [
        torch.randint(1, table.num_embeddings, (batch_size, length), generator=generator) * mask
        for table in scorer.model.feature_embeddings.values()
    ]
    return (items, mask, *features)


def max_length(model: SequentialRecommender) -> int | None:
    """The longest sequence the encoder accepts (learned positions), or None (any)."""
    return getattr(model.encoder, "max_len", None)


def export_program(scorer: NextItemScorer) -> torch.export.ExportedProgram:
    """``torch.export`` with a dynamic batch size and sequence length."""
    if isinstance(scorer.model.encoder, GRUEncoder):
        raise ValueError(
            "torch.export unrolls nn.GRU over time, which fixes the sequence length: export "
            "the gru model with output=<file>.pt (TorchScript trace, any length)"
        )
    batch = Dim("batch", min=1)
    seq = Dim("seq", min=1, max=max_length(scorer.model) or int(2**16))
    inputs = example_inputs(scorer, batch_size=3, length=min(5, max_length(scorer.model) or 5))
    dynamic = tuple({0: batch, 1: seq} for _ in inputs)
    with torch.no_grad():
        return torch.export.export(scorer, inputs, dynamic_shapes=dynamic, strict=False)


def trace(scorer: NextItemScorer) -> torch.jit.ScriptModule:
    """A TorchScript trace; shapes stay dynamic (every op used reads sizes from its inputs)."""
    inputs = example_inputs(scorer, batch_size=3, length=min(5, max_length(scorer.model) or 5))
    # _jit_is_scripting: Lightning's own switch (used by LightningModule.to_torchscript) that
    # stops its `trainer` property raising while the tracer walks the module's attributes
    with torch.no_grad(), warnings.catch_warnings(), _jit_is_scripting():
        # TracerWarning: the encoder's `T > max_len` check is evaluated once, not traced
        warnings.simplefilter("ignore", torch.jit.TracerWarning)
        # torch.jit's own deprecation notice, and torchmetrics properties the tracer reads
        warnings.simplefilter("ignore", DeprecationWarning)
        return torch.jit.trace(scorer, inputs, check_trace=False)


def export(cfg: DictConfig) -> dict[str, Any]:
    """Export ``cfg.ckpt_path`` to ``cfg.output`` (``.pt2`` or ``.onnx``); returns the model,
    scorer and output path."""
    runs.quiet_console()
    output = Path(cfg.output)
    if output.suffix not in FORMATS:
        raise ValueError(f"output must end in one of {FORMATS}, got {output}")
    model, _ = model_from_checkpoint(cfg.ckpt_path)
    scorer = NextItemScorer(model, exclude_history=bool(cfg.exclude_history))
    output.parent.mkdir(parents=True, exist_ok=True)
    tmp = output.with_name(f".{output.stem}.tmp{output.suffix}")  # keeps the suffix
    try:
        if output.suffix == ".pt2":
            torch.export.save(export_program(scorer), tmp)
        elif output.suffix == ".pt":
            torch.jit.save(trace(scorer), tmp)
        else:
            export_onnx(scorer, tmp)
        tmp.replace(output)
    finally:
        tmp.unlink(missing_ok=True)
    return {"model": model, "scorer": scorer, "output": output}


def export_onnx(scorer: NextItemScorer, path: Path) -> None:
    try:
        import onnxscript  # noqa: F401  (torch.onnx's exporter needs it)
    except ImportError:
        raise RuntimeError(
            "ONNX export needs the onnx and onnxscript packages (`pip install onnx onnxscript`); "
            "or export to .pt2 (torch.export), which needs nothing extra"
        ) from None
    inputs = example_inputs(scorer, batch_size=3, length=min(5, max_length(scorer.model) or 5))
    names = ["items", "mask", *scorer.feature_names]
    torch.onnx.export(
        scorer,
        inputs,
        str(path),
        dynamo=True,
        input_names=names,
        output_names=["scores"],
        dynamic_shapes=tuple({0: "batch", 1: "seq"} for _ in inputs),
    )


@hydra.main(version_base="1.3", config_path=runs.CONF_DIR, config_name="export")
def main(cfg: DictConfig) -> None:
    try:
        result = export(cfg)
    except (FileNotFoundError, ValueError, TypeError, RuntimeError) as error:
        raise SystemExit(f"recsys-export: {error}") from None
    model = result["model"]
    print(
        f"Exported {type(model.encoder).__name__} + scorer over {model.hparams['num_items']:,} "
        f"items (batch and sequence length dynamic, length <= {max_length(model) or 'any'}; "
        f"inputs: items, mask{''.join(', ' + n for n in result['scorer'].feature_names)}) to "
        f"{result['output']}"
    )


if __name__ == "__main__":
    main()
