"""jetspark consumer add|edit|info|ls|report|rm|next, and jetspark fetch."""

from __future__ import annotations

import re

import pytest

import jetspark


def test_add_info_ls(orders):
    r = orders(
        "consumer",
        "add",
        "ORDERS",
        "NEW",
        "--filter",
        "orders.new",
        "--wait",
        "45s",
        "--max-deliver",
        "5",
        "--max-pending",
        "100",
        "--description",
        "new orders",
        "--backoff",
        "1s,5s",
        "--metadata",
        "owner=me",
    )
    assert "Consumer ORDERS > NEW added" in r.stdout
    assert r.stderr == "Warning: --backoff sets the ack wait to its first delay (1s); --wait 45s is not used\n"
    assert "Filter Subject: orders.new" in r.stdout
    assert "Unprocessed Messages: 3" in r.stdout
    info = orders.json("consumer", "info", "ORDERS", "NEW")
    c = info["config"]
    assert (info["name"], info["stream_name"], info["num_pending"]) == ("NEW", "ORDERS", 3)
    assert (c["durable_name"], c["filter_subject"], c["ack_policy"], c["deliver_policy"]) == (
        "NEW",
        "orders.new",
        "explicit",
        "all",
    )
    assert (c["max_deliver"], c["max_ack_pending"], c["backoff"], c["metadata"]) == (
        5,
        100,
        [1.0, 5.0],
        {"owner": "me"},
    )
    assert c["ack_wait"] == 1.0  # the server forces the first backoff step
    assert "Ack Wait: 1s" in orders("consumer", "info", "ORDERS", "NEW").stdout

    orders("consumer", "add", "ORDERS", "ALL", "--ack", "none", "--deliver", "last", "--replay", "original")
    assert orders.json("consumer", "ls", "ORDERS", "--names") == ["ALL", "NEW"]
    assert orders("consumer", "ls", "ORDERS", "-n").stdout.split() == ["ALL", "NEW"]
    infos = orders.json("consumer", "ls", "ORDERS")
    assert [(i["name"], i["config"]["ack_policy"], i["num_pending"]) for i in infos] == [
        ("ALL", "none", 1),
        ("NEW", "explicit", 3),
    ]
    text = orders("consumer", "ls", "ORDERS").stdout
    assert "Consumers of ORDERS" in text
    assert any(line.split()[:1] == ["NEW"] for line in text.splitlines())
    assert orders.json("stream", "info", "ORDERS")["state"]["consumer_count"] == 2


@pytest.mark.parametrize(
    "deliver, policy, first",
    [
        ("all", "all", 1),
        ("last", "last", 5),
        ("new", "new", None),
        ("subject", "last_per_subject", 3),
        ("4", "by_start_sequence", 4),
        ("1h", "by_start_time", 1),
    ],
)
def test_deliver_policies(orders, deliver, policy, first):
    # last_per_subject needs a filter (10094 otherwise, as on nats-server)
    extra = ["--filter", "orders.>"] if policy == "last_per_subject" else []
    info = orders.json("consumer", "add", "ORDERS", "C", "--deliver", deliver, *extra)
    assert info["config"]["deliver_policy"] == policy
    if first is None:
        orders("consumer", "next", "ORDERS", "C", "--wait", "0s", code=1)
    else:
        assert orders.json_lines("consumer", "next", "ORDERS", "C", "--wait", "0s")[0]["seq"] == first


def test_add_errors(orders):
    orders("consumer", "add", "ORDERS", "C")
    r = orders("consumer", "add", "ORDERS", "C", "--max-deliver", "3", code=1)
    assert r.stderr.strip() == "Error: consumer already exists (err_code 10148)"
    r = orders("consumer", "add", "NOPE", "C", code=1)
    assert r.stderr.strip() == "Error: stream 'NOPE' not found (err_code 10059); streams: ORDERS"
    r = orders("consumer", "add", "ORDERS", "D", "--deliver", "whenever", code=2)
    assert "invalid start 'whenever'" in r.stderr
    orders("stream", "add", "WQ", "--subjects", "wq.>", "--retention", "workqueue")
    r = orders("consumer", "add", "WQ", "W", "--ack", "none", code=1)
    assert "(err_code 10084)" in r.stderr


def test_edit(orders):
    orders("consumer", "add", "ORDERS", "C", "--filter", "orders.new")
    info = orders.json(
        "consumer", "edit", "ORDERS", "C", "--max-deliver", "7", "--description", "edited", "--filter", "orders.*"
    )
    assert info["name"] == "C"
    # A fresh handle sees what the edit stored.
    c = orders.json("consumer", "info", "ORDERS", "C")["config"]
    assert (c["max_deliver"], c["description"], c["filter_subject"], c["ack_policy"]) == (
        7,
        "edited",
        "orders.*",
        "explicit",
    )
    r = orders("consumer", "edit", "ORDERS", "NOPE", "--max-deliver", "3", code=1)
    assert r.stderr.strip() == "Error: consumer 'NOPE' not found on stream 'ORDERS' (err_code 10014); consumers: C"


