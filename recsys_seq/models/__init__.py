"""Sequence encoders (plain nn.Modules) and the LightningModules that train and rank with them."""

from recsys_seq.models.din import TargetAttention, TargetAttentionRecommender
from recsys_seq.models.gru import GRUEncoder
from recsys_seq.models.popularity import PopularityRecommender
from recsys_seq.models.recommender import SequentialRecommender
from recsys_seq.models.self_attention import SelfAttentionEncoder

__all__ = [
    "GRUEncoder",
    "PopularityRecommender",
    "SelfAttentionEncoder",
    "SequentialRecommender",
    "TargetAttention",
    "TargetAttentionRecommender",
]
