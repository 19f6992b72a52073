"""Make a generated Great Expectations Data Docs site render offline.

GX 1.24's page templates load Bootstrap, bootstrap-table, bootstrap-datepicker, jQuery, Popper,
Font Awesome and Vega from CDNs, and its logo from a web bucket. The project installs the same
libraries from ``expectations/datadocs_assets/package-lock.json`` (``npm ci`` in
scripts/bootstrap); :func:`make_offline` copies the files the pages use to
``static/vendor/`` inside the site and rewrites every page (and the site's stylesheets) to point
at them with paths relative to the page, so the site opens from disk or from object storage
with no request leaving it. Subresource-integrity attributes are dropped on rewritten tags (the
local files are the lock file's, not the CDN's bytes). Links (``<a href>``) are left alone:
following one is the reader's choice, not a request the page makes.
"""

from __future__ import annotations

import logging
import os
import re
import shutil
from pathlib import Path

log = logging.getLogger(__name__)

ASSETS_DIR = Path(
    os.environ.get("HAPROOF_DATADOCS_ASSETS", Path(__file__).parent / "datadocs_assets")
)
VENDOR = "static/vendor"

#: (CDN URL pattern, file under node_modules); versions are those GX 1.24.1's templates name,
#: except Popper (1.14.7: Bootstrap 4.3.1's own peer) and Vega (the majors' locked releases)
ASSETS: tuple[tuple[str, str], ...] = (
    (r"https://maxcdn\.bootstrapcdn\.com/bootstrap/4\.3\.1/css/bootstrap\.min\.css",
     "bootstrap/dist/css/bootstrap.min.css"),
    (r"https://stackpath\.bootstrapcdn\.com/bootstrap/4\.3\.1/js/bootstrap\.min\.js",
     "bootstrap/dist/js/bootstrap.min.js"),
    (r"https://unpkg\.com/bootstrap-table@1\.19\.[01]/dist/bootstrap-table\.min\.css",
     "bootstrap-table/dist/bootstrap-table.min.css"),
    (r"https://unpkg\.com/bootstrap-table@1\.19\.[01]/dist/bootstrap-table\.min\.js",
     "bootstrap-table/dist/bootstrap-table.min.js"),
    (r"https://unpkg\.com/bootstrap-table@1\.19\.[01]/dist/extensions/filter-control/"
     r"bootstrap-table-filter-control(\.min)?\.css",
     "bootstrap-table/dist/extensions/filter-control/bootstrap-table-filter-control.min.css"),
    (r"https://unpkg\.com/bootstrap-table@1\.19\.[01]/dist/extensions/filter-control/"
     r"bootstrap-table-filter-control\.min\.js",
     "bootstrap-table/dist/extensions/filter-control/bootstrap-table-filter-control.min.js"),
    (r"https://cdnjs\.cloudflare\.com/ajax/libs/bootstrap-datepicker/1\.9\.0/css/"
     r"bootstrap-datepicker\.min\.css", "bootstrap-datepicker/dist/css/bootstrap-datepicker.min.css"),
    (r"https://cdnjs\.cloudflare\.com/ajax/libs/bootstrap-datepicker/1\.9\.0/js/"
     r"bootstrap-datepicker\.min\.js", "bootstrap-datepicker/dist/js/bootstrap-datepicker.min.js"),
    (r"https://cdn\.jsdelivr\.net/npm/@forevolve/bootstrap-dark@1\.1\.0/dist/css/"
     r"bootstrap-prefers-dark\.css", "@forevolve/bootstrap-dark/dist/css/bootstrap-prefers-dark.css"),
    (r"https://cdnjs\.cloudflare\.com/ajax/libs/font-awesome/6\.6\.0/css/all\.min\.css",
     "@fortawesome/fontawesome-free/css/all.min.css"),
    (r"https://code\.jquery\.com/jquery-3\.7\.1\.min\.js", "jquery/dist/jquery.min.js"),
    (r"https://cdnjs\.cloudflare\.com/ajax/libs/popper\.js/1\.\d+\.\d+/umd/popper\.min\.js",
     "popper.js/dist/umd/popper.min.js"),
    (r"https://cdn\.jsdelivr\.net/npm/vega@5", "vega/build/vega.min.js"),
    (r"https://cdn\.jsdelivr\.net/npm/vega-lite@5", "vega-lite/build/vega-lite.min.js"),
    (r"https://cdn\.jsdelivr\.net/npm/vega-embed@6", "vega-embed/build/vega-embed.min.js"),
)  # fmt: skip
#: folders copied whole (a stylesheet's fonts)
ASSET_DIRS = ("@fortawesome/fontawesome-free/webfonts",)
#: GX's logo from its web bucket (logo-long.png, full_logo_dark.png): the site ships logo-long.png
_LOGO = re.compile(
    r"https://great-expectations-web-assets\.s3[^\"'()\s]*?/[\w-]+\.png(\?[^\"'\s]*)?"
)
_FAVICON = re.compile(r'href="(?:\./|(?:\.\./)*)static/images/favicon\.ico"')
_SRI = re.compile(r'\s+(integrity|crossorigin)="[^"]*"')
_TAG = re.compile(r"<(script|link|img)\b[^>]*>", re.S)
#: a tag that makes the browser fetch something off the site
_REMOTE = re.compile(
    r"<(?:script|link|img|iframe|source|embed|object)\b[^>]*?\s(?:src|href|data)=[\"']?(?:https?:)?//[^>]*>"
    r"|url\(\s*['\"]?(?:https?:)?//[^)]*\)",
    re.I | re.S,
)


