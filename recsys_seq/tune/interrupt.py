"""Ctrl-C during a study: the running trial stops at once and its values are queued to run
first when the same command runs again; the study's bookkeeping finishes before the command
ends (exit status 130, with a short report).

Python's own SIGINT handler raises ``KeyboardInterrupt`` wherever the main thread is: inside
Optuna's writes to the database, between a trial's ask and its tell (which leaves the trial
RUNNING until its heartbeat goes stale), or between two of the summary files. The handler here
(:func:`stop_on_sigint`) raises only where stopping at once is both safe and wanted, in the
blocks :meth:`StopRequest.armed` marks: while a trial trains, and while a worker sleeps waiting
for the trials of others. Anywhere else it records the request, and the loop
(:func:`~recsys_seq.tune.study.work`) stops before the next trial starts.

Lightning turns a ``KeyboardInterrupt`` inside ``fit`` or ``test`` into ``sys.exit(1)`` after
its graceful shutdown (and ignores SIGINT from then on): :func:`stops_trial` turns whatever a
trial raises once Ctrl-C was pressed into :class:`TrialInterrupted`, which :func:`requeue`
handles.
"""

from __future__ import annotations

import signal
from collections.abc import Iterator
from contextlib import contextmanager
from types import FrameType
from typing import Any

import optuna
from optuna.trial import TrialState

INTERRUPTED = "interrupted"  # user attribute of a trial Ctrl-C stopped (FAIL to Optuna)
RETRY_OF = "retry_of"  # user attribute of its re-queued copy: the interrupted trial's number


class TrialInterrupted(BaseException):
    """A trial stopped by Ctrl-C. Neither an ``Exception`` nor a ``KeyboardInterrupt``, which
    Optuna's ``optimize`` would catch to mark the trial failed and log with a traceback: it
    leaves the trial to :func:`requeue`."""

    def __init__(self, number: int, params: dict[str, Any]) -> None:
        super().__init__(number)
        self.number = number
        self.params = params


class StudyInterrupted(KeyboardInterrupt):
    """recsys-tune stopped by Ctrl-C once its study was open; ``report`` says where it stands
    and how to resume."""

    def __init__(self, report: str) -> None:
        super().__init__(report)
        self.report = report


class StopRequest:
    """Ctrl-C as a request to stop the study: ``requested`` once SIGINT came, and a
    ``KeyboardInterrupt`` only inside :meth:`armed` blocks (see the module's docstring)."""

    def __init__(self) -> None:
        self.requested = False
        self._armed = False

    def on_sigint(self, signum: int, frame: FrameType | None) -> None:
        """The SIGINT handler: record the request; stop an armed block at once."""
        self.requested = True
        if self._armed:
            self._armed = False  # one KeyboardInterrupt per block
            raise KeyboardInterrupt

    @contextmanager
    def armed(self) -> Iterator[None]:
        """A block that Ctrl-C stops at once, also when it came just before the block began
        (e.g. while Optuna drew the trial's values)."""
        if self.requested:
            raise KeyboardInterrupt
        self._armed = True
        try:
            yield
        finally:
            self._armed = False


@contextmanager
def stop_on_sigint() -> Iterator[StopRequest]:
    """A :class:`StopRequest` that receives SIGINT during the block; the previous handler is
    put back after it (Lightning's graceful shutdown leaves SIGINT ignored)."""
    stop = StopRequest()
    previous = signal.signal(signal.SIGINT, stop.on_sigint)
    try:
        yield stop
    finally:
        signal.signal(signal.SIGINT, previous)


@contextmanager
def stops_trial(stop: StopRequest, trial: optuna.Trial) -> Iterator[None]:
    """Run a trial's training so that Ctrl-C stops it at once. Whatever the block raises once
    Ctrl-C was pressed (the ``KeyboardInterrupt``, Lightning's ``sys.exit(1)`` after its
    graceful shutdown, an error of a half-stopped run) becomes :class:`TrialInterrupted`, the
    trial marked ``interrupted``: it is re-run, not counted as a failure."""
    try:
        with stop.armed():
            yield
    except BaseException as error:
        if not stop.requested:
            raise
        trial.set_user_attr(INTERRUPTED, True)
        raise TrialInterrupted(trial.number, trial.params) from error


def requeue(study: optuna.Study, interrupted: TrialInterrupted) -> None:
    """Mark the interrupted trial failed and queue its values to run first.

    FAIL, not PRUNED: a failed trial is not counted towards ``tune.n_trials`` (the study still
    gets all the trials it was asked for), is never the best, is left out of the plots, and
    samplers ignore it (TPE counts a pruned trial among its bad ones, which would steer it
    away from values that were never measured). Its ``interrupted`` attribute
    tells it apart from a real failure in the summary.

    The copy is a WAITING trial in the study's database (any RDB storage keeps it for the next
    process), and Optuna's ask takes a waiting trial before it draws new values, so the next
    trial any worker starts has these values. ``skip_if_exists=False``: Optuna's check
    compares with every trial's values, the interrupted one included, so it would always skip.
    """
    study.tell(interrupted.number, state=TrialState.FAIL, skip_if_finished=True)
    study.enqueue_trial(
        interrupted.params, user_attrs={RETRY_OF: interrupted.number}, skip_if_exists=False
    )
