"""The Spark session factory: never a session at import time."""

from __future__ import annotations

import logging
import os
import sys

DEFAULT_CONF = {
    "spark.ui.enabled": "false",
    "spark.sql.shuffle.partitions": "8",
    "spark.sql.session.timeZone": "UTC",
    "spark.sql.execution.arrow.pyspark.enabled": "true",
    "spark.driver.bindAddress": "127.0.0.1",
    "spark.driver.host": "127.0.0.1",
    "spark.ui.showConsoleProgress": "false",
    # Python workers: glibc serves allocations over 32 MiB with fresh mmap pages and returns
    # them on free, so every 64 MiB chunk read paid page faults (spark_jobs/README.md, "Speed",
    # step 4); with mmap off and no trimming the workers reuse their heap instead (they keep up
    # to a few hundred MB each)
    "spark.executorEnv.MALLOC_MMAP_MAX_": "0",
    "spark.executorEnv.MALLOC_TRIM_THRESHOLD_": str(1 << 30),
    # one Python worker per task slot, kept between tasks (imports and S3 clients stay warm)
    "spark.python.worker.reuse": "true",
    # the driver JVM's heap (local mode: the executors' too), a ceiling, not an allocation:
    # a full audit of a year (millions of timeline rows in and out as Arrow batches) outgrew
    # Spark's 1 GiB default; takes effect when this process starts the JVM
    "spark.driver.memory": "4g",
    "spark.driver.maxResultSize": "2g",
}


def get_spark(
    app_name: str = "haproof-audit",
    master: str | None = None,
    conf: dict | None = None,
    own_session: bool = False,
):
    """A SparkSession: ``local[*]`` by default, a cluster with ``spark://...``, or a Spark
    Connect server with ``sc://...``.

    ``own_session``: start the driver JVM in a session (process group) of its own, so a
    terminal's Ctrl-C reaches only the command, which then ends the JVM and its workers itself
    (``pipeline/interrupt.py``); otherwise every Python worker prints a KeyboardInterrupt."""
    from pyspark.sql import SparkSession

    # py4j says INFO on every gateway connection it opens and closes, the last ones from
    # finalizers at interpreter exit, when logging's streams may be closed already ("--- Logging
    # error ---" after a test run); its warnings and errors still show
    py4j_log = logging.getLogger("py4j")
    if py4j_log.level == logging.NOTSET:
        py4j_log.setLevel(logging.WARNING)
    master = master or os.environ.get("HAPROOF_SPARK_MASTER") or "local[*]"
    # Python workers run this interpreter (the project's venv), whatever python3 is on PATH:
    # ``.venv/bin/haproof`` or an Airflow task started without the venv activated.
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    if master.startswith("sc://"):
        builder = SparkSession.builder.remote(master).appName(app_name)
    else:
        builder = SparkSession.builder.master(master).appName(app_name)
        for k, v in {**DEFAULT_CONF, **(conf or {})}.items():
            builder = builder.config(k, v)
        if own_session:
            _launch_own_session_gateway(app_name, master, {**DEFAULT_CONF, **(conf or {})})
    spark = builder.getOrCreate()
    if not master.startswith("sc://"):
        spark.sparkContext.setLogLevel("WARN")
    return spark


def _launch_own_session_gateway(app_name: str, master: str, conf: dict) -> None:
    """Start the driver JVM (with the session's configuration: the driver's memory is fixed at
    launch) in a new session; ``getOrCreate`` then reuses this gateway."""
    from pyspark import SparkConf, SparkContext
    from pyspark.java_gateway import launch_gateway

    with SparkContext._lock:
        if SparkContext._gateway is not None:
            return
        sconf = SparkConf(loadDefaults=False).setMaster(master).setAppName(app_name)
        for k, v in conf.items():
            sconf.set(k, v)
        gateway = launch_gateway(sconf, popen_kwargs={"start_new_session": True})
    SparkContext._ensure_initialized(gateway=gateway)


def default_parallelism(spark) -> int:
    """Task slots of the session (Spark Connect has no SparkContext: assume 2 per core here)."""
    try:
        return spark.sparkContext.defaultParallelism
    except Exception:  # Spark Connect: no sparkContext
        return max(2, os.cpu_count() or 2)


