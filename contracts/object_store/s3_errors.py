"""What an S3 answer means for a request: not found, key taken, retry, or give up."""

from __future__ import annotations

import ipaddress
from urllib.parse import urlparse

from contracts.errors import ConditionFailedError


class KeyExists(ConditionFailedError):
    """A conditional put found the key taken (HTTP 412)."""


PERMANENT = {
    "NoSuchBucket": "bucket {bucket} does not exist",
    "AccessDenied": "access denied to {bucket}",
    "InvalidAccessKeyId": "the access key is not valid for {bucket}",
    "SignatureDoesNotMatch": "the secret key does not match for {bucket}",
    "AllAccessDisabled": "access to {bucket} is disabled",
}


# boto3 found no credentials in its chain (a retry cannot help): where to put them
NO_CREDENTIALS = (
    "no AWS credentials found: set AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY (or AWS_PROFILE, "
    "~/.aws/credentials, or an instance/task role)"
)


# 4xx answers worth sending again; BadDigest: the server got other bytes than the checksum says
TRANSIENT = ("SlowDown", "RequestTimeout", "ConditionalRequestConflict", "BadDigest")


def is_loopback(endpoint_url: str | None) -> bool:
    host = urlparse(endpoint_url).hostname if endpoint_url else None
    if host is None:
        return False
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False
