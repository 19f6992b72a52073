"""The audit pipeline, written once: audit (Spark) → suites (GX) → report → publish.

``haproof audit`` (:mod:`pipeline.cli`) runs :func:`pipeline.steps.run_pipeline`; the Airflow
DAGs run the same steps as separate tasks (``dags/haproof_common.py``). Heavy imports (Spark,
GX) happen inside the steps, never at import.
"""
