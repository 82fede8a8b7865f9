"""The mapped loader (data.loader=mapped) gives the memory loader's batches bit for bit, in one
process and on each of 2 DDP ranks; its cache is rebuilt when stale or damaged, survives
racing builders, and never touches the prepared folder or a user's file."""

import contextlib
import json
import os
import shutil
import tempfile
import threading
from pathlib import Path

import numpy as np
import polars as pl
import pytest
import torch
import torch.distributed as dist
import torch.multiprocessing as mp

from data_prep import schema
from recsys_seq.core.publish import OutputRefused
from recsys_seq.data import SequenceDataModule, Stage, mapped
from recsys_seq.data.checking import PreparedDataError
from tests.helpers import snapshot

OPTIONS = {
    "all": {"train_windows": "all"},
    "last": {"train_windows": "last"},
    "prefixes": {"train_windows": "prefixes"},
    "prefixes_from_empty": {"train_windows": "prefixes", "empty_history": True},
    "random_batches": {"batching": "random", "max_tokens": 600},
    "holdout": {"train_windows": "holdout", "train_holdout": 2},
    "all_with_holdout": {"train_windows": "all", "train_holdout": 1},
    "boundaries": {"boundaries": [3, 8, 20]},
    "suggested_buckets": {"boundaries": "suggested", "max_tokens": 600},
    "negatives": {"sampled_negatives": 20, "negatives_from": "popularity"},
    "eval_users": {"eval_users": 40, "sampled_negatives": 5},
}


@pytest.fixture(scope="module", autouse=True)
def untouched(demo_dir):
    """The prepared folder is byte for byte what it was once every test here has run."""
    before = snapshot(demo_dir)
    yield
    assert snapshot(demo_dir) == before


def module(path: Path, loader: str, cache: Path, **options) -> SequenceDataModule:
    return SequenceDataModule(path, loader=loader, array_cache=str(cache), max_len=20, **options)


def batches(datamodule: SequenceDataModule, stage: Stage, world: int = 1, rank: int = 0):
    return list(datamodule.dataloader(stage, num_replicas=world, rank=rank))


def assert_same(got: list[dict], expected: list[dict]) -> None:
    assert len(got) == len(expected) > 0
    for a, b in zip(got, expected, strict=True):
        assert a.keys() == b.keys()
        for key in a:
            assert a[key].dtype == b[key].dtype and torch.equal(a[key], b[key]), key


@pytest.mark.parametrize("options", OPTIONS.values(), ids=OPTIONS.keys())
def test_mapped_batches_equal_the_memory_loaders_bit_for_bit(demo_dir, tmp_path, options):
    mapped_module = module(demo_dir, "mapped", tmp_path, **options)
    mapped_module.prepare_data()
    assert isinstance(mapped_module.data.items, np.memmap)
    memory = module(demo_dir, "memory", tmp_path / "unused", **options)
    for stage in Stage:
        assert_same(batches(mapped_module, stage), batches(memory, stage))
    assert not (tmp_path / "unused").exists()
    assert mapped_module.data.repeats_in_training() == memory.data.repeats_in_training()
    assert np.array_equal(mapped_module.data.item_counts, memory.data.item_counts)


def _rank(rank: int, demo_dir: str, cache: str, init: str) -> None:
    """One DDP rank: every rank prepares (as build_datamodule does; one builds, the other
    waits on the lock or finds its cache), then compares its shard with the memory loader's."""
    dist.init_process_group("gloo", init_method=init, rank=rank, world_size=2)
    try:
        options = OPTIONS["all_with_holdout"]
        mapped_module = module(Path(demo_dir), "mapped", Path(cache), **options)
        mapped_module.prepare_data()
        dist.barrier()
        memory = module(Path(demo_dir), "memory", Path(cache), **options)
        for stage in (Stage.TRAIN, Stage.VAL):
            assert_same(batches(mapped_module, stage, 2, rank), batches(memory, stage, 2, rank))
    finally:
        dist.destroy_process_group()


def test_each_of_two_ddp_ranks_gets_the_memory_loaders_batches(demo_dir, tmp_path):
    init = f"file://{tempfile.mktemp(dir=tmp_path)}"
    mp.spawn(_rank, args=(str(demo_dir), str(tmp_path / "arrays"), init), nprocs=2)
    caches = [p for p in (tmp_path / "arrays").iterdir() if not p.name.startswith(".")]
    assert len(caches) == 1 and mapped.open_cache(caches[0], caches[0].name)[0] is not None


@pytest.fixture
def own_copy(demo_dir, tmp_path) -> Path:
    return Path(shutil.copytree(demo_dir, tmp_path / "demo"))


def cache_of(folder: Path, root: Path) -> Path:
    return root / mapped.fingerprint(folder)


def rebuilt_line(capsys, folder: Path, root: Path) -> str:
    """Load through the datamodule, check the batches against the memory loader's, and return
    the one line the load printed."""
    loaded = module(folder, "mapped", root)
    memory = module(folder, "memory", root)
    assert_same(batches(loaded, Stage.TRAIN), batches(memory, Stage.TRAIN))
    lines = capsys.readouterr().out.strip().splitlines()
    assert len(lines) == 1, lines
    return lines[0]


