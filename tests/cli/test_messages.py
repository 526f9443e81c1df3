"""jetspark pub and jetspark sub."""

from __future__ import annotations

import dataclasses
import threading
import time

import jetspark

# ---------------------------------------------------------------------- pub


def test_pub_one(orders):
    r = orders("pub", "orders.new", "hello")
    assert r.stdout.strip() == "Published 5 bytes to orders.new: stream ORDERS seq 6"
    assert orders("pub", "orders.new", "1").stdout.strip() == "Published 1 byte to orders.new: stream ORDERS seq 7"
    assert orders("pub", "orders.new", "").stdout.strip() == "Published 0 bytes to orders.new: stream ORDERS seq 8"
    # --json prints the PubAck as the API returns it: duplicate None (the server left it
    # out), not False.
    with jetspark.connect(orders.store) as js:
        api = dataclasses.asdict(js.publish("orders.new", b"api"))
    assert api == {"stream": "ORDERS", "seq": 9, "domain": None, "duplicate": None, "val": None}
    assert orders.json_lines("pub", "orders.new", "again") == [{**api, "seq": 10}]


def test_pub_count_templates_headers_and_id(cli):
    cli("stream", "add", "T", "--subjects", "t.>")
    r = cli(
        "pub",
        "t.{{Count}}",
        '{"n": {{Count}}}',
        "--count",
        "3",
        "-H",
        "Source:cli",
        "-H",
        "Seq:{{Count}}",
        "--id",
        "m-{{Count}}",
    )
    assert r.stdout.splitlines()[0].startswith("Published 3 messages (")
    assert "stream T: 3 acks, seq 1..3" in r.stdout
    r = cli("pub", "t.one", "x", "--count", "1")
    assert r.stdout == "Published 1 byte to t.one: stream T seq 4\n"
    cli("pub", "t.x", "x", "--id", "n-1")
    r = cli("pub", "t.x", "x", "--count", "2", "--id", "n-{{Count}}")  # n-1 a duplicate, n-2 new
    assert (
        "stream T: 2 acks, seq 5..6" in r.stdout
        and "  1 duplicate (same Nats-Msg-Id within the duplicate window) was not stored again" in r.stdout
    )
    js = jetspark.connect(cli.store)
    m = js.get_msg("T", seq=2)
    assert (m.subject, m.data, m.headers) == ("t.2", b'{"n": 2}', {"Source": "cli", "Seq": "2", "Nats-Msg-Id": "m-2"})
    js.close()


def test_pub_no_templates(cli):
    cli("stream", "add", "T", "--subjects", "t")
    cli("pub", "t", "{{Count}}", "--no-templates")
    assert cli.json("stream", "get", "T", "1")["data"] == "{{Count}}"


def test_pub_dedup_with_id(orders):
    acks = orders.json_lines("pub", "orders.new", "x", "--id", "order-2")
    assert acks == [{"stream": "ORDERS", "seq": 2, "domain": None, "duplicate": True, "val": None}]
    r = orders("pub", "orders.new", "x", "--count", "4", "--id", "order-{{Count}}")
    assert "3 duplicates (same Nats-Msg-Id within the duplicate window) were not stored again" in r.stdout
    assert orders.json("stream", "info", "ORDERS")["state"]["messages"] == 6
    r = orders("pub", "orders.new", "x", "--id", "order-1")
    assert "stream ORDERS seq 1 (duplicate: already stored, not stored again)" in r.stdout


def test_pub_stdin(cli):
    cli("stream", "add", "IN", "--subjects", "in")
    cli("pub", "in", "--force-stdin", input="line one\nline two\n")
    assert cli.json("stream", "get", "IN", "1")["data"] == "line one\nline two\n"
    acks = cli.json_lines("pub", "in", "--force-stdin", "--send-on", "newline", input="a\nb\r\nc")
    assert [a["seq"] for a in acks] == [2, 3, 4]
    assert [cli.json("stream", "get", "IN", str(s))["data"] for s in (2, 3, 4)] == ["a", "b", "c"]
    assert "not both" in cli("pub", "in", "body", "--force-stdin", code=2).stderr


