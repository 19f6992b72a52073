"""Prometheus metrics of the broker, name server and controller processes (RocketMQ 5's
``metricsExporterType=PROM``): the bounded HTTP endpoint and its settings ``exporter.py``, the
refused requests by reason ``refusals.py``, what each process exports ``broker_metrics.py``,
``namesrv_metrics.py``, ``controller_metrics.py``."""
