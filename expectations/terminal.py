"""Quiet, useful terminal output for ``haproof audit`` and ``haproof report``.

- :func:`quiet_third_party` keeps third-party INFO chatter (GX's ``_docs_decorators`` and
  registry messages, py4j, pyspark, Airflow, boto) and Spark's JVM start-up banner off the
  terminal unless ``-v`` asks for them; warnings and errors still show.
- :class:`Progress` draws a one-line bar on stderr when a terminal is attached and prints a few
  plain lines (start, every 25 %, end) otherwise, so logs and CI output stay readable.
- :func:`step` is one plain progress line with the seconds since the command started (the
  clock of ``spark_jobs/progress.py``).
"""

from __future__ import annotations

import logging
import os
import sys
import tempfile
import time
from typing import TextIO

THIRD_PARTY = (
    "great_expectations",
    "py4j",
    "pyspark",
    "airflow",
    "botocore",
    "boto3",
    "urllib3",
    "s3transfer",
    "numba",
    "fsspec",
)

# log4j2 for the Spark driver: WARN (the level Spark's PySpark shell logic wants, so it does not
# announce a "default log level"), and the two start-up warnings about this machine (loopback
# hostname, no native Hadoop library) at ERROR
_LOG4J2 = """\
rootLogger.level = warn
rootLogger.appenderRef.stderr.ref = console
appender.console.type = Console
appender.console.name = console
appender.console.target = SYSTEM_ERR
appender.console.layout.type = PatternLayout
appender.console.layout.pattern = %d{yy/MM/dd HH:mm:ss} %p %c{1}: %m%n
logger.utils.name = org.apache.spark.util.Utils
logger.utils.level = error
logger.native.name = org.apache.hadoop.util.NativeCodeLoader
logger.native.level = error
"""


def quiet_third_party(verbose: bool) -> None:
    """Unless ``verbose``: third-party loggers at WARNING, ours too (the progress lines and the
    verdict table say what happened), and Spark's driver JVM started with an errors-only log4j2
    configuration (through ``SPARK_SUBMIT_OPTS``, read when the gateway starts)."""
    if verbose:
        logging.getLogger().setLevel(min(logging.getLogger().level or logging.INFO, logging.INFO))
        return
    root = logging.getLogger()
    root.setLevel(logging.WARNING)
    for name in THIRD_PARTY:
        logging.getLogger(name).setLevel(logging.WARNING)
    # some set their own level at import (GX's data_context.types.base: INFO): filter at the
    # handlers too, so a module imported later cannot bring its chatter back
    for handler in root.handlers:
        if not any(isinstance(f, _BelowWarning) for f in handler.filters):
            handler.addFilter(_BelowWarning())
    if "log4j2.configurationFile" not in os.environ.get("SPARK_SUBMIT_OPTS", ""):
        path = _log4j2_file()
        opts = os.environ.get("SPARK_SUBMIT_OPTS", "")
        os.environ["SPARK_SUBMIT_OPTS"] = f"{opts} -Dlog4j2.configurationFile=file:{path}".strip()


def _log4j2_file() -> str:
    """One shared file per user (not one per run): written once, replaced atomically."""
    path = os.path.join(tempfile.gettempdir(), f"haproof-log4j2-quiet-{os.getuid()}.properties")
    try:
        with open(path, encoding="utf-8") as fh:
            if fh.read() == _LOG4J2:
                return path
    except OSError:
        pass
    fd, tmp = tempfile.mkstemp(prefix="haproof-log4j2-", suffix=".tmp")
    with os.fdopen(fd, "w", encoding="utf-8") as fh:
        fh.write(_LOG4J2)
    os.replace(tmp, path)
    return path


class _BelowWarning(logging.Filter):
    """Drops third-party records below WARNING."""

    def filter(self, record: logging.LogRecord) -> bool:
        return record.levelno >= logging.WARNING or not record.name.startswith(THIRD_PARTY)


def step(prog: str, msg: str, stream: TextIO | None = None) -> None:
    """``{prog}: [  12.3s] msg`` on stderr."""
    from spark_jobs import progress

    out = stream or sys.stderr
    print(f"{prog}: [{progress.elapsed_s():6.1f}s] {msg}", file=out, flush=True)


class Progress:
    """``with Progress("uploading Data Docs", total) as p: ... p.advance()``."""

    WIDTH = 30

    def __init__(self, what: str, total: int, prog: str = "haproof", stream: TextIO | None = None):
        self.what, self.total, self.prog = what, max(0, int(total)), prog
        self.stream = stream or sys.stderr
        self.done = 0
        self.tty = bool(getattr(self.stream, "isatty", lambda: False)())
        self._next_line = 0  # plain mode: the next quarter to print at
        self._drawn_at = 0.0

    def __enter__(self) -> Progress:
        if not self.tty:
            step(self.prog, f"{self.what}: 0/{self.total}", self.stream)
            self._next_line = 1
        return self

    def advance(self, n: int = 1) -> None:
        self.done = min(self.total, self.done + n) if self.total else self.done + n
        if self.tty:
            now = time.monotonic()
            if now - self._drawn_at >= 0.1 or self.done >= self.total:
                self._draw()
                self._drawn_at = now
        elif self.total and self._next_line < 4 and self.done * 4 >= self._next_line * self.total:
            step(self.prog, f"{self.what}: {self.done}/{self.total}", self.stream)
            self._next_line = self.done * 4 // self.total + 1

    def _draw(self) -> None:
        frac = self.done / self.total if self.total else 1.0
        fill = int(frac * self.WIDTH)
        bar = "#" * fill + "." * (self.WIDTH - fill)
        self.stream.write(f"\r{self.prog}: {self.what} [{bar}] {self.done}/{self.total}")
        self.stream.flush()

    def __exit__(self, *exc) -> None:
        if self.tty:
            self._draw()
            self.stream.write("\n")
            self.stream.flush()
        else:
            step(self.prog, f"{self.what}: {self.done}/{self.total} done", self.stream)
