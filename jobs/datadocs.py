"""Make GX Data Docs readable offline.

Data Docs link Bootstrap, jQuery, Font Awesome, bootstrap-table and Vega from CDNs. The pages'
content (expectation and validation tables) is rendered server-side, so after the build we drop
every remote ``<link>``/``<script>``/``<img>`` and inline a small stylesheet that lays out
Bootstrap's grid, cards, tables and badges and keeps collapsed sections open.
"""

from __future__ import annotations

import re
from pathlib import Path

OFFLINE_CSS = """
body{font-family:-apple-system,Segoe UI,Helvetica,Arial,sans-serif;color:#1f2328;margin:0}
.container-fluid{padding:16px 24px}.row{display:flex;flex-wrap:wrap;gap:16px}
.col-md-2,.col-md-3,.col-lg-2,.col-xl-2,.col-sm-12{flex:0 0 220px}
.col-md-10,.col-md-9,.col-lg-10,.col-xl-10,.col-12{flex:1 1 600px;min-width:0}
.card{border:1px solid #d1d9e0;border-radius:6px;margin:0 0 16px;background:#fff}
.card-header{background:#f6f8fa;padding:8px 12px;border-bottom:1px solid #d1d9e0}
.card-body{padding:8px 12px}.collapse{display:block!important}
table{border-collapse:collapse;width:100%;font-size:13px}
th,td{border-bottom:1px solid #d1d9e0;padding:4px 8px;text-align:left;vertical-align:top}
.badge,.badge-pill{display:inline-block;padding:1px 8px;border-radius:10px;background:#eaeef2}
.badge-success,.text-success{color:#1a7f37}.badge-danger,.text-danger{color:#cf222e}
.fas,.fa,.far{font-style:normal}.fa-check-circle:before{content:"\\2714";color:#1a7f37}
.fa-times:before{content:"\\2716";color:#cf222e}.d-none,.sr-only{display:none}
nav,.navbar{background:#24292f;color:#fff;padding:8px 24px}nav a{color:#fff}
a{color:#0969da}ul{padding-left:20px}.alert{padding:8px 12px;border:1px solid #d1d9e0}
"""

_REMOTE = re.compile(
    r"<link[^>]+href=\"https?://[^\"]*\"[^>]*>"
    r"|<script[^>]+src=\"https?://[^\"]*\"[^>]*>\s*</script>"
    r"|<img[^>]+src=\"https?://[^\"]*\"[^>]*>",
    re.IGNORECASE,
)


def make_offline(site: str | Path) -> int:
    """Rewrite every page under ``site``; returns the number of pages changed."""
    changed = 0
    for page in Path(site).rglob("*.html"):
        text = page.read_text()
        if 'id="wmbt-offline"' in text:
            continue
        new = _REMOTE.sub("", text)
        new = new.replace("</head>", f'<style id="wmbt-offline">{OFFLINE_CSS}</style></head>',
                          1)
        tmp = page.with_suffix(".html.tmp")
        tmp.write_text(new)
        tmp.replace(page)
        changed += 1
    return changed


def remote_references(site: str | Path) -> list[str]:
    """Remote CSS/JS/image references left in the site (empty when it renders offline)."""
    out = []
    for page in Path(site).rglob("*.html"):
        out += [m.group(0)[:120] for m in _REMOTE.finditer(page.read_text())]
    return out
