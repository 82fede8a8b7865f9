"""recsys-tune: the search space, the sweep folder, the persistent study (resume after a kill,
several workers), the summary and plots, through the real conf/ on the bundled demo data."""

import itertools
import json
import os
import re
import shlex
import signal
import sqlite3
import subprocess
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import optuna
import pytest
import yaml
from hydra import initialize_config_dir
from optuna.distributions import FloatDistribution
from optuna.trial import TrialState, create_trial

from recsys_seq import configs
from recsys_seq.cli.tune import main as tune_main
from recsys_seq.core.artifacts import MARKER_FILE, read_marker
from recsys_seq.core.errors import UserError
from recsys_seq.core.options import OptionError
from recsys_seq.core.publish import OutputRefused
from recsys_seq.core.run_folders import mark_growing_folder
from recsys_seq.tune import folder as sweep_folder
from recsys_seq.tune.folder import HISTORY, IMPORTANCES, PARALLEL, claim_sweep_folder
from recsys_seq.tune.interrupt import stop_on_sigint, stops_trial
from recsys_seq.tune.plots import plot_plan, save_plots
from recsys_seq.tune.space import (
    CategoricalParam,
    FloatParam,
    IntParam,
    as_overrides,
    parse_space,
)
from recsys_seq.tune.study import TuneOptions, fail_running, load_study, open_storage, work
from recsys_seq.tune.summary import summary
from recsys_seq.tune.tuner import check_space, make_sampler, train_overrides

pytestmark = pytest.mark.slow  # end-to-end runs and real commands: not in make test-quick

ROOT = Path(__file__).resolve().parents[1]
SEARCHES = sorted(p.stem for p in (Path(configs.CONF_DIR) / "search").glob("*.yaml"))


def test_space_is_checked_into_params():
    space = parse_space(
        {
            "model.optimizer.lr": {"type": "float", "low": 1e-4, "high": 1e-2, "log": True},
            "model.encoder.num_layers": {"type": "int", "low": 1, "high": 3},
            "loss@model.loss": {"type": "categorical", "choices": ["bce", "full_softmax"]},
        }
    )
    assert space == {
        "model.optimizer.lr": FloatParam(1e-4, 1e-2, log=True),
        "model.encoder.num_layers": IntParam(1, 3),
        "loss@model.loss": CategoricalParam(["bce", "full_softmax"]),
    }


@pytest.mark.parametrize(
    "spec, message",
    [
        ({"type": "uniform", "low": 0, "high": 1}, "x.type must be one of float, int"),
        ({"type": "float", "low": 1, "high": 0}, "low must be below high"),
        ({"type": "float", "low": 0, "high": 1, "log": True}, "log: true needs low > 0"),
        ({"type": "int", "low": 1, "high": 8, "log": True, "step": 2}, "without a step"),
        ({"type": "int", "low": 1.5, "high": 3}, "x.low must be an integer"),
        (
            {"type": "float", "low": 0, "high": 1, "lo": 2},
            "x.lo (did you mean search.params.x.low?); search.params.x takes: low, high",
        ),
        ({"type": "categorical", "choices": []}, "x.choices must be a non-empty list"),
        ({"type": "categorical", "choices": [[1, 2]]}, "must be a plain value"),
        ("interval(0, 1)", "x must be a mapping with a type"),
    ],
)
def test_a_bad_space_names_its_key(spec, message):
    with pytest.raises(OptionError) as refused:
        parse_space({"x": spec})
    assert message in str(refused.value) and "search.params.x" in str(refused.value)


def test_an_empty_space_is_refused():
    with pytest.raises(OptionError, match="search.params must map"):
        parse_space(None)


def test_values_become_overrides_recsys_train_reads_back():
    values = {"a": 0.35000000000000003, "b": 3, "c": True, "d": None, "e": "gru", "f": "1e-3"}
    assert as_overrides(values) == ["a=0.35", "b=3", "c=true", "d=null", "e=gru", "f='1e-3'"]


def test_the_commands_own_overrides_are_not_the_trials():
    given = ["tune.n_trials=3", "search=gru", "+search.params.x=1", "model=gru", "debug=fast"]
    assert train_overrides(given) == ["model=gru", "debug=fast"]


