"""Reading a Markdown table back out of a report or a command's output."""

from __future__ import annotations


def table(markdown: str, header: str) -> list[list[str]]:
    """The body rows of the markdown table whose header line starts with `header`, as cell lists."""
    lines = markdown.splitlines()
    start = next(
        i for i, line in enumerate(lines) if line.replace(" ", "").startswith(header.replace(" ", ""))
    )
    body = []
    for line in lines[start + 2 :]:
        if not line.startswith("|"):
            break
        body.append([cell.strip() for cell in line.strip("|").split("|")])
    return body
