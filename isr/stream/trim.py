"""Give the C allocator's free memory back to the system after a
micro-batch's work, in the job's long-lived Python processes (the bucket's
engine process, the Python workers, the driver).

Each micro-batch allocates and frees tens of MB there (a bucket's packed
records and state row, its output records, the driver's collected batch).
glibc's malloc returns freed memory to the system only from the top of its
heap; what is freed below a block still in use stays resident, and the
processes hold on to it between batches. `malloc_trim(0)` releases every
free page of the heap (docs/benchmarks.md, issue 23, branch `rssgoal`:
~30 MB per engine process at 100 k partitions). It costs a walk of the
heap's free lists: milliseconds, once per batch. Memory of Python's own
small-object allocator is not malloc's and not touched.

Arrow's buffers (the source's record batches, the packs, the frames that
Spark hands to and takes from a worker) come from Arrow's own allocator
(mimalloc or jemalloc in the pyarrow wheels), which keeps freed segments
for reuse: `give_back` asks it to return them too (MemoryPool.
release_unused), where pyarrow is loaded already (docs/benchmarks.md,
issue 23, branch `rsscap`: ~24 MB a read task).

The C heap's part does nothing where the C library has no malloc_trim
(musl, macOS); ISR_MALLOC_TRIM=0 turns both off.
"""

from __future__ import annotations

import os
import sys
from typing import Callable, Optional

ENV = "ISR_MALLOC_TRIM"

_trim: Optional[Callable] = None
_looked = False


def _malloc_trim() -> Optional[Callable]:
    global _trim, _looked
    if not _looked:
        _looked = True
        try:
            import ctypes

            _trim = ctypes.CDLL(None).malloc_trim  # glibc's
        except (OSError, AttributeError):
            _trim = None
    return _trim


def give_back() -> bool:
    """Release the C heap's and Arrow's pool's free pages to the system;
    whether it could (the C heap's)."""
    if os.environ.get(ENV, "1") == "0":
        return False
    _release_arrow_pool()
    trim = _malloc_trim()
    if trim is None:
        return False
    trim(0)
    return True


def _release_arrow_pool() -> None:
    """Arrow's allocator's free segments back to the system. Never imports
    pyarrow: a process that has not loaded it has nothing in its pool."""
    pa = sys.modules.get("pyarrow")
    if pa is None:
        return
    try:
        pa.default_memory_pool().release_unused()
    except (AttributeError, NotImplementedError):  # an old pyarrow: nothing to ask
        pass