@pytest.mark.parametrize("name", SEARCHES)
def test_every_search_space_names_options_its_model_has(name):
    """``search/<model>[_<variant>].yaml`` searches the options of ``model=<model>``."""
    model = name.partition("_")[0]
    with initialize_config_dir(configs.CONF_DIR, version_base="1.3"):
        from hydra import compose

        cfg = compose("tune", overrides=[f"search={name}", f"model={model}"])
        check_space(parse_space(configs.plain(cfg.search)["params"]), [f"model={model}"])


def test_a_parameter_recsys_train_lacks_fails_before_the_study():
    with (
        initialize_config_dir(configs.CONF_DIR, version_base="1.3"),
        pytest.raises(OptionError, match="model.encoder.num_heads"),
    ):
        check_space({"model.encoder.num_heads": CategoricalParam([1, 2])}, ["model=gru"])


def test_sweep_folder_is_claimed_and_a_users_folder_refused(tmp_path):
    folder = claim_sweep_folder(tmp_path / "study")
    (folder / "summary.md").write_text("ours\n")
    assert claim_sweep_folder(folder) == folder  # a re-run resumes in it
    (folder / "notes.txt").write_text("mine\n")
    with pytest.raises(OutputRefused, match="notes.txt"):
        claim_sweep_folder(folder)
    users = tmp_path / "users"
    users.mkdir()
    (users / "data.csv").write_text("1\n")
    with pytest.raises(OutputRefused, match="data.csv"):
        claim_sweep_folder(users)
    assert (users / "data.csv").read_text() == "1\n"


def test_a_sweep_folder_another_worker_is_claiming_is_claimed_too(tmp_path, monkeypatch):
    # the other worker has made the folder and is writing its marker
    folder = tmp_path / "study"
    folder.mkdir()
    (folder / f".{MARKER_FILE}.tmp-host-1-0123abcd").write_text("{}")
    assert claim_sweep_folder(folder) == folder
    assert read_marker(folder)["artifact"] == "study"
    # its marker lands between this worker's look at the entries and its read of the marker
    racing = tmp_path / "racing"
    racing.mkdir()
    read = sweep_folder.read_marker

    def marker_lands_first(path):
        mark_growing_folder(racing, "study")
        return read(path)

    monkeypatch.setattr(sweep_folder, "read_marker", marker_lands_first)
    assert claim_sweep_folder(racing) == racing


def test_many_workers_claiming_one_sweep_folder_at_once_all_get_it(tmp_path):
    workers = 8
    for attempt in range(20):
        folder = tmp_path / f"study{attempt}"
        start = threading.Barrier(workers)

        def claim(folder=folder, start=start):
            start.wait()
            return claim_sweep_folder(folder)

        with ThreadPoolExecutor(workers) as pool:
            claimed = list(pool.map(lambda _: claim(), range(workers)))
        assert claimed == [folder] * workers
        assert [e.name for e in folder.iterdir()] == [MARKER_FILE]


@pytest.mark.parametrize(
    "entries",
    [
        [".summary.md.tmp-host-1-0123abcd"],  # a temporary of a study's file, but no marker
        [f".{MARKER_FILE}.tmp-host-1-0123abcd", "notes.txt"],
        [MARKER_FILE, f".{MARKER_FILE}.tmp-host-1-0123abcd"],  # another artifact's marker
    ],
)
def test_a_folder_that_is_no_study_is_refused_whatever_temporaries_it_holds(tmp_path, entries):
    folder = tmp_path / "users"
    folder.mkdir()
    for name in entries:
        (folder / name).write_text(json.dumps({"artifact": "run", "task": "train"}))
    before = {p.name: p.read_text() for p in folder.iterdir()}
    with pytest.raises(OutputRefused, match="did not write"):
        claim_sweep_folder(folder)
    assert {p.name: p.read_text() for p in folder.iterdir()} == before


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


