"""A second real RocketMQ client against ``haproof namesrv`` + ``haproof broker`` (real
processes): ali-ons, the pure-JavaScript RocketMQ 4.x client from npm (tests/interop/js, locked
in its package-lock.json; ``scripts/bootstrap`` installs it). Its requests carry ACL signature
fields (AccessKey, Signature, OnsChannel), which a broker without ACL ignores.

- JS producer → JS push consumer (clustering): 1,000 messages with tags and keys, every 50th
  body large enough for ali-ons to compress; bodies, tags and keys arrive, and the consumer's
  committed offsets reach the broker.
- Two JS push consumers of one group split the queues (ali-ons rebalancing against our consumer
  list) and commit what they consumed.
- JS producer → our Python consumer, and our Python producer → JS consumer, whose handler fails
  on the first delivery of some messages: they come back through %RETRY%<group> after ali-ons'
  CONSUMER_SEND_MSG_BACK.
"""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import subprocess
import time
from pathlib import Path

import pytest

from broker.client.consumer import Consumer
from broker.client.producer import Producer, SendStatus
from tests.conftest import wait_until
from tests.interop.cluster import committed_offsets, single_broker

JS_DIR = Path(__file__).resolve().parent.parent / "interop" / "js"
N = 1000
BIG_EVERY = 50
TAGS = ("TagA", "TagB", "TagC")
PROCESS_TIMEOUT_S = 180


def _node() -> str:
    node = shutil.which("node")
    if node is None:
        if os.environ.get("CI"):
            pytest.fail("node is not installed: CI machines must run the JavaScript interop test")
        pytest.skip("node is not installed (scripts/bootstrap installs the JS client with npm)")
    if not (JS_DIR / "node_modules" / "ali-ons").is_dir():
        pytest.fail(f"ali-ons is not installed: run scripts/bootstrap (npm ci --prefix {JS_DIR})")
    return node


def _run_js(script: str, *args: str, timeout_s: float = PROCESS_TIMEOUT_S) -> list[dict]:
    proc = subprocess.run(
        [_node(), script, *args],
        cwd=JS_DIR,
        capture_output=True,
        timeout=timeout_s,
    )
    lines = [json.loads(x) for x in proc.stdout.decode().splitlines() if x.startswith("{")]
    assert proc.returncode == 0, f"{script} exit {proc.returncode}: {proc.stderr.decode()[-3000:]}"
    return lines


def _expected_body(i: int) -> str:
    head = f"body-{i}"
    return head + "." * (5000 - len(head)) if i % BIG_EVERY == 0 else head


def _expected_keys(i: int) -> str:
    return f"key-{i} k{i % 7}"


def _produce_js(ns_addr: str, broker_addr: str, topic: str) -> list[dict]:
    out = _run_js(
        "producer.js",
        *("--namesrv", ns_addr, "--topic", topic, "--count", str(N)),
        *("--create-on", broker_addr, "--big-every", str(BIG_EVERY)),
    )
    assert out[0] == {"created": topic, "on": broker_addr, "queues": 4}
    sent = [x for x in out if "i" in x]
    assert out[-1] == {"done": True, "sent": N}
    assert [x["i"] for x in sent] == list(range(N))
    assert {x["status"] for x in sent} == {"SEND_OK"}
    assert len({x["msgId"] for x in sent}) == N
    return sent


def test_js_producer_and_push_consumer_with_offsets_on_the_broker(tmp_path):
    topic, group = "JsInterop", "CG_js"
    with single_broker(tmp_path) as (ns, broker):
        sent = _produce_js(ns.addr, broker.addr, topic)
        by_queue: dict[int, int] = {}
        for x in sent:
            by_queue[x["queueId"]] = max(by_queue.get(x["queueId"], -1), x["queueOffset"])
        out = _run_js(
            "consumer.js",
            *("--namesrv", ns.addr, "--topic", topic, "--group", group, "--expect", str(N)),
        )
        got = [x for x in out if "msgId" in x]
        assert out[-1] == {"closed": True, "consumed": N}
        by_id = {x["msgId"]: x for x in got}
        assert set(by_id) == {x["msgId"] for x in sent}
        for x in sent:
            m = by_id[x["msgId"]]
            i = x["i"]
            assert m["topic"] == topic and m["reconsumeTimes"] == 0
            assert m["body"] == _expected_body(i), i  # compressed ones inflated by ali-ons
            assert m["tags"] == TAGS[i % 3] and m["keys"] == _expected_keys(i)
            assert (m["queueId"], m["queueOffset"]) == (x["queueId"], x["queueOffset"])
        # ali-ons commits with the pull flag and with a oneway UPDATE_CONSUMER_OFFSET at close
        want = {q: off + 1 for q, off in by_queue.items()}
        wait_until(
            lambda: committed_offsets(broker.addr, group, topic, 4) == want,
            timeout_s=30,
            what=f"committed offsets {want}",
        )

        # the same messages, consumed by our Python consumer (another group)
        async def consume_py() -> dict[str, object]:
            c = Consumer("CG_py", [ns.addr], topic, persist_interval_ms=0)
            got: dict[str, object] = {}
            deadline = time.monotonic() + 60
            try:
                while len(got) < N:
                    assert time.monotonic() < deadline, f"python consumer got {len(got)} of {N}"
                    for rec in await c.poll():
                        got[rec.msg_id] = rec
            finally:
                await c.close()
            return got

        py = asyncio.run(consume_py())
        assert set(py) == {x["msgId"] for x in sent}
        for x in sent:
            rec, i = py[x["msgId"]], x["i"]
            assert rec.body.decode() == _expected_body(i)
            assert rec.tags == TAGS[i % 3] and rec.properties["KEYS"] == _expected_keys(i)
        assert committed_offsets(broker.addr, "CG_py", topic, 4) == want


