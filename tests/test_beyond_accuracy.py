"""Beyond-accuracy metrics (coverage, avg_pop, gini, tail_share) against a plain-Python
reference, over batches and two gloo processes, and through a real run's files and tables."""

import json

import numpy as np
import polars as pl
import pytest
import torch
import torch.distributed as dist
import torch.multiprocessing as mp

from recsys_seq.data.facts import DataFacts
from recsys_seq.metrics import BeyondAccuracyMetrics, top_items, top_scored
from recsys_seq.metrics.beyond_accuracy import gini, long_tail
from recsys_seq.models import PopularityRecommender, build_model, model_spec
from recsys_seq.models.candidates import Candidates
from recsys_seq.optimized_metric import BEYOND_ACCURACY
from recsys_seq.report.table import markdown
from recsys_seq.workflows import runs
from recsys_seq.workflows.train import train
from tests.helpers import rerank_run, short_checkpoint, train_config

INF = float("-inf")
KS = (1, 3, 5, 50)  # 50: longer than the catalogue


def reference_tail(counts: list[int], head_share: float = 0.8) -> set[int]:
    """Long-tail items 1..N, straight from the definition: the head is every item whose count
    is at least that of the item at which the most popular, in order, reach the share."""
    total = sum(counts[1:])
    running, threshold = 0, None
    for count in sorted(counts[1:], reverse=True):
        running += count
        if running >= head_share * total:
            threshold = count
            break
    return {i for i in range(1, len(counts)) if not (counts[i] >= threshold and counts[i] > 0)}


def reference(scores: np.ndarray, counts: list[int], ks) -> dict[str, float]:
    """One user at a time: each list is the first k of a stable descending sort, without
    items at -inf; then each metric from its definition (Gini from pairwise differences)."""
    n = len(counts) - 1
    tail = reference_tail(counts)
    out = {}
    for k in ks:
        lists = []
        for row in scores:
            order = sorted(range(len(row)), key=lambda j: -row[j])  # sorted() is stable
            lists.append([j for j in order[:k] if row[j] != INF])
        users = [items for items in lists if items]
        recommended = [sum(items.count(i) for items in lists) for i in range(1, n + 1)]
        slots = sum(recommended)
        differences = sum(abs(a - b) for a in recommended for b in recommended)
        out[f"coverage@{k}"] = sum(r > 0 for r in recommended) / n
        out[f"avg_pop@{k}"] = sum(np.mean([counts[i] for i in u]) for u in users) / len(users)
        out[f"gini@{k}"] = differences / (2 * n * slots) if slots else 0.0
        out[f"tail_share@{k}"] = sum(recommended[i - 1] for i in tail) / slots if slots else 0.0
    return out


def case(seed: int, users: int = 40, items: int = 12) -> tuple[torch.Tensor, list[int]]:
    """Scores of few levels (ties everywhere, -0.0 beside 0.0), PAD and some items excluded
    (-inf), one user with two rankable items; training counts with ties and a cold item."""
    rng = np.random.default_rng(seed)
    scores = rng.integers(-2, 3, size=(users, items + 1)).astype(np.float32)
    scores[scores == 0] = rng.choice([0.0, -0.0], size=int((scores == 0).sum()))
    scores[rng.random(scores.shape) < 0.2] = INF  # excluded history
    scores[:, 0] = INF  # PAD
    scores[0, 3:] = INF  # fewer rankable items than most cut-offs
    counts = [0, *rng.integers(0, 6, size=items).tolist()]
    counts[items] = 0  # never seen in training
    return torch.from_numpy(scores), counts


def computed(metric: BeyondAccuracyMetrics) -> dict[str, float]:
    return {k: v.item() for k, v in metric.compute().items()}


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_metrics_match_the_definitions(seed):
    scores, counts = case(seed)
    metric = BeyondAccuracyMetrics(counts, KS)
    metric.update(*top_items(scores, metric.max_k))
    got, expected = computed(metric), reference(scores.numpy(), counts, KS)
    assert got.keys() == expected.keys()
    for name, value in expected.items():
        assert got[name] == pytest.approx(value, abs=1e-12), name


