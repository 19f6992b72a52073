"""RocketMQ's plain ACL (4.4+): accounts in plain_acl.yml (accounts.py), the HMAC-SHA1 request
signature (signing.py) and the per-request permission check (permission.py)."""
