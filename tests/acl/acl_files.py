"""A plain_acl.yml for the tests: an admin account (the brokers' own), an application account
with PUB|SUB on one topic and SUB on one group, and nothing else."""

from __future__ import annotations

from pathlib import Path

from broker.acl.signing import AclSigner

ADMIN_AK, ADMIN_SK = "haproofAdmin", "adminSecret-123"
USER_AK, USER_SK = "appUser01", "appSecret-456"
TOPIC, GROUP = "OrderTopic", "OrderGroup"

PLAIN_ACL = f"""
globalWhiteRemoteAddresses:
accounts:
  - accessKey: {ADMIN_AK}
    secretKey: {ADMIN_SK}
    admin: true
  - accessKey: {USER_AK}
    secretKey: {USER_SK}
    admin: false
    defaultTopicPerm: DENY
    defaultGroupPerm: DENY
    topicPerms:
      - {TOPIC}=PUB|SUB
      - ReadOnlyTopic=SUB
    groupPerms:
      - {GROUP}=SUB
"""


def write_acl(tmp_path: Path, text: str = PLAIN_ACL) -> Path:
    path = tmp_path / "plain_acl.yml"
    path.write_text(text)
    return path


def admin() -> AclSigner:
    return AclSigner(ADMIN_AK, ADMIN_SK)


def user() -> AclSigner:
    return AclSigner(USER_AK, USER_SK)


def acl_broker_conf(tmp_path: Path) -> dict:
    return {
        "aclEnable": "true",
        "aclFile": str(write_acl(tmp_path)),
        "accessKey": ADMIN_AK,
        "secretKey": ADMIN_SK,
        "flushConsumerOffsetInterval": 3_600_000,
    }
