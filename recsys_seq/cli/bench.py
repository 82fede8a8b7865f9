"""recsys-bench <task> [key=value ...]: benchmarks that print a table and write JSON rows.

recsys-bench padding output=outputs/bench/padding.json datasets=s3rec_beauty,ml_1m
recsys-bench prep output=outputs/bench/prep.json
"""

from __future__ import annotations

import sys

from omegaconf import OmegaConf

from data_prep.errors import USAGE_EXIT_CODE, UserError
from data_prep.publish import BENCHMARK, check_target
from recsys_seq.options import checked_arguments


def _padding():
    from recsys_seq.bench.padding import run

    return run


def _throughput():
    from recsys_seq.bench.throughput import run

    return run


def _prep():
    from data_prep.bench import run_prep_benchmark

    return run_prep_benchmark


TASKS = {"padding": _padding, "throughput": _throughput, "prep": _prep}
"""Task name -> the function it runs (imported on demand: each pulls in different libraries)."""


def run_task(args: list[str]) -> None:
    if not args or args[0] not in TASKS:
        raise UserError(f"usage: recsys-bench {{{','.join(TASKS)}}} [key=value ...]")
    try:
        values = OmegaConf.to_container(OmegaConf.from_dotlist(args[1:]))
    except Exception as error:  # noqa: BLE001 - OmegaConf's grammar errors have many types
        raise UserError(f"options must be key=value pairs: {error}") from None
    task = TASKS[args[0]]()
    options = checked_arguments(task, values, f"recsys-bench {args[0]}")
    if options.get("output") is not None:
        check_target(options["output"], BENCHMARK, folder=False)  # before hours of work
    task(**options)


def main(argv: list[str] | None = None) -> None:
    try:
        run_task(sys.argv[1:] if argv is None else argv)
    except UserError as error:
        print(f"recsys-bench: error: {error}", file=sys.stderr)
        sys.exit(USAGE_EXIT_CODE)


if __name__ == "__main__":
    main()
