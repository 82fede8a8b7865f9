"""release_freed_memory hands freed heap blocks back to the system (glibc)."""

import platform
import subprocess
import sys

import pytest

GLIBC = platform.system() == "Linux" and platform.libc_ver()[0] == "glibc"

# A fresh interpreter, so the allocator's state is the script's own: one freed 32 MB block
# raises glibc's mmap threshold, then 40 blocks of 2 MB come from the heap and are freed
# below small blocks that pin the heap's top (so free() alone cannot trim them).
SCRIPT = """
from pathlib import Path
import numpy as np
from recsys_seq.core.heap import release_freed_memory

def private_mb():
    for line in Path("/proc/self/smaps_rollup").read_text().splitlines():
        if line.startswith("Anonymous:"):
            return int(line.split()[1]) / 1024

big = np.ones(4_000_000); del big
blocks = [np.ones(250_000) for _ in range(40)]
pins = [np.ones(100) for _ in range(40)]
del blocks
before = private_mb()
release_freed_memory()
print(before - private_mb())
"""


@pytest.mark.skipif(not GLIBC, reason="malloc_trim is glibc's")
def test_freed_heap_blocks_go_back_to_the_system():
    out = subprocess.run(
        [sys.executable, "-c", SCRIPT], capture_output=True, text=True, check=True
    ).stdout
    released_mb = float(out.strip().splitlines()[-1])
    assert released_mb > 60  # of the 80 MB freed; without the trim, none of it