class DataDocsAssetsError(RuntimeError):
    """The locked assets are not installed (run scripts/bootstrap: npm ci)."""


def node_modules() -> Path:
    return ASSETS_DIR / "node_modules"


def _copy_assets(site: Path) -> None:
    src = node_modules()
    missing = [rel for _, rel in ASSETS if not (src / rel).is_file()]
    missing += [d for d in ASSET_DIRS if not (src / d).is_dir()]
    if missing:
        raise DataDocsAssetsError(
            f"Data Docs assets missing under {src}: {', '.join(missing)} "
            "(scripts/bootstrap installs them with npm ci)"
        )
    for _, rel in ASSETS:
        dest = site / VENDOR / rel
        dest.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(src / rel, dest)
    for rel in ASSET_DIRS:
        shutil.copytree(src / rel, site / VENDOR / rel, dirs_exist_ok=True)


def rewrite_page(html: str, up: str) -> str:
    """Point ``html`` (a page ``up`` = "../" * depth below the site root) at the local copies."""
    for pattern, rel in ASSETS:
        html = re.sub(pattern + r"(?=[\"'])", f"{up}{VENDOR}/{rel}", html)
    html = _LOGO.sub(f"{up}static/images/logo-long.png", html)
    # GX counts one level short for validation pages' favicon: point it at the site's own
    html = _FAVICON.sub(f'href="{up}static/images/favicon.ico"', html)
    return _TAG.sub(lambda m: m.group(0) if "//" in m.group(0) else _SRI.sub("", m.group(0)), html)


def offsite_resources(text: str) -> list[str]:
    """The tags and CSS ``url()``s in ``text`` that would fetch from off the site."""
    return [m.group(0)[:200] for m in _REMOTE.finditer(text)]


def make_offline(site_dir: str | os.PathLike) -> list[str]:
    """Copy the assets into the site and rewrite its pages; returns what still points off-site
    (empty when the site is fully offline). Raises :class:`DataDocsAssetsError` when the
    locked assets are not installed."""
    site = Path(site_dir)
    _copy_assets(site)
    left: list[str] = []
    for path in sorted(site.rglob("*.html")) + sorted((site / "static" / "styles").glob("*.css")):
        rel = path.relative_to(site)
        up = "../" * (len(rel.parts) - 1)
        text = path.read_text(encoding="utf-8")
        if path.suffix == ".css":  # static/styles/x.css: the logo is ../images/
            new = _LOGO.sub("../images/logo-long.png", text)
        else:
            new = rewrite_page(text, up)
        if new != text:
            path.write_text(new, encoding="utf-8")
        left += [f"{rel}: {r}" for r in offsite_resources(new)]
    if left:
        log.warning("Data Docs: %d reference(s) still off-site, e.g. %s", len(left), left[0])
    return left
