"""recsys-export: the exported program equals the eager model at other batch sizes and lengths."""

from pathlib import Path

import pytest
import torch

from recsys_seq import checkpoint as checkpoints
from recsys_seq.core.options import OptionError
from recsys_seq.models import build_model, model_spec
from recsys_seq.models.encoders.gru import GRUEncoder
from recsys_seq.workflows.export import export
from recsys_seq.workflows.export_formats import export_program
from recsys_seq.workflows.export_programs import NextItemScorer, example_inputs
from tests.helpers import compose_config

# (batch size, sequence length): neither is the (3, 5) the program was traced with
SHAPES = [(4, 7), (9, 23), (1, 50)]


@pytest.fixture
def checkpoint(exportable) -> Path:
    """Each kind of one-stage model export holds (tests/conftest.py)."""
    return exportable[1]


def load(path: Path):
    return torch.export.load(path).module() if path.suffix == ".pt2" else torch.jit.load(path)


@pytest.mark.parametrize(
    "suffix, exclude",
    [(".pt2", False), (".pt2", True), (".pt", False), (".pt", True)],
    ids=["export", "export_exclude_history", "trace", "trace_exclude_history"],
)
def test_exported_program_matches_eager_model(tmp_path, checkpoint, suffix, exclude):
    output = tmp_path / f"model{suffix}"
    cfg = compose_config(
        "export",
        tmp_path,
        [f"ckpt_path={checkpoint}", f"output={output}", f"exclude_history={exclude}"],
    )
    if suffix == ".pt2" and isinstance(checkpoints.load(checkpoint).model.encoder, GRUEncoder):
        with pytest.raises(OptionError, match="unrolls nn.GRU.*pt"):
            export(cfg)
        assert not list(tmp_path.glob("*.pt2"))
        return
    result = export(cfg)
    assert [p.name for p in tmp_path.iterdir() if p.suffix == suffix] == [output.name]
    program = load(output)

    eager = checkpoints.load(checkpoint)  # rebuilt independently of the export
    eager.exclude_history = exclude
    for seed, (batch_size, length) in enumerate(SHAPES):
        inputs = example_inputs(result["scorer"], batch_size, length, seed=seed)
        items, mask, *features = inputs
        batch = {"items": items, "mask": mask, "lengths": mask.sum(1)}
        batch |= dict(zip(result["scorer"].feature_names, features, strict=True))
        expected = eager.ranking_scores(batch)  # (B, N + 1)
        with torch.no_grad():
            got = program(*inputs)
        assert got.shape == (batch_size, eager.spec.num_items + 1)
        torch.testing.assert_close(got, expected, atol=1e-5, rtol=0)
        assert torch.isneginf(got[:, 0]).all()
        if exclude:
            assert torch.isneginf(got.gather(1, items)).all()


def test_only_sequential_models_and_known_formats(tmp_path, checkpoint):
    cfg = compose_config(
        "export", tmp_path, [f"ckpt_path={checkpoint}", f"output={tmp_path / 'model.bin'}"]
    )
    with pytest.raises(OptionError, match="pt2"):
        export(cfg)
    din = build_model(
        model_spec(
            {
                "name": "din",
                "num_items": 5,
                "encoder": {"name": "identity"},
                "scorer": {"name": "target_attention"},
                "loss": {"name": "candidate_bce"},
            }
        )
    )
    with pytest.raises(TypeError, match="dot-product scorer"):
        NextItemScorer(din.model)


def test_a_model_with_side_features_exports_with_them_dynamic():
    spec = model_spec(
        {
            "name": "sasrec",
            "num_items": 30,
            "embedding_dim": 8,
            "side_features": {"category": 5},
            "encoder": {"name": "self_attention", "max_len": 12, "num_layers": 1, "num_heads": 1},
        }
    )
    scorer = NextItemScorer(build_model(spec).model)
    program = export_program(scorer).module()
    for seed, (batch_size, length) in enumerate([(2, 4), (7, 11)]):
        inputs = example_inputs(scorer, batch_size, length, seed=seed)
        with torch.no_grad():
            torch.testing.assert_close(program(*inputs), scorer(*inputs))
