"""haproof's error hierarchy: each error keeps its cause and says whether a retry can help."""

from __future__ import annotations


class HaproofError(Exception):
    """Base of every error haproof raises on purpose."""

    retriable: bool = False


class ConfigError(HaproofError):
    """A configuration value is missing, malformed or inconsistent."""


class StoreError(HaproofError):
    """Something is wrong in a store directory."""


class DiskFullError(StoreError):
    """Space for a store file could not be reserved (ENOSPC, EDQUOT): nothing was written."""


class CorruptRecordError(StoreError):
    """Bytes that should be a commit log record are not one."""

    def __init__(self, source: str, offset: int, reason: str) -> None:
        super().__init__(f"{source}: corrupt record at offset {offset}: {reason}")
        self.source = source
        self.offset = offset
        self.reason = reason

    def __reduce__(self):  # crosses the pipe from the archiver's child process
        return (type(self), (self.source, self.offset, self.reason))


class CorruptFileError(StoreError):
    """A store file (consume queue, checkpoint, config JSON, ...) cannot be read."""

    def __init__(self, path: str, reason: str) -> None:
        super().__init__(f"{path}: {reason}")
        self.path = path
        self.reason = reason


class RemotingError(HaproofError):
    """A remoting peer sent something we cannot accept, or went away."""

    retriable = True


class ArchiveError(HaproofError):
    """Object storage refused or failed an operation."""


class TransientArchiveError(ArchiveError):
    retriable = True


class ArchiveConflictError(ArchiveError):
    """An immutable archive key already holds different content."""


class ConditionFailedError(ArchiveError):
    """A conditional write lost: the key was already there (create), or no longer held what the
    writer read (replace)."""


class AuditInputError(HaproofError):
    """The audit cannot read its input (unreadable root, unknown cluster, bad window)."""


class ObjectNotFoundError(ArchiveError):
    """The object (or range) asked for is not in the archive."""


class OffsetRecordError(HaproofError):
    """An offset commit record (DESIGN.md section 3b) breaks its format: names the field."""

    def __init__(self, field: str, why: str) -> None:
        super().__init__(f"offset commit record: {field} {why}")
        self.field = field
        self.why = why

    def __reduce__(self):  # crosses process boundaries (Spark executors)
        return (type(self), (self.field, self.why))


class ObjectTooLargeError(ArchiveError):
    """An object holds more bytes than its reader takes (contracts/read_limits.py)."""

    def __init__(self, message: str, limit: int) -> None:
        super().__init__(message)
        self.limit = limit
