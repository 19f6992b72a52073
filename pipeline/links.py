"""The links ``haproof audit`` prints and puts in ``--json`` for the reports it wrote.

``--report-url`` (or ``HAPROOF_REPORT_URL``) says how a person will open them:

- ``store`` (the default): the object's own URL, ``file:///...`` or ``s3://bucket/...``
  (a browser opens the first; the second is for ``aws s3 cp``);
- ``presign``: a presigned HTTPS GET link, valid ``HAPROOF_REPORT_URL_EXPIRES_S`` seconds
  (default 7 days, S3's longest), signed locally with the store's credentials;
- ``https://...`` (or ``http://``): a base URL that serves the archive root (a CDN or a static
  site in front of the bucket): the link is the base URL followed by the object's key.

A presigned link opens report.html, not the Data Docs site beside it (each of its pages would
need a signature of its own): use a base URL to browse those.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from urllib.parse import urlparse

from contracts.errors import AuditInputError

DEFAULT_EXPIRES_S = 7 * 24 * 3600  # S3's longest for a signature of version 4


def check_mode(how: str | None) -> str:
    how = (how or "store").strip()
    if how in ("store", "presign") or urlparse(how).scheme in ("http", "https"):
        return how
    raise AuditInputError(f"--report-url {how!r}: give store, presign or an http(s):// base URL")


def link_maker(spec, how: str | None) -> Callable[[str], str]:
    """A function from an object's store URL (``{root}/{key}``) to the link to print."""
    how = check_mode(how)
    root = spec.root.rstrip("/")
    if how == "store":
        return lambda url: url
    if how == "presign":
        if urlparse(root).scheme != "s3":
            return lambda url: url  # a file:// link opens as it is
        store = spec.resolved().open()
        expires_s = int(os.environ.get("HAPROOF_REPORT_URL_EXPIRES_S") or DEFAULT_EXPIRES_S)
        return lambda url: store.presigned_get_url(_key(root, url), expires_s)
    base = how.rstrip("/")
    return lambda url: f"{base}/{_key(root, url)}"


def _key(root: str, url: str) -> str:
    if not url.startswith(root + "/"):
        raise AuditInputError(f"{url} is not under the archive root {root}")
    return url[len(root) + 1 :]


def relink(published: dict, make: Callable[[str], str]) -> dict:
    """``published`` (the run's document) with its report links made by ``make``."""
    reports = {name: make(url) for name, url in (published.get("reports") or {}).items()}
    gx = [{**g, "reportUrl": make(g["reportUrl"])} for g in published.get("expectations") or []]
    return {**published, "reports": reports, "expectations": gx}
