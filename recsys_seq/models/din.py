"""DIN-style target attention (Zhou et al., "Deep Interest Network", KDD 2018).

For a candidate item ``c`` the user's interest is a weighted sum of their history embeddings
``h_t``, the weight of each event coming from an *activation unit*, an MLP over
``[h, c, h - c, h * c]``. Interest, candidate and their product go through an MLP that outputs
the candidate's logit. Every candidate gets its own interest vector, so scoring all N items
costs ``B x N x T`` activation-unit evaluations; the code below keeps that cost to one
``D x H`` product per (event, candidate) pair:

    W [h, c, h - c, h * c] = (W1 + W3) h + (W2 - W3) c + W4 (h * c)

The first term is computed once per event, the second once per candidate, and only the third
is per pair. :class:`TargetAttention` parametrises exactly these three matrices (the
four-block form has the same functions; :meth:`TargetAttention.load_concat_weights` converts).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from itertools import pairwise

import torch
import torch.nn.functional as F
from lightning.pytorch.utilities import rank_zero_warn
from torch import nn

from recsys_seq.metrics.ranking import DEFAULT_KS
from recsys_seq.models.ranking import RankingModule
from recsys_seq.models.recommender import OptimizerFactory, SchedulerFactory

ATTENTION_MODES = ("sum", "sigmoid", "softmax")


class ChannelPReLU(nn.Module):
    """PReLU with one slope per channel of the LAST dimension (``nn.PReLU`` uses dim 1)."""

    def __init__(self, channels: int, init: float = 0.25) -> None:
        super().__init__()
        self.slope = nn.Parameter(torch.full((channels,), init))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return F.prelu(x.reshape(-1, x.shape[-1]), self.slope).view(x.shape)  # one fused pass


def make_activation(name: str, channels: int) -> nn.Module:
    if name == "prelu":
        return ChannelPReLU(channels)
    if name == "relu":
        return nn.ReLU()
    if name == "sigmoid":
        return nn.Sigmoid()
    raise ValueError(f"activation must be prelu, relu or sigmoid, got {name!r}")


def mlp(sizes: Sequence[int], activation: str, dropout: float = 0.0) -> nn.Sequential:
    """Linear layers ``sizes[0] -> ... -> sizes[-1]`` with an activation after each hidden one."""
    layers: list[nn.Module] = []
    for i, (width_in, width_out) in enumerate(pairwise(sizes)):
        layers.append(nn.Linear(width_in, width_out))
        if i < len(sizes) - 2:
            layers.append(make_activation(activation, width_out))
            if dropout:
                layers.append(nn.Dropout(dropout))
    return nn.Sequential(*layers)


class TargetAttention(nn.Module):
    """The activation unit: one weight per (candidate, history event) pair, PAD weighted 0.

    Args:
        d_model: D, the width of item embeddings (history and candidates alike).
        hidden: widths of the activation unit's hidden layers (the paper: 80, 40).
        activation: ``prelu`` (per-channel), ``relu`` or ``sigmoid``.
        attention: how the unit's outputs become weights:
            ``sum`` - used as they are (the paper: unnormalised, so the interest vector also
            carries how much of the history is relevant);
            ``sigmoid`` - squashed to (0, 1), still unnormalised;
            ``softmax`` - normalised over the real events of the history.
    """

    def __init__(
        self,
        d_model: int = 64,
        hidden: Sequence[int] = (80, 40),
        activation: str = "prelu",
        attention: str = "softmax",
    ) -> None:
        super().__init__()
        if attention not in ATTENTION_MODES:
            raise ValueError(f"attention must be one of {ATTENTION_MODES}, got {attention!r}")
        if not hidden:
            raise ValueError("the activation unit needs at least one hidden layer")
        self.attention = attention
        first = hidden[0]
        self.history_proj = nn.Linear(d_model, first)  # W1 + W3, and the layer's bias
        self.candidate_proj = nn.Linear(d_model, first, bias=False)  # W2 - W3
        self.product_proj = nn.Linear(d_model, first, bias=False)  # W4
        self.first_activation = make_activation(activation, first)
        self.rest = mlp([*hidden, 1], activation)

    @torch.no_grad()
    def load_concat_weights(self, weight: torch.Tensor, bias: torch.Tensor) -> None:
        """Set the first layer from the four-block form ``Linear(4D, H)`` on
        ``[h, c, h - c, h * c]``: ``weight`` is ``(H, 4D)``, ``bias`` ``(H,)``."""
        w1, w2, w3, w4 = weight.chunk(4, dim=1)  # each (H, D)
        self.history_proj.weight.copy_(w1 + w3)
        self.history_proj.bias.copy_(bias)
        self.candidate_proj.weight.copy_(w2 - w3)
        self.product_proj.weight.copy_(w4)

    def history_term(self, history: torch.Tensor) -> torch.Tensor:
        """``(B, T, D)`` -> ``(B, T, H)``: the per-event part of the first layer (with bias).
        Compute it once per batch and pass it to :meth:`forward` for every candidate chunk."""
        return self.history_proj(history)

    def forward(
        self,
        history: torch.Tensor,
        candidates: torch.Tensor,
        mask: torch.Tensor,
        history_term: torch.Tensor | None = None,
    ) -> torch.Tensor:
        """Attention weights of every history event for every candidate.

        Args:
            history: ``(B, T, D)`` embedded history (right-padded).
            candidates: ``(B, C, D)`` candidate embeddings, or ``(C, D)`` shared by all rows.
            mask: bool, broadcastable to ``(B, C, T)``, True for an event the candidate may
                attend to (a real event; in training also one before the cut point). Every
                row must have at least one True for ``softmax``.
            history_term: :meth:`history_term` of ``history``, if already computed.

        Returns:
            ``(B, C, T)`` weights, exactly 0 where ``mask`` is False.
        """
        if history_term is None:
            history_term = self.history_term(history)  # (B, T, H)
        batch_size, length, _ = history.shape
        width = history_term.shape[-1]
        if candidates.dim() == 2:
            candidates = candidates.expand(batch_size, -1, -1)  # (B, C, D), a view
        # Both per-candidate terms in one batched GEMM over d:
        #   (W2 - W3) c + W4 (h_t * c) = sum_d c_d [(W2 - W3)[:, d] + W4[:, d] h_td]
        # so the per-(event, candidate) work is a single D x H product, with no (B, C, T, D)
        # pair tensor in memory; the per-event term (with the bias) enters as the GEMM's input.
        mixed = (
            history.transpose(1, 2)[..., None] * self.product_proj.weight.T[None, :, None, :]
            + self.candidate_proj.weight.T[None, :, None, :]
        )  # (B, D, T, H), per row not per candidate
        hidden = torch.baddbmm(
            history_term.reshape(batch_size, 1, length * width),  # (B, 1, T*H)
            candidates,  # (B, C, D)
            mixed.flatten(2),  # (B, D, T*H)
        ).view(batch_size, -1, length, width)  # (B, C, T, H)
        logits = self.rest(self.first_activation(hidden)).squeeze(-1)  # (B, C, T)
        mask = mask.expand_as(logits)
        if self.attention == "softmax":
            # additive masking with the dtype's own minimum (constants overflow in fp16)
            logits = logits.masked_fill(~mask, torch.finfo(logits.dtype).min)
            weights = logits.softmax(dim=-1)
        elif self.attention == "sigmoid":
            weights = logits.sigmoid()
        else:
            weights = logits
        return torch.where(mask, weights, torch.zeros_like(weights))  # PAD: exactly 0


class TargetAttentionRecommender(RankingModule):
    """DIN: target attention over the history, an MLP scorer, BCE on sampled negatives.

    Training (per step, vectorised over the batch): ``cuts_per_window`` random cut points per
    window; the history is ``window[:cut]`` and the positive is the item after it
    (``targets[b, cut - 1]``), scored against ``num_negatives`` uniformly drawn items (never
    PAD; never the positive when ``exclude_positive``), with binary cross-entropy. Randomness
    comes from torch's global generator, which ``seed_everything`` seeds.

    Evaluation: :meth:`score_next` scores every item for the whole window (in chunks of
    ``eval_chunk_size`` candidates), so :class:`RankingModule` ranks against all items as for
    every other model, and, with ``data.sampled_negatives=100``, also reports the DIN paper's
    AUC/GAUC against fixed sampled negatives (``<stage>/sampled100/auc``, ``.../gauc``).

    Side features (``category``, ``event``; any ``(B, T)`` long batch entry) are embedded and
    pooled with the same attention weights as the items, so the scorer also sees e.g. the
    categories the user attended to for this candidate. A configured feature missing from the
    batch counts as PAD (a zero vector), with a warning.

    Args:
        num_items: N, real items 1..N (0 is PAD).
        encoder: the :class:`TargetAttention` unit (default: one with ``embedding_dim``).
        embedding_dim: D.
        mlp_hidden: hidden widths of the scoring MLP (the paper: 200, 80).
        mlp_activation: ``prelu``, ``relu`` or ``sigmoid``.
        dropout: dropout inside the scoring MLP.
        side_features: batch keys pooled alongside the items: ``{name: size}`` (sizes from the
            data, as the train CLI passes them; values index the table directly) or a list of
            names (values hashed into ``side_feature_buckets`` rows).
        side_feature_buckets: embedding rows per side feature given by name only.
        side_embedding_dim: width of each side feature's embedding.
        num_negatives: K, negatives per positive in training.
        cuts_per_window: S, cut points per training window.
        exclude_positive: draw negatives from the items other than the positive.
        eval_chunk_size: candidates scored at once in :meth:`score_next`; memory is about
            ``4 * B * T * chunk * (D + 2 * hidden[0])`` bytes.
        optimizer, scheduler, ks, exclude_history: as in
            :class:`~recsys_seq.models.recommender.SequentialRecommender`.
    """

    def __init__(
        self,
        num_items: int,
        encoder: TargetAttention | None = None,
        embedding_dim: int = 64,
        mlp_hidden: Sequence[int] = (200, 80),
        mlp_activation: str = "prelu",
        dropout: float = 0.0,
        side_features: Mapping[str, int] | Sequence[str] = (),
        side_feature_buckets: int = 1024,
        side_embedding_dim: int = 16,
        num_negatives: int = 16,
        cuts_per_window: int = 4,
        exclude_positive: bool = True,
        eval_chunk_size: int = 64,
        optimizer: OptimizerFactory | None = None,
        scheduler: SchedulerFactory | None = None,
        ks: Sequence[int] = DEFAULT_KS,
        exclude_history: bool = False,
    ) -> None:
        super().__init__(ks, exclude_history)
        self.save_hyperparameters(ignore=["encoder", "optimizer", "scheduler"])
        if num_items < 2:
            raise ValueError(f"DIN needs at least 2 items to sample negatives, got {num_items}")
        if min(num_negatives, cuts_per_window, eval_chunk_size) < 1:
            raise ValueError("num_negatives, cuts_per_window and eval_chunk_size must be >= 1")
        self.num_items = num_items
        self.encoder = encoder if encoder is not None else TargetAttention(embedding_dim)
        self.optimizer_factory = optimizer or torch.optim.AdamW
        self.scheduler_factory = scheduler
        self.num_negatives = num_negatives
        self.cuts_per_window = cuts_per_window
        self.exclude_positive = exclude_positive
        self.eval_chunk_size = eval_chunk_size

        self.item_embedding = nn.Embedding(num_items + 1, embedding_dim, padding_idx=0)
        nn.init.normal_(self.item_embedding.weight, std=embedding_dim**-0.5)
        with torch.no_grad():
            self.item_embedding.weight[0].zero_()
        # names -> embedding rows: the data's sizes (the train CLI passes a mapping), else
        # hashed buckets for a bare list of names
        if isinstance(side_features, Mapping):
            sizes = {name: int(size) for name, size in side_features.items()}
            self.side_hashed = False
        else:
            sizes = {name: side_feature_buckets for name in side_features}
            self.side_hashed = True
        self.side_features = tuple(sizes)
        self.side_feature_buckets = side_feature_buckets
        self.side_embedding = nn.ModuleDict(
            {
                name: nn.Embedding(size, side_embedding_dim, padding_idx=0)
                for name, size in sizes.items()
            }
        )
        self._warned_missing: set[str] = set()
        pooled = embedding_dim + side_embedding_dim * len(self.side_features)
        self.head = mlp(
            [pooled + 2 * embedding_dim, *mlp_hidden, 1], mlp_activation, dropout=dropout
        )

    # ------------------------------------------------------------------ history and scoring

    def _side_values(self, batch: dict[str, torch.Tensor], name: str) -> torch.Tensor:
        """``(B, T)`` embedding rows of one side feature (0 stays PAD; hashed into
        ``1..buckets-1`` when the sizes are not known)."""
        values = batch.get(name)
        if values is None:
            if name not in self._warned_missing:
                self._warned_missing.add(name)
                rank_zero_warn(f"DIN: side feature {name!r} is not in the batch; using PAD")
            return torch.zeros_like(batch["items"])
        if not self.side_hashed:
            return values
        return torch.where(values > 0, 1 + (values - 1) % (self.side_feature_buckets - 1), 0)

    def embed_history(self, batch: dict[str, torch.Tensor]) -> tuple[torch.Tensor, torch.Tensor]:
        """The history as the attention reads it and as it is pooled.

        Returns:
            ``(keys, values)``: ``keys`` ``(B, T, D)`` item embeddings; ``values``
            ``(B, T, D + F * Ds)`` items and side features, pooled by the attention weights.
        """
        keys = self.item_embedding(batch["items"])  # (B, T, D); PAD rows are 0
        side = [self.side_embedding[n](self._side_values(batch, n)) for n in self.side_features]
        values = torch.cat([keys, *side], dim=-1) if side else keys  # (B, T, D + F*Ds)
        return keys, values

    def score_candidates(
        self,
        keys: torch.Tensor,
        values: torch.Tensor,
        candidates: torch.Tensor,
        mask: torch.Tensor,
        history_term: torch.Tensor | None = None,
    ) -> torch.Tensor:
        """Logits of candidates given a history.

        Args:
            keys, values: from :meth:`embed_history`, ``(B, T, D)`` and ``(B, T, V)``.
            candidates: ``(B, C)`` or ``(C,)`` (shared by all rows) long item indices.
            mask: bool broadcastable to ``(B, C, T)``, True for events the candidate may see.
            history_term: ``self.encoder.history_term(keys)`` if already computed.

        Returns:
            ``(B, C)`` logits.
        """
        cand = self.item_embedding(candidates)  # (B, C, D) or (C, D)
        weights = self.encoder(keys, cand, mask, history_term)  # (B, C, T), 0 off the mask
        pooled = weights @ values  # (B, C, V): interest (and pooled side features)
        if cand.dim() == 2:
            cand = cand.expand(keys.shape[0], -1, -1)  # (B, C, D)
        interest = pooled[..., : keys.shape[-1]]  # (B, C, D)
        features = torch.cat([pooled, cand, interest * cand], dim=-1)  # (B, C, V + 2D)
        return self.head(features).squeeze(-1)  # (B, C)

    def score_next(self, batch: dict[str, torch.Tensor]) -> torch.Tensor:
        """``(B, N + 1)`` logits of every item after the whole window, ``eval_chunk_size``
        candidates at a time; PAD's column is the dtype's minimum."""
        keys, values = self.embed_history(batch)
        history_term = self.encoder.history_term(keys)  # (B, T, H), shared by all chunks
        mask = batch["mask"][:, None, :]  # (B, 1, T)
        items = torch.arange(1, self.num_items + 1, device=keys.device)
        chunks = [
            self.score_candidates(keys, values, chunk, mask, history_term)  # (B, chunk)
            for chunk in items.split(self.eval_chunk_size)
        ]
        pad = torch.full_like(chunks[0][:, :1], torch.finfo(chunks[0].dtype).min)  # (B, 1)
        return torch.cat([pad, *chunks], dim=1)  # (B, N + 1)

    # ------------------------------------------------------------------------------ training

    def sample_training_pairs(
        self, batch: dict[str, torch.Tensor]
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """Cut points and candidates for one training step.

        Returns:
            ``(cut, candidates)``: ``cut`` ``(B, S)`` long in ``1..lengths[b]`` (the history is
            ``window[:cut]``); ``candidates`` ``(B, S, 1 + K)``, the positive
            ``targets[b, cut - 1]`` first, then K negatives in ``1..N``.
        """
        lengths = batch["lengths"]
        batch_size, device = lengths.shape[0], lengths.device
        shape = (batch_size, self.cuts_per_window)
        cut = 1 + (torch.rand(shape, device=device) * lengths[:, None]).long()  # (B, S)
        cut = torch.minimum(cut, lengths[:, None])  # guard the float edge u * len == len
        positive = batch["targets"].gather(1, cut - 1)  # (B, S)
        negative_shape = (*shape, self.num_negatives)
        if self.exclude_positive:
            other = torch.randint(1, self.num_items, negative_shape, device=device)  # 1..N-1
            negatives = other + (other >= positive[..., None]).long()  # 1..N without positive
        else:
            negatives = torch.randint(1, self.num_items + 1, negative_shape, device=device)
        return cut, torch.cat([positive[..., None], negatives], dim=-1)  # (B, S, 1 + K)

    def training_step(self, batch: dict[str, torch.Tensor], batch_idx: int) -> torch.Tensor:
        cut, candidates = self.sample_training_pairs(batch)  # (B, S), (B, S, 1 + K)
        batch_size, cuts, per_cut = candidates.shape
        keys, values = self.embed_history(batch)
        positions = torch.arange(keys.shape[1], device=keys.device)
        visible = positions < cut[..., None]  # (B, S, T): window[:cut], never PAD
        mask = visible[:, :, None].expand(-1, -1, per_cut, -1).flatten(1, 2)  # (B, S*(1+K), T)
        logits = self.score_candidates(keys, values, candidates.flatten(1), mask)
        logits = logits.view(batch_size, cuts, per_cut)  # (B, S, 1 + K)
        labels = torch.zeros_like(logits)
        labels[..., 0] = 1.0
        loss = F.binary_cross_entropy_with_logits(logits, labels)
        self.log("train/loss", loss, prog_bar=True, batch_size=batch_size)
        return loss
