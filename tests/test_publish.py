"""The publish rule: atomic outputs, only the project's own artifacts replaced, crash-safe at
every step (a kill injected after each step of a publish, then recovery), a folder swapped in
one step where the file system can (its path never missing for a reader)."""

import ctypes
import errno
import json
import os
import subprocess
import sys
import threading
from pathlib import Path

import pytest

from recsys_seq.core import exchange as exchange_module
from recsys_seq.core import publish, temporaries
from recsys_seq.core.exchange import exchange
from recsys_seq.core.publish import MARKER_FILE, OutputRefused, publishing, recover

KIND = "test_folder"
publish.register_folder_kind(KIND, r"data\.txt")
# the steps of a folder publish over a previous one: swapped in one step, or (where the file
# system cannot exchange) the two renames
EXCHANGE_STEPS = ("written", "marked", "exchanged", "removed_old")
RENAME_STEPS = ("written", "marked", "moved_old", "moved_new", "removed_old")
FOLDER_STEPS = [("exchange", s) for s in EXCHANGE_STEPS] + [("rename", s) for s in RENAME_STEPS]
NEW_AFTER = ("exchanged", "moved_new", "removed_old")  # steps after which the new one is in place
FILE_STEPS = ("written", "replaced")


def publish_folder(target: Path, content: str, inputs=()) -> None:
    with publishing(target, KIND, folder=True, inputs=inputs) as tmp:
        (tmp / "data.txt").write_text(content)


def snapshot(folder: Path) -> dict[str, bytes]:
    return {
        str(p.relative_to(folder)): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()
    }


def test_new_folder_is_marked_and_lists_its_files(tmp_path):
    publish_folder(tmp_path / "out", "one")
    marker = json.loads((tmp_path / "out" / MARKER_FILE).read_text())
    assert marker == {"artifact": KIND, "files": ["data.txt"]}
    assert [p.name for p in tmp_path.iterdir()] == ["out"]  # no temporaries left


def test_own_folder_is_replaced_whole(tmp_path):
    publish_folder(tmp_path / "out", "one")
    publish_folder(tmp_path / "out", "two")
    assert (tmp_path / "out" / "data.txt").read_text() == "two"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out"]


@pytest.mark.parametrize(
    "make",
    [
        pytest.param(lambda p: p.write_text("mine"), id="a-user-file"),
        pytest.param(lambda p: (p.mkdir(), (p / "notes.txt").write_text("x")), id="user-folder"),
        pytest.param(
            lambda p: (publish_folder(p, "one"), (p / "added.txt").write_text("x")),
            id="own-folder-with-a-user-file-added",
        ),
        pytest.param(
            lambda p: (
                p.mkdir(),
                (p / MARKER_FILE).write_text(json.dumps({"artifact": "report", "files": []})),
            ),
            id="artifact-of-another-kind",
        ),
        pytest.param(
            lambda p: (p.mkdir(), (p / MARKER_FILE).write_text("not json")), id="broken-marker"
        ),
        pytest.param(
            lambda p: (
                p.mkdir(),
                (p / "thesis.tex").write_text("years of work"),
                (p / MARKER_FILE).write_text(
                    json.dumps({"artifact": KIND, "files": ["thesis.tex"]})
                ),
            ),
            id="planted-marker-listing-a-user-file",
        ),
        pytest.param(lambda p: p.symlink_to(p.parent), id="a-symlink"),
    ],
)
def test_anything_not_ours_is_refused_and_left_untouched(tmp_path, make):
    target = tmp_path / "out"
    make(target)
    before = snapshot(tmp_path) if not target.is_symlink() else None
    with pytest.raises(OutputRefused, match="left untouched"):
        publish_folder(target, "new")
    if before is not None:
        assert snapshot(tmp_path) == before
    assert not [p for p in tmp_path.iterdir() if ".tmp-" in p.name]


def test_a_planted_prepared_dataset_marker_cannot_claim_other_files(tmp_path):
    from data_prep import prepare
    from data_prep.prep import PREPARED_DATASET

    (tmp_path / "log.csv").write_text(
        "user_id,item_id,timestamp\n"
        + "".join(f"{u},{i},{i}\n" for u in range(3) for i in range(4))
    )
    home = tmp_path / "home"
    home.mkdir()
    (home / "Documents").write_text("everything")
    marker = {"artifact": PREPARED_DATASET, "files": ["Documents"]}
    (home / MARKER_FILE).write_text(json.dumps(marker))
    with pytest.raises(OutputRefused, match="left untouched"):
        prepare({"input": tmp_path / "log.csv", "output": home})
    assert (home / "Documents").read_text() == "everything"


def test_an_empty_folder_may_be_filled(tmp_path):
    (tmp_path / "out").mkdir()
    publish_folder(tmp_path / "out", "one")
    assert (tmp_path / "out" / "data.txt").read_text() == "one"


