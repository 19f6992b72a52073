"""Tooling around the product: the demo, the benchmarks, the local cluster launcher and the
embedded S3 server. Tools may import every product package; no product package imports tools
(tests/test_architecture.py holds that line)."""