def test_lists_break_ties_to_the_lower_item_and_never_hold_pad_or_excluded_items():
    scores = torch.tensor([[INF, 1.0, 2.0, 2.0, -0.0, 0.0, INF], [INF, 3.0, INF, INF, INF, INF, 1]])
    items, valid = top_items(scores, 50)
    assert items.shape == (2, 7)  # no longer than the row
    assert (
        items[0, :5].tolist() == [2, 3, 1, 4, 5] and valid[0].tolist() == [True] * 5 + [False] * 2
    )
    assert items[1, :2].tolist() == [1, 6] and valid[1].sum() == 2
    metric = BeyondAccuracyMetrics([0, 1, 1, 1, 1, 1, 1], (50,))
    metric.update(items, valid)
    assert metric.recommended.tolist() == [[2, 1, 1, 1, 1, 1]]  # items 1..6: PAD has no column
    assert metric.compute()["coverage@50"].item() == 1.0


@pytest.mark.parametrize("seed", range(4))
def test_a_list_is_the_stable_sort_of_its_row_alone_or_in_any_batch(seed):
    """Heavy ties (seven values, infinities and NaN among them) at every cut-off: each row's
    list is the first k of Python's stable descending sort, NaN as ``-inf``, alone and within
    the batch."""
    generator = torch.Generator().manual_seed(seed)
    values = torch.tensor([INF, -1.0, -0.0, 0.0, 0.5, 2.0, float("inf"), float("nan")])
    scores = values[torch.randint(0, len(values), (24, 37), generator=generator)]
    scores[0] = float("nan")  # a row of NaN: a list of -inf, no recommendation
    ranked = scores.nan_to_num(nan=INF, posinf=float("inf"), neginf=INF)
    for k in (1, 5, 20, 37, 60):
        top, items = top_scored(scores, k)
        for row in range(scores.shape[0]):
            expected = sorted(range(37), key=lambda i: -float(ranked[row, i]))[:k]
            assert items[row].tolist() == expected
            assert top[row].tolist() == ranked[row, expected].tolist()
            alone = top_scored(scores[row : row + 1], k)[1][0]
            assert torch.equal(alone, items[row])
    assert top_scored(scores[:, :0], 5)[1].shape == (24, 0)  # an empty catalogue lists nothing


def test_a_user_with_nothing_rankable_is_no_user():
    metric = BeyondAccuracyMetrics([0, 4, 2], (1, 2))
    metric.update(*top_items(torch.tensor([[INF, INF, INF], [INF, 1.0, 2.0]]), 2))
    values = computed(metric)
    assert metric.users.item() == 1
    assert values["avg_pop@1"] == 2.0 and values["avg_pop@2"] == 3.0
    assert values["coverage@1"] == 0.5 and values["gini@1"] == pytest.approx(0.5)


def test_gini_of_even_and_of_all_in_one_recommendations():
    even = BeyondAccuracyMetrics([0, 1, 1, 1, 1], (1,))
    even.update(torch.tensor([[1], [2], [3], [4]]), torch.ones(4, 1, dtype=torch.bool))
    assert even.compute()["gini@1"].item() == pytest.approx(0.0)
    one = BeyondAccuracyMetrics([0, 1, 1, 1, 1], (1,))
    one.update(torch.tensor([[2], [2], [2]]), torch.ones(3, 1, dtype=torch.bool))
    assert one.compute()["gini@1"].item() == pytest.approx(3 / 4)  # (N - 1) / N
    assert gini(torch.zeros(1, 3)).item() == 0.0  # no recommendation at all


def test_the_tail_is_outside_the_head_that_holds_80_percent_of_training_events():
    # 31 events: 10 + 8 + 4 + 4 = 26 reach 24.8 at a count of 4, so every item with at least
    # 4 is head, the third one at 4 too (ties do not depend on item order)
    counts = [7, 10, 4, 8, 4, 1, 4, 0]  # PAD's count is never read
    tail = long_tail(torch.tensor(counts))
    assert tail.tolist() == [False, False, False, False, False, True, False, True]
    assert {i for i, t in enumerate(tail.tolist()) if t} == reference_tail(counts)
    assert long_tail(torch.zeros(4)).tolist() == [False, True, True, True]  # nothing seen


