"""Building metric families for a scrape: every series of a process carries its identity
(RocketMQ 5's attributes ``cluster``, ``node_type``, ``node_id``) before its own labels."""

from __future__ import annotations

from collections.abc import Iterable

from prometheus_client.metrics_core import CounterMetricFamily, GaugeMetricFamily, Metric


class Families:
    """Collects families for one scrape; ``identity`` is the (label, value) pairs every series
    carries."""

    def __init__(self, identity: dict[str, str]) -> None:
        self.identity = identity
        self.metrics: list[Metric] = []

    def gauge(self, name: str, doc: str, value: float) -> None:
        self.gauges(name, doc, (), [((), value)])

    def gauges(
        self, name: str, doc: str, labels: tuple[str, ...], rows: Iterable[tuple[tuple, float]]
    ) -> None:
        family = GaugeMetricFamily(name, doc, labels=[*self.identity, *labels])
        self._fill(family, rows)

    def counters(
        self, name: str, doc: str, labels: tuple[str, ...], rows: Iterable[tuple[tuple, float]]
    ) -> None:
        family = CounterMetricFamily(name, doc, labels=[*self.identity, *labels])
        self._fill(family, rows)

    def _fill(self, family, rows: Iterable[tuple[tuple, float]]) -> None:
        ident = list(self.identity.values())
        for values, value in rows:
            family.add_metric([*ident, *(str(v) for v in values)], float(value))
        self.metrics.append(family)


def refusal_rows(counts) -> list[tuple[tuple, float]]:
    """A ``Refusals.counts`` table as (request code, reason) rows."""
    return [((code, reason), n) for (code, reason), n in sorted(counts.items())]


REFUSED = "haproof_requests_refused_total"
REFUSED_DOC = "requests refused, by request code and reason (ACL, flow control, disk full, ...)"
