"""Hand freed heap memory back to the operating system.

glibc keeps freed allocations below its mmap threshold in the process's heap for reuse, and
the threshold adapts upwards (to 32 MB) as large blocks are freed. A data-loading rank makes
many such blocks and frees them: the windows of a 20M-event dataset are built through a dozen
4 MB temporaries, and each epoch's shuffle makes as many again. Kept, they stay private memory
of every rank for the whole run, multiplied by the ranks of a node (``recsys-bench task=data``
measured 30 MB of 55 MB per rank at 20M events). ``malloc_trim(0)`` returns them; it walks the
heap once, a few milliseconds, so it is called where a build ends, not per batch.
"""

from __future__ import annotations

import ctypes
import platform


def _malloc_trim():
    if platform.system() != "Linux" or platform.libc_ver()[0] != "glibc":
        return None  # other allocators (musl, macOS, Windows) keep their own policy
    return getattr(ctypes.CDLL(None), "malloc_trim", None)


_TRIM = _malloc_trim()


def release_freed_memory() -> None:
    """Return the heap's free pages to the system (glibc); a no-op elsewhere."""
    if _TRIM is not None:
        _TRIM(0)
