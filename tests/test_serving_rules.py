"""One owner for a checkpoint's serving rules: whether the user's history is ranked is decided
when the model is trained, and every path that serves it (evaluation, recsys-recommend, the
Python API, an exported program) follows that decision unless the caller overrides it for
that call."""

from pathlib import Path

import polars as pl
import pytest
import torch

import recsys_seq
from data_prep import schema
from recsys_seq.workflows.evaluate import evaluate
from recsys_seq.workflows.export import export
from recsys_seq.workflows.recommend import recommend
from tests.helpers import compose_config, short_checkpoint

pytestmark = pytest.mark.slow  # end-to-end runs and real commands: not in make test-quick

K = 10


@pytest.fixture(scope="module", params=[True, False], ids=["excluded", "included"])
def trained(request, tmp_path_factory, demo_dir) -> tuple[Path, bool]:
    run_dir = tmp_path_factory.mktemp("run") / "run"
    ckpt = short_checkpoint(run_dir, demo_dir, f"model.exclude_history={request.param}")
    return ckpt, request.param


@pytest.fixture(scope="module")
def user(demo_dir) -> tuple[str, list[int]]:
    """A user whose whole history fits one window (serving reads exactly those events):
    its original id and its item indices, oldest first."""
    sequences = pl.read_parquet(demo_dir / schema.SEQUENCES_FILE)
    row = sequences.filter(pl.col(schema.ITEMS).list.len().is_between(5, 40)).row(0, named=True)
    users = pl.read_parquet(demo_dir / schema.USERS_FILE)
    original = users.filter(pl.col(schema.USER) == row[schema.USER])[schema.ORIGINAL_ID][0]
    return str(original), list(row[schema.ITEMS])


def original_ids(demo_dir: Path, indices: list[int]) -> list[str]:
    items = pl.read_parquet(demo_dir / schema.ITEMS_FILE)
    names = dict(
        zip(items[schema.ITEM].to_list(), items[schema.ORIGINAL_ID].to_list(), strict=True)
    )
    return [str(names[i]) for i in indices]


def served_by_each_path(tmp_path, ckpt, demo_dir, user, *override) -> dict[str, list[str]]:
    """The user's top-K item ids from the command, the API and the exported program, each
    with its default rules (or ``override``, e.g. ``exclude_history=false``)."""
    original, history = user
    tmp_path.mkdir(parents=True, exist_ok=True)
    users_file = tmp_path / "users.txt"
    users_file.write_text(f"{original}\n")
    cfg = compose_config(
        "recommend",
        tmp_path / "recommend",
        [f"ckpt_path={ckpt}", f"k={K}", f"users={users_file}", *override],
    )
    frame, _ = recommend(cfg, show_progress=False)
    by_command = [str(i) for i in frame.sort("rank")["item_id"]]

    model = recsys_seq.load(ckpt)
    rule = {}
    if override:
        rule = {"exclude_history": override[0].split("=")[1] == "true"}
    by_api = [str(i) for i in model.recommend(original_ids(demo_dir, history), k=K, **rule).items]

    program = tmp_path / "model.pt"
    export(
        compose_config(
            "export", tmp_path / "export", [f"ckpt_path={ckpt}", f"output={program}", *override]
        )
    )
    items = torch.tensor([history])
    with torch.no_grad():
        scores = torch.jit.load(program)(items, torch.ones_like(items, dtype=torch.bool))
    by_program = original_ids(demo_dir, scores.topk(K, dim=1).indices[0].tolist())
    return {"recommend": by_command, "api": by_api, "export": by_program}


def test_every_serving_path_follows_the_trained_rule(tmp_path, trained, demo_dir, user):
    ckpt, excluded = trained
    served = served_by_each_path(tmp_path, ckpt, demo_dir, user)
    assert served["recommend"] == served["api"] == served["export"]
    seen = set(original_ids(demo_dir, user[1]))
    if excluded:
        assert not seen & set(served["api"])


def test_an_override_is_for_that_call_only(tmp_path, trained, demo_dir, user):
    ckpt, excluded = trained
    other = f"exclude_history={str(not excluded).lower()}"
    overridden = served_by_each_path(tmp_path, ckpt, demo_dir, user, other)
    assert overridden["recommend"] == overridden["api"] == overridden["export"]
    history = original_ids(demo_dir, user[1])
    if not excluded:  # the override leaves the history out of this user's list
        assert set(overridden["api"]).isdisjoint(history)
    model = recsys_seq.load(ckpt)  # one loaded model, callers with different rules
    before = model.recommend(history, k=K).items
    model.recommend(history, k=K, exclude_history=not excluded)
    assert model.recommend(history, k=K).items == before


def test_evaluation_defaults_to_the_trained_rule(tmp_path, trained):
    ckpt, excluded = trained

    def metrics(*override: str) -> dict:
        cfg = compose_config("eval", tmp_path / "eval", [f"ckpt_path={ckpt}", *override])
        return evaluate(cfg)[0]

    default, as_trained = metrics(), metrics(f"exclude_history={str(excluded).lower()}")
    other = metrics(f"exclude_history={str(not excluded).lower()}")
    assert default["test/ndcg@10"] == as_trained["test/ndcg@10"]
    assert default["popularity/test/ndcg@10"] == as_trained["popularity/test/ndcg@10"]
    assert default["test/ndcg@10"] != other["test/ndcg@10"]
