"""recsys-bench <task> [key=value ...]: benchmarks that print a table and write JSON rows.

recsys-bench padding output=outputs/bench/padding.json datasets=s3rec_beauty,ml_1m
recsys-bench prep output=outputs/bench/prep.json
"""

from __future__ import annotations

import sys

from omegaconf import OmegaConf

from data_prep.errors import USAGE_EXIT_CODE, UserError
from data_prep.publish import BENCHMARK, check_target


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


def run_task(args: list[str]) -> None:
    if not args or args[0] not in TASKS:
        raise UserError(f"usage: recsys-bench {{{','.join(TASKS)}}} [key=value ...]")
    try:
        options = OmegaConf.to_container(OmegaConf.from_dotlist(args[1:]))
    except Exception as error:  # noqa: BLE001 - OmegaConf's grammar errors have many types
        raise UserError(f"options must be key=value pairs: {error}") from None
    if options.get("output") is not None:
        check_target(options["output"], BENCHMARK, folder=False)  # before hours of work
    try:
        TASKS[args[0]](options)
    except TypeError as error:
        if "unexpected keyword argument" not in str(error):
            raise
        raise UserError(f"recsys-bench {args[0]}: {error}") from None


def main(argv: list[str] | None = None) -> None:
    try:
        run_task(sys.argv[1:] if argv is None else argv)
    except UserError as error:
        print(f"recsys-bench: error: {error}", file=sys.stderr)
        sys.exit(USAGE_EXIT_CODE)


if __name__ == "__main__":
    main()
