"""Checkpoints are data, not programs: crafted files run nothing and get clear messages."""

import copy
import io
import os
import pickle
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest
import torch

from recsys_seq import checkpoint
from recsys_seq.checkpoint import CheckpointError, VocabularyMismatch
from recsys_seq.workflows.train import train
from tests.helpers import short_checkpoint, train_config

pytestmark = pytest.mark.slow  # end-to-end runs and real commands: not in make test-quick

BIN = Path(sys.executable).parent


@pytest.fixture(scope="module")
def trained(tmp_path_factory, demo_dir) -> Path:
    return short_checkpoint(tmp_path_factory.mktemp("run"), demo_dir)


@pytest.fixture()
def payload(trained) -> dict:
    return torch.load(trained, weights_only=True)


def planted(marker: Path) -> dict:
    """A section that would write ``marker`` if anything instantiated it."""
    return {"_target_": "pathlib.Path.write_text", "self": str(marker), "data": "pwned"}


SECTIONS = [
    ("model",),
    ("model", "encoder"),
    ("model", "loss"),
    ("model", "optimizer"),
    ("model", "scheduler"),
    ("data",),
    (),
]


def section(record: dict, keys: tuple[str, ...]) -> dict:
    for key in keys:
        if not isinstance(record.get(key), dict):
            record[key] = {}
        record = record[key]
    return record


@pytest.mark.parametrize("keys", SECTIONS, ids=lambda k: ".".join(k) or "record")
def test_planted_targets_are_refused_and_never_called(tmp_path, payload, keys):
    marker = tmp_path / "marker.txt"
    crafted = copy.deepcopy(payload)
    section(crafted["recsys_seq"], keys).update(planted(marker))
    crafted["hyper_parameters"] = {"run_config": str(planted(marker))}  # read by nothing
    path = tmp_path / "crafted.ckpt"
    torch.save(crafted, path)
    with pytest.raises(CheckpointError, match="invalid record|Unknown option|_target_"):
        checkpoint.load(path)
    assert not marker.exists()


class Evil:
    def __init__(self, marker: str) -> None:
        self.marker = marker

    def __reduce__(self):
        return (os.system, (f"touch {self.marker}",))


def torch_pickle(tmp_path: Path, obj) -> bytes:
    buffer = io.BytesIO()
    torch.save(obj, buffer)
    return buffer.getvalue()


