"""The temporaries of publishing: how they are named, and the cleanup after a process that
died while it held some.

A publish of ``P/X`` writes ``P/.X.tmp-<tag>`` and moves a previous output aside to
``P/.X.old-<tag>``, where the tag (:func:`tag`) names the host and process that owns them.
:func:`recover` reads those names back: a previous output moved aside by a process that died
goes back to ``X`` (or is removed when ``X`` is in place), and temporaries of dead processes
are removed; those of live processes, or of another host, are left alone. Every publish, and
every load of a prepared dataset, runs it first (:mod:`recsys_seq.core.publish`).
"""

from __future__ import annotations

import os
import re
import shutil
import socket
import uuid
from pathlib import Path

_TAG = re.compile(r"^\.(?P<name>.+)\.(?P<role>tmp|old)-(?P<host>[^-]+)-(?P<pid>\d+)-[0-9a-f]{8}")


def tag() -> str:
    """``<host>-<pid>-<random>``: the owner of a temporary, as :func:`recover` reads it back."""
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


def remove(path: Path) -> None:
    """Remove a temporary, file or folder (a symbolic link itself, never what it points to)."""
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
                remove(entry)
        except OSError:  # a read-only location: readers go on, the next writer reports it
            return
