"""The package's version, written once: pyproject.toml reads it from here
([tool.setuptools.dynamic]) into the wheel's metadata, and ``jetspark.__version__``
re-exports it."""

__version__ = "0.1.0"
