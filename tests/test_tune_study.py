"""recsys-tune's persistent study: its sampler, resuming it (with the same options only),
trials killed or running elsewhere, and Ctrl-C in a trial, between trials or while waiting."""

import os
import signal
import threading
import time
from pathlib import Path

import optuna
import pytest
from optuna.trial import TrialState

from recsys_seq.core.errors import UserError
from recsys_seq.core.options import OptionError
from recsys_seq.tune.interrupt import stop_on_sigint, stops_trial
from recsys_seq.tune.study import TuneOptions, fail_running, load_study, open_storage, work
from recsys_seq.tune.tuner import make_sampler

pytestmark = pytest.mark.slow  # end-to-end runs and real commands: not in make test-quick


def options(tmp_path: Path, **values) -> TuneOptions:
    defaults = {"study_name": "s", "sweep_dir": str(tmp_path), "heartbeat_interval": 1}
    return TuneOptions(**{**defaults, "grace_period": 2, **values})


def open_study(tmp_path: Path, made_with: dict | None = None) -> optuna.Study:
    storage = open_storage(f"sqlite:///{tmp_path / 'study.db'}", options(tmp_path))
    study = load_study(storage, "s", made_with or {"a": 1})
    study.sampler = optuna.samplers.RandomSampler(seed=0)
    return study


@pytest.mark.parametrize("target", ["os.system", "builtins.eval", "optuna.study.Study", ""])
def test_only_an_optuna_sampler_class_is_ever_made(target):
    with pytest.raises(OptionError, match=r"tune.sampler._target_ must be one of optuna\.samplers"):
        make_sampler({"_target_": target, "seed": 1}, 0)


def test_a_seeded_sampler_draws_new_values_when_a_study_resumes():
    seeded = {"_target_": "optuna.samplers.RandomSampler", "seed": 7}

    def first_draw(sampler) -> float:
        return optuna.create_study(sampler=sampler).ask().suggest_float("x", 0.0, 1.0)

    fresh = first_draw(make_sampler(seeded, 0))
    assert first_draw(make_sampler(seeded, 0)) == fresh  # the seed still makes runs repeatable
    assert first_draw(make_sampler(seeded, 3)) != fresh  # three trials in: other values


def test_resuming_with_other_options_is_refused(tmp_path):
    open_study(tmp_path, {"overrides": ["model=sasrec"], "metric": "val/ndcg@10"})
    with pytest.raises(UserError, match=r"other overrides.*model=sasrec.*then.*model=gru"):
        open_study(tmp_path, {"overrides": ["model=gru"], "metric": "val/ndcg@10"})


def test_an_unreachable_database_is_one_clear_error(tmp_path):
    with pytest.raises(UserError, match="tune.storage: cannot open the study database"):
        open_storage("nosuchdb://user:secret@host/db", options(tmp_path))


@pytest.mark.filterwarnings("ignore:Heartbeat of storage")  # a trial asked by hand, as a killed one
def test_a_killed_trial_is_failed_retried_and_the_total_kept(tmp_path):
    """A RUNNING trial left by a killed process (its heartbeat stops) does not block the
    resume: after its grace period it is failed and its values run again. A pruned trial
    (a diverged run) counts as finished, so the loop always ends."""
    study = open_study(tmp_path)
    study.optimize(lambda t: t.suggest_float("x", 0, 1), n_trials=1)
    killed = study.ask()
    x = killed.suggest_float("x", 0, 1)
    study._storage.record_heartbeat(killed._trial_id)  # then the process dies
    first = study.trials[0].value

    def objective(trial):
        value = trial.suggest_float("x", 0, 1)
        if trial.number == 3:
            raise optuna.TrialPruned("diverged")
        return value

    work(study, objective, n_trials=4, poll_seconds=0.5, say=lambda line: None)
    states = [t.state for t in study.trials]
    assert states.count(TrialState.COMPLETE) == 3 and states.count(TrialState.PRUNED) == 1
    assert study.trials[killed.number].state == TrialState.FAIL
    retry = next(t for t in study.trials if t.system_attrs.get("failed_trial") == killed.number)
    assert retry.params == {"x": x} and retry.state == TrialState.COMPLETE
    assert study.trials[0].value == first


