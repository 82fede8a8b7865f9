"""recsys_seq.load(<exported file>): the checkpoint's recommendations through the exported
program, for every kind of model recsys-export holds; what the archive carries; the files it
refuses; and the plain-torch snippet of the README (no recsys_seq), run here so it cannot rot."""

import ast
import json
import re
import subprocess
import sys
import zipfile
from pathlib import Path

import numpy as np
import polars as pl
import pytest
import torch
from polars.testing import assert_frame_equal

import recsys_seq
from recsys_seq.checkpoint import open_checkpoint
from recsys_seq.core.errors import UserError
from recsys_seq.core.options import OptionError
from recsys_seq.exported_contract import CATALOGUE_KEY, CONTRACT_KEY, ExportError
from recsys_seq.workflows.export import export
from recsys_seq.workflows.train import train
from tests.helpers import compose_config, histories, rerank_run, short_checkpoint

K = 10
GHOSTS = ["no-such-item", 999_999_999_999]  # ids no model knows
CANDIDATES = 20  # rerank_run's K

# The README's snippet: an exported file served with torch alone (run by
# test_the_plain_torch_snippet_gives_the_same_top_k, with other paths and histories).
README = Path(__file__).resolve().parents[1] / "README.md"
SNIPPET = next(
    block
    for block in re.findall(r"```python\n(.*?)```", README.read_text(), re.S)
    if "extra_files=texts" in block
)
SNIPPET_PATH, SNIPPET_HISTORY = '"model.pt2"', "[470256549, 359518691]"
# runs the snippet for other files and histories, in a process that never imports recsys_seq
DRIVER = """
import json, sys
snippet, (path_line, history_line), cases = json.load(sys.stdin)
for path, history in cases:
    code = snippet.replace(path_line, json.dumps(path))
    exec(code.replace(history_line, json.dumps(history)), {})
assert not {m.split(".")[0] for m in sys.modules} & {"recsys_seq", "data_prep"}, sys.modules
"""


def export_to(folder: Path, checkpoint: Path, suffix: str, *overrides: str) -> Path:
    output = folder / f"model{suffix}"
    cfg = compose_config(
        "export", folder / "export", [f"ckpt_path={checkpoint}", f"output={output}", *overrides]
    )
    export(cfg)
    return output


def suffixes(kind: str) -> list[str]:
    """The torch formats a kind exports to (torch.export fixes a GRU's length)."""
    return [".pt"] if kind == "gru" else [".pt2", ".pt"]


def assert_same(got: pl.DataFrame, want: pl.DataFrame) -> None:
    """The same items in the same order, sources and counts; scores to float tolerance."""
    assert_frame_equal(got.drop("score"), want.drop("score"))
    np.testing.assert_allclose(got["score"], want["score"], rtol=1e-5, atol=1e-5)


def assert_serves_alike(served, model, requests, rules) -> None:
    """``served`` recommends as ``model`` under each unknown policy and history rule."""
    for unknown in ("skip", "popular"):
        for rule in rules:
            want = model.recommend_batch(requests, K, exclude_history=rule, unknown=unknown)
            got = served.recommend_batch(requests, K, exclude_history=rule, unknown=unknown)
            assert_same(got, want)
    for history in (requests[0], requests[-2], requests[-1]):  # known, unknown only, empty
        got = served.recommend(history, K)  # by its own rule
        want = model.recommend(history, K, exclude_history=served.exclude_history)
        assert (got.items, got.unknown, got.source) == (want.items, want.unknown, want.source)
        np.testing.assert_allclose(got.scores, want.scores, rtol=1e-5, atol=1e-5)
    with pytest.raises(UserError, match="no item the model knows"):
        served.recommend_batch(requests, K, unknown="error")


@pytest.fixture(scope="module")
def requests(demo_dir) -> list[list]:
    """Histories in original ids: the demo's first users, some with an unknown id inside, one
    longer than the window (several users' events, 170 > max_len 50), one of unknown ids
    only, and an empty one."""
    known = histories(demo_dir, 12)
    mixed = [h[:2] + [GHOSTS[n % 2]] + h[2:] for n, h in enumerate(known[:6])]
    joined = [item for h in known for item in h][:170]
    assert len(joined) == 170
    return [*known[6:], *mixed, joined, GHOSTS, []]


