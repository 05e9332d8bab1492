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

Nothing happens where the C library has no malloc_trim (musl, macOS), or
with ISR_MALLOC_TRIM=0.
"""

from __future__ import annotations

import os
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
    """Release the C heap's free pages to the system; whether it could."""
    if os.environ.get(ENV, "1") == "0":
        return False
    trim = _malloc_trim()
    if trim is None:
        return False
    trim(0)
    return True
