"""Reading a node's Prometheus endpoint in a test (over HTTP, as Prometheus does)."""

from __future__ import annotations

import urllib.request

from prometheus_client.parser import text_string_to_metric_families


def scrape(port: int) -> dict[tuple[str, frozenset], float]:
    """Every sample of the endpoint: (name, labels without the identity) -> value."""
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as resp:
        assert resp.status == 200
        text = resp.read().decode()
    out = {}
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            labels = {k: v for k, v in s.labels.items() if k not in ("node_type", "node_id")}
            out[(s.name, frozenset(labels.items()))] = s.value
    return out


def value(samples, name: str, **labels) -> float | None:
    """The sample ``name`` with exactly ``labels`` (``cluster`` C unless given)."""
    labels = {"cluster": "C", **labels}
    if labels["cluster"] is None:
        del labels["cluster"]
    return samples.get((name, frozenset(labels.items())))