@pytest.fixture(scope="module")
def two_stage(tmp_path_factory, demo_dir) -> tuple[Path, Path]:
    """``(retriever, pipeline)`` checkpoints: a sasrec retriever with item categories, and a
    two-stage model over it, both trained to leave the history out."""
    root = tmp_path_factory.mktemp("two_stage")
    retriever = short_checkpoint(
        root / "retriever",
        demo_dir,
        "model=sasrec",
        "model.side_features=[category]",
        "model.exclude_history=true",
    )
    run = rerank_run(
        root / "run",
        demo_dir,
        f"rerank.retriever.ckpt_path={retriever}",
        "model.exclude_history=true",
        "baselines=false",
    )
    return retriever, Path(train(run)[0]["checkpoint"])


# -- the same recommendations ---------------------------------------------------------------


def test_an_export_recommends_as_its_checkpoint(tmp_path, exportable, requests):
    kind, checkpoint = exportable
    model = recsys_seq.load(checkpoint)
    for suffix in suffixes(kind):
        served = recsys_seq.load(export_to(tmp_path / suffix, checkpoint, suffix))
        assert (served.name, served.max_len) == (model.name, model.max_len)
        assert served.exclude_history is model.exclude_history is False  # the demo's rule
        assert_serves_alike(served, model, requests, rules=(None, True, False))


def test_an_onnx_export_recommends_as_its_checkpoint(tmp_path, exportable, requests):
    for package in ("onnx", "onnxscript", "onnxruntime"):  # the onnx extra
        pytest.importorskip(package)
    kind, checkpoint = exportable
    if kind == "gru":  # torch.export fixes a GRU's length (tests/test_export.py)
        with pytest.raises(OptionError, match=r"\.pt"):
            export_to(tmp_path, checkpoint, ".onnx")
        return
    path = export_to(tmp_path, checkpoint, ".onnx")
    import onnx

    stored = {p.key for p in onnx.load(str(path)).metadata_props}
    assert {CONTRACT_KEY, CATALOGUE_KEY, "recsys_seq_artifact"} <= stored
    served = recsys_seq.load(path)
    assert_serves_alike(served, recsys_seq.load(checkpoint), requests, rules=(None, True, False))


def test_an_export_without_the_history_serves_that_rule_only(tmp_path, exportable, requests):
    _, checkpoint = exportable
    path = export_to(tmp_path, checkpoint, ".pt", "exclude_history=true")
    served, model = recsys_seq.load(path), recsys_seq.load(checkpoint)
    assert served.exclude_history
    assert_same(
        served.recommend_batch(requests, K),
        model.recommend_batch(requests, K, exclude_history=True),
    )
    with pytest.raises(ExportError, match=f"{re.escape(str(path))} was exported with exclude"):
        served.recommend_batch(requests, K, exclude_history=False)


def test_a_two_stage_export_recommends_as_its_checkpoint(tmp_path, two_stage, requests):
    model = recsys_seq.load(two_stage[1])
    assert model.exclude_history
    for suffix in (".pt2", ".pt"):
        for rule in ("true", "false"):
            folder = tmp_path / f"{suffix}-{rule}"
            served = recsys_seq.load(
                export_to(folder, two_stage[1], suffix, f"exclude_history={rule}")
            )
            assert served.name == model.name == "din"
            assert_serves_alike(
                served, model, requests, rules=(True,) if rule == "true" else (True, False)
            )
    with pytest.raises(ExportError, match=f"k <= {CANDIDATES}"):
        served.recommend_batch(requests, CANDIDATES + 1)
    assert len(served.recommend(requests[0], CANDIDATES).items) == CANDIDATES


# -- what the file holds ----------------------------------------------------------------


