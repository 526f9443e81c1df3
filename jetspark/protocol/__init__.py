"""The NATS pieces both backends share and neither owns.

- ``subjects``: subject validation, wildcard matching, collision and subset;
- ``headers``: the ``NATS/1.0`` header-block codec and the JetStream header names;
- ``arrow``: the Arrow schema of range reads (``read_batches``) and of the
  ``headers`` column of batch appends;
- ``msg_ids``: the ``Nats-Msg-Id`` header blocks of a batch, built at once;
- ``ack_reply``: a delivery's ``$JS.ACK`` reply subject, built and read (one grammar);
- ``frames``: what a server sends a client, framed in bulk (pure, NumPy);
- ``pub_lines``: the ``PUB``/``HPUB`` lines of a batch append, built in bulk;
- ``pubacks``: the PubAcks of a batch append or of pipelined publishes among those
  frames, read a run at a time;
- ``ack_frames``: a batch append's PubAcks framed by their shape (what ``frames``
  frames, runs of PubAcks with their rows and sequences read on the way);
- ``deliveries``: consumer deliveries and direct-get replies among those frames, read
  a run at a time, and the range-read chunk built on them.

The embedded engine (``jetspark.engine``) and the nats-py backend
(``jetspark.remote``) import this package and the public data model
(``jetspark.api``), never each other; the connector and the CLI import only
the public API and this package.  Nothing here imports pyspark or nats-py.
"""
