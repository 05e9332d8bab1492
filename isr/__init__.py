"""Kafka ISR monitor: re-computes partition leaders' ISR decisions from fetch-state events."""

__version__ = "0.1.0"


def _stale_native_guard() -> None:
    """The domain core compiled by scripts/build-native is used only while
    its sources are the ones it was built from: CPython imports a C extension
    before the .py beside it, so an edit after a build would be silently
    ignored. The build writes each compiled module's source digest to
    isr/native.json; if a source differs now, every compiled module is
    imported from its .py instead (they call each other natively: never a
    mix), with one line saying so."""
    import hashlib
    import json
    import os
    import sys

    root = os.path.dirname(os.path.abspath(__file__))
    try:
        with open(os.path.join(root, "native.json"), "rb") as f:
            built = json.load(f)["sources"]
    except (OSError, ValueError, KeyError, TypeError):
        return  # nothing built (or unreadable: the extensions, if any, as they are)
    top = os.path.dirname(root)
    sources = {name: os.path.join(top, *name.split(".")) + ".py" for name in built}
    stale = []
    for name, path in sources.items():
        try:
            with open(path, "rb") as f:
                if hashlib.sha256(f.read()).hexdigest() != built[name]:
                    stale.append(path)
        except OSError:
            stale.append(path)
    if stale:
        print(f"isr: the compiled domain core is older than {os.path.relpath(stale[0])}"
              f"{f' and {len(stale) - 1} more' if len(stale) > 1 else ''}: running its Python "
              "modules; rebuild with scripts/build-native (or remove it: --clean)",
              file=sys.stderr)
        sys.meta_path.insert(0, _PythonModules(sources))


class _PythonModules:
    """A finder that imports the named modules from their .py files
    (`sources`: module name -> its .py)."""

    def __init__(self, sources: dict) -> None:
        self.sources = sources

    def find_spec(self, name, path=None, target=None):
        source = self.sources.get(name)
        if source is None:
            return None
        import importlib.util

        return importlib.util.spec_from_file_location(name, source)


_stale_native_guard()
