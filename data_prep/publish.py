"""Every output of the project is published by this module: never a partial file, never a
user's file lost.

The rule, for folders (a prepared dataset, a report) and files (recommendations, an export,
``metrics.json``) alike:

1. The output is written to a temporary sibling ``P/.X.tmp-<host>-<pid>-<random>`` (the same
   file system as ``P/X``, so the final rename is atomic).
2. It is published by renaming that sibling onto ``P/X``. A folder that already exists is first
   moved aside to ``P/.X.old-<same tag>`` and removed after the rename; a file is replaced in
   one ``os.replace``.
3. An existing ``X`` is replaced only when it is the project's own artifact of the same kind:
   a folder carrying :data:`MARKER_FILE` of that kind and holding nothing the marker does not
   list, or a file its kind recognises as its own (:func:`register_kind`). Never a user's
   file, a folder with other content, the working directory or a folder above it, an input of
   the command or a folder that holds one: those are refused with :class:`OutputRefused`.

A kill at any instant leaves the previous output or the new one, once :func:`recover` has run;
every publish, and every load of a prepared dataset, runs it first: it puts back a previous
output whose owner died between the two renames and removes temporaries of dead processes.
"""

from __future__ import annotations

import errno
import json
import os
import re
import shutil
import socket
import uuid
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from pathlib import Path

from data_prep.errors import UserError

MARKER_FILE = ".recsys-seq.json"
"""Inside every folder the project publishes: ``{"artifact": <kind>, "files": [...]}``."""

FileRecogniser = Callable[[Path], bool]
_FILE_KINDS: dict[str, FileRecogniser] = {}
_FOLDER_KINDS: dict[str, re.Pattern] = {}

# errors of the output's file system that a user fixes (space, permissions, read-only mount)
_OUTPUT_ERRNOS = {
    errno.ENOSPC,
    errno.EACCES,
    errno.EPERM,
    errno.EROFS,
    errno.EDQUOT,
    errno.ENAMETOOLONG,
}
_NAME_MAX = 255  # bytes in one file name on common file systems
_TEMPORARY_EXTRA = 64  # what a temporary sibling's name adds: ".", ".tmp-<host>-<pid>-<hex>"


class OutputRefused(UserError):
    """The output path is not the project's to write (or replace)."""


def _after(step: str) -> None:
    """Called after each publish step; tests replace it to kill the process exactly there."""


def register_kind(kind: str, recognise: FileRecogniser) -> None:
    """Declare a file kind and how to tell an existing file of that kind written by the project
    (from its content: a metadata key, a header) from anybody else's file."""
    _FILE_KINDS[kind] = recognise


def register_folder_kind(kind: str, names: str) -> None:
    """Declare a folder kind and the names (a regular expression) its files may have.

    A marker is a claim anybody can write: a folder is replaced only when every entry in it is
    listed by its marker AND named like a file of its kind, so a planted marker never makes
    the project delete a file it could not have written."""
    _FOLDER_KINDS[kind] = re.compile(names)


# ------------------------------------------------------------------------------ ownership


def read_marker(folder: Path) -> dict | None:
    """The folder's marker, or None when it has none (or an unreadable one)."""
    try:
        marker = json.loads((folder / MARKER_FILE).read_text())
    except (OSError, ValueError):
        return None
    return marker if isinstance(marker, dict) else None


def owns_folder(folder: Path, kind: str) -> bool:
    """Whether ``folder`` is the project's ``kind`` artifact with nothing added to it."""
    marker = read_marker(folder)
    if marker is None or marker.get("artifact") != kind:
        return False
    names = _FOLDER_KINDS.get(kind)
    files = marker.get("files")
    if names is None or not isinstance(files, list) or not all(isinstance(f, str) for f in files):
        return False
    listed = set(files) | {MARKER_FILE}
    return all(
        entry.name == MARKER_FILE or (entry.name in listed and names.fullmatch(entry.name))
        for entry in folder.iterdir()
    )


def write_marker(folder: Path, kind: str) -> None:
    """Mark ``folder`` as the project's ``kind`` artifact holding what it holds now."""
    files = sorted(entry.name for entry in folder.iterdir() if entry.name != MARKER_FILE)
    text = json.dumps({"artifact": kind, "files": files}, indent=2) + "\n"
    (folder / MARKER_FILE).write_text(text)


# ------------------------------------------------------------------------------ refusals


def _is_within(path: Path, folder: Path) -> bool:
    return path == folder or folder in path.parents


