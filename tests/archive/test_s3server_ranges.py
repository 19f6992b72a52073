"""The embedded S3 server's range path (tools.s3server): a Range GET over real HTTP with
boto3 returns exactly the requested bytes, streamed from the object's buffer; moto's answers for
odd ranges (suffix, open end, past the end, several ranges) are kept."""

from __future__ import annotations

import os
import uuid

import pytest
from botocore.exceptions import ClientError

from tools.s3server_ranges import RANGE_PIECE_BYTES


@pytest.fixture(scope="module")
def objects(s3_server):
    client = s3_server.client()
    bucket = f"ranges-{uuid.uuid4().hex[:8]}"
    client.create_bucket(Bucket=bucket)
    big = os.urandom(3 * RANGE_PIECE_BYTES + 12345)  # several pieces and a partial one
    small = b"0123456789" * 10
    client.put_object(Bucket=bucket, Key="big", Body=big)
    client.put_object(Bucket=bucket, Key="small", Body=small)
    return client, bucket, {"big": big, "small": small}


def _get(client, bucket, key, rng):
    return client.get_object(Bucket=bucket, Key=key, Range=rng)


@pytest.mark.parametrize(
    "key, first, last",
    [
        ("big", 0, 0),
        ("big", 0, 3 * RANGE_PIECE_BYTES + 12344),  # the whole object as a range
        ("big", RANGE_PIECE_BYTES - 3, RANGE_PIECE_BYTES + 2),  # across a piece boundary
        ("big", 2 * RANGE_PIECE_BYTES + 7, 3 * RANGE_PIECE_BYTES + 12344),  # to the end
        ("small", 10, 19),
    ],
)
def test_range_returns_exactly_the_bytes(objects, key, first, last) -> None:
    client, bucket, data = objects
    res = _get(client, bucket, key, f"bytes={first}-{last}")
    body = res["Body"].read()
    assert body == data[key][first : last + 1]
    assert res["ContentLength"] == last - first + 1
    assert res["ContentRange"] == f"bytes {first}-{last}/{len(data[key])}"
    assert res["ResponseMetadata"]["HTTPStatusCode"] == 206


def test_open_and_suffix_ranges_and_an_end_past_the_object(objects) -> None:
    client, bucket, data = objects
    big = data["big"]
    assert _get(client, bucket, "big", "bytes=-100")["Body"].read() == big[-100:]
    assert _get(client, bucket, "big", f"bytes={len(big) - 5}-")["Body"].read() == big[-5:]
    tail = _get(client, bucket, "big", f"bytes={len(big) - 5}-{len(big) + 100}")
    assert tail["Body"].read() == big[-5:]


def test_range_starting_past_the_end_is_invalid(objects) -> None:
    client, bucket, data = objects
    with pytest.raises(ClientError) as err:
        _get(client, bucket, "small", f"bytes={len(data['small'])}-{len(data['small']) + 9}")
    assert err.value.response["Error"]["Code"] == "InvalidRange"


def test_several_ranges_get_the_whole_object_as_moto_does(objects) -> None:
    client, bucket, data = objects
    res = _get(client, bucket, "small", "bytes=0-1,5-6")
    assert res["ResponseMetadata"]["HTTPStatusCode"] == 200
    assert res["Body"].read() == data["small"]


def test_plain_get_and_overwrite_are_unchanged(objects) -> None:
    client, bucket, data = objects
    assert client.get_object(Bucket=bucket, Key="big")["Body"].read() == data["big"]
    client.put_object(Bucket=bucket, Key="small", Body=b"new")
    assert _get(client, bucket, "small", "bytes=1-2")["Body"].read() == b"ew"
    client.put_object(Bucket=bucket, Key="small", Body=data["small"])
    assert _get(client, bucket, "small", "bytes=0-9")["Body"].read() == data["small"][:10]


@pytest.mark.parametrize("buffer_bytes", [1 << 30, 1024], ids=["in_memory", "spilled_to_file"])
def test_a_range_reads_only_its_bytes_never_the_whole_value(monkeypatch, buffer_bytes) -> None:
    """In-process, on moto's own key object: the range body never touches ``key.value``."""
    from moto.s3.models import FakeKey

    from tools.s3server_ranges import _KeyBytes

    data = os.urandom(2 * RANGE_PIECE_BYTES + 99)
    key = FakeKey("k", data, "123456789012", "us-east-1", max_buffer_size=buffer_bytes)

    def no_whole_reads(_key):
        raise AssertionError("the whole object was read")

    monkeypatch.setattr(FakeKey, "value", property(no_whole_reads))
    lazy = _KeyBytes(key)
    assert len(lazy) == len(data)
    body = lazy[RANGE_PIECE_BYTES - 1 : 2 * RANGE_PIECE_BYTES + 50]
    pieces = list(body)
    assert b"".join(pieces) == data[RANGE_PIECE_BYTES - 1 : 2 * RANGE_PIECE_BYTES + 50]
    assert max(len(p) for p in pieces) <= RANGE_PIECE_BYTES
    assert len(body) == RANGE_PIECE_BYTES + 51
    key.dispose()
