"""jetspark's embedded engine: the JetStream API on a store directory, no server.

``jetspark.connect("./jetspark-data")`` returns its handle, ``handle.JetStream``;
``jetspark.backend.JetStreamAPI`` is its contract, the same as the nats-py backend's.
This package imports neither pyspark nor nats-py (tests/test_imports.py).

Modules, each importing only those above it (tests/test_imports.py checks the order);
from the files up:

- ``records``: the record format every file shares and its checksums; ``diskio``: the
  store's writes, each landing whole or failing with a typed error; ``locking``:
  cross-process locks; ``config``: StreamConfig defaults and checks, in the server's
  order; ``msg_ttl``: per-message TTL and delete-marker values as the server reads and
  writes them; ``refusals``: publish headers for server features a stream does not have;
- ``metafile``: the small JSON documents, checksummed and kept twice; ``state_header``: a
  stream's state header (two checksummed slots); ``blocks``: one block's files;
  ``bindings``: push subscriptions bound to a consumer, seen by every process;
  ``wakeup``: waking waiting consumers when another process changes a stream;
- ``consumer_config``: ConsumerConfig defaults and checks; ``consumer_match``: which
  stored messages a consumer's filters match, and a pull's byte budget; ``consumer_log``:
  a consumer's state changes as checksummed records, read back by every process (appends,
  compaction, damage); ``consumer_due``: a consumer's pending deliveries by deadline;
  ``consumer_held``: its pending deliveries and delivery counts in stream order;
  ``consumer_state``: a consumer's state and what each record does to it; ``consumer_fetch``:
  what a fetch delivers (the redeliveries due, max_deliver expiries, new messages);
- ``journals``: a stream's journals and their compaction; ``removed``: removed sequences
  (the ``ops`` journal); ``subject_table``: the subject dictionary; ``dedup``: the
  duplicate window;
- ``consumer``: a consumer's delivery state machine (pure planners: at the time they are
  given, the records to write; ``commit`` writes them, then the memory follows);
  ``consumer_set``: a stream's consumers and the retention they drive;
- ``block_index``: which block holds a sequence, its entry, size and liveness;
  ``subject_stats``: per-subject counts; ``verify``: records checked against their
  checksums before they are served; ``ttl_index``: which messages carry a TTL, read back
  from the stream;
- ``block_writer``: appends and removals on the blocks; ``recovery``: what a crash or
  damage left, found and cut away; ``check``: ``check_stream``, finding and repairing;
- ``storage``: ``StreamStorage``, one stream's files composed of the layers above;
- ``expiry``: max_age, TTLs and delete markers, applied at the next operation;
  ``stream_state``: a stream's state as stream_info reports it;
- ``stream``: one stream's JetStream rules (publish checks, limits, purge, get, delete);
- ``store_dir``: ``StoreDirectory``, the store directory (lock, generation, registry of
  streams, subject routes, damaged streams); ``backup``: a stream's files copied under its
  lock; ``bulk``: Arrow range reads and batch appends, time -> sequence;
- ``deliveries``: ``Deliveries``, what consumers hand out and what acks do (``Msg``,
  ``Delivery``);
- ``pull``: pull subscriptions; ``push``: push subscriptions; ``async_writer``:
  ``publish_async``'s writer thread;
- ``handle``: ``JetStream``, the handle: its verbs over all of the above.

What the engine promises on disk and under crashes: docs/storage.md; what it implements
of JetStream and where it differs from nats-server: docs/semantics.md and
docs/reference/differences-nats-server.md.
"""