def check_target(
    target: str | Path, kind: str, *, folder: bool, inputs: Iterable[str | Path] = ()
) -> Path:
    """The absolute target path, or :class:`OutputRefused` saying why it may not be written."""
    target = _check_location(target, kind, folder, inputs)
    if target.is_symlink() or (target.exists() and not _replaceable(target, kind, folder)):
        raise OutputRefused(
            f"Output {target} exists and is not {_a(kind.replace('_', ' '))} written by "
            f"recsys-seq ({_describe(target)}); it is left untouched. Remove it yourself or "
            f"name another output {'folder' if folder else 'file'}."
        )
    return target


def _check_location(
    target: str | Path, kind: str, folder: bool, inputs: Iterable[str | Path]
) -> Path:
    """Refuse the working directory, a folder above it, an input and a folder holding one."""
    target = Path(os.path.abspath(target))
    what = "folder" if folder else "file"
    if len(os.fsencode(target.name)) + _TEMPORARY_EXTRA > _NAME_MAX:
        raise OutputRefused(
            f"Output name {target.name[:40]}... is too long ({len(target.name)} characters; "
            f"at most {_NAME_MAX - _TEMPORARY_EXTRA}). Name a shorter output {what}."
        )
    if _is_within(Path.cwd().resolve(), target.resolve()):
        raise OutputRefused(
            f"Output {target} is the working directory or a folder above it; publishing there "
            f"would replace everything in it. Name a new {what} (a path inside it)."
        )
    for source in inputs:
        source = Path(os.path.abspath(source)).resolve()
        if _is_within(source, target.resolve()):
            relation = "is" if source == target.resolve() else "holds"
            raise OutputRefused(
                f"Output {target} {relation} the input {source}; writing it would destroy the "
                f"input. Name another output {what}."
            )
        if source.is_dir() and _is_within(target.resolve(), source):
            raise OutputRefused(
                f"Output {target} is inside the input folder {source}, which is only ever "
                f"read. Name an output {what} outside it."
            )
    for parent in target.parents:
        if parent.exists():
            if not parent.is_dir():
                raise OutputRefused(f"Output {target}: {parent} is a file, not a folder.")
            break
    return target


def _a(noun: str) -> str:
    return f"{'an' if noun[0] in 'aeiou' else 'a'} {noun}"


def _replaceable(target: Path, kind: str, folder: bool) -> bool:
    if folder:
        return target.is_dir() and (not any(target.iterdir()) or owns_folder(target, kind))
    recognise = _FILE_KINDS.get(kind)
    return target.is_file() and recognise is not None and recognise(target)


def _describe(path: Path) -> str:
    if path.is_symlink():
        return "a symbolic link"
    if path.is_dir():
        marker = read_marker(path)
        if marker is not None and owns_folder(path, str(marker.get("artifact"))):
            return f"{_a(str(marker.get('artifact')).replace('_', ' '))} folder"
        return "a folder with other content"
    return "a file"


# ------------------------------------------------------------------------------ recovery

_TAG = re.compile(r"^\.(?P<name>.+)\.(?P<role>tmp|old)-(?P<host>[^-]+)-(?P<pid>\d+)-[0-9a-f]{8}")


def _tag() -> str:
    host = re.sub(r"[^A-Za-z0-9_.]", "_", socket.gethostname())
    return f"{host}-{os.getpid()}-{uuid.uuid4().hex[:8]}"


def _dead(host: str, pid: int) -> bool:
    """True when the process that owns a leftover is known to be gone (this machine only)."""
    if host != re.sub(r"[^A-Za-z0-9_.]", "_", socket.gethostname()):
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    except PermissionError:
        return False
    return False


def _remove(path: Path) -> None:
    if path.is_dir() and not path.is_symlink():
        shutil.rmtree(path, ignore_errors=True)
    else:
        path.unlink(missing_ok=True)


def recover(target: str | Path) -> None:
    """Clean up after publishes of ``target`` whose process died.

    A previous output moved aside (``.X.old-*``) goes back to ``X`` when ``X`` is missing and is
    removed otherwise; temporaries (``.X.tmp-*``) of dead processes are removed.
    """
    target = Path(os.path.abspath(target))
    parent = target.parent
    if not parent.is_dir():
        return
    leftovers = [
        (entry, match)
        for entry in parent.iterdir()
        if (match := _TAG.match(entry.name)) and match["name"] == target.name
    ]
    for entry, match in sorted(leftovers, key=lambda pair: pair[1]["role"] != "old"):
        if not _dead(match["host"], int(match["pid"])):
            continue
        try:
            if match["role"] == "old" and not target.exists() and not target.is_symlink():
                os.rename(entry, target)  # the previous output, back in place
            else:
                _remove(entry)
        except OSError:  # a read-only location: readers go on, the next writer reports it
            return