def test_batches_add_up_to_one_batch():
    scores, counts = case(3, users=61)
    whole = BeyondAccuracyMetrics(counts, KS)
    whole.update(*top_items(scores, whole.max_k))
    parts = BeyondAccuracyMetrics(counts, KS)
    for chunk in scores.tensor_split([5, 6, 30]):  # uneven, one of a single user
        parts.update(*top_items(chunk, parts.max_k))
    expected = computed(whole)
    for name, value in computed(parts).items():
        assert value == pytest.approx(expected[name], abs=1e-12), name


def _two_processes(rank: int, init: str, scores: torch.Tensor, counts: list[int], out: str) -> None:
    """One gloo process: its share of the users (rank 0 the first 7, rank 1 the rest), then
    compute(), which sums the states across both."""
    dist.init_process_group("gloo", init_method=init, rank=rank, world_size=2)
    try:
        metric = BeyondAccuracyMetrics(counts, KS)
        part = scores[:7] if rank == 0 else scores[7:]
        metric.update(*top_items(part, metric.max_k))
        torch.save(computed(metric), f"{out}/{rank}.pt")
    finally:
        dist.destroy_process_group()


def test_two_processes_give_what_one_gives(tmp_path):
    scores, counts = case(4, users=45)
    init = f"file://{tmp_path / 'rendezvous'}"
    mp.spawn(_two_processes, args=(init, scores, counts, str(tmp_path)), nprocs=2, join=True)
    one = BeyondAccuracyMetrics(counts, KS)
    one.update(*top_items(scores, one.max_k))
    expected = computed(one)
    for rank in (0, 1):
        got = torch.load(tmp_path / f"{rank}.pt", weights_only=True)
        for name, value in expected.items():
            assert got[name] == pytest.approx(value, abs=1e-12), (rank, name)


def test_the_popularity_baseline_gets_them_with_its_history_excluded():
    counts = [0, 9, 7, 7, 3, 1, 0]
    baseline = PopularityRecommender(np.array(counts), ks=(2, 10), exclude_history=True)
    items = torch.tensor([[1, 2, 0], [3, 0, 0], [4, 5, 6]])  # right-padded windows
    batch = {"items": items, "lengths": torch.tensor([2, 1, 3]), "target": torch.tensor([3, 1, 1])}
    values = baseline.evaluate([batch], "test")
    scores = torch.tensor(counts, dtype=torch.float32).repeat(3, 1)
    scores[:, 0] = INF
    scores.scatter_(1, items, INF)
    expected = reference(scores.numpy(), counts, (2, 10))
    for name, value in expected.items():
        assert values[f"popularity/test/{name}"] == pytest.approx(value, abs=1e-6), name
    # lists [3, 4], [1, 2], [1, 2]: items 2 and 3 tie at 7, the lower index is recommended
    assert values["popularity/test/avg_pop@2"] == pytest.approx((5 + 8 + 8) / 3)
    assert values["popularity/test/coverage@2"] == pytest.approx(4 / 6)


def test_the_pipeline_lists_continue_in_the_retrievers_order():
    retriever = torch.tensor([[INF, 5.0, 4.0, 3.0, 2.0, 1.0], [INF, INF, INF, 1.0, 2.0, INF]])
    both = Candidates(
        retriever_scores=retriever,
        items=torch.tensor([[1, 2], [4, 3]]),  # the retriever's top 2
        valid=torch.tensor([[True, True], [True, True]]),
        ranker_scores=torch.tensor([[0.0, 1.0], [3.0, 4.0]]),
    )
    items, valid = both.top(4)
    assert items[0].tolist() == [2, 1, 3, 4] and valid[0].all()
    assert items[1, :2].tolist() == [3, 4] and valid[1].tolist() == [True, True, False, False]
    assert both.top(1)[0].tolist() == [[2], [3]]


def test_a_checkpoint_holds_no_metric_facts():
    encoder = {"name": "gru", "num_layers": 1}
    spec = model_spec({"name": "gru", "encoder": encoder, "num_items": 5})
    counted = build_model(spec, DataFacts(item_counts=np.arange(6)))
    assert counted.val_beyond is not None and build_model(spec).val_beyond is None
    assert counted.state_dict().keys() == build_model(spec).state_dict().keys()