def test_edit_prints_the_new_config(orders):
    orders("consumer", "add", "ORDERS", "C")
    r = orders("consumer", "edit", "ORDERS", "C", "--max-deliver", "7", "--wait", "1m30s")
    # The changes in consumer info's words and units.
    assert r.stdout.split("\n\n")[0].splitlines() == [
        "Consumer ORDERS > C updated:",
        "  Ack Wait: 30s -> 1m30s",
        "  Maximum Deliveries: unlimited -> 7",
    ]


def test_next_acks(orders):
    orders("consumer", "add", "ORDERS", "NEW", "--filter", "orders.new")
    r = orders("consumer", "next", "ORDERS", "NEW")
    assert r.stdout.startswith("[ORDERS > NEW] orders.new @ ")
    assert "stream seq 1, consumer seq 1, delivered 1x, 2 pending" in r.stdout
    assert '{"id": 1}' in r.stdout and "Acknowledged message" in r.stdout
    msgs = orders.json_lines("consumer", "next", "ORDERS", "NEW", "--count", "2")
    assert [(m["seq"], m["consumer_seq"], m["delivered"], m["pending"], m["action"]) for m in msgs] == [
        (2, 2, 1, 1, "ack"),
        (3, 3, 1, 0, "ack"),
    ]
    assert msgs[0]["data"] == '{"id": 2}' and msgs[0]["headers"] == {"Nats-Msg-Id": "order-2"}
    info = orders.json("consumer", "info", "ORDERS", "NEW")
    assert (info["ack_floor"]["stream_seq"], info["num_ack_pending"], info["num_pending"]) == (3, 0, 0)
    r = orders("consumer", "next", "ORDERS", "NEW", "--wait", "50ms", code=1)
    assert r.stderr.strip() == "Error: no message from consumer 'NEW' of stream 'ORDERS' within 0.05 s"


def test_next_no_ack_nak_term(orders):
    orders("consumer", "add", "ORDERS", "C", "--filter", "orders.new")
    assert orders("consumer", "next", "ORDERS", "C", "--no-ack", "--raw").stdout == '{"id": 1}\n'
    info = orders.json("consumer", "info", "ORDERS", "C")
    assert (info["num_ack_pending"], info["ack_floor"]["stream_seq"]) == (1, 0)
    # nak: delivered again at once
    assert orders.json_lines("consumer", "next", "ORDERS", "C", "--nak")[0]["seq"] == 2
    m = orders.json_lines("consumer", "next", "ORDERS", "C", "--term")[0]
    assert (m["seq"], m["delivered"], m["action"]) == (2, 2, "term")
    assert orders("consumer", "next", "ORDERS", "C", "--nak", "--term", code=2).stderr.count("cannot be combined") == 1


def test_next_fewer_than_count(orders):
    orders("consumer", "add", "ORDERS", "C", "--filter", "orders.shipped")
    r = orders("consumer", "next", "ORDERS", "C", "--count", "3", "--wait", "0s", "--raw")
    assert r.stdout == "shipped\n"
    assert "1 of 3 messages: no more within 0s" in r.stderr


def test_fetch(orders):
    orders("consumer", "add", "ORDERS", "C")
    msgs = orders.json_lines("fetch", "ORDERS", "C", "--batch", "4")
    assert [m["seq"] for m in msgs] == [1, 2, 3, 4]
    assert msgs[3]["headers"] == {"Region": "eu"}
    r = orders("fetch", "ORDERS", "C", "--batch", "10", "--timeout", "0s")
    assert "[ORDERS > C] orders.shipped" in r.stdout
    r = orders("fetch", "ORDERS", "C", "--timeout", "10ms", code=1)
    assert "no message from consumer 'C'" in r.stderr
    assert orders.json("consumer", "info", "ORDERS", "C")["ack_floor"]["stream_seq"] == 5
    r = orders("fetch", "ORDERS", "NOPE", code=1)
    assert r.stderr.strip() == "Error: consumer 'NOPE' not found on stream 'ORDERS' (err_code 10014); consumers: C"