def test_the_archive_holds_the_id_map_and_contract_under_its_own_name(tmp_path, exportable):
    kind, checkpoint = exportable
    trained = open_checkpoint(checkpoint)
    for suffix in suffixes(kind):
        folder = tmp_path / suffix
        path = export_to(folder, checkpoint, suffix)
        with zipfile.ZipFile(path) as archive:
            names = archive.namelist()
            contract = json.loads(archive.read(f"model/extra/{CONTRACT_KEY}"))
            catalogue = json.loads(archive.read(f"model/extra/{CATALOGUE_KEY}"))
        assert {name.split("/")[0] for name in names} == {"model"}  # not the temporary's
        assert [p.name for p in folder.iterdir() if p.name != "export"] == [path.name]
        assert contract == {
            "format": 1,
            "model": trained.spec.name,
            "layout": "item_scores",
            "features": ["category"] if kind == "sasrec_category" else [],
            "max_len": 50,
            "exclude_history": False,
            "num_items": trained.spec.num_items,
            "num_candidates": None,
            "item_fingerprint": trained.spec.item_fingerprint,
            "pad_index": 0,
        }
        assert catalogue["original_ids"] == trained.catalogue.original_ids.to_list()
        assert catalogue["counts"] == trained.catalogue.counts.tolist()
        assert catalogue["features"] == {
            "category": trained.catalogue.features["category"].tolist()
        }


