"""ali-ons (a real RocketMQ client, tests/interop/js) against a SYNC_MASTER group of three in
controller mode, real processes on 127.0.0.1 (issue #30): the JS producer sends all along; kill -9
the master mid-run; the controller elects a slave by itself, the client goes on sending to it (a
failed send is reported and the next one goes, as an application would), and every message the
client saw acknowledged (SEND_OK) is on the elected master, read back by the JS push consumer
and by offset."""

from __future__ import annotations

import asyncio
import subprocess

from broker.remoting.codes import RequestCode, ResponseCode
from tests.client.test_interop_js import JS_DIR, _json_lines, _node, _run_js
from tests.support.cluster import knows_topic
from tests.support.controller_cluster import ControllerCluster
from tests.support.waiting import wait_for

TOPIC = "JsFailover"
COUNT = 600
KILL_AFTER = 100  # acknowledged sends before the master is killed


def test_ali_ons_goes_on_through_a_controller_failover(tmp_path):
    node = _node()
    asyncio.run(_failover(tmp_path, node))


async def _failover(tmp_path, node: str) -> None:
    cluster = await ControllerCluster.start(tmp_path)
    proc = None
    try:
        first, epoch = await cluster.wait_master()
        await cluster.wait_in_sync(first, 2)
        ns = cluster.ns.addr
        await asyncio.to_thread(
            _run_js,
            "producer.js",
            "--namesrv",
            ns,
            "--topic",
            TOPIC,
            "--count",
            "0",
            "--create-on",
            first,
        )
        for n in cluster.nodes.values():  # the slaves took the topic's config from the master
            await wait_for(
                lambda n=n: asyncio.to_thread(knows_topic, n.addr, TOPIC), 30_000, what="topic"
            )
        out = tmp_path / "producer.jsonl"
        with open(out, "wb") as fh, open(out.with_suffix(".err"), "wb") as err:
            proc = subprocess.Popen(
                [
                    node,
                    "producer.js",
                    "--namesrv",
                    ns,
                    "--topic",
                    TOPIC,
                    "--count",
                    str(COUNT),
                    "--keep-going",
                    "1",
                    "--route-poll-ms",
                    "500",
                ],
                cwd=JS_DIR,
                stdout=fh,
                stderr=err,
            )

        def acked() -> list[dict]:
            return [x for x in _json_lines(out) if x.get("status") == "SEND_OK"]

        await wait_for(lambda: len(acked()) >= KILL_AFTER, 60_000, what="sends before the kill")
        cluster.kill(cluster.node_at(first).name)
        killed_at = len(_json_lines(out))
        second, _ = await cluster.wait_master(epoch, 30_000)
        assert await asyncio.to_thread(proc.wait, 180) == 0, out.with_suffix(".err").read_text()
        lines = _json_lines(out)
        assert lines[-1] == {"done": True, "sent": COUNT}
        sent = acked()
        after = [x for x in lines[killed_at:] if x.get("status") == "SEND_OK"]
        assert len(after) >= 100, "the client did not go on with the elected master"
        for x in sent:  # each acknowledged message by its offset on the elected master
            rec = await cluster.pull(second, TOPIC, x["queueId"], x["queueOffset"])
            assert rec.body.decode() == f"body-{x['i']}", x
        total = sum([await _max_offset(cluster, second, q) for q in range(4)])
        got = await asyncio.to_thread(
            _run_js,
            "consumer.js",
            "--namesrv",
            ns,
            "--topic",
            TOPIC,
            "--group",
            "CG_failover",
            "--expect",
            str(total),
        )
        consumed = {x["msgId"] for x in got if "msgId" in x}
        lost = [x["i"] for x in sent if x["msgId"] not in consumed]
        assert not lost, f"{len(lost)} acknowledged messages not consumed: {lost[:10]}"
    finally:
        if proc is not None and proc.poll() is None:
            proc.kill()
            proc.wait()
        await cluster.close()


async def _max_offset(cluster: ControllerCluster, addr: str, queue_id: int) -> int:
    fields = {"topic": TOPIC, "queueId": queue_id}
    resp = await cluster.invoke(addr, RequestCode.GET_MAX_OFFSET, fields, 5000)
    assert resp is not None and resp.code == ResponseCode.SUCCESS
    return int(resp.ext_fields["offset"])