def test_the_results_table_has_them_beside_the_baseline(capsys):
    metrics = {
        "test/ndcg@10": 0.05,
        "test/coverage@10": 0.4,
        "test/gini@10": 0.6,
        "popularity/test/ndcg@10": 0.01,
        "popularity/test/coverage@10": 0.002,
        "popularity/test/gini@10": 0.99,
    }
    runs.print_results(metrics, model_name="sasrec")
    table = capsys.readouterr().out
    rows = [line for line in table.splitlines() if line.startswith("| ") and "@" in line]
    assert [row.split("|")[1].strip() for row in rows] == ["ndcg@10", "coverage@10", "gini@10"]
    assert "200.0x" in rows[1] and "0.6x" in rows[2]
    assert "top-K lists across the catalogue" in table


def test_the_report_shows_them_at_the_optimised_cut_off():
    frame = pl.DataFrame(
        {
            "run": ["a"],
            "model": ["sasrec"],
            "dataset": ["demo"],
            "overrides": [""],
            "optimized_metric": ["val/ndcg@10"],
            "best_val": [0.5],
            "test/ndcg@10": [0.4],
            "test/hr@10": [0.6],
            "test/coverage@5": [0.3],
            **{f"test/{name}@10": [0.25] for name in BEYOND_ACCURACY},
        }
    )
    header, _, row = (line.strip("|").split("|") for line in markdown(frame).splitlines())
    shown = dict(zip((c.strip() for c in header), (c.strip() for c in row), strict=True))
    assert list(shown)[-4:] == [f"test/{name}@10" for name in BEYOND_ACCURACY]
    assert shown["test/gini@10"] == "0.2500" and "test/coverage@5" not in shown


@pytest.mark.slow
def test_a_run_writes_them_into_its_metrics_and_tables(tmp_path, demo_dir, capsys):
    run_dir = tmp_path / "run"
    cfg = train_config(
        run_dir,
        demo_dir,
        "trainer.max_epochs=1",
        "trainer.limit_train_batches=3",
        "trainer.limit_val_batches=2",
        "callbacks.early_stopping=null",
        "logger=[]",
    )
    _, objects = train(cfg)
    table = capsys.readouterr().out
    written = json.loads((run_dir / "metrics.json").read_text())
    num_items = objects["datamodule"].data.num_items
    for prefix in ("val/", "test/", "popularity/test/"):
        for k in (1, 5, 10, 20):
            assert 0 < written[f"{prefix}coverage@{k}"] <= 1
            assert written[f"{prefix}avg_pop@{k}"] > 0
            assert 0 <= written[f"{prefix}gini@{k}"] < 1
            assert 0 <= written[f"{prefix}tail_share@{k}"] <= 1
    # the baseline shows nearly everyone the same best-sellers: about k items of the catalogue
    assert written["popularity/test/coverage@1"] * num_items < 10
    for name in ("coverage@10", "avg_pop@10", "gini@10", "tail_share@10"):
        row = next(line for line in table.splitlines() if line.startswith(f"| {name} "))
        assert f"{written[f'test/{name}']:.4f}" in row, name
        assert f"{written[f'popularity/test/{name}']:.4f}" in row, name


@pytest.mark.slow
def test_a_two_stage_run_has_them_for_the_pipeline_and_its_retriever(tmp_path, demo_dir):
    """With 20 candidates the pipeline's top 20 is its retriever's top 20 re-ordered: the same
    items, so the same beyond-accuracy figures at 20 (and, below 20, other ones)."""
    retriever = short_checkpoint(tmp_path / "retriever", demo_dir, "model.exclude_history=true")
    metrics, _ = train(
        rerank_run(
            tmp_path / "run",
            demo_dir,
            f"rerank.retriever.ckpt_path={retriever}",
            "model.exclude_history=true",
        )
    )
    for name in BEYOND_ACCURACY:
        assert {f"val/{name}@10", f"test/{name}@10", f"retriever/test/{name}@10"} <= set(metrics)
        pipeline, alone = metrics[f"test/{name}@20"], metrics[f"retriever/test/{name}@20"]
        assert pipeline == pytest.approx(alone, abs=1e-6), name
