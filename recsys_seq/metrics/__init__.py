"""Ranking and beyond-accuracy metrics whose states are sums and counts, so they are exact
under DDP."""

from recsys_seq.metrics.auc import SampledAUC
from recsys_seq.metrics.beyond_accuracy import BeyondAccuracyMetrics
from recsys_seq.metrics.ranking import RankingMetrics, nan_as_lowest, target_rank
from recsys_seq.metrics.sampled import SampledMetrics
from recsys_seq.metrics.top_k import top_items, top_scored

__all__ = [
    "BeyondAccuracyMetrics",
    "RankingMetrics",
    "SampledAUC",
    "SampledMetrics",
    "nan_as_lowest",
    "target_rank",
    "top_items",
    "top_scored",
]
