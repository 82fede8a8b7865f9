"""The persistent study: its database, its identity, and the loop that works it.

The study lives in a database (SQLite in the sweep folder unless ``tune.storage`` names
another), so that

* running the same command again resumes it: ``tune.n_trials`` is the total of finished trials
  wanted, and only the missing ones run;
* a trial whose process was killed does not block that: every running trial records a
  heartbeat, and one silent for ``tune.grace_period`` seconds is marked failed and queued again
  with the same parameters (Optuna's heartbeat and
  :class:`~optuna.storages.RetryHeartbeatStaleTrialCallback`). Marking every running trial
  failed at start would instead kill the trials of the other workers;
* ``tune.fail_running=true`` fails the running trials at once instead (no waiting for the
  grace period; also for a trial killed before its first heartbeat, which Optuna never counts
  as stale): for one worker only, as it would fail the other workers' trials too;
* several processes work one study at once, each running the same command: a worker starts a
  trial only while finished plus running trials are fewer than ``tune.n_trials``, and waits
  for the others' last trials before it ends, so each one ends with the study complete;
* Ctrl-C stops the running trial at once and queues its values to run first, or stops before
  the next trial (:mod:`~recsys_seq.tune.interrupt`).

A study remembers the options it was made with (the recsys-train overrides, the space, the
optimised metric): resuming it with others would mix two experiments, and is refused.
"""

from __future__ import annotations

import json
import time
import warnings
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import optuna
from optuna.exceptions import ExperimentalWarning
from optuna.storages import RDBStorage, RetryHeartbeatStaleTrialCallback
from optuna.study import StudyDirection
from optuna.trial import TrialState

from recsys_seq.core.errors import UserError
from recsys_seq.core.options import OptionError, checked, option
from recsys_seq.tune.folder import DATABASE
from recsys_seq.tune.interrupt import StopRequest, TrialInterrupted, requeue

FINISHED = (TrialState.COMPLETE, TrialState.PRUNED)  # what counts towards tune.n_trials
MADE_WITH = "made_with"  # the study's user attribute: what it was made with


@dataclass(frozen=True)
class TuneOptions:
    """``tune.*`` of ``conf/tune.yaml``, checked before the study is opened."""

    study_name: str
    sweep_dir: str
    storage: str | None = None
    n_trials: int = option(20, min=1)
    heartbeat_interval: int = option(60, min=1)
    grace_period: int = option(180, min=1)
    max_retry: int = option(2, min=0)
    fail_running: bool = False
    sampler: dict[str, Any] | None = None


def tune_options(values: Mapping[str, Any]) -> TuneOptions:
    options = checked(TuneOptions, values, "tune")
    if options.grace_period <= options.heartbeat_interval:
        raise OptionError(
            f"tune.grace_period ({options.grace_period} s) must be longer than "
            f"tune.heartbeat_interval ({options.heartbeat_interval} s), or every running "
            "trial would look killed."
        )
    return options


def storage_url(options: TuneOptions, sweep_dir: Path) -> str:
    """``tune.storage``, or the SQLite database in the sweep folder."""
    return options.storage or f"sqlite:///{sweep_dir / DATABASE}"


def shown_url(url: str) -> str:
    """The URL for messages and the summary, its password hidden."""
    from sqlalchemy.engine import make_url

    try:
        return make_url(url).render_as_string(hide_password=True)
    except Exception:  # an unparsable URL: the error that names it comes from open_storage
        return url


def open_storage(url: str, options: TuneOptions, attempts: int = 3) -> RDBStorage:
    """The study's database with heartbeats on, its tables made on first use.

    Workers that start together on a new database race to make its tables, and all but one
    fail once: each failure is tried again after a second.

    Raises:
        UserError: the URL is not a database URL, its driver is not installed, or the
            database cannot be reached.
    """
    for _ in range(attempts - 1):
        try:
            return _storage(url, options)
        except Exception:  # the last attempt reports it
            time.sleep(1.0)
    try:
        return _storage(url, options)
    except Exception as error:  # SQLAlchemy's URL, driver and connection errors
        text = str(error).strip()
        reason = text.splitlines()[0] if text else type(error).__name__
        raise UserError(
            f"tune.storage: cannot open the study database {shown_url(url)} ({reason}). "
            "Give a SQLAlchemy URL (sqlite:///<file>, postgresql://<user>@<host>/<db>, ...) "
            "whose driver is installed and whose server is reachable."
        ) from None


