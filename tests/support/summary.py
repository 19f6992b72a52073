"""Figures a test wants in the run's terminal summary (CI prints them even under ``-q``): the
simulation block's count of schedules, for one. ``tests/conftest.py`` prints them at the end."""

from __future__ import annotations

import pytest

SUMMARY_LINES = pytest.StashKey[list]()


def add_summary_line(config: pytest.Config, line: str) -> None:
    config.stash.setdefault(SUMMARY_LINES, []).append(line)
