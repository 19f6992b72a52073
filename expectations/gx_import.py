"""Great Expectations' import, in one place: what is kept out of it, what is deferred, and the
background thread that starts it early.

``import great_expectations`` (GX 1.x) imports every core expectation and metric (its
``__init__`` registers them all; GX has no narrower import path), and three of them import
heavy third-party modules at module level for work the suites never do: ``scipy.stats`` (the KL
divergence and Kolmogorov-Smirnov expectations) and ``altair`` (the KL divergence's charts).
Those two were 60 % of the import (4.4 of 7 CPU s; measured with ``python -X importtime``,
see docs/benchmarks.md, "Where a small audit's time goes"). Two measures, both outside GX's code:

- :data:`UNUSED_BACKENDS`: GX's optional back ends (SQL, Spark ML, cloud SDKs) that GX imports
  only when installed (``great_expectations/compatibility/``, ``try: import ... except
  ImportError``); the audit's environment has them for other reasons. Not yet imported by
  anything else, they read as absent during GX's import, as on an install without GX's extras,
  and are visible again afterwards.
- :data:`DEFERRED`: modules GX imports unconditionally but uses only inside the functions of
  expectations the suites do not have. Each stands in ``sys.modules`` as a :class:`Deferred`
  module until the first attribute is read from it, which imports the real module (so anything
  that does use them still works, only later). ``tests/expectations/test_gx_import.py`` fails
  when validating the suites and building Data Docs start reading them (the saving is then
  gone, and this list should shrink), and checks that a deferred module still works.

:func:`prefetch` starts the import on a daemon thread (once); :func:`await_import` waits for it.
"""

from __future__ import annotations

import importlib
import os
import sys
import threading
import types

#: GX's optional back ends the suites never use (they validate pandas DataFrames)
UNUSED_BACKENDS = ("sqlalchemy", "pyspark.ml", "google.cloud", "azure")

#: modules GX imports at module level and uses only in expectations the suites do not have
DEFERRED = ("scipy.stats", "altair")

_prefetched: threading.Thread | None = None
_prefetch_lock = threading.Lock()
_load_lock = threading.RLock()


class Deferred(types.ModuleType):
    """Stands for a module until an attribute is read from it; the first read imports the real
    module, puts it in ``sys.modules`` (and on its parent package) in place of this one, and
    every read is then forwarded to it."""

    def __getattr__(self, attr: str):  # called only for what the stand-in does not have
        return getattr(self.load(), attr)

    def load(self) -> types.ModuleType:
        with _load_lock:
            real = self.__dict__.get("_real")
            if real is None:
                name = self.__name__
                if sys.modules.get(name) is self:
                    del sys.modules[name]
                real = importlib.import_module(name)
                parent, _, child = name.rpartition(".")
                if parent and getattr(sys.modules[parent], child, None) is self:
                    setattr(sys.modules[parent], child, real)
                self.__dict__["_real"] = real
            return real

    @property
    def loaded(self) -> bool:
        return "_real" in self.__dict__


def defer(name: str) -> None:
    """Put a :class:`Deferred` stand-in for ``name`` in ``sys.modules`` unless it is imported
    already (its parent package, if any, is imported for real)."""
    with _load_lock:
        if name in sys.modules:
            return
        parent, _, child = name.rpartition(".")
        if parent:
            importlib.import_module(parent)
        module = Deferred(name)
        sys.modules[name] = module
        if parent:
            setattr(sys.modules[parent], child, module)


def import_gx() -> None:
    """Import GX (the modules the suites use), once per process."""
    os.environ.setdefault("GX_ANALYTICS_ENABLED", "False")  # no route to the internet
    if "great_expectations.expectations" in sys.modules:
        return
    for name in DEFERRED:
        defer(name)
    hidden = [name for name in UNUSED_BACKENDS if name not in sys.modules]
    for name in hidden:
        sys.modules[name] = None  # type: ignore[assignment]  # an import of it: ImportError
    try:
        import great_expectations  # noqa: F401
        import great_expectations.expectations  # noqa: F401
        from great_expectations.core.run_identifier import RunIdentifier  # noqa: F401
    finally:
        for name in hidden:
            if sys.modules.get(name, 0) is None:
                del sys.modules[name]


def prefetch(*shared: str) -> None:
    """Start importing GX on a daemon thread (once); :func:`await_import` waits for it.

    ``shared``: modules the caller imports too while GX's import runs (pyspark's, pandas): they
    are imported here first, in the caller's thread, so the two threads never import one
    package at once (a circular import inside it could then be seen half-initialised)."""
    global _prefetched
    for name in shared:
        importlib.import_module(name)
    with _prefetch_lock:
        if _prefetched is None:
            _prefetched = threading.Thread(target=import_gx, name="gx-import", daemon=True)
            _prefetched.start()


def await_import() -> None:
    """GX imported: the prefetch's thread waited for, or the import done here."""
    with _prefetch_lock:
        thread = _prefetched
    if thread is not None:
        thread.join()
    import_gx()  # imported already (a no-op), or the thread failed: raise its error here
