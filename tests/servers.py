"""The nats-server launcher, kept importable as ``tests.servers``: it lives in
natsdev/servers.py, where the benchmarks and scripts import it too."""

from natsdev.servers import NatsCluster, NatsServer, free_port, free_ports, nats_server_binary, wait_listening

__all__ = ["NatsCluster", "NatsServer", "free_port", "free_ports", "nats_server_binary", "wait_listening"]
