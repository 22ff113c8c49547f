"""A report as sections of paragraphs, tables and figures, written two ways: Markdown beside its PNG
files (`report.md`), and one self-contained HTML page with every figure inlined (`report.html`: opens
from a file, from an e-mail, offline, with nothing else at hand).
"""

from __future__ import annotations

import base64
import html
import os
import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

from attnx.table import markdown_table


@dataclass
class Table:
    header: list[str]
    body: list[list[str]]
    right_from: int | None = None  # columns from this one on are numbers, right-aligned
    id: str | None = None  # the HTML table's id, for what reads the page


@dataclass
class Image:
    path: Path
    caption: str


@dataclass
class Section:
    title: str
    parts: Sequence[str | Table | Image] = field(default_factory=list)  # a str: a paragraph (Markdown inline)


def slug(name: str) -> str:
    """`name` as a file or folder name: runs of anything but letters, digits and `_.+-` become one `_`.
    One rule for the report's figures (`pareto_task_reverse.png`) and compare's folders, where `+`
    names a score inside its host (`dot+my_score`)."""
    return re.sub(r"[^A-Za-z0-9_.+-]+", "_", name).strip("_")


def markdown(title: str, sections: Sequence[Section], folder: Path) -> str:
    """The report as Markdown; figures linked relative to `folder`, where the file is written."""
    lines = [f"# {title}", ""]
    for section in sections:
        if section.title:
            lines += [f"## {section.title}", ""]
        for part in section.parts:
            if isinstance(part, Table):
                lines += [markdown_table(part.header, part.body, right_from=part.right_from), ""]
            elif isinstance(part, Image):
                lines += [f"![{part.caption}]({Path(os.path.relpath(part.path, folder)).as_posix()})", ""]
            else:
                lines += [part, ""]
    return "\n".join(lines).rstrip() + "\n"


STYLE = """
body { font: 14px/1.45 system-ui, -apple-system, "Segoe UI", sans-serif; color: #1d2430; margin: 0 auto;
       max-width: 1200px; padding: 24px; }
h1 { font-size: 24px; margin: 0 0 4px; }
h2 { font-size: 18px; margin: 28px 0 8px; border-bottom: 1px solid #dde2ea; }
table { border-collapse: collapse; margin: 8px 0 14px; font-variant-numeric: tabular-nums; }
th, td { padding: 3px 10px; border-bottom: 1px solid #e6e9ef; text-align: left; white-space: nowrap; }
td:last-child:not(.num) { white-space: normal; min-width: 12em; }  /* a long last column wraps */
th { background: #f3f5f8; font-weight: 600; } td.num, th.num { text-align: right; }
tr.highlight td { background: #fff6d6; } code { background: #f3f5f8; padding: 0 3px; border-radius: 3px; }
figure { display: inline-block; margin: 6px 12px 12px 0; vertical-align: top; }
figure img { max-width: 100%; max-height: 520px; border: 1px solid #e6e9ef; }
figcaption { font-size: 12px; color: #5a6475; }
p { margin: 6px 0; max-width: 900px; }
"""


def page(title: str, sections: Sequence[Section], highlight: str | None = None) -> str:
    """The report as one HTML page; every image is inlined as a data URI. Rows of a table whose first
    cells name `highlight` (a value such as the candidate's name) are highlighted."""
    out = [
        "<!DOCTYPE html>",
        '<html lang="en"><head><meta charset="utf-8">',
        f"<title>{html.escape(title)}</title><style>{STYLE}</style></head><body>",
        f"<h1>{html.escape(title)}</h1>",
    ]
    for section in sections:
        if section.title:
            out.append(f"<h2>{html.escape(section.title)}</h2>")
        for part in section.parts:
            if isinstance(part, Table):
                out.append(_html_table(part, highlight))
            elif isinstance(part, Image):
                data = base64.b64encode(part.path.read_bytes()).decode()
                caption = html.escape(part.caption)
                out.append(
                    f'<figure><img src="data:image/png;base64,{data}" alt="{caption}">'
                    f"<figcaption>{caption}</figcaption></figure>"
                )
            else:
                out.append(f"<p>{_inline(part)}</p>")
    out.append("</body></html>")
    return "\n".join(out) + "\n"


def _html_table(table: Table, highlight: str | None) -> str:
    def cls(i: int) -> str:
        return ' class="num"' if table.right_from is not None and i >= table.right_from else ""

    ident = f' id="{table.id}"' if table.id else ""
    head = "".join(f"<th{cls(i)}>{html.escape(h)}</th>" for i, h in enumerate(table.header))
    rows = []
    for row in table.body:
        marked = highlight is not None and highlight in row[: table.right_from or len(row)]
        cells = "".join(f"<td{cls(i)}>{_inline(c)}</td>" for i, c in enumerate(row))
        attribute = ' class="highlight"' if marked else ""
        rows.append(f"<tr{attribute}>{cells}</tr>")
    return f"<table{ident}><thead><tr>{head}</tr></thead><tbody>{''.join(rows)}</tbody></table>"


def _inline(text: str) -> str:
    """Markdown's inline `code` and **bold** in escaped text; nothing else is markup."""
    escaped = html.escape(text)
    escaped = re.sub(r"`([^`]+)`", r"<code>\1</code>", escaped)
    return re.sub(r"\*\*([^*]+)\*\*", r"<strong>\1</strong>", escaped)
