"""What an audit checks before Spark starts (a JVM costs seconds): the archive root opens, the
cluster and the group exist, each miss naming what does exist and the nearest name."""

from __future__ import annotations

import difflib

from contracts import archive_layout as layout
from contracts.archive_layout import LayoutError
from contracts.errors import ArchiveError, AuditInputError


def did_you_mean(value: str, choices: list[str]) -> str:
    """`` (did you mean 'x'?)`` for the nearest of ``choices``, else the empty string."""
    near = difflib.get_close_matches(value, choices, n=1, cutoff=0.6)
    return f" (did you mean {near[0]!r}?)" if near else ""


def _names(store, prefix: str) -> list[str]:
    out = []
    for p in store.list_prefixes(prefix):
        name = p[len(prefix) :].rstrip("/")
        try:
            layout.check_name("name", name)
        except LayoutError:
            continue
        out.append(name)
    return sorted(out)


def _miss(what: str, value: str, where: str, existing: list[str]) -> AuditInputError:
    if not existing:
        return AuditInputError(f"no {what} {value!r} under {where}: it holds none")
    listed = ", ".join(existing[:20]) + (f" (+{len(existing) - 20} more)" if existing[20:] else "")
    return AuditInputError(
        f"no {what} {value!r} under {where}{did_you_mean(value, existing)}; {what}s there: {listed}"
    )


def check_input(spec, cluster: str, broker_name: str | None) -> list[str]:
    """The groups the audit will read; :class:`AuditInputError` (one line) on a miss."""
    try:
        layout.check_name("cluster", cluster)
        if broker_name is not None:
            layout.check_name("brokerName", broker_name)
    except LayoutError as exc:
        raise AuditInputError(str(exc)) from exc
    try:
        store = spec.open()
        clusters = _names(store, f"{layout.VERSION}/")
    except ArchiveError as exc:
        raise AuditInputError(f"cannot open archive root {spec.root}: {exc}") from exc
    if cluster not in clusters:
        raise _miss("cluster", cluster, spec.root, clusters)
    groups = _names(store, layout.cluster_prefix(cluster))
    where = f"{spec.root.rstrip('/')}/{layout.cluster_prefix(cluster)}"
    if broker_name is None:
        if not groups:
            raise AuditInputError(f"no broker group under {where}")
        return groups
    if broker_name not in groups:
        raise _miss("group", broker_name, where, groups)
    return [broker_name]