def completed(n: int, names: tuple[str, ...] = ("a", "b"), varying: bool = True) -> optuna.Study:
    """A study of ``n`` completed trials over ``names`` (each varying, or all fixed but the
    first)."""
    study = optuna.create_study(direction="maximize")
    for i in range(n):
        params = {name: float(i if varying or k == 0 else 0) for k, name in enumerate(names)}
        distributions = {name: FloatDistribution(0, 100) for name in names}
        study.add_trial(create_trial(params=params, distributions=distributions, value=i / n))
    return study


def test_a_plot_is_drawn_only_once_the_completed_trials_support_it():
    assert plot_plan(completed(0)) == {
        HISTORY: "needs 1 completed trial, has 0",
        PARALLEL: "needs 2 completed trials, has 0",
        IMPORTANCES: "needs 20 completed trials, has 0",
    }
    assert plot_plan(completed(1))[HISTORY] is None
    assert plot_plan(completed(2))[PARALLEL] is None
    assert plot_plan(completed(19))[IMPORTANCES] == "needs 20 completed trials, has 19"
    assert plot_plan(completed(20))[IMPORTANCES] is None
    eleven = tuple("abcdefghijk")  # two trials per searched parameter
    assert plot_plan(completed(20, eleven))[IMPORTANCES] == "needs 22 completed trials, has 20"
    assert plot_plan(completed(22, eleven))[IMPORTANCES] is None
    one_varies = plot_plan(completed(20, varying=False))[IMPORTANCES]
    assert one_varies == "needs two or more parameters that took different values"


def test_only_the_plots_the_trials_support_are_written_and_the_summary_names_the_rest(tmp_path):
    folder = claim_sweep_folder(tmp_path / "study")
    metric = "val/best_ndcg@10"
    few = completed(3)
    plan = plot_plan(few)
    drawn = [name for name, missing in plan.items() if missing is None]
    assert save_plots(few, folder, metric, drawn) == [folder / HISTORY, folder / PARALLEL]
    text = summary(few, metric, "sqlite://", [], plan)
    assert text.endswith(
        "## Plots\n\n- optimization_history.png\n- parallel_coordinate.png\n"
        "- param_importances.png: not drawn, needs 20 completed trials, has 3\n"
    )
    assert save_plots(completed(20), folder, metric, [IMPORTANCES]) == [folder / IMPORTANCES]
    assert (folder / IMPORTANCES).read_bytes().startswith(b"\x89PNG")