def test_fetch_no_ack_on_a_workqueue(cli):
    cli("stream", "add", "JOBS", "--subjects", "jobs.>", "--retention", "workqueue")
    cli("pub", "jobs.a", "job {{Count}}", "--count", "3")
    cli("consumer", "add", "JOBS", "W")
    assert cli("fetch", "JOBS", "W", "--batch", "2", "--no-ack", "--raw").stdout == "job 1\njob 2\n"
    assert cli.json("stream", "info", "JOBS")["state"]["messages"] == 3
    assert cli("fetch", "JOBS", "W", "--raw").stdout == "job 3\n"
    assert cli.json("stream", "info", "JOBS")["state"]["messages"] == 2  # the acked job left the queue


def test_rm(orders):
    orders("consumer", "add", "ORDERS", "C")
    r = orders("consumer", "rm", "ORDERS", "C", input="n\n", code=1)
    assert "Really delete consumer ORDERS > C?" in r.stdout
    assert orders("consumer", "rm", "ORDERS", "C", "-f").stdout.strip() == "Deleted consumer ORDERS > C"
    assert orders.json("consumer", "ls", "ORDERS") == []
    assert orders("consumer", "ls", "ORDERS").stdout.strip() == "No consumers defined on ORDERS"
    assert (
        orders("consumer", "rm", "ORDERS", "C", "-f", code=1).stderr.strip()
        == "Error: consumer 'C' not found on stream 'ORDERS' (err_code 10014); consumers: none"
    )


def test_ls_and_info_show_the_last_delivery_and_ack(orders):
    orders("consumer", "add", "ORDERS", "C")
    orders("consumer", "add", "ORDERS", "IDLE")

    def last_delivery() -> dict:
        rows = orders("consumer", "ls", "ORDERS").stdout.splitlines()[4:]
        return {row.split()[0]: row.rsplit("  ", 1)[1].strip() for row in rows}

    assert last_delivery() == {"C": "-", "IDLE": "-"}
    text = orders("consumer", "info", "ORDERS", "C").stdout
    assert "Last delivery" not in text and "Last Ack" not in text
    orders("fetch", "ORDERS", "C", "--batch", "2")  # delivers and acks two
    shown = last_delivery()
    assert re.fullmatch(r"\d+s ago", shown["C"]) and shown["IDLE"] == "-"
    text = orders("consumer", "info", "ORDERS", "C").stdout
    assert re.search(r"Last Delivered Message: Consumer sequence: 2 Stream sequence: 2 Last delivery: \d+s ago", text)
    assert re.search(r"Acknowledgment Floor: Consumer sequence: 2 Stream sequence: 2 Last Ack: \d+s ago", text)
    info = orders.json("consumer", "info", "ORDERS", "C")
    assert info["delivered"]["last_active"] <= info["ack_floor"]["last_active"]  # RFC 3339 UTC: ordered as text


# ---------------------------------------------------------------------- ephemeral and push consumers


def test_ephemeral_consumer_named_for_you(orders):
    info = orders.json("consumer", "add", "ORDERS", "--ephemeral", "--pull", "--inactive-threshold", "1h")
    name = info["name"]
    assert name and "durable_name" not in info["config"] and info["config"]["inactive_threshold"] == 3600.0
    assert orders.json("consumer", "ls", "ORDERS", "--names") == [name]
    assert "Ephemeral: true" in orders("consumer", "info", "ORDERS", name).stdout
    # It is a pull consumer: consumer next reads it.
    assert [m["seq"] for m in orders.json_lines("consumer", "next", "ORDERS", name, "--count", "2")] == [1, 2]


def test_ephemeral_consumer_with_a_name_and_its_default_threshold(orders):
    info = orders.json("consumer", "add", "ORDERS", "TMP", "--ephemeral")
    assert (info["name"], info["config"]["name"], info["config"].get("durable_name")) == ("TMP", "TMP", None)
    assert info["config"]["inactive_threshold"] == 5.0  # the server's default for an ephemeral


def test_a_consumer_needs_a_name_unless_ephemeral(orders):
    r = orders("consumer", "add", "ORDERS", code=2)
    assert "give the consumer's NAME (or --ephemeral" in r.stderr
    assert orders.json("consumer", "ls", "ORDERS") == []


