"""trim.give_back: the C heap's free pages go back to the system after a
micro-batch (the engine processes, the Python workers, the driver)."""

import os
import sys

import pytest

from isr.stream import trim

glibc = pytest.mark.skipif(not sys.platform.startswith("linux") or trim._malloc_trim() is None,
                           reason="glibc's malloc_trim")


def rss_mb() -> float:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 2**20


@glibc
def test_a_batchs_freed_memory_leaves_the_process(monkeypatch):
    """64 MB of a batch's records freed below a block still in use stay
    resident (malloc gives back only the top of its heap); give_back
    releases them."""
    monkeypatch.delenv(trim.ENV, raising=False)
    batch = [bytes(16_384) for _ in range(4_096)]  # below the mmap threshold: in the heap
    for b in batch:  # touch every page
        assert b[-1] == 0
    kept = [bytes(16_384)]  # noqa: F841 - allocated after them: the heap's top stays in use
    held = rss_mb()
    del batch
    assert rss_mb() > held - 16  # freed, still resident
    assert trim.give_back()
    assert rss_mb() < held - 48


def test_it_can_be_turned_off(monkeypatch):
    monkeypatch.setenv(trim.ENV, "0")
    assert trim.give_back() is False


def test_arrows_freed_buffers_leave_the_process_too(monkeypatch):
    """A batch's Arrow arrays (a read task's record batches, the packs, the
    frames Spark hands over) come from Arrow's own allocator, which keeps
    freed segments for reuse: give_back returns those too."""
    pa = pytest.importorskip("pyarrow")
    if pa.default_memory_pool().backend_name == "system":
        pytest.skip("Arrow allocates with malloc here: the test above covers it")
    monkeypatch.delenv(trim.ENV, raising=False)
    batch = [pa.array([b"x" * 200] * 5_000, pa.binary()) for _ in range(64)]  # ~64 MB
    kept = pa.array([b"y" * 200] * 5_000, pa.binary())  # noqa: F841 - its pool stays in use
    held = rss_mb()
    del batch
    assert rss_mb() > held - 16  # freed, still resident
    trim.give_back()
    assert rss_mb() < held - 48
