"""A copy of a source tree with the domain core's hot modules compiled by
Cython, for measuring what compiling them buys (docs/benchmarks.md, issue 23,
branch `compiled`). The tree itself is not touched and nothing here is used
by `isr`: the copy is what bench/compare_trees.py and bench/scenario_outputs.py
then run (`--tree`), beside the pure tree.

    pip install --target /tmp/cy cython            # Cython 3.x; not a dependency
    PYTHONPATH=/tmp/cy python bench/compile_tree.py . /tmp/ctree          # as is
    PYTHONPATH=/tmp/cy python bench/compile_tree.py . /tmp/ctree --slots  # + layouts

As is: each module compiled from its unmodified .py (Cython's Python
semantics; `annotation_typing` off, so an annotation never becomes a runtime
type check). `--slots`: also an augmenting .pxd beside each module, written
here from the source, that makes every plain class with a literal
`__slots__` an extension type whose slots are `cdef public object` fields
(the same values, no C types: only the attribute access changes, from a
descriptor lookup to a struct field inside the class's own methods). The
compiled modules sit beside their .py files in the copy and are imported
first (CPython prefers an extension module).
"""

from __future__ import annotations

import argparse
import ast
import os
import shutil
import sys

# Where `isr replay`'s time goes (sampling profile of the realistic files):
# the session catch-up, the engine, the partition model, the alert rules.
HOT = [
    "isr/model/partition.py", "isr/model/session.py", "isr/model/brokers.py",
    "isr/model/rules.py", "isr/model/health.py", "isr/model/follower.py",
    "isr/model/stall.py", "isr/model/propagation.py",
    "isr/engine/sessions.py", "isr/engine/local.py", "isr/engine/sequencer.py",
    "isr/engine/deadlines.py", "isr/engine/listeners.py", "isr/engine/propagation.py",
    "isr/alerts/listener.py", "isr/alerts/evaluator.py", "isr/alerts/conditions.py",
    "isr/alerts/watch.py", "isr/contract/events.py", "isr/linecap.py",
]


def slot_layouts(source: str) -> str:
    """The augmenting .pxd of one module: its plain (no base, no decorator)
    classes with a literal, non-empty __slots__ as extension types."""
    out = []
    for node in ast.parse(source).body:
        if not isinstance(node, ast.ClassDef) or node.bases or node.decorator_list:
            continue
        for stmt in node.body:
            if (isinstance(stmt, ast.Assign) and isinstance(stmt.targets[0], ast.Name)
                    and stmt.targets[0].id == "__slots__" and stmt.value.elts):
                names = ", ".join(e.value for e in stmt.value.elts)
                out.append(f"cdef class {node.name}:\n    cdef public object {names}\n")
    return "\n".join(out)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("tree", help="the source tree (its isr/ and bench/ are copied)")
    parser.add_argument("into", help="the copy to build (replaced)")
    parser.add_argument("--slots", action="store_true", help="extension types for __slots__ classes")
    parser.add_argument("modules", nargs="*", default=HOT, help="paths under the tree")
    args = parser.parse_intermixed_args()
    from Cython.Build import cythonize  # only this script needs Cython
    from setuptools import Extension, setup

    if os.path.exists(args.into):
        shutil.rmtree(args.into)
    skip = shutil.ignore_patterns("__pycache__", "*.so", "*.c", "*.pxd")
    for part in ("isr", "bench"):
        shutil.copytree(os.path.join(args.tree, part), os.path.join(args.into, part), ignore=skip)
    os.chdir(args.into)
    if args.slots:
        for module in args.modules:
            with open(module) as f:
                pxd = slot_layouts(f.read())
            if pxd:
                with open(module[:-3] + ".pxd", "w") as f:
                    f.write(pxd)
    extensions = [Extension(m[:-3].replace("/", "."), [m]) for m in args.modules]
    setup(script_args=["build_ext", "--inplace", "--build-temp", "build"],
          ext_modules=cythonize(extensions, quiet=True, compiler_directives={
              "language_level": 3, "annotation_typing": False, "binding": True}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
