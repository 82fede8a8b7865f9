"""The Python API: a checkpoint alone recommends in original ids, from any folder."""

import re
import shutil
from pathlib import Path

import numpy as np
import polars as pl
import pytest
import torch

import recsys_seq
from data_prep import schema
from recsys_seq.checkpoint import CheckpointError
from recsys_seq.core.errors import UserError
from recsys_seq.workflows.recommend import recommend
from tests.helpers import compose_config, histories, short_checkpoint

README = Path(__file__).resolve().parents[1] / "README.md"
README_CKPT = "outputs/train/runs/<run>/checkpoints/best.ckpt"


@pytest.fixture(scope="module")
def checkpoint(tmp_path_factory, demo_dir) -> Path:
    return short_checkpoint(tmp_path_factory.mktemp("run"), demo_dir)


@pytest.fixture(scope="module")
def model(checkpoint):
    return recsys_seq.load(checkpoint)


def test_the_readme_example_runs(checkpoint, capsys):
    text = README.read_text()
    section = text[text.index("## Python API") :]
    code = re.search(r"```python\n(.*?)```", section, re.S).group(1)
    assert README_CKPT in code
    exec(code.replace(README_CKPT, str(checkpoint)), {})  # the project's own README
    assert capsys.readouterr().out.strip()  # it shows its results


def test_agrees_with_recsys_recommend_for_the_datasets_users(tmp_path, checkpoint, demo_dir):
    cfg = compose_config(
        "recommend", tmp_path, [f"ckpt_path={checkpoint}", "k=10", f"output={tmp_path / 'r.csv'}"]
    )
    served, _ = recommend(cfg, show_progress=False)
    users = pl.read_parquet(demo_dir / schema.USERS_FILE).sort(schema.USER).head(40)
    wanted = served.join(
        users.select(pl.col(schema.ORIGINAL_ID).alias("user_id"), schema.USER), on="user_id"
    ).sort(schema.USER, "rank")
    got = recsys_seq.load(checkpoint).recommend_batch(histories(demo_dir, 40), k=10)
    assert got["query"].to_list() == wanted[schema.USER].to_list()
    assert got["item_id"].to_list() == wanted["item_id"].to_list()
    np.testing.assert_allclose(got["score"], wanted["score"], rtol=1e-5, atol=1e-6)
    assert set(got["source"]) == {"model"} and got["unknown_items"].sum() == 0


def test_one_history_is_the_batch_of_one(model, demo_dir):
    history = histories(demo_dir, 3)[2]
    one = model.recommend(history, k=7)
    batch = model.recommend_batch([history], k=7)
    assert one.items == batch["item_id"].to_list() and len(one.items) == 7
    assert one.scores == batch["score"].to_list() and one.source == "model" and not one.unknown
    # the demo log repeats items, so its models rank the history by default (as trained)
    assert not model.exclude_history
    assert one.items == model.recommend(history, k=7, exclude_history=False).items
    excluded = model.recommend(history, k=7, exclude_history=True)
    assert not set(excluded.items) & set(history)
    kept = model.recommend(history, k=200, exclude_history=False)
    assert set(kept.items) & set(history)


def test_ids_follow_the_id_policy(model, demo_dir):
    history = histories(demo_dir, 1)[0]
    spelled = [f" 00{i} " if n % 2 else f"{i}.0" for n, i in enumerate(history)]
    assert model.recommend(spelled).items == model.recommend(history).items
    floats = [float(i) for i in history]
    assert model.recommend(floats).items == model.recommend(history).items


def test_unknown_items_are_dropped_and_counted(model, demo_dir):
    history = histories(demo_dir, 1)[0]
    noisy = ["no-such-item", *history, "x"]
    got = model.recommend(noisy)
    assert got.unknown == ["no-such-item", "x"]
    assert got.items == model.recommend(history).items
    batch = model.recommend_batch([noisy, history])
    assert batch.group_by("query").agg(pl.col("unknown_items").first()).sort("query")[
        "unknown_items"
    ].to_list() == [2, 0]


def test_histories_with_no_known_item_follow_the_policy(model):
    histories_ = [["a", "b"], [], ["c"]]
    skipped = model.recommend_batch(histories_, k=5)
    assert skipped.is_empty()
    assert model.recommend(["a"]).source == "skipped" and model.recommend(["a"]).items == []
    popular = model.recommend_batch(histories_, k=5, unknown="popular")
    counts = model.catalogue.counts
    top = model.catalogue.ids(np.argsort(-counts[1:], kind="stable")[:5] + 1).to_list()
    assert popular["query"].to_list() == [0] * 5 + [1] * 5 + [2] * 5
    assert popular.filter(pl.col("query") == 1)["item_id"].to_list() == top
    assert set(popular["source"]) == {"popular"}
    assert popular["score"].to_list()[:5] == sorted(popular["score"].to_list()[:5], reverse=True)
    with pytest.raises(
        UserError, match=r"2 histories have no item the model knows \(positions 0, 1"
    ):
        model.recommend_batch([["a"], [], ["c"], ["d"]][:2], unknown="error")