def _storage(url: str, options: TuneOptions) -> RDBStorage:
    # SQLite: a writer waits for another's lock (several workers) instead of failing at once
    engine = {"connect_args": {"timeout": 60}} if url.startswith("sqlite") else {}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ExperimentalWarning)  # heartbeats: stable in use
        return RDBStorage(
            url,
            engine_kwargs=engine,
            heartbeat_interval=options.heartbeat_interval,
            grace_period=options.grace_period,
            heartbeat_stale_trial_callback=RetryHeartbeatStaleTrialCallback(
                max_retry=options.max_retry
            ),
        )


def load_study(storage: RDBStorage, name: str, made_with: Mapping[str, Any]) -> optuna.Study:
    """The study ``name``: created, or loaded when it exists and was made with the same
    options (a maximised study; ``made_with`` is stored with it).

    Raises:
        UserError: the stored study minimises, or was made with other options.
    """
    study = optuna.create_study(
        storage=storage,
        study_name=name,
        direction="maximize",
        load_if_exists=True,
    )
    where = f"Study {name!r} in {shown_url(storage.url)}"
    if study.direction != StudyDirection.MAXIMIZE:
        raise UserError(f"{where} minimises; recsys-tune maximises. Pick another tune.study_name.")
    wanted = json.loads(json.dumps(made_with))  # as stored: JSON values
    stored = study.user_attrs.get(MADE_WITH)
    if stored is None:
        study.set_user_attr(MADE_WITH, wanted)
    elif stored != wanted:
        differ = [key for key in wanted if stored.get(key) != wanted[key]]
        raise UserError(
            f"{where} was made with other {' and '.join(differ)}: "
            + "; ".join(f"{k} {stored.get(k)} then, {wanted[k]} now" for k in differ)
            + ". Resume it with the same options, or start another study with "
            "tune.study_name=<name>."
        )
    return study


def count(study: optuna.Study, states: tuple[TrialState, ...]) -> int:
    return len(study.get_trials(deepcopy=False, states=states))


def fail_stale_trials(study: optuna.Study) -> None:
    """Mark the trials whose heartbeat stopped failed (and queue their retries)."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ExperimentalWarning)
        optuna.storages.fail_stale_trials(study)


def fail_running(study: optuna.Study, max_retry: int) -> list[int]:
    """Mark every running trial failed now and queue its retry, as a stale heartbeat would
    (``tune.fail_running=true``): to resume at once after a kill, when no other worker runs.
    Returns the trials' numbers."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ExperimentalWarning)
        retry = RetryHeartbeatStaleTrialCallback(max_retry=max_retry)
    failed = []
    for trial in study.get_trials(states=(TrialState.RUNNING,)):
        study.tell(trial.number, state=TrialState.FAIL, skip_if_finished=True)
        retry(study, study.trials[trial.number])
        failed.append(trial.number)
    return failed


def work(
    study: optuna.Study,
    objective: Callable[[optuna.Trial], float],
    n_trials: int,
    poll_seconds: float,
    say: Callable[[str], None] = print,
    stop: StopRequest | None = None,
) -> int | None:
    """Run trials until ``study`` has ``n_trials`` finished ones, sharing the work with any
    other process running the same study, or until Ctrl-C (``stop``; None: never requested).

    A trial starts only while finished plus running trials are fewer than ``n_trials``; when
    the rest are running elsewhere, this waits for them (every ``poll_seconds``), so a running
    trial whose process was killed is failed and retried here after its grace period.

    Returns:
        The number of the trial Ctrl-C interrupted, its values queued again
        (:func:`~recsys_seq.tune.interrupt.requeue`); None when none was.
    """
    stop = stop or StopRequest()
    waiting = False
    while not stop.requested and (finished := count(study, FINISHED)) < n_trials:
        running = count(study, (TrialState.RUNNING,))
        if finished + running < n_trials:
            try:
                study.optimize(objective, n_trials=1)
            except TrialInterrupted as interrupted:
                requeue(study, interrupted)
                return interrupted.number
            waiting = False
            continue
        if not waiting:
            say(
                f"{finished} of {n_trials} trials finished, {running} running elsewhere: "
                "waiting for them (a killed one is run again once its heartbeat is stale)."
            )
            waiting = True
        _wait(stop, poll_seconds)
        fail_stale_trials(study)
    return None


def _wait(stop: StopRequest, seconds: float) -> None:
    """Sleep, or less when Ctrl-C comes (then the loop ends: nothing of ours is running)."""
    try:
        with stop.armed():
            time.sleep(seconds)
    except KeyboardInterrupt:
        if not stop.requested:
            raise
