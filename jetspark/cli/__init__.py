"""The ``jetspark`` command line, over the public API only (``jetspark.connect`` and its handle).

::

    app.py        the click group, global options (--store, --server, --context, --debug)
    state.py      State (the lazily opened store), the click Group: the one error boundary
    contexts.py   jetspark context add|info|ls|select|unselect|rm, and which one applies
    context_store.py  saved contexts: files in the user's config directory
    streams.py    jetspark stream add|edit|info|ls|rm|purge|get|rmm|report|check|backup|restore
    stream_extra.py  jetspark stream subjects|find|seal|copy
    stream_config.py the StreamConfig flags and stream info's rendering
    consumers.py  jetspark consumer add|edit|info|ls|report|rm|next
    consumer_pause.py  jetspark consumer pause|resume, and --pause's time or duration
    publish.py    jetspark pub
    stream_reading.py  jetspark sub, stream view (reads without a consumer)
    fetch.py      jetspark fetch, and the delivery loop consumer next shares
    message_print.py  a message printed as nats does, raw, or as a JSON line
    tools.py      jetspark demo, bench
    shell.py      jetspark completion, man
    parse.py      durations and sizes, as the nats CLI reads them
    templates.py  {{Count}}-style body templates for pub
    output.py     tables, JSON, progress bars
"""

from jetspark.cli.app import cli, main

__all__ = ["cli", "main"]
