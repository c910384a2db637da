"""Make GX Data Docs readable offline.

Data Docs link Bootstrap, jQuery, Font Awesome, bootstrap-table and Vega from CDNs. The pages'
content (expectation and validation tables) is rendered server-side, so after the build we drop
every remote ``<link>``/``<script>``/``<img>`` and inline a small stylesheet that lays out
Bootstrap's grid, cards, tables and badges and keeps collapsed sections open. The index page
is the exception: its tables (validations, expectation suites) are empty ``<table>`` elements
that bootstrap-table fills from rows the page embeds in a script, so those rows are written
into the tables here (:func:`fill_tables`), each linked to its page as a click on it would be.
"""

from __future__ import annotations

import ast
import html
import re
from pathlib import Path
from typing import Any

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
.cooltip .top,.ge-index-page-tabs-container .btn,.fixed-bottom{display:none}
.tab-pane{margin:0 0 24px}
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
        new = fill_tables(_REMOTE.sub("", text))
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


_TABLE_CALL = re.compile(r"\$\('#(?P<id>[\w-]+)'\)\.bootstrapTable\(\s*Object\.assign\(\s*\{")


def fill_tables(page: str) -> str:
    """``page`` with every table that bootstrap-table would fill from embedded rows written
    out as HTML rows (sorted as the script asks; a row's link on its first plain cell). A
    table already filled, or a script not understood, is left as it is."""
    for call in reversed(list(_TABLE_CALL.finditer(page))):
        try:
            options = _options(page, call.end())
        except (ValueError, SyntaxError):
            continue
        table = re.compile(r'(<table\s+id="' + re.escape(call.group("id")) + r'"[^>]*>)\s*</table>')
        m = table.search(page)
        if m is None or "columns" not in options:
            continue
        page = page[:m.start()] + m.group(1) + _rows_html(options) + "</table>" + page[m.end():]
    return page


def _options(page: str, start: int) -> dict[str, Any]:
    """The ``key: [literal]`` entries of the script's first options object (``columns``,
    ``data``) and its second one (sort settings), read as the Python literals GX wrote."""
    out: dict[str, Any] = {}
    pos = start
    while True:
        m = re.compile(r"\s*(\w+):\s*").match(page, pos)
        if m is None:
            break
        value, pos = _literal(page, m.end())
        out[m.group(1)] = value
        pos = re.compile(r"\s*,?").match(page, pos).end()  # type: ignore[union-attr]
    rest = re.compile(r"\s*\},\s*").match(page, pos)
    if rest is not None and page.startswith("{", rest.end()):
        extra, _ = _literal(page, rest.end())
        if isinstance(extra, dict):
            out.update({k: v for k, v in extra.items() if k in ("sortName", "sortOrder")})
    return out


def _literal(text: str, start: int) -> tuple[Any, int]:
    """The Python literal (list, dict or quoted string) that starts at ``start`` and where it
    ends; brackets inside strings do not count."""
    opening = text[start]
    if opening in "'\"":
        end = start + 1
        while text[end] != opening:
            end += 2 if text[end] == "\\" else 1
        return ast.literal_eval(text[start:end + 1]), end + 1
    if opening not in "[{":
        raise ValueError(f"not a literal at {start}")
    depth, i, quote = 0, start, ""
    while True:
        c = text[i]
        if quote:
            if c == "\\":
                i += 1
            elif c == quote:
                quote = ""
        elif c in "'\"":
            quote = c
        elif c in "[{":
            depth += 1
        elif c in "]}":
            depth -= 1
            if depth == 0:
                return ast.literal_eval(text[start:i + 1]), i + 1
        i += 1


def _rows_html(options: dict[str, Any]) -> str:
    """A header row of the column titles and one row per record (cells: GX's own HTML)."""
    columns = [c for c in options["columns"] if isinstance(c, dict) and "field" in c]
    rows = [r for r in options.get("data") or [] if isinstance(r, dict)]
    sort = options.get("sortName")
    if sort:
        col = next((c for c in columns if c["field"] == sort), {})
        key = col.get("sortName", sort)
        rows.sort(key=lambda r: str(r.get(key, "")) if not isinstance(r.get(key), int | float)
                  else f"{r[key]:020.6f}", reverse=options.get("sortOrder") == "desc")
    head = "".join(f"<th>{html.escape(str(c.get('title', c['field'])))}</th>" for c in columns)
    body = []
    for r in rows:
        link = r.get("_table_row_link_path")
        cells, linked = [], False
        for c in columns:
            value = str(r.get(c["field"], ""))
            if link and not linked and value.strip() and "<" not in value:
                value = f'<a href="{html.escape(link)}">{html.escape(value)}</a>'
                linked = True
            cells.append(f"<td>{value}</td>")
        href = f' data-href="{html.escape(link)}"' if link else ""
        body.append(f"<tr{href}>{''.join(cells)}</tr>")
    return f"<thead><tr>{head}</tr></thead><tbody>{''.join(body)}</tbody>"
