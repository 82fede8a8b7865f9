"""A blend (``rerank.blend=w``): the retriever's candidates ordered by ``w * ranker + (1 - w) *
retriever score`` with fixed shares, the ranker a second model of every item trained on its own
loss. (End to end, with serving and export: tests/test_rerank_runs.py.)"""

import pytest
import torch

from recsys_seq.core.options import OptionError
from recsys_seq.data import Stage
from recsys_seq.data.facts import DataFacts
from recsys_seq.models import NextItemTask, build_model, model_spec, rerank_spec
from recsys_seq.models.ranking import rankable_scores
from tests.test_rerank_model import NUM_ITEMS, K, batches, specs


def ranker_spec(**loss):
    return model_spec(
        {
            "name": "gru",
            "encoder": {"name": "gru"},
            "num_items": NUM_ITEMS,
            "embedding_dim": 16,
            "exclude_history": True,
            "loss": {"name": "full_softmax", **loss},
        }
    )


def blended(share: float, seed: int = 0, **options):
    torch.manual_seed(seed)
    _, din_rerank = specs()
    ranker = ranker_spec()
    rerank = rerank_spec(din_rerank.retriever, {"candidates": K, "blend": share, **options}, ranker)
    return build_model(ranker, rerank=rerank).eval()


@pytest.mark.parametrize("share", [0.0, 0.3, 1.0])
def test_the_candidates_are_ordered_by_the_shared_score(share):
    task = blended(share)
    with torch.no_grad():
        for batch in batches(Stage.TEST):
            both = task.candidates(batch, batch["items"])
            ranker = rankable_scores(task.model.score_next(batch), batch["items"])
            retriever = both.retriever_scores
            expected = share * ranker.gather(1, both.items) + (1 - share) * retriever.gather(
                1, both.items
            )
            torch.testing.assert_close(both.ranker_scores, expected)
            target = batch["target"][:, None]
            final = both.positions(target)[:, 0]
            among = (both.items == target).any(1)
            if share == 0.0:  # the retriever's own order
                assert torch.equal(final, both.retriever_ranks(target)[:, 0])
            if share == 1.0:  # the ranker's order of the retriever's candidates
                own = ranker.gather(1, both.items)
                at_target = ranker.gather(1, target)
                by_ranker = (own >= at_target).sum(1) - 1
                assert torch.equal(final[among], by_ranker[among])


def test_a_blended_ranker_trains_on_its_own_loss_and_its_shares_stay_fixed():
    task = blended(0.4, seed=3)
    alone = NextItemTask(task.spec, task.model, task.loss, DataFacts())
    names = dict(task.named_parameters())
    assert "ranker_weight" not in names and "score_weight" not in names  # never trained
    frozen = {k: v.clone() for k, v in task.retriever.state_dict().items()}
    task.train()
    optimizer = torch.optim.Adam([p for p in task.parameters() if p.requires_grad], lr=0.05)
    for batch in batches(Stage.TRAIN)[:3]:
        with torch.no_grad():
            torch.manual_seed(0)
            expected = alone.training_step(batch, 0)
        torch.manual_seed(0)
        loss = task.training_step(batch, 0)
        torch.testing.assert_close(loss, expected)  # the ranker's loss over every item
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
    assert all(torch.equal(v, task.retriever.state_dict()[k]) for k, v in frozen.items())
    assert (task.ranker_weight.item(), task.score_weight.item()) == pytest.approx((0.4, 0.6))
    # the shares are part of the pipeline's state: a checkpoint carries them
    state = task.state_dict()
    assert state["ranker_weight"].item() == pytest.approx(0.4)
    assert state["score_weight"].item() == pytest.approx(0.6)


def test_a_blend_refuses_what_it_cannot_use():
    din, din_rerank = specs()
    retriever, ranker = din_rerank.retriever, ranker_spec()
    with pytest.raises(OptionError, match="dot product"):
        rerank_spec(retriever, {"blend": 0.5}, din)  # DIN cannot score the catalogue
    with pytest.raises(OptionError, match="rerank.blend"):
        rerank_spec(retriever, {}, ranker)  # a model of every item without a blend
    candidate_only = ({"holdout": 1}, {"cross_fit": 2}, {"retriever_score": False})
    for options in candidate_only:
        name = next(iter(options))
        with pytest.raises(OptionError, match=f"rerank.{name} shapes a ranker"):
            rerank_spec(retriever, {"blend": 0.5, **options}, ranker)
    for share in (-0.1, 1.5, "half"):
        with pytest.raises(OptionError, match="blend"):
            rerank_spec(retriever, {"blend": share}, ranker)
