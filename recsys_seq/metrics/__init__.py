"""Ranking metrics whose states are sums and counts, so they are exact under DDP."""

from recsys_seq.metrics.auc import SampledAUC
from recsys_seq.metrics.ranking import RankingMetrics, target_rank
from recsys_seq.metrics.sampled import SampledMetrics

__all__ = ["RankingMetrics", "SampledAUC", "SampledMetrics", "target_rank"]