def test_push_consumer(orders):
    # (nats-py binds a queue subscription to the consumer named as its queue group.)
    r = orders(
        "consumer",
        "add",
        "ORDERS",
        "workers",
        "--target",
        "monitor.orders",
        "--deliver-group",
        "workers",
        "--heartbeat",
        "5s",
        "--flow-control",
    )
    text = r.stdout
    for line in (
        "Delivery Subject: monitor.orders",
        "Deliver Queue Group: workers",
        "Idle Heartbeat: 5s",
        "Flow Control: true",
        "Active Interest: false",
    ):
        assert line in text
    assert "Pull Mode" not in text and "Waiting Pulls" not in text
    c = orders.json("consumer", "info", "ORDERS", "workers")["config"]
    assert (c["deliver_subject"], c["deliver_group"], c["idle_heartbeat"], c["flow_control"]) == (
        "monitor.orders",
        "workers",
        5.0,
        True,
    )
    # A push subscription on the API receives what the consumer delivers.
    with jetspark.connect(orders.store) as js:
        sub = js.subscribe("orders.>", durable="workers", stream="ORDERS", queue="workers", manual_ack=True)
        msg = sub.next_msg(timeout=30)
        assert (msg.subject, msg.metadata.sequence.stream) == ("orders.new", 1)
        msg.ack()
        sub.unsubscribe()
    # Pull-only commands say what the consumer is.
    for args in (["consumer", "next", "ORDERS", "workers"], ["fetch", "ORDERS", "workers"]):
        assert orders(*args, code=1).stderr == (
            "Error: consumer 'workers' on stream 'ORDERS' is a push consumer (it delivers to monitor.orders): "
            "consumer next and fetch read pull consumers; a push subscription (js.subscribe) reads this one\n"
        )


@pytest.mark.parametrize(
    "flags, error",
    [
        (["--heartbeat", "1s"], "--heartbeat: for a push consumer only; add --target SUBJECT"),
        (["--flow-control"], "--flow-control: for a push consumer only; add --target SUBJECT"),
        (["--deliver-group", "g"], "--deliver-group: for a push consumer only; add --target SUBJECT"),
        (["--pull", "--target", "mon"], "--pull and --target: a consumer is pull (no --target) or push"),
    ],
)
def test_push_flags_need_a_target(orders, flags, error):
    r = orders("consumer", "add", "ORDERS", "P", *flags, code=2)
    assert error in r.stderr
    assert orders.json("consumer", "ls", "ORDERS") == []


@pytest.mark.parametrize(
    "flags, error",
    [
        (["--target", "orders.loop"], "consumer deliver subject forms a cycle (err_code 10081)"),
        (["--target", "mon.*"], "(err_code 10079)"),
        (["--target", "mon", "--flow-control"], "(err_code 10108)"),
        (["--target", "mon", "--heartbeat", "10ms"], "(err_code 10083)"),
    ],
)
def test_push_config_errors_are_the_server_s(orders, flags, error):
    r = orders("consumer", "add", "ORDERS", "P", *flags, code=1)
    assert r.stderr.startswith("Error: ") and error in r.stderr
    assert orders.json("consumer", "ls", "ORDERS") == []


# ---------------------------------------------------------------------- report


def test_report(orders):
    orders("consumer", "add", "ORDERS", "B_PULL", "--filter", "orders.new")
    orders("consumer", "add", "ORDERS", "A_PUSH", "--target", "mon.a", "--ack", "none")
    orders("consumer", "next", "ORDERS", "B_PULL", "--count", "2", "--no-ack")
    rows = orders.json("consumer", "report", "ORDERS")
    assert [r["consumer"] for r in rows] == ["A_PUSH", "B_PULL"]
    push, pull = rows
    assert (push["mode"], push["ack_policy"], push["unprocessed"], push["ack_pending"]) == ("push", "none", 5, 0)
    assert (
        pull["mode"],
        pull["ack_policy"],
        pull["ack_wait"],
        pull["ack_pending"],
        pull["unprocessed"],
        pull["ack_floor"],
    ) == (
        "pull",
        "explicit",
        30.0,
        2,
        1,
        0,
    )
    assert pull["durable"] is True and pull["cluster"] is None
    assert [r["consumer"] for r in orders.json("consumer", "report", "ORDERS", "--sort", "ack-pending")] == [
        "B_PULL",
        "A_PUSH",
    ]
    text = orders("consumer", "report", "ORDERS").stdout
    lines = text.splitlines()
    assert lines[0] == "Consumer report for ORDERS with 2 consumers"
    assert lines[2].split() == [
        "Consumer",
        "Mode",
        "Ack",
        "Policy",
        "Ack",
        "Wait",
        "Ack",
        "Pending",
        "Redelivered",
        "Unprocessed",
        "Ack",
        "Floor",
    ]
    assert lines[4].split() == ["A_PUSH", "Push", "None", "-", "0", "0", "5", "0"]
    assert lines[5].split() == ["B_PULL", "Pull", "Explicit", "30s", "2", "0", "1", "0"]
    orders("stream", "add", "EMPTY", "--subjects", "empty")
    assert orders("consumer", "report", "EMPTY").stdout == "No consumers defined on EMPTY\n"
    assert orders.json("consumer", "report", "EMPTY") == []
    r = orders("consumer", "report", "NOPE", code=1)
    assert r.stderr.startswith("Error: stream 'NOPE' not found (err_code 10059)")
