"""recsys-recommend: top-K agrees with evaluation's ranks; ids map back to the originals."""

from pathlib import Path

import numpy as np
import polars as pl
import pytest
import torch

from data_prep import schema
from recsys_seq.checkpoint import VocabularyMismatch
from recsys_seq.core.errors import UserError
from recsys_seq.core.publish import OutputRefused
from recsys_seq.metrics import target_rank
from recsys_seq.serving import PART, PART_KEY, long_frame, to_frame
from recsys_seq.workflows.recommend import (
    UnknownUsers,
    is_recommendations,
    read_user_ids,
    recommend,
)
from tests.helpers import compose_config, short_checkpoint

K = 10


@pytest.fixture(scope="module")
def checkpoint(tmp_path_factory, demo_dir) -> Path:
    run_dir = tmp_path_factory.mktemp("run")
    return short_checkpoint(run_dir, demo_dir)


def recommend_config(tmp_path: Path, ckpt: Path, *overrides: str):
    return compose_config(
        "recommend",
        tmp_path,
        [f"ckpt_path={ckpt}", f"k={K}", "batch_size=200", *overrides],
    )


def item_index(data_dir: Path) -> dict:
    """original item id -> item index."""
    items = pl.read_parquet(data_dir / schema.ITEMS_FILE)
    return dict(zip(items[schema.ORIGINAL_ID].to_list(), items[schema.ITEM].to_list(), strict=True))


@pytest.mark.parametrize("exclude", [True, False], ids=["exclude_history", "keep_history"])
def test_test_stage_top_k_agrees_with_evaluation(tmp_path, checkpoint, demo_dir, exclude):
    cfg = recommend_config(
        tmp_path,
        checkpoint,
        "stage=test",
        f"exclude_history={exclude}",
        f"output={tmp_path / 'recs.parquet'}",
    )
    frame, info = recommend(cfg, show_progress=False)
    assert pl.read_parquet(tmp_path / "recs.parquet").equals(frame)
    model, datamodule = info["model"], info["datamodule"]
    to_index = item_index(demo_dir)
    users = pl.read_parquet(demo_dir / schema.USERS_FILE)
    user_of = dict(
        zip(users[schema.ORIGINAL_ID].to_list(), users[schema.USER].to_list(), strict=True)
    )
    recs = {
        user_of[user]: [to_index[i] for i in group.sort("rank")["item_id"]]
        for (user,), group in frame.group_by("user_id")
    }
    assert len(recs) == info["users"] == len(datamodule.dataset("test"))

    model.exclude_history = exclude  # what evaluation does with model.exclude_history
    checked = hits = 0
    for batch in datamodule.dataloader("test", num_replicas=1, rank=0):
        scores = model.ranking_scores(batch)  # the evaluation code path
        ranks = target_rank(scores, batch["target"])
        expected = torch.topk(scores, K, dim=1).indices
        for row, user in enumerate(batch["user"].tolist()):
            assert recs[user] == expected[row].tolist()  # an independent topk, same order
            in_top = batch["target"][row].item() in recs[user]
            assert in_top == (ranks[row].item() < K)  # evaluation's hit iff in the list
            hits += in_top
            checked += 1
    assert checked == len(recs) and hits > 0
    if exclude:  # nothing from the input window comes back
        for batch in datamodule.dataloader("test", num_replicas=1, rank=0):
            for row, user in enumerate(batch["user"].tolist()):
                window = set(batch["items"][row, : batch["lengths"][row]].tolist())
                assert not window & set(recs[user])
            break


