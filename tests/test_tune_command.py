"""The recsys-tune command on the bundled demo data: its help, a study killed and resumed,
Ctrl-C and the same command resuming, two workers on one study, and the advice when Optuna
is missing."""

import itertools
import os
import re
import shlex
import signal
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import optuna
import pytest
import yaml
from optuna.trial import TrialState

from recsys_seq import configs
from recsys_seq.cli.tune import main as tune_main
from tests.helpers import REPO
from tests.helpers.tune import SEARCHES

pytestmark = pytest.mark.slow  # end-to-end runs and real commands: not in make test-quick


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
    return {**os.environ, "PYTHONPATH": str(REPO)}


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
