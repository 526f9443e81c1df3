"""What the optional extras bring, checked without importing them.

The core install (the engine, the nats:// backend, the CLI) needs neither PySpark nor
pandas; the Spark connector and the demo do, through ``pip install "jetspark[spark]"``.
``importlib.util.find_spec`` looks for a package without running it, so asking costs no
PySpark import (nor a JVM).
"""

from __future__ import annotations

import importlib.util

__all__ = ["SPARK_EXTRA", "missing_spark", "require_spark"]

SPARK_EXTRA = 'pip install "jetspark[spark]"'
# What the spark extra installs (pyproject.toml [project.optional-dependencies] spark).
_SPARK_MODULES = ("pyspark", "pandas")


def missing_spark() -> list[str]:
    """The spark extra's packages this interpreter cannot import (none when it is installed)."""
    return [name for name in _SPARK_MODULES if importlib.util.find_spec(name) is None]


def require_spark(what: str) -> None:
    """Raise ``ModuleNotFoundError`` naming the spark extra when its packages are missing.

    ``what`` names what needs them, for the message ("jetspark.connector")."""
    missing = missing_spark()
    if missing:
        raise ModuleNotFoundError(
            f"{what} needs PySpark and pandas, which this installation lacks ({', '.join(missing)} not found): "
            f"install the spark extra with {SPARK_EXTRA} (Spark also needs Java 17 or newer)",
            name=missing[0],
        )
