"""bench/engine_proc_rss.py --census N runs this: an engine process
(isr.stream.engineproc.serve) that, after its Nth call (once the call's
memory is given back, trim.give_back), writes what it holds to
$CENSUS_OUT.<pid>:
- its RSS and Python's small-object allocator (pymalloc): the arenas'
  bytes, the bytes in live blocks, in free blocks of used pools, in unused
  pools (an arena goes back to the system only when all of it is free);
- every object the cyclic GC tracks, by type, with `sys.getsizeof`, and
  the untracked scalars they hold (ints past the small-int cache, strs,
  bytes, floats: each counted once, under its first holder's type);
- the containers held in the slots of slotted objects (the models, the
  watches, the sessions, ...), by owner and slot.
The census's own bookkeeping is left out. Issue 23, docs/benchmarks.md,
"The engine process's memory, object by object"."""
import collections, gc, os, sys

from isr.stream import engineproc

AT = int(os.environ.get("CENSUS_AT", "1"))
OUT = os.environ["CENSUS_OUT"]
SCALARS = (int, float, str, bytes, bytearray)
CONTAINERS = (dict, list, tuple, set, frozenset)


def _slots(o) -> tuple:
    """The slot names of a slotted object's class (none for a class itself)."""
    slots = getattr(type(o), "__slots__", None)
    return tuple(slots) if isinstance(slots, (tuple, list)) and not isinstance(o, type) else ()


def _held(o, slots: tuple) -> tuple:
    """The values an object holds, where the census looks for scalars (a
    slotted object's in the order of `slots`)."""
    if isinstance(o, (list, tuple)):
        return tuple(o)
    if isinstance(o, dict):
        return (*o.keys(), *o.values())
    return tuple(getattr(o, s, None) for s in slots)


def _pymalloc() -> list[str]:
    """The totals of sys._debugmallocstats (it writes to fd 2)."""
    path = f"{OUT}.{os.getpid()}.pymalloc"
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC)
    saved = os.dup(2)
    os.dup2(fd, 2)
    try:
        sys._debugmallocstats()
    finally:
        os.dup2(saved, 2)
        os.close(fd)
    keep = ("arenas allocated current", "bytes/arena", "bytes in allocated blocks",
            "bytes in available blocks", "unused pools")
    return [line.rstrip() for line in open(path) if any(k in line for k in keep)]


def census() -> str:
    gc.collect()
    size: collections.Counter = collections.Counter()
    count: collections.Counter = collections.Counter()
    seen: set = set()
    ours = {id(size), id(count), id(seen)}
    for o in gc.get_objects():
        if id(o) in ours:
            continue
        kind = type(o).__qualname__
        size[kind] += sys.getsizeof(o)
        count[kind] += 1
        slots = _slots(o)
        held = _held(o, slots)
        for c in held:
            if (isinstance(c, SCALARS) and not isinstance(c, bool) and id(c) not in seen
                    and not (isinstance(c, int) and -5 <= c <= 256)):
                seen.add(id(c))
                k = f"{type(c).__name__} in {kind}"
                size[k] += sys.getsizeof(c)
                count[k] += 1
        for s, v in zip(slots, held):  # a slotted object's containers, by slot
            if isinstance(v, CONTAINERS) and v:
                k = f"  {kind}.{s} ({type(v).__name__})"
                size[k] += sys.getsizeof(v)
                count[k] += 1
    status = {k: int(v.split()[0]) // 1024 for k, v in
              (line.split(":", 1) for line in open("/proc/self/status"))
              if k in ("VmRSS", "RssAnon", "RssFile")}
    lines = ["RSS {VmRSS} MB (anonymous {RssAnon}, files {RssFile})".format(**status),
             *_pymalloc(), "MB (getsizeof) / objects / type:"]
    lines += [f"{s / 1e6:9.1f} {count[k]:9d}  {k}" for k, s in size.most_common(45)]
    return "\n".join(lines) + "\n"


_calls = [0]
_give_back = engineproc.trim.give_back


def give_back():
    done = _give_back()
    _calls[0] += 1
    if _calls[0] == AT:
        with open(f"{OUT}.{os.getpid()}", "w") as f:
            f.write(census())
    return done


engineproc.trim.give_back = give_back
engineproc.serve(sys.argv[1], int(sys.argv[2]))
