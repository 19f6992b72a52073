"""Terminal output helpers: a bar on a terminal, a few plain lines elsewhere, quiet logging."""

from __future__ import annotations

import io
import logging
import os

from expectations.terminal import THIRD_PARTY, Progress, quiet_third_party


class _Tty(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_plain_progress_prints_start_quarters_and_end():
    out = io.StringIO()
    with Progress("uploading", 100, prog="t", stream=out) as p:
        for _ in range(100):
            p.advance()
    lines = [line.split("] ", 1)[1] for line in out.getvalue().splitlines()]
    assert lines == [
        "uploading: 0/100",
        "uploading: 25/100",
        "uploading: 50/100",
        "uploading: 75/100",
        "uploading: 100/100 done",
    ]


def test_tty_progress_redraws_one_line():
    out = _Tty()
    with Progress("scanning", 4, prog="t", stream=out) as p:
        for _ in range(4):
            p.advance()
    text = out.getvalue()
    assert text.count("\n") == 1 and text.endswith("\n")
    assert "\rt: scanning [" + "#" * Progress.WIDTH + "] 4/4" in text


def test_quiet_drops_third_party_info_but_keeps_warnings(monkeypatch):
    monkeypatch.delenv("SPARK_SUBMIT_OPTS", raising=False)
    root = logging.getLogger()
    out = io.StringIO()
    handler = logging.StreamHandler(out)
    old_level, old_handlers = root.level, root.handlers[:]
    root.handlers = [handler]
    try:
        quiet_third_party(verbose=False)
        gx = logging.getLogger("great_expectations.data_context.types.base")
        gx.setLevel(logging.INFO)  # as GX does at import, after we quietened it
        gx.info("Created temporary directory")
        gx.warning("a real warning")
        assert out.getvalue() == "a real warning\n"
        opts = os.environ["SPARK_SUBMIT_OPTS"]
        assert "-Dlog4j2.configurationFile=file:" in opts
        path = opts.split("file:", 1)[1].split()[0]
        assert "rootLogger.level = warn" in open(path).read()
    finally:
        root.handlers, root.level = old_handlers, old_level
        for name in THIRD_PARTY:
            logging.getLogger(name).setLevel(logging.NOTSET)
