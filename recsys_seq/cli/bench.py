"""recsys-bench <task> [key=value ...]: benchmarks that print a table and write JSON rows.

recsys-bench padding output=outputs/bench/padding.json datasets=s3rec_beauty,ml_1m
recsys-bench prep output=outputs/bench/prep.json
"""

from __future__ import annotations

import sys

from omegaconf import OmegaConf


def _padding(options: dict) -> None:
    from recsys_seq.bench.padding import run

    run(**options)


def _throughput(options: dict) -> None:
    from recsys_seq.bench.throughput import run

    run(**options)


def _prep(options: dict) -> None:
    from data_prep.bench import run_prep_benchmark

    run_prep_benchmark(**options)


TASKS = {"padding": _padding, "throughput": _throughput, "prep": _prep}


def main(argv: list[str] | None = None) -> None:
    args = sys.argv[1:] if argv is None else argv
    if not args or args[0] not in TASKS:
        raise SystemExit(f"usage: recsys-bench {{{','.join(TASKS)}}} [key=value ...]")
    options = OmegaConf.to_container(OmegaConf.from_dotlist(args[1:]))
    TASKS[args[0]](options)


if __name__ == "__main__":
    main()
