"""Ranking metrics whose states are sums and counts, so they are exact under DDP."""

from recsys_seq.metrics.auc import SampledAUC, sampled_negatives
from recsys_seq.metrics.ranking import RankingMetrics, target_rank

__all__ = ["RankingMetrics", "SampledAUC", "sampled_negatives", "target_rank"]
