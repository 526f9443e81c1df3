"""A griffe extension (mkdocs.yml, mkdocstrings ``extensions:``): docstrings built at import.

The API reference reads the source statically, which would show JetStreamDataSource's
placeholder docstring; its real one is assembled at import from the connector's options
(``jetspark.connector.options.OPTIONS``), so take that one from the imported class.
"""

from __future__ import annotations

import importlib

import griffe

RUNTIME_DOCSTRINGS = {"jetspark.connector.JetStreamDataSource"}


class RuntimeDocstrings(griffe.Extension):
    def on_class_instance(self, *, cls: griffe.Class, **kwargs) -> None:
        if cls.path in RUNTIME_DOCSTRINGS:
            module, _, name = cls.path.rpartition(".")
            doc = getattr(importlib.import_module(module), name).__doc__
            cls.docstring = griffe.Docstring(doc, parent=cls)
