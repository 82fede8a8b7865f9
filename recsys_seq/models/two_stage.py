"""Two-stage recommendation: a retriever's top-K candidates re-ranked by a ranker (DIN).

A ranking-stage model such as DIN scores a few hundred plausible candidates, never the whole
catalogue. :class:`TwoStageTask` composes:

* the **retriever**, a trained dot-product model (sasrec, gru), frozen: it scores every item
  in one product and hands each user its top-K (``rerank.candidates``), the history excluded
  when ``exclude_history``;
* the **ranker**, the run's own model (DIN target attention over the history), which
  re-scores those K, optionally with the retriever's score as a feature: the logit is
  ``a * ranker + b * retriever score`` with learned ``a, b`` starting at ``(0, 1)``, so a
  fresh pipeline ranks exactly as its retriever and training learns what to change.

Both stages as plain PyTorch are a :class:`~recsys_seq.models.reranker.Reranker`, and what
they hand back a :class:`~recsys_seq.models.candidates.Candidates`: the final ranking is the
ranker's order of the K candidates followed by every other item in the retriever's order.
Evaluation costs K ranker scores per user, not N.

Training shows the ranker what it will face: the item after a window against negatives mined
from the retriever's top-K *for that window* (its view of it only: the encoders are causal,
and the retriever never saw validation or test events), mixed with uniform ones
(``rerank.hard_negatives``), under a listwise softmax (or DIN's pointwise BCE). By default
the windows are the retriever's own training windows, at random cut points, where it has
memorised the answer (S3-Rec Beauty: the next item in its top 10 for 72% of training cuts, 9%
of validation users). ``rerank.holdout=n`` trains the ranker on events the retriever never
trained on instead: each user's last n training events, held out of the retriever's training
by ``data.train_holdout`` (the ranker's ``data.train_windows=holdout``). ``rerank.cross_fit=K``
keeps every training window and makes its scores honest another way: K more retrievers, the
k-th trained without the users of fold k (user index mod K, ``data.cross_fit_fold``), each
score the windows of the users they never saw (stacking's out-of-fold predictions); the
serving retriever, trained on everyone, is the one validation, test and serving read. The
fold retrievers stay out of the ranker's checkpoints (each has its own): resuming refills them
from the ones the run loaded, and evaluation and serving build none.

Logged beside the pipeline's ``<stage>/<metric>@<k>``: ``retriever/<stage>/...`` (the retriever
alone, the same users, with ``hr@K``, the candidate recall that bounds any re-ranker) and
``ranker/<stage>/auc``/``gauc`` beside ``retriever/<stage>/auc``/``gauc`` (the target against
the other candidates, for users whose target is among them, in the ranker's and in the
retriever's order). The beyond-accuracy metrics (``coverage@k``, ...) read the final ranking's
top-k lists, what the pipeline serves, and ``retriever/<stage>/coverage@k`` the retriever's own
lists. All are sums over users, exact under DDP.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

from recsys_seq.data.facts import DataFacts
from recsys_seq.metrics import RankingMetrics, SampledMetrics, top_items
from recsys_seq.metrics.auc import SampledAUC
from recsys_seq.models.candidate_bce import CandidateBCELoss, cut_visibility, positive_first_bce
from recsys_seq.models.candidates import Candidates
from recsys_seq.models.network import NextItemModel
from recsys_seq.models.reranker import Reranker
from recsys_seq.models.spec import ModelSpec, RerankSpec
from recsys_seq.models.task import NextItemTask


def feature_tables(task: NextItemTask) -> dict[str, nn.Embedding]:
    """``{batch key: embedding table}`` of the side features a batch for ``task`` must carry:
    its model's, and a two-stage model's retriever's too (the stages may embed different
    ones)."""
    tables = dict(task.model.embedder.features)
    if isinstance(task, TwoStageTask):
        tables = dict(task.retriever.embedder.features) | tables
    return tables


FOLD_PREFIX = "fold_retrievers."
WEIGHT_KEYS = ("state_dict", "current_model_state")  # the second: weight averaging's raw ones
BLEND_SHARES = ("ranker_weight", "score_weight")  # a blend's fixed shares (buffers), w and 1 - w


class TwoStageTask(NextItemTask):
    """The ranker's :class:`NextItemTask` over a frozen retriever's candidates (module doc).

    Args:
        spec, model, loss, facts: the ranker, as for :class:`NextItemTask`; ``loss`` is a
            :class:`CandidateBCELoss` (cut points and uniform negatives).
        retriever: the retriever's network (weights loaded by the caller); never trained.
        rerank: the retriever's spec and the rerank options.
        fold_retrievers: with ``rerank.cross_fit=K``, the K networks of the retriever's spec
            trained without the users of each fold (weights loaded by the caller), which
            score the training windows; never trained.
    """

    def __init__(
        self,
        spec: ModelSpec,
        model: NextItemModel,
        loss: CandidateBCELoss,
        facts: DataFacts,
        retriever: NextItemModel,
        rerank: RerankSpec,
        fold_retrievers: Sequence[NextItemModel] = (),
    ) -> None:
        super().__init__(spec, model, loss, facts)
        if len(fold_retrievers) != rerank.options.cross_fit:
            raise ValueError(
                f"rerank.cross_fit={rerank.options.cross_fit} needs as many fold retrievers, "
                f"got {len(fold_retrievers)}"
            )
        self.rerank = rerank
        self.retriever = retriever.requires_grad_(False).eval()
        self.fold_retrievers = nn.ModuleList(fold_retrievers).requires_grad_(False).eval()
        self.num_candidates = rerank.options.candidates
        # with the retriever's score: logit = ranker_weight * ranker + score_weight * score,
        # learned from (0, 1): the pipeline starts as the retriever's order and learns what to
        # change; or fixed at (w, 1 - w) for a blend (rerank.blend = w)
        blend, residual = rerank.options.blend, rerank.options.retriever_score
        if blend is not None:
            shares = (float(blend), 1.0 - blend)
            for name, share in zip(BLEND_SHARES, shares, strict=True):
                self.register_buffer(name, torch.tensor(share))
        else:
            self.ranker_weight = nn.Parameter(torch.zeros(())) if residual else None
            self.score_weight = nn.Parameter(torch.ones(())) if residual else None
        ks = sorted({*spec.evaluated_ks, self.num_candidates})
        self.retriever_metrics = nn.ModuleDict(
            {stage: RankingMetrics(ks) for stage in ("val", "test")}
        )
        self.retriever_sampled = nn.ModuleDict(
            {stage: SampledMetrics(spec.evaluated_ks) for stage in ("val", "test")}
        )
        self.retriever_beyond = nn.ModuleDict(
            {}
            if self.val_beyond is None
            else {stage: self.beyond_accuracy() for stage in ("val", "test")}
        )
        # within the candidates: the ranker's order, and the retriever's for comparison
        self.candidate_auc = nn.ModuleDict(
            {
                f"{who}/{stage}": SampledAUC()
                for who in ("ranker", "retriever")
                for stage in ("val", "test")
            }
        )

    def start_from_retriever(self) -> None:
        """Copy the retriever's trained embeddings into the ranker's (``init_from_retriever``;
        a fresh run only, after the retriever's weights are loaded)."""
        self.model.embedder.load_state_dict(self.retriever.embedder.state_dict())

    def on_save_checkpoint(self, checkpoint: dict[str, Any]) -> None:
        super().on_save_checkpoint(checkpoint)
        for key in WEIGHT_KEYS:  # the weights, and the raw ones beside averaged weights
            if key in checkpoint:
                checkpoint[key] = {
                    name: weight
                    for name, weight in checkpoint[key].items()
                    if not name.startswith(FOLD_PREFIX)
                }

    def on_load_checkpoint(self, checkpoint: dict[str, Any]) -> None:
        """Resuming or testing in the run: the fold retrievers as this task holds them (their
        own checkpoints' weights, loaded before the ranker's)."""
        folds = self.fold_retrievers.state_dict()
        for key in WEIGHT_KEYS:
            if key in checkpoint:
                checkpoint[key] |= {FOLD_PREFIX + name: weight for name, weight in folds.items()}

    def train(self, mode: bool = True) -> TwoStageTask:
        super().train(mode)
        self.retriever.eval()  # frozen: no dropout, whatever Lightning switches
        self.fold_retrievers.eval()
        return self

    # -- both stages -------------------------------------------------------------------

    @property
    def reranker(self) -> Reranker:
        """Both stages as a plain module over this task's own parts (:class:`Reranker`)."""
        return Reranker(
            self.retriever, self.model, self.num_candidates, self.ranker_weight, self.score_weight
        )

    def candidates(
        self, batch: dict[str, torch.Tensor], exclude: torch.Tensor | None
    ) -> Candidates:
        """:meth:`Reranker.candidates` of this task."""
        return self.reranker.candidates(batch, exclude)

    # -- training ----------------------------------------------------------------------

    def training_step(self, batch: dict[str, torch.Tensor], batch_idx: int) -> torch.Tensor:
        if self.rerank.options.blend is not None:  # a model of every item, on its own loss
            return super().training_step(batch, batch_idx)
        if "target" in batch:  # held-out events (data.train_windows=holdout): the whole window
            cut, positive = batch["lengths"][:, None], batch["target"][:, None]  # (B, 1)
        else:  # the retriever's own training windows: random cut points
            cut, positive = self.loss.cuts(batch)  # (B, S)
        with torch.no_grad():
            views = self.training_views(batch)
            tops = [self.retriever_top(batch, r, states, cut, positive) for r, states in views]
            pool = self.of_own_fold(batch, [items for items, _ in tops])
            valid = self.of_own_fold(batch, [valid for _, valid in tops])
            negatives = self.mined_negatives(positive, pool, valid)
        candidates = torch.cat([positive[..., None], negatives], dim=-1)  # (B, S, 1 + n)
        visible = cut_visibility(cut, candidates.shape[-1], batch["items"].shape[1])
        flat = candidates.flatten(1)
        logits = self.model.score(self.model.encode(batch), visible, flat)
        if self.score_weight is not None:
            with torch.no_grad():
                scores = [r.score(states, visible, flat) for r, states in views]
                score = self.of_own_fold(batch, scores)
            logits = self.reranker.with_retriever_score(logits, score)
        logits = logits.view(candidates.shape)
        if self.rerank.options.objective == "softmax":
            first = torch.zeros(logits.shape[:-1], dtype=torch.long, device=logits.device)
            loss = F.cross_entropy(logits.flatten(0, 1), first.flatten())
        else:
            loss = positive_first_bce(logits)
        self.log("train/loss", loss, prog_bar=True, batch_size=batch["lengths"].shape[0])
        return loss

    def on_train_epoch_end(self) -> None:
        """Log the learned logit weights as the epoch leaves them: how far the pipeline has
        moved from its retriever's order (``ranker_weight`` 0 and ``score_weight`` 1 is that
        order)."""
        if isinstance(self.score_weight, nn.Parameter):
            self.log("train/ranker_weight", self.ranker_weight.detach())
            self.log("train/score_weight", self.score_weight.detach())

    def training_views(
        self, batch: dict[str, torch.Tensor]
    ) -> list[tuple[NextItemModel, torch.Tensor]]:
        """``[(retriever, its states of the batch)]`` of the retrievers that score training
        windows: the K fold retrievers when cross-fitting, else the serving retriever."""
        retrievers = list(self.fold_retrievers) or [self.retriever]
        return [(retriever, retriever.encode(batch)) for retriever in retrievers]

    def of_own_fold(
        self, batch: dict[str, torch.Tensor], values: Sequence[torch.Tensor]
    ) -> torch.Tensor:
        """Of ``values`` (one ``(B, ...)`` tensor per :meth:`training_views` retriever), each
        row's from the retriever that never saw its user (fold ``user mod K``)."""
        if len(values) == 1:
            return values[0]
        fold = batch["user"] % len(values)  # (B,)
        rows = torch.arange(fold.shape[0], device=fold.device)
        return torch.stack(list(values))[fold, rows]

    def retriever_top(
        self,
        batch: dict[str, torch.Tensor],
        retriever: NextItemModel,
        states: torch.Tensor,
        cut: torch.Tensor,
        positive: torch.Tensor,
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """``(items, valid)``, each ``(B, S, K)``: ``retriever``'s top-K after ``window[:cut]``
        from its ``states`` at the cut, without PAD, the positive, and (with
        ``exclude_history``) the events before the cut."""
        index = (cut - 1)[..., None].expand(-1, -1, states.shape[-1])
        scores = (states.gather(1, index) @ retriever.item_table.T).float()  # (B, S, N+1)
        scores[..., 0] = float("-inf")
        if self.exclude_history:
            visible = torch.arange(batch["items"].shape[1], device=cut.device) < cut[..., None]
            seen = torch.where(visible, batch["items"][:, None, :], 0)  # (B, S, T); PAD -> 0
            scores = scores.scatter(2, seen, float("-inf"))
        scores = scores.scatter(2, positive[..., None], float("-inf"))
        top, items = scores.topk(min(self.num_candidates, scores.shape[-1] - 1), dim=-1)
        return items, top > float("-inf")

    def mined_negatives(
        self, positive: torch.Tensor, pool: torch.Tensor, valid: torch.Tensor
    ) -> torch.Tensor:
        """``(B, S, n)`` training negatives per cut: ``hard_negatives`` of them drawn without
        replacement from the retriever's top-K ``pool`` for that cut (:meth:`retriever_top`),
        the rest uniform (never the positive, never PAD); a hard slot with no rankable
        candidate left (not ``valid``) falls back to uniform."""
        count = self.loss.num_negatives
        uniform = self.loss.random_negatives(positive, count)
        hard = min(round(self.rerank.options.hard_negatives * count), pool.shape[-1])
        if hard == 0:
            return uniform
        pick = torch.rand(pool.shape, device=pool.device).argsort(-1)[..., :hard]
        mined = torch.where(valid.gather(-1, pick), pool.gather(-1, pick), uniform[..., :hard])
        return torch.cat([mined, uniform[..., hard:]], dim=-1)

    # -- evaluation and serving --------------------------------------------------------

    def _update_stage(self, batch: dict[str, torch.Tensor], stage: str) -> None:
        full, sampled, beyond = self.stage_metrics(stage)
        exclude = batch["items"] if self.exclude_history else None
        both = self.candidates(batch, exclude)
        target = batch["target"][:, None]
        retriever_rank = both.retriever_ranks(target)  # (B, 1), for both stages' metrics
        full.update(both.positions(target, retriever_rank)[:, 0])
        self.retriever_metrics[stage].update(retriever_rank[:, 0])
        if beyond is not None:
            beyond.update(*both.top(beyond.max_k))
            self.retriever_beyond[stage].update(*top_items(both.retriever_scores, beyond.max_k))
        if "negatives" in batch:
            items = torch.cat([target, batch["negatives"]], 1)
            sampled.update(-both.positions(items).double(), weight=batch["lengths"])
            self.retriever_sampled[stage].update(
                both.retriever_scores.gather(1, items), weight=batch["lengths"]
            )
        column, others, valid = both.target_and_others(target)
        retriever_scores = both.retriever_scores.gather(1, both.items)
        for who, scores in (("ranker", both.ranker_scores), ("retriever", retriever_scores)):
            self.candidate_auc[f"{who}/{stage}"].update(
                scores.gather(1, column)[:, 0],
                scores.gather(1, others),
                weight=batch["lengths"],
                valid=valid,
            )

    def validation_step(self, batch: dict[str, torch.Tensor], batch_idx: int) -> None:
        self._update_stage(batch, "val")

    def test_step(self, batch: dict[str, torch.Tensor], batch_idx: int) -> None:
        self._update_stage(batch, "test")

    def _log_companions(self, stage: str) -> None:
        """Log (and reset) the retriever's and the ranker's own metrics of ``stage``."""
        alone = [self.retriever_metrics[stage]]
        if stage in self.retriever_beyond:
            alone.append(self.retriever_beyond[stage])
        retriever = {
            f"retriever/{stage}/{k}": v.float() for part in alone for k, v in part.compute().items()
        }
        if self.sampled_negatives:
            n = self.sampled_negatives
            retriever |= {
                f"retriever/{stage}/sampled{n}/{k}": v.float()
                for k, v in self.retriever_sampled[stage].compute().items()
            }
        for who in ("ranker", "retriever"):
            auc = self.candidate_auc[f"{who}/{stage}"]
            retriever |= {f"{who}/{stage}/{k}": v.float() for k, v in auc.compute().items()}
            auc.reset()
        self.log_dict(retriever)
        for part in (*alone, self.retriever_sampled[stage]):
            part.reset()

    def on_validation_epoch_end(self) -> None:
        super().on_validation_epoch_end()
        self._log_companions("val")

    def on_test_epoch_end(self) -> None:
        super().on_test_epoch_end()
        self._log_companions("test")

    def score_next(self, batch: dict[str, torch.Tensor]) -> torch.Tensor:
        raise TypeError(
            "a two-stage model ranks K candidates, not the catalogue: use candidates() or "
            "predict_step()"
        )

    def serve(self, batch: dict[str, torch.Tensor], k: int, exclude_history: bool) -> dict:
        """The top-``k`` of the final ranking: ``items (B, k)`` with ``scores (B, k)``, the
        ranker's for the first K positions and the retriever's after them. Exclusion as in
        :meth:`NextItemTask.serve`."""
        exclude = batch.get("seen", batch["items"]) if exclude_history else None
        items, scores = self.candidates(batch, exclude).top_with_scores(k)
        return {"user": batch["user"], "items": items, "scores": scores}
