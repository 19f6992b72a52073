"""RocketMQ's config JSON files under ``config/``: read fastjson's output, write atomically.

``JsonConfigFile`` is one file; ``TableConfig`` a name -> settings table in one (``topics.json``,
``subscriptionGroup.json``); ``TableManager`` the plumbing both owners of such a table share
(reading, put / delete / replace_from_master with a new dataVersion, persist), each owner saying
how a change becomes durable: ``TopicConfigManager`` (``broker/store/topic_configs.py``, through
its change log) and ``SubscriptionGroupManager`` (``broker/store/subscription_groups.py``). ``delayOffset.json``: ``broker/store/delay_offsets.py``.

fastjson writes map keys that are integers without quotes (``{0:250,1:250}``) and indents with
tabs; :func:`loads_fastjson` accepts that. We write strict JSON (quoted keys), which fastjson
reads back. Every write goes to a temp file, is fsynced and renamed, keeping ``.bak``.
"""

from __future__ import annotations

import json
import logging
import threading
from typing import Any

from broker.clock import SYSTEM_CLOCK
from broker.store.checkpoint import atomic_write
from contracts.errors import CorruptFileError
from contracts.fastjson import loads_fastjson

log = logging.getLogger(__name__)


def new_data_version(counter: int = 0) -> dict[str, int]:
    return {"counter": counter, "timestamp": SYSTEM_CLOCK.wall_ms()}


class JsonConfigFile:
    """One config file: ``load`` (falling back to ``.bak``) and atomic ``persist``."""

    def __init__(self, path: str):
        self.path = path
        self._lock = threading.Lock()

    def load(self) -> dict[str, Any] | None:
        """The parsed document, None when neither the file nor its ``.bak`` exists. A copy that
        cannot be used (unreadable, not JSON, over a JSON limit) gives way to the other with a
        WARNING; when neither can be used, CorruptFileError names both."""
        problems: list[str] = []
        for candidate in (self.path, self.path + ".bak"):
            try:
                with open(candidate, encoding="utf-8") as fh:
                    text = fh.read()
                if not text.strip():
                    log.warning("%s is empty; trying its backup", candidate)
                    continue
                doc = loads_fastjson(text, candidate)
                if not isinstance(doc, dict):
                    raise CorruptFileError(candidate, "expected a JSON object at the top level")
            except FileNotFoundError:
                continue
            except (OSError, UnicodeDecodeError) as exc:
                problems.append(f"{candidate}: cannot read: {exc}")
                continue
            except CorruptFileError as exc:
                problems.append(str(exc))
                continue
            if problems:
                log.warning("%s; using %s", "; ".join(problems), candidate)
            return doc
        if problems:
            raise CorruptFileError(self.path, "no usable copy: " + "; ".join(problems))
        return None

    def persist(self, doc: dict[str, Any]) -> None:
        data = json.dumps(doc, indent="\t", sort_keys=False).encode()
        with self._lock:
            atomic_write(self.path, data, keep_backup=True)

    def checkpoint(self, doc: dict[str, Any]) -> None:
        """``doc`` to the ``.bak`` and then to the file, each atomically: both copies the same
        (a change log replayed over either finds its place by the dataVersion)."""
        data = json.dumps(doc, indent="\t", sort_keys=False).encode()
        with self._lock:
            atomic_write(self.path + ".bak", data)
            atomic_write(self.path, data)