@pytest.mark.filterwarnings("ignore:Heartbeat of storage")
def test_a_worker_waits_for_the_trials_running_elsewhere(tmp_path):
    study = open_study(tmp_path)
    study.optimize(lambda t: t.suggest_float("x", 0, 1), n_trials=1)
    elsewhere = study.ask()
    elsewhere.suggest_float("x", 0, 1)
    study._storage.record_heartbeat(elsewhere._trial_id)
    said = []
    # n_trials=2: one finished, one running elsewhere, so nothing is started here; once the
    # other worker is gone (its heartbeat stale) the trial is retried here
    work(study, lambda t: t.suggest_float("x", 0, 1), 2, poll_seconds=0.5, say=said.append)
    assert said and "running elsewhere" in said[0]
    assert len(study.get_trials(states=(TrialState.COMPLETE,))) == 2


@pytest.mark.filterwarnings("ignore:Heartbeat of storage")
def test_fail_running_resumes_at_once_even_without_a_heartbeat(tmp_path):
    """A trial killed before its first heartbeat is never stale to Optuna;
    tune.fail_running=true fails it (and queues its retry) when the command starts."""
    study = open_study(tmp_path)
    killed = study.ask()
    x = killed.suggest_float("x", 0, 1)
    assert fail_running(study, max_retry=2) == [killed.number]
    work(study, lambda t: t.suggest_float("x", 0, 1), 1, poll_seconds=60, say=print)
    assert study.trials[killed.number].state == TrialState.FAIL
    assert [t.params for t in study.get_trials(states=(TrialState.COMPLETE,))] == [{"x": x}]


def pressing_ctrl_c(stop, number: int, *, training: bool):
    """An objective whose trial ``number`` gets Ctrl-C while it trains (which then takes 30 s
    unless stopped), or just after its training."""

    def objective(trial):
        x = trial.suggest_float("x", 0, 1)
        with stops_trial(stop, trial):
            if trial.number == number and training:
                os.kill(os.getpid(), signal.SIGINT)
                time.sleep(30)
        if trial.number == number and not training:
            os.kill(os.getpid(), signal.SIGINT)
        return x

    return objective


def test_ctrl_c_in_a_trial_stops_it_at_once_and_queues_its_values_first(tmp_path):
    study = open_study(tmp_path)
    before = signal.getsignal(signal.SIGINT)
    started = time.monotonic()
    with stop_on_sigint() as stop:
        objective = pressing_ctrl_c(stop, 1, training=True)
        assert work(study, objective, 3, poll_seconds=60, stop=stop) == 1
    assert time.monotonic() - started < 20  # not after the 30 s training
    assert signal.getsignal(signal.SIGINT) is before
    stopped, queued = study.trials[1:]
    assert stopped.state == TrialState.FAIL and stopped.user_attrs == {"interrupted": True}
    assert queued.state == TrialState.WAITING and queued.user_attrs == {"retry_of": 1}
    # the next run takes the queued values before drawing any; the interrupted trial is not
    # counted, so the study still gets its 3 completed trials
    work(study, lambda t: t.suggest_float("x", 0, 1), 3, poll_seconds=60)
    assert study.trials[2].params == stopped.params and study.trials[2].user_attrs["retry_of"] == 1
    assert [t.state for t in study.trials].count(TrialState.COMPLETE) == 3
    assert len(study.trials) == 4


def test_ctrl_c_between_trials_lets_the_trial_finish_and_starts_no_other(tmp_path):
    study = open_study(tmp_path)
    with stop_on_sigint() as stop:
        assert work(study, pressing_ctrl_c(stop, 0, training=False), 3, 60, stop=stop) is None
    assert [t.state for t in study.trials] == [TrialState.COMPLETE]


@pytest.mark.filterwarnings("ignore:Heartbeat of storage")
def test_ctrl_c_while_waiting_for_other_workers_ends_at_once(tmp_path):
    study = open_study(tmp_path)
    elsewhere = study.ask()
    elsewhere.suggest_float("x", 0, 1)
    study._storage.record_heartbeat(elsewhere._trial_id)
    started = time.monotonic()
    with stop_on_sigint() as stop:
        threading.Timer(0.5, os.kill, (os.getpid(), signal.SIGINT)).start()
        assert work(study, lambda t: 0.0, 1, 60, say=lambda line: None, stop=stop) is None
    assert time.monotonic() - started < 20  # not after the 60 s poll
    assert study.trials[0].state == TrialState.RUNNING  # another worker's: left to it