# ------------------------------------------------------------------------------ publishing


def is_disk_error(error: BaseException) -> bool:
    """A full disk, missing permission or read-only file system, raised by Python (an OSError)
    or by a library that reports the operating system's code (Polars: ``(os error 28)``)."""
    if isinstance(error, OSError):
        return error.errno in _OUTPUT_ERRNOS
    code = re.search(r"os error (\d+)", str(error))
    return code is not None and int(code[1]) in _OUTPUT_ERRNOS


@contextmanager
def output_errors(target: Path) -> Iterator[None]:
    """Report a full disk, missing permission or read-only file system as the output's fault."""
    try:
        yield
    except Exception as err:
        if isinstance(err, UserError) or not is_disk_error(err):
            raise
        reason = err.strerror if isinstance(err, OSError) and err.strerror else str(err)
        raise OutputRefused(
            f"Could not write the output {target}: {reason.strip().splitlines()[0]}. Free "
            "space or pick a writable location; nothing was published and the previous "
            "output is intact."
        ) from None


@contextmanager
def publishing(
    target: str | Path,
    kind: str,
    *,
    folder: bool,
    inputs: Iterable[str | Path] = (),
    keep_existing: Callable[[Path], bool] | None = None,
) -> Iterator[Path]:
    """Yield a temporary sibling of ``target`` to write into; publish it when the block ends.

    Args:
        target: the output folder or file.
        kind: the artifact kind (``prepared_dataset``, ``recommendations``, ...): an existing
            target is replaced only when it is the project's artifact of this kind.
        folder: the output is a folder (created for the block) or a file (the block creates it;
            the temporary path keeps ``target``'s suffix, for writers that go by it).
        inputs: files and folders the command reads; the target may not be or hold one.
        keep_existing: called with the target just before publishing, when it exists; True
            keeps it and discards the new output (e.g. another process published the same
            dataset meanwhile).

    Raises:
        OutputRefused: the target is not the project's to write, or its file system refused.
    """
    inputs = list(inputs)
    target = Path(os.path.abspath(target))
    with output_errors(target):
        recover(target)
        check_target(target, kind, folder=folder, inputs=inputs)
    tag = _tag()
    tmp = target.parent / f".{target.name}.tmp-{tag}{'' if folder else target.suffix}"
    with output_errors(target):
        target.parent.mkdir(parents=True, exist_ok=True)
        if folder:
            tmp.mkdir()
        try:
            yield tmp
            _after("written")
            if folder:
                write_marker(tmp, kind)
                _after("marked")
            if keep_existing is not None and target.exists() and keep_existing(target):
                return
            ours = target.exists()  # seen before the check: ours only if the check passes
            check_target(target, kind, folder=folder, inputs=inputs)  # changed meanwhile?
            if folder:
                _swap_folder(tmp, target, target.parent / f".{target.name}.old-{tag}", ours)
            else:
                _place_file(tmp, target, ours)
                _after("replaced")
        finally:
            if tmp.exists():
                _remove(tmp)


def _changed_meanwhile(target: Path) -> OutputRefused:
    return OutputRefused(
        f"Output {target} appeared while it was being written (another program?); it is left "
        "untouched and nothing was published. Run the command again."
    )


def _place_file(tmp: Path, target: Path, ours: bool) -> None:
    """Move ``tmp`` to ``target``: replacing it only when it was checked to be ours, else
    with a hard link that fails if somebody created ``target`` since the check."""
    if ours:
        os.replace(tmp, target)
        return
    try:
        os.link(tmp, target)
    except FileExistsError:
        raise _changed_meanwhile(target) from None
    except OSError:  # a file system without hard links: the plain rename
        os.rename(tmp, target)
        return
    tmp.unlink()


