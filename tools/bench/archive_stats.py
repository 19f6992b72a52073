"""Figures of ``haproof bench archive``: percentiles, the archive lag figures, several runs of
one mode combined, and the confidence interval of the on/off throughput ratio."""

from __future__ import annotations

import math
import statistics


def pct(values: list[float], q: float) -> float:
    if not values:
        return 0.0
    values = sorted(values)
    return values[min(len(values) - 1, int(q * len(values)))]


def lag_figures(lag_ms: list[float], lag_bytes: list[float]) -> dict:
    """Archive lag percentiles from the samples taken under load."""
    return {
        "lag_p50_ms": pct(lag_ms, 0.5),
        "lag_p99_ms": pct(lag_ms, 0.99),
        "lag_max_ms": max(lag_ms, default=0.0),
        "lag_p50_bytes": pct(lag_bytes, 0.5),
        "lag_p99_bytes": pct(lag_bytes, 0.99),
    }


# Student's t, two-sided 95 %, for 1..30 degrees of freedom
_T975 = (
    12.706, 4.303, 3.182, 2.776, 2.571, 2.447, 2.365, 2.306, 2.262, 2.228, 2.201, 2.179, 2.160,
    2.145, 2.131, 2.120, 2.110, 2.101, 2.093, 2.086, 2.080, 2.074, 2.069, 2.064, 2.060, 2.056,
    2.052, 2.048, 2.045, 2.042,
)  # fmt: skip


def ratio_interval(per_round: list[float], target: float = 0.9) -> tuple[list[float] | None, str]:
    """A 95 % confidence interval for the on/off ratio from the paired rounds' ratios (a t
    interval on their logarithms, so it stays positive and a ratio and its inverse are treated
    alike), and what it says of ``target``: ``"met"`` (the whole interval at or above it),
    ``"missed"`` (wholly below) or ``"undecided"`` (the noise of these rounds spans it, or
    fewer than two rounds)."""
    logs = [math.log(r) for r in per_round if r > 0]
    if len(logs) < 2 or len(logs) != len(per_round):
        return None, "undecided"
    df = len(logs) - 1
    t = _T975[df - 1] if df <= len(_T975) else 2.0 if df <= 60 else 1.98 if df <= 120 else 1.96
    half = t * statistics.stdev(logs) / math.sqrt(len(logs))
    mean = statistics.fmean(logs)
    lo, hi = math.exp(mean - half), math.exp(mean + half)
    verdict = "met" if lo >= target else "missed" if hi < target else "undecided"
    return [round(lo, 3), round(hi, 3)], verdict


def combine_runs(runs: list[dict]) -> dict:
    """Several runs of one mode: totals, mean rates, the worst lag, drained only if all did."""
    out = dict(runs[0])
    if len(runs) == 1:
        return out
    for key in ("sent", "failed", "archived_bytes"):
        if key in out:
            out[key] = sum(r.get(key, 0) for r in runs)
    rates = ("msgs_per_s", "append_mb_per_s", "archive_mb_per_s", "send_s")
    cpus = (
        "broker_cpu_ms_per_mb",
        "archiver_cpu_ms_per_mb",
        "s3_cpu_ms_per_mb",
        "loadgen_cpu_ms_per_mb",
    )
    for key in rates + cpus:
        if key in out and all(r.get(key) is not None for r in runs):
            out[key] = round(sum(r[key] for r in runs) / len(runs), 3)
    for key in ("lag_p50_ms", "lag_p99_ms", "lag_max_ms", "lag_p50_bytes", "lag_p99_bytes"):
        if key in out:
            out[key] = max(r[key] for r in runs)
    if "drained" in out:
        out["drained"] = all(r["drained"] for r in runs)
        out["drain_s"] = max((r["drain_s"] or 0.0) for r in runs)
        out["storage_errors"] = sorted({e for r in runs for e in r["storage_errors"]})
    out["broker_exit"] = max(r["broker_exit"] for r in runs)
    return out
