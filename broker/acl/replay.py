"""Replay protection for request-bound signatures (scheme 2, broker/acl/signing.py): a signed
request is accepted only within ``WINDOW_MS`` of its ``SignTimestamp`` and only once per
(accessKey, ``SignNonce``). A nonce is remembered until its timestamp leaves the window, after
which the window alone refuses it; the cache holds at most ``MAX_NONCES`` and refuses (rather
than forgets) when that many are live.
"""

from __future__ import annotations

import heapq

from broker.acl.signing import wall_ms

WINDOW_MS = 60_000  # how far a request's SignTimestamp may be from this node's clock
MAX_NONCES = 200_000
NONCE_MAX_CHARS = 64


class ReplayGuard:
    def __init__(self, window_ms: int = WINDOW_MS, max_nonces: int = MAX_NONCES, clock_ms=wall_ms):
        self.window_ms = window_ms
        self.max_nonces = max_nonces
        self.clock_ms = clock_ms
        self._seen: set[tuple[str, str]] = set()
        self._expiry: list[tuple[int, tuple[str, str]]] = []  # heap of (forget at ms, key)

    def refusal(self, access_key: str, timestamp: str | None, nonce: str | None) -> str | None:
        """None and the nonce remembered, or why the request is refused. Call only once the
        signature matched (a forged request must not fill the cache)."""
        now = self.clock_ms()
        try:
            ts = int(timestamp or "")
        except ValueError:
            return "no SignTimestamp"
        if abs(now - ts) > self.window_ms:
            return f"SignTimestamp {ts} is {abs(now - ts)} ms from this node's clock (replayed?)"
        if not nonce or len(nonce) > NONCE_MAX_CHARS:
            return "no usable SignNonce"
        self._forget_until(now)
        key = (access_key, nonce)
        if key in self._seen:
            return f"SignNonce {nonce[:NONCE_MAX_CHARS]!r} was used already (a replayed request)"
        if len(self._seen) >= self.max_nonces:
            return f"more than {self.max_nonces} signed requests within {self.window_ms} ms"
        self._seen.add(key)
        heapq.heappush(self._expiry, (ts + self.window_ms, key))
        return None

    def _forget_until(self, now: int) -> None:
        expiry = self._expiry
        while expiry and expiry[0][0] < now:
            _, key = heapq.heappop(expiry)
            self._seen.discard(key)