def test_a_stale_cache_is_replaced_when_a_table_is_rewritten(own_copy, tmp_path, capsys):
    root = tmp_path / "arrays"
    mapped.ensure_cache(own_copy, root)
    old = cache_of(own_copy, root)
    capsys.readouterr()
    table = own_copy / schema.SEQUENCES_FILE
    pl.read_parquet(table).write_parquet(table, compression="uncompressed")
    assert "changed since the cache" in rebuilt_line(capsys, own_copy, root)
    assert cache_of(own_copy, root) != old and not old.exists()  # the old version is removed


def test_a_cache_of_an_older_layout_is_never_read_and_is_replaced(
    own_copy, tmp_path, capsys, monkeypatch
):
    """A new layout (another set of arrays) changes the fingerprint: the old cache of the same
    folder is not opened, a new one is built and the old one removed."""
    root = tmp_path / "arrays"
    monkeypatch.setattr(mapped, "VERSION", mapped.VERSION - 1)
    mapped.ensure_cache(own_copy, root)
    old = cache_of(own_copy, root)
    monkeypatch.undo()
    capsys.readouterr()
    assert "changed since the cache" in rebuilt_line(capsys, own_copy, root)
    assert cache_of(own_copy, root) != old and not old.exists()


@pytest.mark.parametrize("damage", ["truncate", "remove_npy", "remove_manifest", "wrong_shape"])
def test_a_damaged_cache_is_detected_and_rebuilt(demo_dir, tmp_path, capsys, damage):
    root = tmp_path / "arrays"
    mapped.ensure_cache(demo_dir, root)
    folder = cache_of(demo_dir, root)
    capsys.readouterr()
    items, manifest = folder / "items.npy", folder / mapped.MANIFEST
    if damage == "truncate":
        os.truncate(items, items.stat().st_size // 2)
    elif damage == "remove_npy":
        (folder / "feature-event.npy").unlink()
    elif damage == "remove_manifest":
        manifest.unlink()
    else:
        record = json.loads(manifest.read_text())
        record["arrays"]["items"][1] = [1]
        manifest.write_text(json.dumps(record))
    expected = {
        "truncate": "items.npy is missing or truncated",
        "remove_npy": "feature-event.npy is missing or truncated",
        "remove_manifest": "no cache of this dataset version yet",
        "wrong_shape": "items.npy does not match the manifest",
    }[damage]
    assert expected in rebuilt_line(capsys, demo_dir, root)
    assert mapped.open_cache(folder, folder.name)[0] is not None


def test_a_users_file_in_the_cache_folder_is_never_replaced(demo_dir, tmp_path):
    root = tmp_path / "arrays"
    mapped.ensure_cache(demo_dir, root)
    folder = cache_of(demo_dir, root)
    (folder / "notes.txt").write_text("mine\n")
    (folder / mapped.MANIFEST).unlink()
    with pytest.raises(OutputRefused, match="not an array cache written by recsys-seq"):
        mapped.ensure_cache(demo_dir, root)
    assert (folder / "notes.txt").read_text() == "mine\n"


def test_the_cache_is_never_written_inside_the_prepared_folder(own_copy):
    before = snapshot(own_copy)
    with pytest.raises(OutputRefused, match="inside the input folder"):
        mapped.ensure_cache(own_copy, own_copy / "arrays")
    assert snapshot(own_copy) == before


def test_two_racing_builders_end_with_one_good_cache(demo_dir, tmp_path, monkeypatch):
    """Both build at once (the lock bypassed, as on a file system that cannot lock): the loser
    keeps the winner's cache or its rename fails harmlessly, and both open the winner's."""
    root = tmp_path / "arrays"
    both_building = threading.Barrier(2)
    build = mapped._build

    def racing_build(*args):
        both_building.wait()
        build(*args)

    monkeypatch.setattr(mapped, "_lock", lambda path: contextlib.nullcontext())
    monkeypatch.setattr(mapped, "_build", racing_build)
    results, errors = [], []

    def builder():
        try:
            results.append(mapped.ensure_cache(demo_dir, root))
        except Exception as error:  # reported by the assert below
            errors.append(error)

    threads = [threading.Thread(target=builder) for _ in range(2)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert not errors and len(results) == 2
    assert [p.name for p in root.iterdir()] == [mapped.fingerprint(demo_dir)]  # no temporaries
    assert np.array_equal(results[0]["items"], results[1]["items"])


@pytest.mark.parametrize("damage", ["missing folder", "no meta.json", "not a folder"])
def test_a_folder_that_is_not_prepared_is_named_and_no_cache_is_made(tmp_path, demo_dir, damage):
    folder = tmp_path / "data"
    if damage == "no meta.json":
        shutil.copytree(demo_dir, folder)
        (folder / schema.META_FILE).unlink()
    elif damage == "not a folder":
        folder.write_text("not a dataset")
    cache = tmp_path / "cache"
    with pytest.raises(PreparedDataError, match=str(folder)):
        module(folder, "mapped", cache).prepare_data()
    assert not cache.exists() or not any(cache.iterdir())
