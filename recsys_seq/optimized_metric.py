"""The run's one optimised metric (``optimized_metric``, e.g. ``val/ndcg@10``), the names
derived from it and the names of the metrics every model logs, without torch: training,
sweeps and the report all read them here.

It picks the best checkpoint, stops early, drives the LR scheduler, is what sweeps maximise
and what the report plots. A run logs its best value so far as :func:`best_key`.
"""

from __future__ import annotations

import re

from recsys_seq.core.options import OptionError

METRICS = ("hr", "ndcg", "mrr")
"""The all-item metrics every model logs, each at every cut-off it evaluates."""
BEYOND_ACCURACY = ("coverage", "avg_pop", "gini", "tail_share")
"""The beyond-accuracy metrics of the top-K lists, which every model with training counts
logs at every cut-off (:mod:`recsys_seq.metrics.beyond_accuracy`); never optimised: for some,
lower is better."""
DEFAULT = "val/ndcg@10"
PATTERN = re.compile(rf"val/({'|'.join(METRICS)})@([1-9][0-9]*)")
"""What ``optimized_metric`` may name: an all-item validation metric at any cut-off."""


def check_optimized_metric(name: object) -> str:
    """``name`` if it is a metric the models log in validation, else an :class:`OptionError`."""
    if not isinstance(name, str) or not PATTERN.fullmatch(name):
        raise OptionError(
            f"optimized_metric must be a validation metric val/<{'|'.join(METRICS)}>@<k> "
            f"(k >= 1), e.g. val/ndcg@10 or val/hr@20, got {name!r}."
        )
    return name


def cutoff(name: str) -> int:
    """The metric's k (``val/ndcg@10`` -> 10)."""
    return int(name.rsplit("@", 1)[1])


def best_key(name: str) -> str:
    """The logged best value so far of ``name`` (``val/ndcg@10`` -> ``val/best_ndcg@10``)."""
    return "val/best_" + name.removeprefix("val/")
