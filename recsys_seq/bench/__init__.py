"""Benchmarks that print a table and write JSON rows (``recsys-bench <task> output=FILE``)."""
