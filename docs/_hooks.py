"""MkDocs hooks (mkdocs.yml ``hooks:``): pages filled in from the code at build time.

``<!-- options-table -->`` in a page becomes the Spark options table built from
``jetspark.connector.options.OPTIONS``, the one place the connector declares its options
(the parsers accept exactly those), so the table cannot drift from the code.
"""

from __future__ import annotations

OPTIONS_MARKER = "<!-- options-table -->"


def on_page_markdown(markdown: str, page, config, files) -> str:
    if OPTIONS_MARKER in markdown:
        from jetspark.connector.options import options_table

        markdown = markdown.replace(OPTIONS_MARKER, options_table())
    return markdown