def test_the_plain_torch_snippet_gives_the_same_top_k(tmp_path, exportable, two_stage, requests):
    kind, checkpoint = exportable
    long_history, mixed = requests[-3], requests[6]
    files = [(export_to(tmp_path / s, checkpoint, s), long_history) for s in suffixes(kind)]
    files.append(
        (export_to(tmp_path / "excluded", checkpoint, ".pt", "exclude_history=true"), mixed)
    )
    if kind == "sasrec":  # and once for a two-stage program, which leaves the history out
        files.append((export_to(tmp_path / "two_stage", two_stage[1], ".pt2"), long_history))
    cases = [(str(path), history) for path, history in files]
    assert SNIPPET_PATH in SNIPPET and SNIPPET_HISTORY in SNIPPET
    done = subprocess.run(
        [sys.executable, "-c", DRIVER],
        input=json.dumps([SNIPPET, [SNIPPET_PATH, SNIPPET_HISTORY], cases]),
        capture_output=True,
        text=True,
        cwd=tmp_path,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    printed = list(map(ast.literal_eval, done.stdout.splitlines()))
    wanted = [recsys_seq.load(path).recommend(history, K).items for path, history in files]
    assert printed == wanted


# -- files it refuses -------------------------------------------------------------------


def rewritten(source: Path, target: Path, texts: dict[str, str | None]) -> Path:
    """A copy of the archive ``source`` with the extra files ``texts`` replaced (None:
    left out)."""
    with zipfile.ZipFile(source) as old, zipfile.ZipFile(target, "w") as new:
        for info in old.infolist():
            key = info.filename.split("/extra/")[-1] if "/extra/" in info.filename else None
            if key not in texts:
                new.writestr(info, old.read(info))
            elif texts[key] is not None:
                new.writestr(info, texts[key])
    return target


@pytest.fixture(scope="module")
def retriever_export(tmp_path_factory, two_stage) -> tuple[Path, dict, dict]:
    """The retriever's .pt2, with its contract and catalogue."""
    path = export_to(tmp_path_factory.mktemp("exported"), two_stage[0], ".pt2")
    with zipfile.ZipFile(path) as archive:
        texts = [
            json.loads(archive.read(f"model/extra/{key}")) for key in (CONTRACT_KEY, CATALOGUE_KEY)
        ]
    return path, *texts


def changed(values: dict, **changes) -> str:
    """JSON of ``values`` with ``changes`` (``key=...``; a value of ``...`` removes the key)."""
    return json.dumps({k: v for k, v in (values | changes).items() if v is not ...})


def contract_cases(contract: dict, catalogue: dict) -> dict[str, tuple[dict, str]]:
    """``{case: (texts to write, what the refusal says)}``."""
    ids = catalogue["original_ids"]
    return {
        "no contract": ({CONTRACT_KEY: None}, f"carries no {CONTRACT_KEY}.*recsys-export"),
        "no catalogue": ({CATALOGUE_KEY: None}, f"carries no {CATALOGUE_KEY}"),
        "not json": ({CONTRACT_KEY: '{"format": 1,'}, "is not JSON"),
        "not utf-8": ({CONTRACT_KEY: b"\xff\xfe"}, "is not JSON"),  # type: ignore[dict-item]
        "a list": ({CONTRACT_KEY: "[1]"}, "is not a JSON object"),
        "newer format": ({CONTRACT_KEY: changed(contract, format=2)}, "format 2.*reads format 1"),
        "format as text": ({CONTRACT_KEY: changed(contract, format="1")}, "format '1'"),
        "missing key": ({CONTRACT_KEY: changed(contract, max_len=...)}, r"lacks \['max_len'\]"),
        "unknown key": ({CONTRACT_KEY: changed(contract, extra=1)}, r"unknown \['extra'\]"),
        "text length": ({CONTRACT_KEY: changed(contract, max_len="50")}, "max_len='50'"),
        "bool length": ({CONTRACT_KEY: changed(contract, max_len=True)}, "max_len=True"),
        "text rule": ({CONTRACT_KEY: changed(contract, exclude_history="no")}, "exclude_history"),
        "features as text": ({CONTRACT_KEY: changed(contract, features="category")}, "features"),
        "other layout": ({CONTRACT_KEY: changed(contract, layout="scores")}, "layout"),
        "no candidates": (
            {CONTRACT_KEY: changed(contract, layout="ranked_candidates")},
            "num_candidates=None",
        ),
        "other ids": (
            {CATALOGUE_KEY: changed(catalogue, original_ids=ids[::-1])},
            "do not match the model's fingerprint",
        ),
        "short counts": (
            {CATALOGUE_KEY: changed(catalogue, counts=catalogue["counts"][1:])},
            "counts must be",
        ),
        "text counts": (
            {CATALOGUE_KEY: changed(catalogue, counts=list(map(str, catalogue["counts"])))},
            "counts must be",
        ),
        "another program's contract": (
            {CONTRACT_KEY: changed(contract, layout="ranked_candidates", num_candidates=5)},
            "its program does not take or give what its serving contract says",
        ),
    }


def test_a_file_without_a_sound_contract_is_refused_naming_it(tmp_path, retriever_export):
    path, contract, catalogue = retriever_export
    for case, (texts, said) in contract_cases(contract, catalogue).items():
        damaged = rewritten(path, tmp_path / f"{case.replace(' ', '_')}.pt2", texts)
        with pytest.raises(ExportError, match=f"{re.escape(str(damaged))}.*{said}") as error:
            recsys_seq.load(damaged)
        assert "\n" not in str(error.value), case
    # the rewritten archive itself is sound: only what was changed is refused
    assert recsys_seq.load(rewritten(path, tmp_path / "same.pt2", {})).name == "sasrec"


def test_foreign_and_broken_files_are_refused_naming_them(tmp_path, monkeypatch):
    class Plus(torch.nn.Module):
        def forward(self, x):
            return x + 1

    foreign = tmp_path / "foreign.pt2"
    torch.export.save(torch.export.export(Plus(), (torch.ones(2),)), foreign)
    broken = tmp_path / "broken.pt"
    broken.write_bytes(b"not a zip archive")
    onnx = tmp_path / "model.onnx"
    onnx.write_bytes(b"\0")
    monkeypatch.setitem(sys.modules, "onnxruntime", None)  # as where it is not installed
    for path, said in [
        (foreign, f"carries no {CONTRACT_KEY}"),
        (broken, r"not a readable \.pt archive"),
        (tmp_path / "missing.pt2", "does not exist"),
        (onnx, r"needs ONNX Runtime.*pip install 'recsys-seq\[onnx\]'"),
    ]:
        with pytest.raises(ExportError, match=f"{re.escape(str(path))}.*{said}"):
            recsys_seq.load(path)