def task_partitions(spark, n_items: int) -> int:
    """Partitions for ``n_items`` work items of similar size: one per task slot. Each Python
    task costs scheduling and worker round trips (spark_jobs/README.md, "Speed", step 2), so
    waves of small tasks cost more than the imbalance of one task per slot; the items are dealt
    round-robin by :func:`rows_frame`'s callers."""
    return max(1, min(n_items, default_parallelism(spark)))


def deal(rows: list, partitions: int) -> list:
    """``rows`` reordered so that cutting them into ``partitions`` contiguous slices (as
    ``parallelize`` does) deals them round-robin: each slice gets a mix of large and small."""
    return [r for k in range(partitions) for r in rows[k::partitions]]


def rows_frame(spark, rows: list[tuple], schema: str, partitions: int):
    """A DataFrame of small driver-side rows spread over ``partitions`` tasks without a shuffle
    where a SparkContext exists; on Spark Connect (no RDDs) by ``repartition``."""
    try:
        sc = spark.sparkContext
    except Exception:  # Spark Connect
        return spark.createDataFrame(rows, schema).repartition(partitions)
    return spark.createDataFrame(sc.parallelize(rows, partitions), schema)


def run_tasks(spark, rows: list[tuple], schema: str, partitions: int, fn, out_schema: str):
    """``fn(iterator of input tuples) -> iterator of output tuples`` over ``rows`` cut into
    ``partitions`` contiguous slices; the output tuples (``out_schema`` order) as dicts.

    With a SparkContext the rows travel as pickled tuples (``parallelize`` + ``mapPartitions``:
    no Arrow or pandas conversion, cheaper per job than ``mapInPandas``); on Spark
    Connect (no RDDs) through ``mapInPandas``."""
    columns = [c.strip().split()[0] for c in out_schema.split(",")]
    try:
        sc = spark.sparkContext
    except Exception:  # Spark Connect
        sc = None
    if sc is not None:
        out = sc.parallelize(rows, partitions).mapPartitions(fn).collect()
        return [dict(zip(columns, r, strict=True)) for r in out]

    def run(batches):
        import pandas as pd

        for pdf in batches:
            items = (
                tuple(None if pd.isna(v) else v for v in t)
                for t in pdf.itertuples(index=False, name=None)
            )
            yield pd.DataFrame(list(fn(items)), columns=columns)

    df = rows_frame(spark, rows, schema, partitions)
    return [r.asDict() for r in df.mapInPandas(run, out_schema).collect()]


def has_context(spark) -> bool:
    """Whether the session has a SparkContext (RDDs; not on Spark Connect)."""
    try:
        return spark.sparkContext is not None
    except Exception:  # Spark Connect
        return False


def run_tasks_keeping(spark, rows: list[tuple], partitions: int, fn, keep: str, columns):
    """:func:`run_tasks` on a SparkContext, where ``fn`` also yields pairs ``(keep, value)``:
    the values come back as they are (a Python object each: the delivery check's arrays of a
    chunk) in the same collect as the other rows, which come back as dicts of ``columns``. One
    job, each row pickled once: nothing is persisted in Spark and read again by later jobs
    (that cost more than the rows' bytes: every cached row unpickled by each job)."""
    out = spark.sparkContext.parallelize(rows, partitions).mapPartitions(fn).collect()
    kept = [r[1] for r in out if r[0] == keep]
    return [dict(zip(columns, r, strict=True)) for r in out if r[0] != keep], kept


def run_scan_tasks(spark, rows, schema: str, partitions: int, fn, out_schema: str, keep: str):
    """:func:`run_tasks_keeping` on a SparkContext (the values of rows of kind ``keep``: a
    list), else :func:`run_tasks` (and None): ``(rows as dicts, kept values or None)``."""
    if has_context(spark):
        columns = [c.strip().split()[0] for c in out_schema.split(",")]
        return run_tasks_keeping(spark, rows, partitions, fn, keep, columns)
    return run_tasks(spark, rows, schema, partitions, fn, out_schema), None