def test_serve_excludes_whole_history_and_maps_ids(tmp_path, checkpoint, demo_dir):
    users = pl.read_parquet(demo_dir / schema.USERS_FILE)
    chosen = users[schema.ORIGINAL_ID].to_list()[5:12]
    ids_file = tmp_path / "ids.csv"
    ids_file.write_text("user_id\n" + "\n".join(str(u) for u in chosen) + "\n")
    output = tmp_path / "out" / "recs.csv"
    cfg = recommend_config(
        tmp_path, checkpoint, f"users={ids_file}", f"output={output}", "exclude_history=true"
    )
    frame, _ = recommend(cfg, show_progress=False)
    assert frame.columns == ["user_id", "rank", "item_id", "score", "source"]
    assert frame["user_id"].unique(maintain_order=True).to_list() == chosen  # file order
    assert frame.group_by("user_id").len()["len"].to_list() == [K] * len(chosen)
    written = pl.read_csv(output)
    assert written["item_id"].to_list() == frame["item_id"].to_list()
    assert [p.name for p in output.parent.iterdir()] == ["recs.csv"]  # no temp file left
    sequences = pl.read_parquet(demo_dir / schema.SEQUENCES_FILE)
    to_index = item_index(demo_dir)
    user_of = dict(
        zip(users[schema.ORIGINAL_ID].to_list(), users[schema.USER].to_list(), strict=True)
    )
    for (user,), group in frame.group_by("user_id"):
        history = sequences.filter(pl.col(schema.USER) == user_of[user])[schema.ITEMS][0]
        assert not set(history.to_list()) & {to_index[i] for i in group["item_id"]}
        assert group.sort("rank")["score"].is_sorted(descending=True)


def test_indices_map_back_to_original_ids(demo_dir):
    users = pl.read_parquet(demo_dir / schema.USERS_FILE).sort(schema.USER)
    items = pl.read_parquet(demo_dir / schema.ITEMS_FILE).sort(schema.ITEM)
    frame = to_frame(
        users=torch.tensor([3, 0]),
        items=torch.tensor([[1, 7, 2], [5, 4, 9]]),
        scores=torch.tensor([[3.0, 2.0, -torch.inf], [1.0, 0.5, 0.25]]),
        data_path=demo_dir,
    )
    user_id = users[schema.ORIGINAL_ID].to_numpy()
    item_id = dict(
        zip(items[schema.ITEM].to_list(), items[schema.ORIGINAL_ID].to_list(), strict=True)
    )
    assert frame["user_id"].to_list() == [user_id[3]] * 2 + [user_id[0]] * 3  # -inf row dropped
    assert frame["rank"].to_list() == [1, 2, 1, 2, 3]
    assert frame["item_id"].to_list() == [item_id[i] for i in (1, 7, 5, 4, 9)]
    assert frame["score"].to_list() == [3.0, 2.0, 1.0, 0.5, 0.25]
    assert frame["user_id"].dtype == users[schema.ORIGINAL_ID].dtype
    assert not np.isin(frame["item_id"].to_numpy(), [0]).any()


def test_unknown_user_ids_are_named_with_unknown_error(tmp_path, checkpoint):
    ids_file = tmp_path / "ids.txt"
    ids_file.write_text("nobody\n42\n")
    cfg = recommend_config(
        tmp_path,
        checkpoint,
        f"users={ids_file}",
        f"output={tmp_path / 'r.parquet'}",
        "unknown=error",
    )
    with pytest.raises(UnknownUsers, match="2 user id.*nobody, 42"):
        recommend(cfg, show_progress=False)
    assert not (tmp_path / "r.parquet").exists()


def test_refuses_another_item_vocabulary(tmp_path, checkpoint):
    payload = torch.load(checkpoint, weights_only=True)
    payload["recsys_seq"]["model"]["item_fingerprint"] = "0" * 64
    payload["recsys_seq"]["catalogue"] = None  # (its catalogue would no longer match either)
    torch.save(payload, tmp_path / "other.ckpt")
    cfg = recommend_config(tmp_path, tmp_path / "other.ckpt", f"output={tmp_path / 'r.csv'}")
    with pytest.raises(VocabularyMismatch, match="fingerprint"):
        recommend(cfg, show_progress=False)


def test_users_file_follows_the_id_policy(tmp_path, demo_dir):
    users = pl.read_parquet(demo_dir / schema.USERS_FILE).sort(schema.USER)
    first, second, third = (str(u) for u in users[schema.ORIGINAL_ID].head(3))
    ids_file = tmp_path / "ids.csv"
    spellings = ["user_id,extra", f'"{second}",x', f" 00{first} ", f"{third}.0", f"{second}"]
    ids_file.write_bytes(("\ufeff" + "\r\n".join(spellings) + "\r\n").encode())
    got = read_user_ids(ids_file, users)
    assert got[schema.USER].to_list() == [1, 0, 2]  # file order, each user once, no header


