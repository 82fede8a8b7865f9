"""The training arrays as memory-mapped ``.npy`` files, shared by every process of a node
through the page cache (``data.loader=mapped``).

Decoding ``sequences.parquet`` into flat arrays costs every DDP rank the whole dataset in
private memory (8 copies on an 8-GPU node). Instead the arrays of
:class:`~recsys_seq.data.dataset.PreparedSequences` are derived once per dataset version,
written as ``.npy`` files, and each rank opens them with ``np.load(mmap_mode="r")``: windows
are gathered from the map exactly as from the in-memory arrays, the pages a rank reads are
shared with every other rank, and only the windows' own gathers are private.

Layout: ``<data.array_cache>/<fingerprint>/`` holds one ``<name>.npy`` per array
(:data:`ARRAYS`, then ``feature-<name>.npy`` per side feature) and ``manifest.json``, written
last, recording the fingerprint, the source folder and every array's dtype and shape. The
prepared folder is only ever read; the cache folder is published atomically
(:mod:`recsys_seq.core.publish`: a temporary sibling renamed into place, and only a folder of
this kind, holding nothing else, is ever replaced), so concurrent builders on a shared file
system end with one good cache: a loser's rename fails or finds the winner's, and either way
it opens the winner's. A lock file beside the cache (``.<fingerprint>.lock``) makes the other
ranks of a node wait for the one that builds, rather than build too; where the file system
cannot lock, they build concurrently and the publish still keeps one.

An opened cache is checked against the folder's fingerprint and its manifest; a stale cache
(the dataset changed), a missing or truncated ``.npy`` or a wrong manifest is rebuilt, with one
printed line saying why.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import json
import os
import shutil
from collections.abc import Iterator
from pathlib import Path

import numpy as np

from data_prep import schema
from recsys_seq.core.artifacts import owns_folder
from recsys_seq.core.publish import (
    OutputRefused,
    check_location,
    publishing,
    register_folder_kind,
)
from recsys_seq.data.catalogue import Catalogue
from recsys_seq.data.dataset import PreparedSequences
from recsys_seq.data.validate import check_prepared

ARRAY_CACHE = "array_cache"
"""The artifact kind of a cache folder (see :mod:`recsys_seq.core.artifacts`)."""
MANIFEST = "manifest.json"
VERSION = 2  # of the layout; part of the fingerprint, so a new layout never reads an old one
ARRAYS = ("items", "offsets", "users", "val_index", "test_index", "train_end")
FEATURE_PREFIX = "feature-"
TABLES = (schema.SEQUENCES_FILE, schema.ITEMS_FILE, schema.USERS_FILE)

register_folder_kind(ARRAY_CACHE, rf"{MANIFEST.replace('.', '[.]')}|[A-Za-z0-9_-]+[.]npy")


def fingerprint(folder: Path) -> str:
    """A key of the prepared folder's content, cheap at any size: meta.json's bytes (the
    prep's own hash of its input and config, the counts) and each table's size and
    modification time in nanoseconds.

    Hashing the tables themselves (GBs at 200M events) at every start of every rank is what
    the cache exists to avoid. Any write of a table (recsys-prep republishing, an edit, a
    copy cut short) changes its size or mtime_ns; a copy that keeps both (``cp -p``, rsync)
    keeps the content too. Only a deliberate rewrite that forges both is missed.
    """
    digest = hashlib.sha256(f"array-cache-v{VERSION}\n".encode())
    digest.update((folder / schema.META_FILE).read_bytes())
    for name in TABLES:
        stat = (folder / name).stat()
        digest.update(f"\n{name} {stat.st_size} {stat.st_mtime_ns}".encode())
    return digest.hexdigest()[:24]


def load_mapped(folder: Path, cache_root: Path) -> PreparedSequences:
    """``folder``'s sequences with every array mapped from its cache (built when missing,
    stale or damaged). ``meta.json`` and ``items.parquet`` (the catalogue, one row per item)
    are read from the folder itself: the fingerprint covers both, and checkpoints carry the
    catalogue; ``item_counts`` is the catalogue's (one row per item: small, and model buffers).
    """
    arrays = ensure_cache(folder, cache_root)
    meta = json.loads((folder / schema.META_FILE).read_text())
    features = {
        name.removeprefix(FEATURE_PREFIX): values
        for name, values in arrays.items()
        if name.startswith(FEATURE_PREFIX)
    }
    catalogue = Catalogue.load(
        folder, int(meta["items"]), meta.get(schema.META_ITEM_ATTRIBUTES, {})
    )
    return PreparedSequences(
        **{name: arrays[name] for name in ARRAYS},
        item_counts=catalogue.counts,
        features=features,
        meta=meta,
        catalogue=catalogue,
    )


def ensure_cache(folder: Path, cache_root: Path) -> dict[str, np.ndarray]:
    """The cache's arrays, mapped; built first (validating ``folder``) unless a good one is
    there. The lock serialises the builders of one node; the publish, those of many.

    Raises:
        PreparedDataError: ``folder`` is missing or not a prepared folder (named, before
            any cache is touched).
    """
    try:
        key = fingerprint(folder)
    except OSError:
        check_prepared(folder)  # the error that names what is wrong with the folder
        raise
    target = cache_root / key
    arrays, problem = open_cache(target, key)
    if arrays is not None:
        return arrays
    check_location(target, ARRAY_CACHE, True, [folder])  # never inside the prepared folder
    with _lock(cache_root / f".{key}.lock"):
        arrays, problem = open_cache(target, key)  # another rank may have built it meanwhile
        if arrays is None:
            print(f"Array cache {target}: {_stale_reason(folder, cache_root, key) or problem}")
            _build(folder, target, key)
            arrays, problem = open_cache(target, key)
    if arrays is None:
        raise OutputRefused(f"Array cache {target} was built but cannot be read: {problem}.")
    return arrays


def open_cache(target: Path, key: str) -> tuple[dict[str, np.ndarray] | None, str]:
    """``(arrays, "")`` when ``target`` is a complete cache of fingerprint ``key``, else
    ``(None, what is wrong)``. Each array is mapped, never read: the check costs a few
    ``stat`` and header reads at any size."""
    try:
        manifest = json.loads((target / MANIFEST).read_text())
        entries = manifest["arrays"]
        if manifest["fingerprint"] != key:
            return None, "its manifest names another dataset version; rebuilding"
        files = {name: entries[name] for name in ARRAYS} | {
            name: entry for name, entry in entries.items() if name.startswith(FEATURE_PREFIX)
        }
    except FileNotFoundError:
        return None, "no cache of this dataset version yet; building it (once per node)"
    except (OSError, ValueError, KeyError, TypeError):
        return None, "its manifest is unreadable or incomplete; rebuilding"
    arrays = {}
    for name, entry in files.items():
        path = target / f"{name}.npy"
        try:
            values = np.load(path, mmap_mode="r")
            complete = os.path.getsize(path) == values.offset + values.nbytes
        except (OSError, ValueError):
            return None, f"{path.name} is missing or truncated; rebuilding"
        if not complete or [str(values.dtype), list(values.shape)] != entry:
            return None, f"{path.name} does not match the manifest; rebuilding"
        arrays[name] = values
    return arrays, ""


def _build(folder: Path, target: Path, key: str) -> None:
    """Validate and decode ``folder`` (:meth:`PreparedSequences.load`, which checks every
    file), write its arrays, the manifest last, and publish; a good cache published by
    another builder meanwhile is kept instead."""
    data = PreparedSequences.load(folder)
    arrays = {name: getattr(data, name) for name in ARRAYS} | {
        f"{FEATURE_PREFIX}{name}": values for name, values in data.features.items()
    }
    try:
        with publishing(
            target,
            ARRAY_CACHE,
            folder=True,
            inputs=[folder],
            keep_existing=lambda existing: open_cache(existing, key)[0] is not None,
        ) as tmp:
            for name, values in arrays.items():
                np.save(tmp / f"{name}.npy", np.ascontiguousarray(values))
            manifest = {
                "fingerprint": key,
                "source": str(folder),
                "arrays": {name: [str(v.dtype), list(v.shape)] for name, v in arrays.items()},
            }
            (tmp / MANIFEST).write_text(json.dumps(manifest, indent=2) + "\n")
    except OutputRefused:
        if open_cache(target, key)[0] is None:  # not a winner's cache: a real refusal
            raise
    _remove_stale(folder, target)


def _caches_of(folder: Path, cache_root: Path) -> Iterator[Path]:
    """The caches in ``cache_root`` built from ``folder`` (any version)."""
    for entry in cache_root.iterdir() if cache_root.is_dir() else ():
        try:
            source = json.loads((entry / MANIFEST).read_text())["source"]
        except (OSError, ValueError, KeyError, TypeError):
            continue
        if source == str(folder):
            yield entry


def _stale_reason(folder: Path, cache_root: Path, key: str) -> str | None:
    stale = [entry.name for entry in _caches_of(folder, cache_root) if entry.name != key]
    if not stale:
        return None
    return f"{folder} changed since the cache {', '.join(stale)} was built; building this one"


def _remove_stale(folder: Path, keep: Path) -> None:
    """Remove caches of earlier versions of ``folder`` (the folder no longer holds them) and
    their lock files, only caches the project wrote and nobody added to."""
    for entry in _caches_of(folder, keep.parent):
        if entry != keep and owns_folder(entry, ARRAY_CACHE):
            shutil.rmtree(entry, ignore_errors=True)
            (entry.parent / f".{entry.name}.lock").unlink(missing_ok=True)


@contextlib.contextmanager
def _lock(path: Path) -> Iterator[None]:
    """An exclusive ``flock`` on ``path`` (created, never written); none where the file
    system refuses (read-only, no locking): the publish is safe without it."""
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        handle = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
    except OSError:
        yield
        return
    try:
        with contextlib.suppress(OSError):
            fcntl.flock(handle, fcntl.LOCK_EX)
        yield
    finally:
        os.close(handle)
