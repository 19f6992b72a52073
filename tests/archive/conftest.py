from __future__ import annotations

import uuid

import pytest

from contracts.object_store import open_store


@pytest.fixture
def s3_root(s3_server) -> str:
    bucket = f"haproof-{uuid.uuid4().hex[:12]}"
    s3_server.create_bucket(bucket)
    return f"s3://{bucket}/archive"


@pytest.fixture(params=["file", "s3"])
def object_store(request, tmp_path, s3_server):
    if request.param == "file":
        return open_store(f"file://{tmp_path}/archive")
    bucket = f"haproof-{uuid.uuid4().hex[:12]}"
    s3_server.create_bucket(bucket)
    return open_store(f"s3://{bucket}/pre", part_size=5 * 1024 * 1024, **s3_server.store_options())
