"""Polars jobs that turn raw behaviour logs into prepared sequence datasets.

This package imports no torch: preparing data must not need a deep-learning stack.
"""
