"""recsys-bench task=<name> [option=value ...]: benchmarks that print a table and write rows.

    recsys-bench task=padding output=outputs/bench/padding.json datasets=[s3rec_beauty,ml_1m]
    recsys-bench task=throughput dataset=bert4rec_beauty device=cuda
    recsys-bench task=prep output=outputs/bench/prep.json
    recsys-bench task=loss output=outputs/bench/loss.json threads=1
    recsys-bench task=data output=outputs/bench/data.json events=[2000000,20000000] ranks=[1,2]

A Hydra app like the other commands, composed from ``conf/bench.yaml``, which names
every task's options (null: the task's default) and writes nothing of Hydra's. Each task is a
function whose annotated keyword arguments are its options: the options given a value are
checked against that function (:func:`recsys_seq.core.options.checked_arguments`), so a task refuses
another task's options and values of the wrong type, and an existing ``output`` that is not a
benchmark file of ours is refused before the work starts.
"""

from __future__ import annotations

import typing
from collections.abc import Callable, Mapping
from typing import Any

import hydra
from omegaconf import DictConfig, OmegaConf

from recsys_seq.core.conf import CONF_SEARCH_PATH
from recsys_seq.core.errors import UserError, exit_on_user_error, run_command
from recsys_seq.core.options import checked_arguments
from recsys_seq.core.publish import BENCHMARK, check_target


def _padding():
    from recsys_seq.bench.padding import run

    return run


def _throughput():
    from recsys_seq.bench.throughput import run

    return run


def _prep():
    from recsys_seq.bench.prep import run_prep_benchmark

    return run_prep_benchmark


def _loss():
    from recsys_seq.bench.loss import run

    return run


def _data():
    from recsys_seq.bench.data import run

    return run


TASKS = {
    "padding": _padding,
    "throughput": _throughput,
    "prep": _prep,
    "loss": _loss,
    "data": _data,
}
"""Task name -> the function it runs (imported on demand: each pulls in different libraries)."""


def task_options(task: Callable, values: Mapping[str, Any], where: str) -> dict[str, Any]:
    """The options given a value (not null), checked against ``task``'s arguments; a list
    option given one name is that one name (``datasets=ml_1m``), as in recsys-prep."""
    hints = typing.get_type_hints(task)
    given = {
        k: [v] if isinstance(v, str) and _takes_list(hints.get(k)) else v
        for k, v in values.items()
        if v is not None
    }
    return checked_arguments(task, given, where)


def _takes_list(hint: Any) -> bool:
    return any(typing.get_origin(h) is list for h in (hint, *typing.get_args(hint)))


def run_task(cfg: DictConfig) -> Any:
    """Run the benchmark ``cfg.task`` with the options of ``cfg`` that are set."""
    if OmegaConf.is_missing(cfg, "task") or cfg.task not in TASKS:
        given = "" if OmegaConf.is_missing(cfg, "task") else f", not {cfg.task!r}"
        raise UserError(
            f"task must be one of {', '.join(TASKS)}{given} (usage: recsys-bench "
            "task=<name> [option=value ...]; recsys-bench --help lists the options)."
        )
    values = OmegaConf.to_container(cfg, resolve=True)
    name = values.pop("task")
    task = TASKS[name]()
    options = task_options(task, values, f"recsys-bench task={name}")
    if options.get("output") is not None:
        read = [options["cache"]] if options.get("cache") else []  # the prepared datasets
        check_target(options["output"], BENCHMARK, folder=False, inputs=read)  # before the work
    return task(**options)


@hydra.main(version_base="1.3", config_path=CONF_SEARCH_PATH, config_name="bench")
@exit_on_user_error("recsys-bench")
def _main(cfg: DictConfig) -> None:
    run_task(cfg)


def main() -> None:
    run_command(_main, "recsys-bench")


if __name__ == "__main__":
    main()