def test_working_directory_and_folders_above_it_are_refused(tmp_path, monkeypatch):
    work = tmp_path / "a" / "b"
    work.mkdir(parents=True)
    monkeypatch.chdir(work)
    for target in (Path("."), Path(".."), tmp_path, Path("../../")):
        with pytest.raises(OutputRefused, match="working directory"):
            publish_folder(target, "x")
    assert list(work.iterdir()) == []


def test_the_input_and_a_folder_holding_it_are_refused(tmp_path):
    source = tmp_path / "logs" / "log.csv"
    source.parent.mkdir()
    source.write_text("u,i\n")
    for target in (source, source.parent, tmp_path):
        with pytest.raises(OutputRefused, match="input"):
            publish_folder(target, "x", inputs=[source])
    assert source.read_text() == "u,i\n"


def test_a_parent_that_is_a_file_is_refused(tmp_path):
    (tmp_path / "file").write_text("x")
    with pytest.raises(OutputRefused, match="is a file"):
        publish_folder(tmp_path / "file" / "out", "x")


def test_a_failure_inside_the_block_leaves_the_previous_output(tmp_path):
    publish_folder(tmp_path / "out", "one")
    with pytest.raises(RuntimeError), publishing(tmp_path / "out", KIND, folder=True) as tmp:
        (tmp / "data.txt").write_text("half")
        raise RuntimeError("boom")
    assert (tmp_path / "out" / "data.txt").read_text() == "one"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out"]


def test_file_kinds_replace_only_what_they_recognise(tmp_path):
    publish.register_kind("test_note", lambda p: p.read_text().startswith("NOTE"))
    target = tmp_path / "note.txt"
    publish.write_text(target, "NOTE 1", "test_note")
    publish.write_text(target, "NOTE 2", "test_note")
    assert target.read_text() == "NOTE 2"
    target.write_text("a user's text")
    with pytest.raises(OutputRefused, match="left untouched"):
        publish.write_text(target, "NOTE 3", "test_note")
    assert target.read_text() == "a user's text"
    with pytest.raises(OutputRefused):  # an unknown kind recognises nothing
        publish.write_text(target, "x", "no_such_kind")


def test_disk_errors_name_the_output(tmp_path, monkeypatch):
    def full(*args, **kwargs):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(Path, "write_text", full)
    with pytest.raises(OutputRefused, match=r"Could not write the output .*out.*No space"):
        publish_folder(tmp_path / "out", "x")


KILL = r"""
import os, sys
from pathlib import Path
from recsys_seq.core import publish
step, target, folder = sys.argv[1], Path(sys.argv[2]), sys.argv[3] == "folder"
publish._after = lambda name: os._exit(9) if name == step else None
if sys.argv[4] == "rename":  # a file system that cannot exchange
    publish.exchange = lambda first, second: False
publish.register_kind("test_note", lambda p: p.read_text().startswith("NOTE"))
if folder:
    publish.register_folder_kind("test_folder", r"data\.txt")
    with publish.publishing(target, "test_folder", folder=True) as tmp:
        (tmp / "data.txt").write_text("new")
else:
    publish.write_text(target, "NOTE new", "test_note")
"""


def killed_publish(step: str, target: Path, folder: bool, swap: str = "exchange") -> int:
    done = subprocess.run(
        [sys.executable, "-c", KILL, step, str(target), "folder" if folder else "file", swap],
        cwd=Path(__file__).parents[1],
        capture_output=True,
        text=True,
    )
    return done.returncode


@pytest.mark.parametrize("swap, step", FOLDER_STEPS)
def test_folder_publish_killed_after_each_step_recovers(tmp_path, swap, step):
    target = tmp_path / "out"
    publish_folder(target, "old")
    assert killed_publish(step, target, folder=True, swap=swap) == 9
    recover(target)  # what the next command does first
    assert (target / "data.txt").read_text() in ("old", "new")
    if step in NEW_AFTER:
        assert (target / "data.txt").read_text() == "new"
    else:
        assert (target / "data.txt").read_text() == "old"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out"]  # nothing left over
    publish_folder(target, "again")  # and it is still ours to replace
    assert (target / "data.txt").read_text() == "again"


@pytest.mark.parametrize("step", FILE_STEPS)
def test_file_publish_killed_after_each_step_recovers(tmp_path, step):
    publish.register_kind("test_note", lambda p: p.read_text().startswith("NOTE"))
    target = tmp_path / "note.txt"
    publish.write_text(target, "NOTE old", "test_note")
    assert killed_publish(step, target, folder=False) == 9
    recover(target)
    assert target.read_text() == ("NOTE new" if step == "replaced" else "NOTE old")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["note.txt"]


