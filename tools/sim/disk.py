"""The simulated disk: what of each mapped file (commit log, consume queues) is durable.

The store's files live in a temp dir. ``broker.store.mapped_file.durability_observer`` tells
this model each range the real code made durable (fdatasync after a flush, msync after a
truncation's zeroing); the model keeps a durable image per file. A power loss puts every file
back to its durable image, except that the range written since (the last writes) may be
torn: a random prefix of it, in whole 4 KiB pages, reached the disk. A killed process loses nothing (the page cache
survives). Other files (checkpoint, epoch file, JSON tables, markers) are written atomically
with fsyncs by the store and are taken as durable: losing a rename that was not fsynced is not
modelled yet.
"""

from __future__ import annotations

import os
import random

from broker.store import mapped_file

PAGE = 4096


class SimDisk:
    def __init__(self) -> None:
        self.images: dict[str, bytearray] = {}

    def install(self) -> None:
        mapped_file.durability_observer = self.synced

    def uninstall(self) -> None:
        mapped_file.durability_observer = None

    def synced(self, path: str, start: int, end: int) -> None:
        image = self.images.get(path)
        with open(path, "rb") as fh:
            if image is None or start == 0 and end >= len(image):
                self.images[path] = bytearray(fh.read())
                return
            fh.seek(start)
            image[start:end] = fh.read(end - start)

    def durable(self, path: str, start: int, end: int) -> bytes:
        """Bytes ``[start, end)`` of ``path`` as they are on the simulated disk."""
        image = self.images.get(path)
        return bytes(image[start:end]) if image is not None else b""

    def power_loss(self, root: str, rng: random.Random, tear: bool) -> list[str]:
        """Every mapped file under ``root`` back to its durable image (maybe with a torn last
        write). Returns what happened, for the trace."""
        notes = []
        for path in sorted(_mapped_files(root)):
            with open(path, "rb") as fh:
                current = fh.read()
            image = self.images.get(path, bytearray(len(current)))
            if len(image) < len(current):
                image = image + bytearray(len(current) - len(image))
            if image == current:
                continue
            out = bytearray(image)
            first, last = _differing_range(current, image)
            kept = 0
            if tear:  # pages are written back whole, in any order: a prefix of whole pages
                cuts = [first, *range((first // PAGE + 1) * PAGE, last, PAGE), last]
                kept = rng.choice(cuts) - first
            out[first : first + kept] = current[first : first + kept]
            with open(path, "r+b") as fh:
                fh.write(out)
            self.images[path] = out
            rel = os.path.relpath(path, root)
            notes.append(f"{rel} lost [{first + kept},{last}) kept {kept}")
        return notes


def _differing_range(a: bytes, b: bytes) -> tuple[int, int]:
    """``[first, last)``: the first and one past the last index where ``a`` and ``b`` (same
    length, not equal) differ; whole pages compared first (a byte loop in Python is slow)."""
    n = len(a)
    lo = 0
    while lo + PAGE <= n and a[lo : lo + PAGE] == b[lo : lo + PAGE]:
        lo += PAGE
    first = next(i for i in range(lo, n) if a[i] != b[i])
    hi = n
    while hi - PAGE >= first and a[hi - PAGE : hi] == b[hi - PAGE : hi]:
        hi -= PAGE
    last = next(i for i in range(hi - 1, first - 1, -1) if a[i] != b[i]) + 1
    return first, last


def _mapped_files(root: str):
    for dirpath, _dirs, files in os.walk(root):
        for name in files:
            if len(name) == 20 and name.isdigit():
                yield os.path.join(dirpath, name)