def test_python_producer_to_js_consumer_with_retries_through_the_broker(tmp_path):
    topic, group, n, fail_first = "PyToJs", "CG_js_retry", 200, 3
    with single_broker(tmp_path, messageDelayLevel="1s 2s") as (ns, broker):

        async def produce() -> list:
            p = Producer("PG_py", [ns.addr])
            try:
                out = []
                for i in range(n):
                    res = await p.send(topic, f"py-{i}".encode(), tags=TAGS[i % 3], keys=f"pk{i}")
                    assert res.status is SendStatus.SEND_OK
                    out.append(res)
                return out
            finally:
                await p.close()

        asyncio.run(produce())
        out = _run_js(
            "consumer.js",
            *("--namesrv", ns.addr, "--topic", topic, "--group", group),
            *("--expect", str(n), "--fail-first", str(fail_first)),
        )
        got = [x for x in out if "msgId" in x]
        assert out[-1] == {"closed": True, "consumed": n}
        firsts = [x for x in got if x["reconsumeTimes"] == 0]
        failed = [x for x in firsts if x["failing"]]
        retried = [x for x in got if x["reconsumeTimes"] == 1]
        assert len(failed) == fail_first
        # each failed message came back once through %RETRY%, under its original topic
        assert sorted(x["body"] for x in retried) == sorted(x["body"] for x in failed)
        assert {x["topic"] for x in got} == {topic}
        assert sorted(int(x["body"].split("-")[1]) for x in firsts) == list(range(n))
        for x in got:
            i = int(x["body"].split("-")[1])
            assert x["tags"] == TAGS[i % 3] and x["keys"] == f"pk{i}"
        wait_until(
            lambda: sum(committed_offsets(broker.addr, group, topic, 4).values()) == n,
            timeout_s=30,
            what="offsets of the topic committed",
        )
        wait_until(
            lambda: committed_offsets(broker.addr, group, "%RETRY%" + group, 1) == {0: fail_first},
            timeout_s=30,
            what="offsets of the retry topic committed",
        )


def _json_lines(path: Path) -> list[dict]:
    """Complete JSON lines written so far (a line still being written is left out)."""
    text = path.read_text() if path.exists() else ""
    return [json.loads(x) for x in text.split("\n")[:-1] if x.startswith("{")]


def test_two_js_consumers_of_a_group_share_the_queues(tmp_path):
    topic, group = "JsShared", "CG_js_two"
    node = _node()
    with single_broker(tmp_path) as (ns, broker):
        _run_js(
            "producer.js",
            *("--namesrv", ns.addr, "--topic", topic, "--count", "0", "--create-on", broker.addr),
        )
        outs = [tmp_path / f"consumer-{k}.jsonl" for k in range(2)]
        procs = []
        try:
            for out in outs:
                with open(out, "wb") as fh, open(out.with_suffix(".err"), "wb") as err:
                    procs.append(
                        subprocess.Popen(
                            [
                                node,
                                "consumer.js",
                                "--namesrv",
                                ns.addr,
                                "--topic",
                                topic,
                                "--group",
                                group,
                                "--expect",
                                "0",
                            ],
                            cwd=JS_DIR,
                            stdout=fh,
                            stderr=err,
                        )
                    )

            def assignments() -> list[list[int]] | None:
                latest = []
                for out in outs:
                    assigned = [x["assigned"] for x in _json_lines(out) if "assigned" in x]
                    if not assigned:
                        return None
                    latest.append(assigned[-1])
                return latest

            # both rebalanced onto two queues each (ali-ons rebalances every 2 s here)
            mine, theirs = wait_until(
                lambda: (a := assignments()) and sorted(a[0] + a[1]) == [0, 1, 2, 3] and a,
                timeout_s=60,
                what="the group's queues split between the two consumers",
            )
            assert len(mine) == len(theirs) == 2
            sent = _produce_js(ns.addr, broker.addr, topic)

            def received() -> list[list[dict]]:
                return [[x for x in _json_lines(out) if "msgId" in x] for out in outs]

            wait_until(
                lambda: len({m["msgId"] for got in received() for m in got}) == N,
                timeout_s=60,
                what=f"{N} messages consumed by the group",
            )
            for proc in procs:
                proc.terminate()  # SIGTERM: the consumer closes and commits its offsets
            assert [proc.wait(PROCESS_TIMEOUT_S) for proc in procs] == [0, 0]
        finally:
            for proc in procs:
                if proc.poll() is None:
                    proc.kill()
                    proc.wait()
        got = received()
        for own, queues in zip(got, (mine, theirs), strict=True):
            assert own and {m["queueId"] for m in own} <= set(queues)
        assert sorted(m["msgId"] for own in got for m in own) == sorted(x["msgId"] for x in sent)
        want: dict[int, int] = {}
        for x in sent:
            want[x["queueId"]] = max(want.get(x["queueId"], 0), x["queueOffset"] + 1)
        wait_until(
            lambda: committed_offsets(broker.addr, group, topic, 4) == want,
            timeout_s=30,
            what=f"committed offsets {want}",
        )
