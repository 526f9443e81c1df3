"""Fixtures for the command-line tests: a CliRunner against a temporary store.

``cli("stream", "ls")`` runs ``jetspark stream ls`` in-process with
``JETSPARK_STORE`` pointing at the test's store (and ``JETSPARK_CONFIG_DIR``, where saved
contexts live, at a directory of the test's) and checks the exit status
(0 unless ``code=`` says otherwise); ``cli.json(...)`` parses stdout.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner, Result

from jetspark.cli import cli as jetspark_cli


class Cli:
    def __init__(self, store, config=None) -> None:
        self.store = store
        # Saved contexts (jetspark context): never the user's own; by default beside the store.
        self.config = config if config is not None else Path(store).parent / "config"
        self.runner = CliRunner(env={"JETSPARK_STORE": str(store), "JETSPARK_CONFIG_DIR": str(config)})

    def __call__(self, *args: str, input=None, code: int = 0, env=None) -> Result:
        result = self.runner.invoke(jetspark_cli, [str(a) for a in args], input=input, env=env, catch_exceptions=False)
        assert result.exit_code == code, (
            f"jetspark {' '.join(map(str, args))} exited {result.exit_code}, "
            f"expected {code}\nstdout:\n{result.stdout}\nstderr:\n{result.stderr}"
        )
        return result

    def json(self, *args: str, **kw):
        return json.loads(self(*args, "--json", **kw).stdout)

    def json_lines(self, *args: str, **kw) -> list:
        return [json.loads(line) for line in self(*args, "--json", **kw).stdout.splitlines() if line.strip()]


@pytest.fixture
def cli(tmp_path) -> Cli:
    return Cli(tmp_path / "store", tmp_path / "config")


@pytest.fixture
def orders(cli) -> Cli:
    """A store with stream ORDERS on orders.> holding five messages: orders.new x3, orders.eu.new, orders.shipped."""
    cli("stream", "add", "ORDERS", "--subjects", "orders.>")
    cli("pub", "orders.new", '{"id": {{Count}}}', "--count", "3", "--id", "order-{{Count}}")
    cli("pub", "orders.eu.new", "eu", "-H", "Region:eu")
    cli("pub", "orders.shipped", "shipped")
    return cli