def _swap_folder(tmp: Path, target: Path, old: Path, ours: bool) -> None:
    """Rename ``tmp`` onto ``target``, moving our existing ``target`` aside first. With no
    previous output, the rename fails on anything created at ``target`` since the check
    (but an empty folder, which loses nothing)."""
    if ours:
        os.rename(target, old)
        _after("moved_old")
    try:
        os.rename(tmp, target)
    except OSError as error:
        if error.errno in (errno.ENOTEMPTY, errno.EEXIST, errno.ENOTDIR, errno.EISDIR):
            raise _changed_meanwhile(target) from None
        raise
    _after("moved_new")
    if old.exists():
        shutil.rmtree(old)
        _after("removed_old")


def write_text(target: str | Path, text: str, kind: str) -> Path:
    """Publish a small text file (``metrics.json``, ``config.yaml``) atomically."""
    with publishing(target, kind, folder=False) as tmp:
        tmp.write_text(text)
    return Path(os.path.abspath(target))


# ------------------------------------------------------------------------------ run folders

RUN = "run"
# what Hydra itself puts into a run folder before the project's code starts
_HYDRA_ENTRIES = re.compile(r"^(\.hydra|[^/]+\.log)$")
# everything a run writes: Hydra's files, checkpoints, loggers, results, temporaries
_RUN_ENTRIES = re.compile(
    r"^(\.hydra|[^/]+\.log|checkpoints|csv|tensorboard|mlflow|metrics\.json|config\.yaml|"
    r"report|recommendations\.parquet|model\.pt2|\.recsys-seq\.json|\..+\.tmp-.+)$"
)


def check_run_folder(folder: str | Path, inputs: Iterable[str | Path] = ()) -> Path:
    """The absolute run folder if the project may use it: new, empty, holding only what Hydra
    writes for a run, or a marked run folder holding only what runs write; never the working
    directory, an input or inside an input folder. Else :class:`OutputRefused`."""
    folder = _check_location(folder, RUN, True, inputs)
    if folder.exists() and not folder.is_dir():
        raise OutputRefused(f"Run folder {folder} is a file; pick a new folder.")
    marker = read_marker(folder) if folder.is_dir() else None
    allowed = (
        _RUN_ENTRIES if marker is not None and marker.get("artifact") == RUN else _HYDRA_ENTRIES
    )
    if folder.is_dir() and not all(allowed.match(e.name) for e in folder.iterdir()):
        raise OutputRefused(
            f"Run folder {folder} already holds files that recsys-seq did not write; they are "
            "left untouched. Pick a new folder with hydra.run.dir=<folder>."
        )
    return folder


def claim_run_folder(folder: str | Path, inputs: Iterable[str | Path] = ()) -> Path:
    """Make ``folder`` a run folder of the project (checkpoints, metrics, logs grow in it):
    :func:`check_run_folder`, then the marker."""
    folder = check_run_folder(folder, inputs)
    if read_marker(folder) is None:
        with output_errors(folder):
            folder.mkdir(parents=True, exist_ok=True)
            tmp = folder / f".{MARKER_FILE}.tmp-{_tag()}"
            tmp.write_text(json.dumps({"artifact": RUN}) + "\n")
            os.replace(tmp, folder / MARKER_FILE)
    return folder


def discard_unclaimed_run_folder(folder: Path) -> None:
    """Remove a run folder that holds only what Hydra wrote (the run never claimed it)."""
    unclaimed = folder.is_dir() and read_marker(folder) is None
    if unclaimed and all(_HYDRA_ENTRIES.match(e.name) for e in folder.iterdir()):
        shutil.rmtree(folder, ignore_errors=True)


def in_run_folder(path: Path) -> bool:
    """Files of a run folder are the project's: ``metrics.json``, ``config.yaml``, plots."""
    marker = read_marker(path.parent)
    return marker is not None and marker.get("artifact") == RUN


RUN_FILE = "run_file"
register_kind(RUN_FILE, in_run_folder)


# ------------------------------------------------------------------------------ benchmark rows

BENCHMARK = "benchmark"


def _is_benchmark(path: Path) -> bool:
    try:
        content = json.loads(path.read_text())
    except (OSError, ValueError):
        return False
    return isinstance(content, dict) and set(content) == {BENCHMARK, "rows"}


register_kind(BENCHMARK, _is_benchmark)


def write_rows(target: str | Path, rows: list[dict], benchmark: str) -> Path:
    """Publish benchmark rows as ``{"benchmark": <task>, "rows": [...]}`` (JSON)."""
    text = json.dumps({BENCHMARK: benchmark, "rows": rows}, indent=2, default=str) + "\n"
    return write_text(target, text, BENCHMARK)