def test_pub_quiet_and_progress(cli):
    cli("stream", "add", "P", "--subjects", "p")
    quiet = cli("pub", "p", "x", "--count", "300", "-q")
    assert quiet.stdout == "" and quiet.stderr == ""  # piped: no progress bar
    loud = cli("pub", "p", "x", "--count", "300", "--progress")
    assert "pub p:" in loud.stderr and "/300" in loud.stderr and "msg/s" in loud.stderr
    assert "Published 300 messages" in loud.stdout


def test_pub_errors(orders):
    r = orders("pub", "nothing.here", "x", code=1)
    assert r.stderr.strip() == "Error: no stream captures subject 'nothing.here'; add a stream whose subjects match it"
    r = orders("pub", "orders.x", "{{Nope}}", code=2)
    assert "unknown template function '{{Nope}}'" in r.stderr
    r = orders("pub", "orders.x", "x", "-H", "novalue", code=2)
    assert "invalid header 'novalue'" in r.stderr
    orders("stream", "add", "SMALL", "--subjects", "small", "--max-msgs", "2", "--discard", "new")
    r = orders("pub", "small", "x", "--count", "5", code=1)
    assert "published 2 messages before the error" in r.stderr
    assert "(err_code 10077)" in r.stderr


# ---------------------------------------------------------------------- sub


def test_sub_reads_a_subject(orders):
    assert orders("sub", "orders.new", "--no-follow", "--raw").stdout == '{"id": 1}\n{"id": 2}\n{"id": 3}\n'
    msgs = orders.json_lines("sub", "orders.>", "--no-follow")
    assert [m["seq"] for m in msgs] == [1, 2, 3, 4, 5]
    assert msgs[3] == {
        **msgs[3],
        "subject": "orders.eu.new",
        "headers": {"Region": "eu"},
        "data": "eu",
        "stream": "ORDERS",
    }
    assert [m["seq"] for m in orders.json_lines("sub", "orders.*.new", "--no-follow")] == [4]
    text = orders("sub", "orders.shipped", "--no-follow").stdout
    assert text.startswith("[ORDERS #5] orders.shipped @ ") and "shipped" in text


def test_sub_start_positions(orders):
    def seqs(*args):
        return [m["seq"] for m in orders.json_lines("sub", *args, "--no-follow")]

    assert seqs("--stream", "ORDERS") == [1, 2, 3, 4, 5]
    assert seqs("orders.>", "--start-sequence", "4") == [4, 5]
    assert seqs("orders.>", "--last") == [5]
    assert seqs("orders.new", "--last") == [3]
    assert seqs("orders.>", "--new") == []
    assert seqs("orders.>", "--last-per-subject") == [3, 4, 5]
    assert seqs("orders.>", "--since", "1h") == [1, 2, 3, 4, 5]
    assert seqs("orders.>", "--count", "2") == [1, 2]


def test_sub_errors(orders):
    assert "give a SUBJECT" in orders("sub", code=2).stderr
    assert "cannot be combined" in orders("sub", "orders.>", "--last", "--since", "1h", code=2).stderr
    assert "cannot be combined" in orders("sub", "orders.>", "--start-sequence", "2", "--since", "1h", code=2).stderr
    r = orders("sub", "elsewhere.x", "--no-follow", code=1)
    assert r.stderr.strip() == "Error: no stream captures 'elsewhere.x'; name the stream with --stream"
    assert "(err_code 10059)" in orders("sub", "--stream", "NOPE", "--no-follow", code=1).stderr


def test_sub_follows_new_messages(orders):
    def publish_later():
        time.sleep(0.15)
        with jetspark.connect(orders.store) as js:
            js.publish("orders.new", b"late 1")
            js.publish("orders.other", b"skipped by the filter")
            js.publish("orders.new", b"late 2")

    t = threading.Thread(target=publish_later)
    t.start()
    try:
        r = orders("sub", "orders.new", "--count", "5", "--raw")
    finally:
        t.join()
    assert r.stdout.splitlines() == ['{"id": 1}', '{"id": 2}', '{"id": 3}', "late 1", "late 2"]