class TableConfig:
    """``topics.json`` (``topicConfigTable``) or ``subscriptionGroup.json``
    (``subscriptionGroupTable``): a name → settings table with a dataVersion."""

    def __init__(self, path: str, table_key: str):
        self.file = JsonConfigFile(path)
        self.table_key = table_key
        self.table: dict[str, dict[str, Any]] = {}
        self.data_version = new_data_version()

    @classmethod
    def load(cls, path: str, table_key: str) -> TableConfig:
        t = cls(path, table_key)
        doc = t.file.load() or {}
        table = doc.get(table_key, {})
        if not isinstance(table, dict):
            raise CorruptFileError(path, f"{table_key} is not an object")
        t.table = table
        if isinstance(doc.get("dataVersion"), dict):
            t.data_version = doc["dataVersion"]
        return t

    def put(self, name: str, settings: dict[str, Any]) -> None:
        self.table[name] = settings
        self.next_version()

    def next_version(self) -> None:
        """RocketMQ DataVersion.nextVersion: counter + 1, timestamp now."""
        self.data_version = {
            "counter": int(self.data_version.get("counter", 0)) + 1,
            "timestamp": SYSTEM_CLOCK.wall_ms(),
        }

    def replace(self, doc: Any, what: str) -> bool:
        """Take another node's whole table (a slave copying its master: the table and its
        dataVersion); True when it differed. ValueError names ``what`` when ``doc`` is not
        a table document."""
        if not isinstance(doc, dict):
            raise ValueError(f"{what}: not a JSON object")
        table = doc.get(self.table_key) or {}
        version = doc.get("dataVersion") or {}
        if not isinstance(table, dict) or not all(isinstance(v, dict) for v in table.values()):
            raise ValueError(f"{what}: {self.table_key} is not an object of objects")
        if not isinstance(version, dict):
            raise ValueError(f"{what}: dataVersion is not an object")
        if table == self.table:
            return False
        self.table = dict(table)
        self.data_version = version
        return True

    def to_json(self) -> dict[str, Any]:
        return {self.table_key: self.table, "dataVersion": self.data_version}

    def persist(self) -> None:
        self.file.persist(self.to_json())


class TableManager:
    """One table's owner: build with ``load(path)``. Subclasses name ``TABLE_KEY`` (the table in
    the file) and ``MASTER_REQUEST`` (the request a slave copies the table with, named in a
    ValueError) and say in ``_put_done`` / ``_deleted`` / ``_replaced`` how a change becomes
    durable before the call returns (default: the whole file persisted)."""

    TABLE_KEY: str
    MASTER_REQUEST: str

    def __init__(self, tables: TableConfig) -> None:
        self._tables = tables

    @classmethod
    def load(cls, path: str) -> TableManager:
        return cls(TableConfig.load(path, cls.TABLE_KEY))

    # -- reading --------------------------------------------------------------------------------

    def get(self, name: str) -> dict[str, Any] | None:
        return self._tables.table.get(name)

    def __contains__(self, name: object) -> bool:
        return name in self._tables.table

    @property
    def table(self) -> dict[str, dict[str, Any]]:
        """Name -> config: a copy of the table (the configs in it are the stored ones: read
        them; change them through the methods below)."""
        return dict(self._tables.table)

    @property
    def data_version(self) -> dict[str, int]:
        return self._tables.data_version

    @property
    def file(self) -> JsonConfigFile:
        return self._tables.file

    def to_json(self) -> dict[str, Any]:
        return self._tables.to_json()

    # -- changing -------------------------------------------------------------------------------

    def put(self, name: str, config: dict[str, Any]) -> None:
        """Create or replace ``name``'s config (a new dataVersion), durable when it returns."""
        self._tables.put(name, config)
        self._put_done(name, config)

    def delete(self, name: str) -> bool:
        """Remove ``name``'s config (a new dataVersion), durable; False when it had none."""
        if self._tables.table.pop(name, None) is None:
            return False
        self._tables.next_version()
        self._deleted(name)
        return True

    def replace_from_master(self, doc: Any) -> bool:
        """The master's ``MASTER_REQUEST`` document: its table and dataVersion replace ours when
        the table differs (durable); True then. ValueError names a malformed document."""
        if not self._tables.replace(doc, self.MASTER_REQUEST):
            return False
        self._replaced()
        return True

    def persist(self) -> None:
        self._tables.persist()

    def _put_done(self, name: str, config: dict[str, Any]) -> None:
        self.persist()

    def _deleted(self, name: str) -> None:
        self.persist()

    def _replaced(self) -> None:
        self.persist()


def topic_config(name: str, queue_nums: int, perm: int = 6) -> dict[str, Any]:
    """A TopicConfig as RocketMQ serialises it."""
    return {
        "topicName": name,
        "readQueueNums": queue_nums,
        "writeQueueNums": queue_nums,
        "perm": perm,
        "topicFilterType": "SINGLE_TAG",
        "topicSysFlag": 0,
        "order": False,
    }
