"""MkDocs hooks (mkdocs.yml `hooks:`): a page whose code fence does not close fails the build.

Markdown lets an unclosed fence run to the end of the page, silently swallowing every section
after it (docs/local-runs.md once lost half a page that way), and `--strict` does not see it.
"""

from __future__ import annotations

import re

from mkdocs.exceptions import PluginError

# A fence opens or closes on a line of its own: three or more backticks or tildes, indented
# (inside a list item) or not, with an info string only when it opens.
FENCE = re.compile(r"^[ \t]*(`{3,}|~{3,})(.*)$")


def unclosed_fence(markdown: str) -> int | None:
    """The line of the first fence that never closes, or None."""
    opened: tuple[str, int] | None = None
    for number, line in enumerate(markdown.splitlines(), 1):
        fence = FENCE.match(line)
        if not fence:
            continue
        marks = fence[1]
        if opened is None:
            opened = (marks, number)
        elif marks[0] == opened[0][0] and len(marks) >= len(opened[0]) and not fence[2].strip():
            opened = None
    return opened[1] if opened else None


def on_page_markdown(markdown: str, page, config, files) -> str:
    line = unclosed_fence(markdown)
    if line is not None:
        raise PluginError(
            f"{page.file.src_uri}:{line}: this code fence never closes, so it swallows the rest "
            "of the page: close it with the same fence on a line of its own"
        )
    return markdown