def test_help_lists_the_search_spaces_from_their_files(tmp_path):
    done = subprocess.run(
        [sys.executable, "-m", "recsys_seq.cli.tune", "--help"],
        cwd=tmp_path,
        env=env(),
        capture_output=True,
        text=True,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    for name in SEARCHES:
        file = Path(configs.CONF_DIR) / "search" / f"{name}.yaml"
        keys = list(yaml.safe_load(file.read_text())["params"])
        after = done.stdout.split(f"\n  {name}\n", 1)[1].splitlines()
        block = itertools.takewhile(lambda line: line.startswith("    "), after)
        assert [line.split()[0] for line in block] == keys, name
    assert re.search(r"\n    model\.encoder\.num_heads +one of 1, 2, 4\n", done.stdout)
    assert re.search(r"\n    model\.optimizer\.lr +float 0\.0003 to 0\.01, log\n", done.stdout)


def tune_command(sweep_dir: Path, data_dir: Path, *overrides: str) -> list[str]:
    return [
        sys.executable,
        "-m",
        "recsys_seq.cli.tune",
        f"data.path={data_dir}",
        "debug=fast",
        "baselines=false",
        "tune.n_trials=3",
        f"tune.sweep_dir={sweep_dir}",
        "tune.heartbeat_interval=1",
        "tune.grace_period=2",
        *overrides,
    ]


def env() -> dict[str, str]:
    return {**os.environ, "PYTHONPATH": str(ROOT)}


def trial_states(database: Path) -> list[tuple[int, str, float | None]]:
    """``(number, state, value)`` of every trial, read straight from the SQLite file."""
    try:
        with sqlite3.connect(database, timeout=30) as db:
            return db.execute(
                "SELECT t.number, t.state, v.value FROM trials t "
                "LEFT JOIN trial_values v ON v.trial_id = t.trial_id ORDER BY t.number"
            ).fetchall()
    except sqlite3.OperationalError:  # not created yet
        return []


@pytest.mark.slow
def test_a_killed_study_resumes_and_completes(tmp_path, demo_dir):
    sweep = tmp_path / "study"
    command = tune_command(sweep, demo_dir)
    first = subprocess.Popen(command, cwd=tmp_path, env=env(), stdout=subprocess.DEVNULL)
    deadline = time.monotonic() + 300
    while time.monotonic() < deadline and first.poll() is None:
        states = trial_states(sweep / "study.db")
        running = [n for n, s, _ in states if s == "RUNNING"]
        started = [n for n in running if (sweep / "trials" / str(n) / "train.log").exists()]
        if started and any(s == "COMPLETE" for _, s, _ in states):
            break  # a trial training (its heartbeat on) after one that finished
        time.sleep(0.2)
    assert first.poll() is None, "the study ended before it could be killed"
    first.send_signal(signal.SIGKILL)
    first.wait()
    before = trial_states(sweep / "study.db")
    done = [(n, v) for n, s, v in before if s == "COMPLETE"]
    killed = [n for n, s, _ in before if s == "RUNNING"]
    assert done and len(killed) == 1

    resumed = subprocess.run(command, cwd=tmp_path, env=env(), capture_output=True, text=True)
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    after = trial_states(sweep / "study.db")
    assert [(n, v) for n, s, v in after if n in dict(done)] == done  # kept, not run again
    assert sum(s == "COMPLETE" for _, s, _ in after) == 3
    assert dict((n, s) for n, s, _ in after)[killed[0]] == "FAIL"
    study = optuna.load_study(study_name="sasrec", storage=f"sqlite:///{sweep / 'study.db'}")
    retry = next(t for t in study.trials if t.system_attrs.get("failed_trial") == killed[0])
    assert retry.params == study.trials[killed[0]].params
    # what people read: two lines per trial run here, then the summary table
    out = resumed.stdout
    assert f"trial {retry.number}  model.optimizer.lr=" in out
    assert f"trial {retry.number}  val/best_ndcg@10 = " in out
    assert "| trial | state" in out and "## Best: trial" in out
    assert (sweep / "summary.md").read_text() in out
    best = yaml.safe_load((sweep / "best.yaml").read_text())
    assert best["value"] == max(t.value for t in study.trials if t.value is not None)
    assert best["overrides"][:3] == [f"data.path={demo_dir}", "debug=fast", "baselines=false"]
    for name in ("optimization_history", "parallel_coordinate"):
        assert (sweep / f"{name}.png").read_bytes().startswith(b"\x89PNG")
    assert not (sweep / "param_importances.png").exists()  # 3 trials say nothing of it
    assert "- param_importances.png: not drawn, needs 20 completed trials, has 3" in out
    for trial in study.get_trials(states=(TrialState.COMPLETE,)):
        run = sweep / "trials" / str(trial.number)
        assert (run / "metrics.json").is_file() and (run / "train.log").is_file()
        assert "Seed set" in (run / "train.log").read_text()  # a trial's lines go there
    assert "Seed set" not in out and "GPU available" not in out


def read(path: Path) -> str:
    return path.read_text() if path.is_file() else ""


@pytest.mark.slow
def test_ctrl_c_requeues_the_running_trial_and_the_same_command_resumes(tmp_path, demo_dir):
    """SIGINT while trial 1 trains: exit status 130 and a report; trial 1 failed, marked
    interrupted, its values queued; the same command runs them first, as trial 2."""
    sweep = tmp_path / "study"
    # one epoch per trial (a few seconds), so that Ctrl-C lands while trial 1 trains
    command = tune_command(sweep, demo_dir, "trainer.fast_dev_run=false", "trainer.max_epochs=1")
    first = subprocess.Popen(
        command, cwd=tmp_path, env=env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )
    deadline = time.monotonic() + 300
    log = sweep / "trials" / "1" / "train.log"
    while first.poll() is None and time.monotonic() < deadline and "\ngiven " not in read(log):
        time.sleep(0.1)  # "given": the last line before training starts
    first.send_signal(signal.SIGINT)
    out, err = first.communicate(timeout=300)
    assert first.returncode == 130, err[-3000:]
    assert [(n, s) for n, s, _ in trial_states(sweep / "study.db")] == [
        (0, "COMPLETE"),
        (1, "FAIL"),
        (2, "WAITING"),
    ]
    study = optuna.load_study(study_name="sasrec", storage=f"sqlite:///{sweep / 'study.db'}")
    stopped = study.trials[1]
    assert stopped.user_attrs["interrupted"] is True
    assert "Detected KeyboardInterrupt" in log.read_text()  # Lightning's shutdown, in the log
    report = out.split("\nrecsys-tune: interrupted (Ctrl-C)", 1)[1]
    assert report.startswith("; trial 1 was stopped and its values queued again.\n")
    assert "Trials: 1 complete, 0 pruned, 0 failed, of 3 wanted.\n" in report
    assert f"Best so far: trial 0, val/best_ndcg@10 = {study.trials[0].value:.4f}, with" in report
    assert f"the database sqlite:///{sweep / 'study.db'}" in report
    assert report.endswith(
        "Resume with the same command; the re-queued trial runs first:\n"
        f"  {shlex.join(['recsys-tune', *command[3:]])}\n"
    )
    # the summary is published whole, as of the interrupt, and nothing is left half-written
    assert re.search(r"\n\| +1 \| INTERRUPTED +\|", (sweep / "summary.md").read_text())
    assert not [p.name for p in sweep.iterdir() if ".tmp-" in p.name]

    resumed = subprocess.run(command, cwd=tmp_path, env=env(), capture_output=True, text=True)
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    assert "1 of 3 trials finished, 1 queued to run first" in resumed.stdout
    ran = [line.split()[1] for line in resumed.stdout.splitlines() if line.startswith("trial ")]
    assert ran[0] == "2"  # the queued values, before any new draw
    study = optuna.load_study(study_name="sasrec", storage=f"sqlite:///{sweep / 'study.db'}")
    assert study.trials[2].params == stopped.params and study.trials[2].user_attrs["retry_of"] == 1
    states = [t.state for t in study.trials]
    assert states.count(TrialState.COMPLETE) == 3 and states[1] == TrialState.FAIL


@pytest.mark.slow
def test_two_workers_complete_one_study_together(tmp_path, demo_dir):
    sweep = tmp_path / "study"
    command = tune_command(sweep, demo_dir)
    workers = [
        subprocess.Popen(
            command, cwd=tmp_path, env=env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE
        )
        for _ in range(2)
    ]
    outputs = [w.communicate(timeout=600) for w in workers]
    for worker, (_, err) in zip(workers, outputs, strict=True):
        assert worker.returncode == 0, err.decode()[-3000:]
    complete = [n for n, s, _ in trial_states(sweep / "study.db") if s == "COMPLETE"]
    # each worker starts a trial only while fewer than n_trials are finished or running; two
    # asking at the same instant may run one more
    assert 3 <= len(complete) <= 4
    assert sorted(p.name for p in (sweep / "trials").iterdir()) == sorted(map(str, complete))


def test_without_optuna_the_command_says_what_to_install(tmp_path, monkeypatch, capsys):
    monkeypatch.setitem(sys.modules, "optuna", None)  # import optuna fails as if not installed
    for name in [m for m in sys.modules if m.startswith("recsys_seq.tune.")]:
        monkeypatch.delitem(sys.modules, name)
    monkeypatch.setattr(sys, "argv", ["recsys-tune", "tune.sweep_dir=study"])
    monkeypatch.chdir(tmp_path)
    with pytest.raises(SystemExit) as exited:
        tune_main()
    assert exited.value.code == 2
    err = capsys.readouterr().err
    assert err.startswith("recsys-tune: error: recsys-tune needs Optuna")
    assert 'pip install "recsys-seq[sweeps]"' in err
    assert not (tmp_path / "study").exists()