def crafted_files(tmp_path: Path, trained: Path, payload: dict) -> dict[str, Path]:
    marker = tmp_path / "marker.txt"
    files = {
        "pickle-of-os.system": pickle.dumps(Evil(str(marker))),
        "torch-archive-with-os.system": torch_pickle(tmp_path, {"state_dict": Evil(str(marker))}),
        "random-bytes": os.urandom(4096),
        "empty": b"",
        "truncated-archive": trained.read_bytes()[: trained.stat().st_size // 2],
        "text": b"this is not a checkpoint\n",
        "foreign-zip": zip_bytes(),
        "a-plain-tensor": torch_pickle(tmp_path, torch.zeros(3)),
        "no-record-old-format": torch_pickle(
            tmp_path, {k: v for k, v in payload.items() if k != "recsys_seq"}
        ),
        "record-of-another-format": torch_pickle(
            tmp_path, {**payload, "recsys_seq": {**payload["recsys_seq"], "format": 99}}
        ),
        "state-dict-not-tensors": torch_pickle(tmp_path, {**payload, "state_dict": {"w": [1, 2]}}),
    }
    paths = {}
    for name, content in files.items():
        paths[name] = tmp_path / f"{name}.ckpt"
        paths[name].write_bytes(content)
    paths["a-directory"] = tmp_path / "folder.ckpt"
    paths["a-directory"].mkdir()
    paths["missing"] = tmp_path / "missing.ckpt"
    return paths


def zip_bytes() -> bytes:
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w") as archive:
        archive.writestr("hello.txt", "hi")
    return buffer.getvalue()


def test_hostile_files_are_refused_with_a_message_and_run_nothing(tmp_path, trained, payload):
    for name, path in crafted_files(tmp_path, trained, payload).items():
        with pytest.raises(CheckpointError) as error:
            checkpoint.load(path)
        assert str(path) in str(error.value), name
    assert not (tmp_path / "marker.txt").exists()


RECORD_CHANGES = {
    "num_items-a-string": ("model", "num_items", "12"),
    "num_items-negative": ("model", "num_items", -1),
    "num_items-huge": ("model", "num_items", 10**12),
    "num_items-other-size": ("model", "num_items", 1999),
    "embedding_dim-zero": ("model", "embedding_dim", 0),
    "name-not-a-label": ("model", "name", "x; rm -rf /"),
    "unknown-encoder": ("model", "encoder", {"name": "evil"}),
    "unknown-scorer": ("model", "scorer", {"name": "os.system"}),
    "unknown-loss": ("model", "loss", {"name": "evil", "num_negatives": 1}),
    "loss-that-cannot-train-the-scorer": ("model", "scorer", {"name": "target_attention"}),
    "ks-a-string": ("model", "ks", "10"),
    "unknown-key": ("model", "shell", "rm -rf /"),
    "dropout-one": ("model", "encoder", {"name": "self_attention", "dropout": 1.0}),
    "encoder-of-another-model": ("model", "encoder", {"name": "gru"}),
    "bool-as-int": ("model", "embedding_dim", True),
    "data-batch-size-string": ("data", "batch_size", "abc"),
    "data-unknown-key": ("data", "prepare", {"_target_": "os.system"}),
}


@pytest.mark.parametrize("change", RECORD_CHANGES.values(), ids=RECORD_CHANGES.keys())
def test_bad_values_in_the_record_are_named(tmp_path, payload, change):
    part, key, value = change
    crafted = copy.deepcopy(payload)
    crafted["recsys_seq"][part][key] = value
    path = tmp_path / "bad.ckpt"
    torch.save(crafted, path)
    with pytest.raises(CheckpointError) as error:
        checkpoint.load(path)
    assert str(path) in str(error.value)
    message = str(error.value)
    assert key in message or "weights do not fit" in message or "catalogue lists" in message


def test_a_good_checkpoint_loads_its_weights(trained, payload):
    opened = checkpoint.open_checkpoint(trained)
    state = opened.build().state_dict()
    assert state.keys() == payload["state_dict"].keys()
    assert all(torch.equal(state[k], payload["state_dict"][k]) for k in state)
    assert opened.spec.name == "sasrec"
    assert Path(opened.data.path).is_absolute()


def test_resume_refuses_a_checkpoint_of_another_vocabulary(tmp_path, demo_dir, payload):
    crafted = copy.deepcopy(payload)
    crafted["recsys_seq"]["model"]["item_fingerprint"] = "0" * 64  # same size, other items
    crafted["recsys_seq"]["catalogue"] = None  # (its catalogue would no longer match either)
    path = tmp_path / "other.ckpt"
    torch.save(crafted, path)
    cfg = train_config(tmp_path / "run", demo_dir, "debug=fast", f"ckpt_path={path}")
    with pytest.raises(VocabularyMismatch, match="fingerprint"):
        train(cfg)


def test_resume_refuses_another_architecture(tmp_path, demo_dir, trained):
    cfg = train_config(
        tmp_path / "run", demo_dir, "debug=fast", f"ckpt_path={trained}", "model.embedding_dim=32"
    )
    with pytest.raises(CheckpointError, match="embedding_dim"):
        train(cfg)


@pytest.mark.parametrize("command", ["recsys-eval", "recsys-recommend", "recsys-export"])
def test_commands_refuse_crafted_checkpoints_with_exit_2(tmp_path, trained, payload, command):
    marker = tmp_path / "marker.txt"
    crafted = copy.deepcopy(payload)
    crafted["recsys_seq"]["model"]["encoder"].update(planted(marker))
    bad = tmp_path / "crafted.ckpt"
    torch.save(crafted, bad)
    evil = tmp_path / "evil.ckpt"
    evil.write_bytes(pickle.dumps(Evil(str(marker))))
    for path in (bad, evil, tmp_path):
        output = tmp_path / ("out.csv" if command == "recsys-recommend" else "out.pt2")
        args = [str(BIN / command), f"ckpt_path={path}"]
        if command != "recsys-eval":
            args.append(f"output={output}")
        done = subprocess.run(args, cwd=tmp_path, capture_output=True, text=True)
        assert done.returncode == 2, done.stderr[-2000:]
        assert "Traceback" not in done.stderr
        # a folder as the checkpoint is refused too: as no checkpoint, or as an input folder
        # the run folder would be written into
        assert f"{command}: error:" in done.stderr and str(path) in done.stderr
        assert not output.exists()
    assert not marker.exists()
