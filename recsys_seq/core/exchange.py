"""Swapping two paths in one step: Linux's ``renameat2(RENAME_EXCHANGE)``.

Publishing a folder over an existing one with plain renames takes two steps (the old folder
aside, the new one in), and between them the output path does not exist: a reader that is not
ours (a job a scheduler started, a notebook) would find nothing. An exchange swaps the two
folders atomically, so every reader sees the old folder or the new one. Where the system has
no such call (not Linux, an old C library) or the file system refuses it (some network and
overlay file systems), :func:`exchange` says so and the caller takes the two renames.
"""

from __future__ import annotations

import ctypes
import errno
import os
import sys
from pathlib import Path

_AT_FDCWD = -100  # <fcntl.h>: paths relative to the working directory
_RENAME_EXCHANGE = 2  # <linux/fs.h>
# what renameat2 answers where the kernel or the file system cannot exchange
_UNSUPPORTED = {errno.ENOSYS, errno.EINVAL, errno.ENOTSUP, errno.EOPNOTSUPP}


def _renameat2():
    """libc's ``renameat2``, or None where there is none (not Linux, glibc before 2.28)."""
    if not sys.platform.startswith("linux"):
        return None
    try:
        return getattr(ctypes.CDLL(None, use_errno=True), "renameat2", None)
    except OSError:
        return None


_RENAMEAT2 = _renameat2()


def exchange(first: Path, second: Path) -> bool:
    """Swap the two existing paths in one atomic step; False (and nothing done) where this
    system or file system cannot.

    Raises:
        OSError: the exchange is supported but failed (a path vanished, no permission).
    """
    if _RENAMEAT2 is None:
        return False
    done = _RENAMEAT2(
        _AT_FDCWD, os.fsencode(first), _AT_FDCWD, os.fsencode(second), _RENAME_EXCHANGE
    )
    if done == 0:
        return True
    code = ctypes.get_errno()
    if code in _UNSUPPORTED:
        return False
    raise OSError(code, os.strerror(code), str(second))
