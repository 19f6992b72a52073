"""What the writer (broker) and the readers (spark_jobs, expectations, dags) share, written once.

This package imports nothing of the project. Modules:

- ``record``: the RocketMQ commit log record, a package: ``layout``, ``properties``, ``ids``,
  ``model``, ``builder`` and ``reader`` apart;
- ``record_walk``: one walk over a byte range of records (pure Python + NumPy, numba beside it);
- ``archive_layout``: v1 archive keys, manifests, snapshots, events, audit output keys;
- ``audit_tables``: audit table columns, verdicts, what fails a check, defaults;
- ``audit_state``: the audit state document's field names and the verified ends a prune reads;
- ``object_store``: the object store interface and its file:// and s3:// backends;
- ``errors``: the typed errors every part raises;
- ``fastjson``: reading fastjson's JSON (unquoted integer keys).
"""
