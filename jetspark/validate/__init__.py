"""Argument checks shared by both backends (the engine and the nats:// client).

Every public verb checks its arguments here before it does anything, so a
refused call writes nothing and its error names the argument and what is
accepted.  Two kinds of refusal:

- Arguments that travel in a JetStream API request (stream and consumer
  configs, purge, get/delete message, stream info) are refused as the server
  refuses a request it cannot read: ``BadRequestError`` 10025 ("invalid
  JSON"), whose description starts with the field's name.  The server answers
  that for a wrong JSON type or a number outside its Go field (``int32``,
  ``int64``, ``uint64``, durations in ``int64`` nanoseconds); NaN, infinity or
  an object that JSON cannot carry get the same answer here.  Rules about
  meaning (a negative ``max_age``, a bad subject) stay with the server's own
  checks (``jetspark.engine.config`` on the engine).
- jetspark's own arguments (payloads, headers, Arrow tables, fetch and read
  options) are refused with a ``TypeError`` (wrong type) or ``ValueError``
  (wrong value) whose message starts with the argument's name.

Sequence numbers are ``int64`` in jetspark (the Arrow ``seq`` column, the
engine's index): a sequence beyond ``2**63 - 1`` that the server would take
(its fields are ``uint64``) is refused with 10003 rather than overflow later.

Modules: ``args`` (scalars, configs, names, requests, publish, reads and
consumers) and ``batch`` (publish_batch's Arrow table, its subjects, headers
and message ids); both are re-exported here, so callers write ``V.name``.
"""

from jetspark.validate.args import *  # noqa: F403
from jetspark.validate.batch import batch_subjects, batch_table, row_headers, row_msg_id  # noqa: F401
