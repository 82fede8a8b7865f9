"""recsys-tune: an Optuna study over recsys-train's options, resumable and shared by workers.

recsys-tune search=sasrec data=s3rec_beauty tune.n_trials=30    # run, or resume, the study
recsys-tune search=sasrec tune.storage=postgresql://user@host/db  # a database for many workers

Every recsys-train option applies to every trial; the study lives in
``outputs/tune/<study name>/`` (``tune.sweep_dir``): its database, ``trials/<n>/`` run folders,
``summary.md``, ``best.yaml`` and plots. Ctrl-C stops it with a report and exit status 130;
the same command resumes it, the interrupted trial's values first. The parts are
:mod:`recsys_seq.tune`'s.
"""

from __future__ import annotations

import shlex
import sys

import hydra
from hydra.core.hydra_config import HydraConfig
from omegaconf import DictConfig

from recsys_seq.core.conf import CONF_SEARCH_PATH
from recsys_seq.core.errors import UserError, exit_on_user_error, run_command

INTERRUPTED_EXIT_CODE = 130  # the shell's code for a command stopped by Ctrl-C


def same_command() -> str:
    """The command line as typed, for the report that says how to resume: recsys-tune's
    arguments quoted for a shell, under its installed name however it was started
    (``python -m recsys_seq.cli.tune`` too)."""
    return shlex.join(["recsys-tune", *sys.argv[1:]])


@hydra.main(version_base="1.3", config_path=CONF_SEARCH_PATH, config_name="tune")
@exit_on_user_error("recsys-tune")
def _main(cfg: DictConfig) -> float | None:
    try:
        from recsys_seq.tune.interrupt import StudyInterrupted
        from recsys_seq.tune.tuner import tune
    except ModuleNotFoundError as error:
        if error.name != "optuna":
            raise
        raise UserError(
            'recsys-tune needs Optuna, which is not installed: pip install "recsys-seq[sweeps]"'
        ) from None
    try:
        study = tune(cfg, HydraConfig.get().overrides.task, same_command())
    except StudyInterrupted as stopped:
        print(stopped.report, flush=True)
        sys.exit(INTERRUPTED_EXIT_CODE)
    except KeyboardInterrupt:
        print(
            "recsys-tune: interrupted before the study was open; no trial was started. Run "
            "the same command again to start it.",
            file=sys.stderr,
        )
        sys.exit(INTERRUPTED_EXIT_CODE)
    return study.best_value if study.best_trials else None


def main() -> None:
    run_command(_main, "recsys-tune")


if __name__ == "__main__":
    main()