def test_a_new_folder_killed_before_its_rename_leaves_nothing(tmp_path):
    target = tmp_path / "out"
    assert killed_publish("marked", target, folder=True) == 9
    recover(target)
    assert list(tmp_path.iterdir()) == []


def test_leftovers_of_a_live_process_are_left_alone(tmp_path):
    target = tmp_path / "out"
    tag = temporaries.tag()  # this process: alive
    (tmp_path / f".out.tmp-{tag}").mkdir()
    recover(target)
    assert (tmp_path / f".out.tmp-{tag}").exists()


def test_run_folder_claim(tmp_path, monkeypatch):
    run = tmp_path / "run"
    (run / ".hydra").mkdir(parents=True)
    (run / "train.log").write_text("")
    publish.claim_run_folder(run, task="train")  # what Hydra wrote is fine
    publish.claim_run_folder(run, task="train")  # and a marked run folder is reused
    with pytest.raises(OutputRefused, match="another run's record"):
        publish.claim_run_folder(run, task="eval")  # but not another task's run
    (run / "metrics.json").write_text("{}")
    publish.write_text(run / "metrics.json", '{"a": 1}', publish.RUN_FILE)
    assert json.loads((run / "metrics.json").read_text()) == {"a": 1}
    user = tmp_path / "mine"
    user.mkdir()
    (user / "thesis.tex").write_text("x")
    with pytest.raises(OutputRefused, match="did not write"):
        publish.claim_run_folder(user, task="train")
    assert sorted(os.listdir(user)) == ["thesis.tex"]
    (user / "metrics.json").write_text("my numbers")
    with pytest.raises(OutputRefused):  # a user's file, in a folder that is not a run folder
        publish.write_text(user / "metrics.json", "{}", publish.RUN_FILE)
    assert (user / "metrics.json").read_text() == "my numbers"
    monkeypatch.chdir(user)
    with pytest.raises(OutputRefused, match="working directory"):
        publish.claim_run_folder(".", task="train")


def test_a_full_disk_during_prep_names_the_output_not_the_input(tmp_path, monkeypatch):
    import polars as pl

    from data_prep import job, prepare

    (tmp_path / "log.csv").write_text(
        "user_id,item_id,timestamp\n"
        + "".join(f"{u},{i},{i}\n" for u in range(3) for i in range(4))
    )

    def full(*args, **kwargs):
        raise pl.exceptions.ComputeError("failed to write: No space left on device (os error 28)")

    monkeypatch.setattr(job, "run", full)
    with pytest.raises(OutputRefused, match=r"Could not write the output .*out: .*No space"):
        prepare({"input": tmp_path / "log.csv", "output": tmp_path / "out"})
    assert sorted(p.name for p in tmp_path.iterdir()) == ["log.csv"]


@pytest.mark.parametrize(
    "command",
    [
        ["recsys-train", "data.path=no_such_folder"],
        ["recsys-train", "data.batch_size=0"],
        ["recsys-eval", "ckpt_path=no_such.ckpt"],
    ],
    ids=["train-missing-data", "train-bad-option", "eval-missing-checkpoint"],
)
def test_a_refused_run_leaves_no_run_folder(tmp_path, command):
    bin_dir = Path(sys.executable).parent
    done = subprocess.run(
        [str(bin_dir / command[0]), *command[1:]], cwd=tmp_path, capture_output=True, text=True
    )
    assert done.returncode == 2, done.stderr
    assert done.stderr.startswith(f"{command[0]}: error: ")
    runs = list(tmp_path.glob("outputs/*/runs/*"))
    assert runs == [], runs
    assert not (tmp_path / "no_such_folder").exists()


def test_a_planted_marker_without_a_file_list_claims_nothing(tmp_path):
    user = tmp_path / "out"
    user.mkdir()
    (user / "thesis.docx").write_text("precious")
    for marker in (
        {"artifact": KIND},
        {"artifact": KIND, "files": 5},
        {"artifact": KIND, "files": "ab"},
    ):
        (user / MARKER_FILE).write_text(json.dumps(marker))
        with pytest.raises(OutputRefused, match="left untouched"):
            publish_folder(user, "new")
        assert (user / "thesis.docx").read_text() == "precious"


def test_a_planted_run_marker_does_not_make_a_users_folder_a_run_folder(tmp_path):
    user = tmp_path / "mine"
    user.mkdir()
    (user / "thesis.docx").write_text("precious")
    (user / MARKER_FILE).write_text(json.dumps({"artifact": publish.RUN}))
    with pytest.raises(OutputRefused, match="did not write"):
        publish.claim_run_folder(user, task="train")
    data = tmp_path / "data"
    data.mkdir()
    with pytest.raises(OutputRefused, match="inside the input folder"):
        publish.claim_run_folder(data / "run", inputs=[data], task="train")
    assert list(data.iterdir()) == []


