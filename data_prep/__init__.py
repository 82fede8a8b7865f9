"""Polars jobs that turn raw behaviour logs into prepared sequence datasets.

This package imports no torch: preparing data must not need a deep-learning stack.

Public API::

    prepare(cfg) -> meta            # run the prep job (cfg: the keys of conf/prep.yaml)
    demo.prepare_demo(output) -> Path   # the bundled demo dataset, prepared once
    formats.scan(path, fmt) -> LazyFrame  # a raw file as canonical columns
"""

from data_prep.formats import scan
from data_prep.prep import prepare, read_meta
from data_prep.prep_error import PrepError

__all__ = ["PrepError", "prepare", "read_meta", "scan"]
