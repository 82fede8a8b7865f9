"""recsys-tune's sweep folder: claimed once and shared by workers claiming it at the same
instant, a user's folder refused whatever it holds; the plots the completed trials support
written into it, and the summary naming the rest."""

import json
import threading
from concurrent.futures import ThreadPoolExecutor

import optuna
import pytest
from optuna.distributions import FloatDistribution
from optuna.trial import create_trial

from recsys_seq.core.artifacts import MARKER_FILE, read_marker
from recsys_seq.core.publish import OutputRefused
from recsys_seq.core.run_folders import mark_growing_folder
from recsys_seq.tune import folder as sweep_folder
from recsys_seq.tune.folder import HISTORY, IMPORTANCES, PARALLEL, claim_sweep_folder
from recsys_seq.tune.plots import plot_plan, save_plots
from recsys_seq.tune.summary import summary

pytestmark = pytest.mark.slow  # end-to-end runs and real commands: not in make test-quick


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