@pytest.mark.parametrize("output", ["r.parquet", "r.csv"])
def test_only_its_own_output_is_replaced(tmp_path, checkpoint, output):
    target = tmp_path / output
    cfg = recommend_config(tmp_path, checkpoint, "users=all", f"output={target}")
    recommend(cfg, show_progress=False)
    first = target.read_bytes()
    recommend(cfg, show_progress=False)  # its own file: replaced
    assert target.read_bytes() == first
    target.write_text("user_id,rank\nmine,1\n")  # now somebody else's
    with pytest.raises(OutputRefused, match="left untouched"):
        recommend(cfg, show_progress=False)
    assert target.read_text() == "user_id,rank\nmine,1\n"


def test_stale_parts_are_cleared_and_a_foreign_folder_is_refused(tmp_path, checkpoint):
    output = tmp_path / "recs.parquet"
    parts = tmp_path / ".recs.parquet.parts"
    cfg = recommend_config(tmp_path, checkpoint, f"output={output}")
    first, _ = recommend(cfg, show_progress=False)
    # a killed run with more ranks left parts behind: they must not join the next table
    parts.mkdir()
    stale = long_frame(torch.tensor([0]), torch.tensor([[1, 2]]), torch.tensor([[9.0, 8.0]]))
    stale.write_parquet(parts / "part-7.parquet", metadata={PART_KEY: PART})
    again, _ = recommend(cfg, show_progress=False)
    assert again.equals(first) and not parts.exists()
    parts.mkdir()
    (parts / "notes.txt").write_text("mine")
    with pytest.raises(UserError, match="in the way"):
        recommend(cfg, show_progress=False)
    assert (parts / "notes.txt").read_text() == "mine"


@pytest.mark.parametrize("policy", ["skip", "popular"])
def test_unknown_user_ids_are_skipped_or_given_popular_items(
    tmp_path,
    checkpoint,
    demo_dir,
    policy,
    capsys,
):
    users = pl.read_parquet(demo_dir / schema.USERS_FILE).sort(schema.USER)
    known = users[schema.ORIGINAL_ID].head(2).to_list()
    ids_file = tmp_path / "ids.txt"
    ids_file.write_text(f"{known[1]}\n999999999999\nnobody\n{known[0]}\n")
    output = tmp_path / "r.csv"
    cfg = recommend_config(
        tmp_path, checkpoint, f"users={ids_file}", f"output={output}", f"unknown={policy}"
    )
    frame, info = recommend(cfg, show_progress=False)
    assert "2 user id(s)" in capsys.readouterr().out
    written = pl.read_csv(output, schema=frame.schema)
    assert written.equals(frame)
    served = frame["user_id"].cast(pl.String).unique(maintain_order=True).to_list()
    if policy == "skip":
        assert served == [str(known[1]), str(known[0])]
        assert info["users"] == 2
        return
    assert served == [str(known[1]), str(known[0]), "999999999999", "nobody"]
    assert info["users"] == 4
    is_known = pl.col("user_id").cast(pl.String).is_in([str(u) for u in known])
    assert set(frame.filter(is_known)["source"]) == {"model"}
    assert set(frame.filter(~is_known)["source"]) == {"popular"}
    counts = pl.read_parquet(demo_dir / schema.ITEMS_FILE).sort(
        [schema.COUNT, schema.ITEM], descending=[True, False]
    )
    fallback = frame.filter(pl.col("user_id").cast(pl.String) == "nobody")
    top = counts.head(K)
    assert fallback["item_id"].cast(pl.Int64).to_list() == top[schema.ORIGINAL_ID].to_list()
    assert fallback["score"].to_list() == top[schema.COUNT].cast(pl.Float64).to_list()
    assert fallback["rank"].to_list() == list(range(1, K + 1))


@pytest.mark.parametrize(
    ("header", "ours"),
    [
        ("user_id,rank,item_id,score,source", True),
        ("user_id,rank,item_id,score", True),  # written before the source column
        ("user_id,rank,item_id", False),
        ("user_id,rank,item_id,score,source,extra", False),
        ("item_id,rank,user_id,score,source", False),
    ],
)
def test_only_a_csv_with_a_recommendation_header_counts_as_this_commands(tmp_path, header, ours):
    path = tmp_path / "recs.csv"
    path.write_text(f"{header}\n1,1,2,0.5,model\n", encoding="utf-8")
    assert is_recommendations(path) is ours