@pytest.mark.parametrize("folder", [False, True], ids=["file", "folder"])
def test_a_target_created_after_the_last_check_is_never_replaced(tmp_path, monkeypatch, folder):
    target = tmp_path / ("out" if folder else "note.txt")
    checks = []
    real_check = publish.check_target

    def check_then_race(*args, **kwargs):
        checked = real_check(*args, **kwargs)
        checks.append(1)
        if len(checks) == 2:  # the last check passed; now somebody creates the target
            if folder:
                target.mkdir()
                (target / "theirs.txt").write_text("theirs")
            else:
                target.write_text("theirs")
        return checked

    monkeypatch.setattr(publish, "check_target", check_then_race)
    publish.register_kind("test_note", lambda p: p.read_text().startswith("NOTE"))
    with pytest.raises(OutputRefused, match="appeared while"):
        if folder:
            publish_folder(target, "ours")
        else:
            publish.write_text(target, "NOTE ours", "test_note")
    theirs = (target / "theirs.txt") if folder else target
    assert theirs.read_text() == "theirs"
    assert sorted(p.name for p in tmp_path.iterdir()) == [target.name]


def test_an_output_name_too_long_for_its_temporary_is_refused_up_front(tmp_path):
    with pytest.raises(OutputRefused, match="too long"):
        publish_folder(tmp_path / ("a" * 240), "x")
    assert list(tmp_path.iterdir()) == []


def test_a_folder_is_swapped_in_one_step_and_its_path_never_vanishes(tmp_path, monkeypatch):
    """On this file system the publish takes the exchange: a reader polling the output while
    it is replaced, again and again, always finds it."""
    target = tmp_path / "out"
    publish_folder(target, "0")
    swaps = []

    def recorded(first: Path, second: Path) -> bool:
        swaps.append(exchange(first, second))
        return swaps[-1]

    monkeypatch.setattr(publish, "exchange", recorded)
    missing, done = [], threading.Event()

    def reader() -> None:
        while not done.is_set():
            if not target.is_dir():
                missing.append(1)

    thread = threading.Thread(target=reader)
    thread.start()
    try:
        for n in range(1, 40):
            publish_folder(target, str(n))
    finally:
        done.set()
        thread.join()
    assert swaps and all(swaps), "this file system cannot exchange: the test proves nothing"
    assert missing == []
    assert (target / "data.txt").read_text() == "39"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out"]  # the old folder removed


def test_without_exchange_the_two_renames_publish(tmp_path, monkeypatch):
    monkeypatch.setattr(publish, "exchange", lambda first, second: False)
    publish_folder(tmp_path / "out", "one")
    publish_folder(tmp_path / "out", "two")
    assert (tmp_path / "out" / "data.txt").read_text() == "two"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out"]


@pytest.mark.parametrize("code", [errno.ENOSYS, errno.EINVAL, errno.EOPNOTSUPP])
def test_an_exchange_the_system_cannot_do_is_reported_as_such(tmp_path, monkeypatch, code):
    def refuses(*args) -> int:
        ctypes.set_errno(code)
        return -1

    monkeypatch.setattr(exchange_module, "_RENAMEAT2", refuses)
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    assert exchange(tmp_path / "a", tmp_path / "b") is False
    monkeypatch.setattr(exchange_module, "_RENAMEAT2", None)  # not Linux, or an old libc
    assert exchange(tmp_path / "a", tmp_path / "b") is False


def test_a_failed_exchange_is_an_error(tmp_path):
    (tmp_path / "a").mkdir()
    with pytest.raises(FileNotFoundError):
        exchange(tmp_path / "a", tmp_path / "missing")


@pytest.mark.parametrize("swap", ["exchange", "rename"])
def test_a_file_added_to_our_folder_during_the_publish_stays(tmp_path, monkeypatch, swap):
    """Somebody puts a file into our previous output after the last check: it goes back in
    place, with the file, and nothing is published."""
    target = tmp_path / "out"
    publish_folder(target, "old")
    if swap == "rename":
        monkeypatch.setattr(publish, "exchange", lambda first, second: False)
    checks = []
    real_check = publish.check_target

    def check_then_add(*args, **kwargs):
        checked = real_check(*args, **kwargs)
        checks.append(1)
        if len(checks) == 2:
            (target / "theirs.txt").write_text("theirs")
        return checked

    monkeypatch.setattr(publish, "check_target", check_then_add)
    with pytest.raises(OutputRefused, match="changed while"):
        publish_folder(target, "new")
    assert (target / "theirs.txt").read_text() == "theirs"
    assert (target / "data.txt").read_text() == "old"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out"]