@pytest.mark.parametrize(
    "call, message",
    [
        (lambda m: m.recommend("123"), "list of item ids"),
        (lambda m: m.recommend_batch("123"), "list of lists"),
        (lambda m: m.recommend_batch([123]), "list of item ids"),
        (lambda m: m.recommend([1], k=0), "k must be a positive integer"),
        (lambda m: m.recommend([1], k=True), "k must be a positive integer"),
        (lambda m: m.recommend([1], unknown="guess"), "unknown must be one of"),
        (lambda m: m.recommend_batch([[1]], batch_size=0), "batch_size"),
        (lambda m: m.recommend([[1, 2]]), r"\[1, 2\] \(list\) is not an id"),
        (lambda m: m.recommend([1.5]), "not an integer id"),
        (lambda m: m.recommend([1, None]), r"histories\[0\]\[1\] = None .*missing id"),
    ],
)
def test_wrong_uses_get_a_clear_error(model, call, message):
    with pytest.raises(UserError, match=message):
        call(model)


def test_serves_from_any_folder_without_the_prepared_data(tmp_path, demo_dir, monkeypatch):
    data = tmp_path / "data"
    shutil.copytree(demo_dir, data)
    ckpt = short_checkpoint(tmp_path / "run", data)
    history = histories(data, 1)[0]
    before = recsys_seq.load(ckpt).recommend(history)
    shutil.rmtree(data)  # the prepared folder is gone
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    monkeypatch.chdir(elsewhere)
    after = recsys_seq.load(ckpt).recommend(history)
    assert after.items == before.items and after.scores == before.scores


def _tampered(tmp_path: Path, checkpoint: Path, change) -> Path:
    payload = torch.load(checkpoint, weights_only=True)
    change(payload["recsys_seq"])
    torch.save(payload, tmp_path / "tampered.ckpt")
    return tmp_path / "tampered.ckpt"


def _swap_two_ids(record):
    ids = record["catalogue"]["original_ids"]
    ids[[0, 1]] = ids[[1, 0]]


@pytest.mark.parametrize(
    "change, message",
    [
        (_swap_two_ids, "do not match the model's fingerprint"),
        (
            lambda r: r["catalogue"].update(original_ids=r["catalogue"]["original_ids"][:-1]),
            "lists 1999 items",
        ),
        (lambda r: r["catalogue"].update(original_ids=["a"] * 2000), "fingerprint"),
        (lambda r: r["catalogue"].update(original_ids=[1] * 2000), "neither an int64"),
        (lambda r: r["catalogue"].update(counts=r["catalogue"]["counts"][:-1]), "counts must be"),
        (lambda r: r["catalogue"].update(counts=-r["catalogue"]["counts"]), "non-negative"),
        (lambda r: r["catalogue"].update(counts=r["catalogue"]["counts"].float()), "int64"),
        (lambda r: r["catalogue"].update(features={"event": torch.zeros(2001).long()}), "among"),
        (lambda r: r.update(catalogue=[1, 2]), "not a mapping"),
    ],
)
def test_a_tampered_catalogue_is_refused(tmp_path, checkpoint, change, message):
    with pytest.raises(CheckpointError, match=message):
        recsys_seq.load(_tampered(tmp_path, checkpoint, change))


def test_category_values_beyond_the_models_vocabulary_are_refused(tmp_path, demo_dir):
    ckpt = short_checkpoint(tmp_path / "run", demo_dir, "model.side_features=[category]")
    model = recsys_seq.load(ckpt)
    assert model.recommend(histories(demo_dir, 1)[0]).source == "model"

    def too_big(record):
        record["catalogue"]["features"]["category"][1] = 10_000

    with pytest.raises(CheckpointError, match="exceed the model's vocabulary"):
        recsys_seq.load(_tampered(tmp_path, ckpt, too_big))


def test_a_checkpoint_without_a_catalogue_is_refused_by_the_api(tmp_path, checkpoint):
    ckpt = _tampered(tmp_path, checkpoint, lambda r: r.update(catalogue=None))
    with pytest.raises(CheckpointError, match="no item catalogue"):
        recsys_seq.load(ckpt)


def test_a_model_of_per_event_features_says_what_it_needs(tmp_path, demo_dir):
    ckpt = short_checkpoint(tmp_path / "run", demo_dir, "model.side_features=[event]")
    with pytest.raises(UserError, match=r"per-event side features \(event\).*recsys-recommend"):
        recsys_seq.load(ckpt).recommend(histories(demo_dir, 1)[0])


def test_recsys_eval_works_from_another_folder(tmp_path, demo_dir, monkeypatch):
    """A run given a relative data.path records it absolute: the checkpoint works anywhere."""
    from recsys_seq.workflows.evaluate import evaluate

    shutil.copytree(demo_dir, tmp_path / "data")
    monkeypatch.chdir(tmp_path)
    ckpt = short_checkpoint(tmp_path / "run", Path("data"))
    record = torch.load(ckpt, weights_only=True)["recsys_seq"]["data"]
    assert record["path"] == str(tmp_path / "data") and record["source"] is None
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    monkeypatch.chdir(elsewhere)
    cfg = compose_config("eval", elsewhere / "eval", [f"ckpt_path={ckpt}", "baselines=false"])
    metrics, _ = evaluate(cfg)
    assert 0 <= metrics["test/ndcg@10"] <= 1
    assert sorted(p.name for p in elsewhere.iterdir()) == []  # nothing prepared or written here
