"""Every fault class the generator builds, by name: ``(builder, variant)``.

Each Hypothesis example builds one group per class in one archive root, so a single audit run
judges all of them; the example draws only where each fault goes and the sizes.
"""

from __future__ import annotations

from hypothesis import strategies as st

from tests.faults import cases_objects as o
from tests.faults import cases_replicas as r
from tests.faults.generator import Builder, Case, Shape

FAULTS = {
    "clean": (o.clean, ""),
    "single-node-no-offsets": (o.single_node_no_offsets, ""),
    "log-missing": (o.log_missing, ""),
    "object-shorter": (o.object_size, "shorter"),
    "object-longer": (o.object_size, "longer"),
    "sha256-flip": (o.sha256_flip, ""),
    "sha256-flip-single-node": (o.sha256_flip, "single-node"),
    "manifest-bad-json": (o.bad_manifest, "bad-json"),
    "manifest-bad-fields": (o.bad_manifest, "bad-fields"),
    "manifest-missing": (o.manifest_missing, ""),
    "snapshot-bad-json": (o.bad_document, "snapshot-bad-json"),
    "snapshot-bad-fields": (o.bad_document, "snapshot-bad-fields"),
    "event-bad-json": (o.bad_document, "event-bad-json"),
    "event-bad-fields": (o.bad_document, "event-bad-fields"),
    "divergent": (r.divergent, ""),
    "replicated-corruption": (r.replicated_corruption, ""),
    "lag-within": (r.lag, "within"),
    "lag-beyond": (r.lag, "beyond"),
    "conflict": (r.conflict, ""),
    "failover-clean": (r.failover, "clean"),
    "failover-acked-loss": (r.failover, "acked-loss"),
    "failover-offset-regression": (r.failover, "offset-regression"),
    "offset-regression": (r.offsets, "regression"),
    "offset-reset": (r.offsets, "reset"),
    "offset-beyond": (r.offsets, "beyond"),
    "queue-offset-gap": (r.queue_gap, ""),
}

shapes = st.builds(
    Shape,
    n=st.integers(12, 40),
    body_len=st.integers(20, 400),
    queues=st.integers(1, 3),
    chunk_m=st.integers(200, 6000),
    chunk_s=st.integers(200, 6000),
)


def build_case(root, work, index: int, fault: str, draw) -> tuple[Builder, Case]:
    """Build fault class ``fault`` as group ``f{index:02d}-{fault}`` under ``root``."""
    fn, variant = FAULTS[fault]
    b = Builder(root, work, f"f{index:02d}-{fault}", draw(shapes, label=f"{fault} shape"))
    case = fn(b, draw, variant)
    if case.fault != fault:
        raise AssertionError(f"builder for {fault} built {case.fault}")
    return b, case


def build_all(root, work, draw, faults=tuple(FAULTS)) -> list[tuple[Builder, Case]]:
    return [build_case(root, work, i, f, draw) for i, f in enumerate(faults)]
