import functools
import json

import pytest

from broker.client.consumer import BROADCASTING, Consumer
from broker.client.offsets import LocalFileOffsetStore, OffsetTable, allocate_averagely
from broker.client.routes import MessageQueue
from broker.remoting.codes import RequestCode, ResponseCode
from broker.remoting.command import RemotingCommand
from broker.remoting.server import RemotingServer
from contracts.errors import CorruptFileError
from contracts.record.builder import encode_message
from contracts.record.model import Message
from tests.client.fakes import register, start_namesrv
from tests.support.aio import async_test
from tests.support.waiting import wait_for

TOPICS = {"T": {"readQueueNums": 4, "writeQueueNums": 4, "perm": 6}}


def test_allocate_averagely_matches_rocketmq():
    mqs = [MessageQueue("T", "b", i) for i in range(5)]
    cids = ["c2", "c1"]
    assert [m.queue_id for m in allocate_averagely(mqs, cids, "c1")] == [0, 1, 2]
    assert [m.queue_id for m in allocate_averagely(mqs, cids, "c2")] == [3, 4]
    three = [allocate_averagely(mqs[:2], ["a", "b", "c"], c) for c in "abc"]
    assert [[m.queue_id for m in x] for x in three] == [[0], [1], []]
    assert allocate_averagely(mqs, cids, "stranger") == []


def test_offsets_only_increase():
    t, mq = OffsetTable(), MessageQueue("T", "b", 0)
    t.update(mq, 5)
    t.update(mq, 3)
    assert t.read(mq) == 5
    t.update(mq, 3, increase_only=False)
    assert t.read(mq) == 3


def test_local_offset_file_roundtrip_and_corrupt(tmp_path):
    path = str(tmp_path / "offsets.json")
    s = LocalFileOffsetStore(path)
    s.update(MessageQueue("T@x", "b", 2), 9)
    s.persist()
    assert LocalFileOffsetStore.load(path).read(MessageQueue("T@x", "b", 2)) == 9
    (tmp_path / "bad.json").write_text("{")
    with pytest.raises(CorruptFileError, match="bad.json"):
        LocalFileOffsetStore.load(str(tmp_path / "bad.json"))


class FakeBroker:
    def __init__(self, n_per_queue):
        self.members, self.pulls, self.updates = set(), [], []
        self.committed = {}
        self.queues = {}
        phys = 0
        for qid in range(4):
            recs = []
            for i in range(n_per_queue):
                enc = encode_message(
                    Message("T", b"q%d-%d" % (qid, i), queue_id=qid), ("127.0.0.1", 10911)
                )
                recs.append(bytes(enc.stamp(i, phys, 1)))
                phys += len(recs[-1])
            self.queues[qid] = recs
        self.server = RemotingServer(
            {
                RequestCode.HEART_BEAT: self.heartbeat,
                RequestCode.GET_CONSUMER_LIST_BY_GROUP: self.members_list,
                RequestCode.PULL_MESSAGE: self.pull,
                RequestCode.QUERY_CONSUMER_OFFSET: self.query,
                RequestCode.UPDATE_CONSUMER_OFFSET: self.update,
            }
        )

    async def heartbeat(self, conn, req):
        self.members.add(json.loads(req.body)["clientID"])
        self.last_conn = conn
        return req.make_response(ResponseCode.SUCCESS)

    async def members_list(self, conn, req):
        body = json.dumps({"consumerIdList": sorted(self.members)}).encode()
        return req.make_response(ResponseCode.SUCCESS, body=body)

    async def query(self, conn, req):
        key = (req.field("consumerGroup"), req.int_field("queueId"))
        if key not in self.committed:
            return req.make_response(ResponseCode.QUERY_NOT_FOUND)
        return req.make_response(ResponseCode.SUCCESS, ext_fields={"offset": self.committed[key]})

    async def pull(self, conn, req):
        self.pulls.append(dict(req.ext_fields))
        qid, off = req.int_field("queueId"), req.int_field("queueOffset")
        recs = self.queues[qid][off : off + req.int_field("maxMsgNums")]
        if not recs:
            return req.make_response(
                ResponseCode.PULL_NOT_FOUND, ext_fields={"nextBeginOffset": off}
            )
        return req.make_response(
            ResponseCode.SUCCESS,
            ext_fields={"nextBeginOffset": off + len(recs)},
            body=b"".join(recs),
        )

    async def update(self, conn, req):
        key = (req.field("consumerGroup"), req.int_field("queueId"))
        self.updates.append((key, req.int_field("commitOffset")))
        self.committed[key] = req.int_field("commitOffset")
        return req.make_response(ResponseCode.SUCCESS)


_poll_until = functools.partial(wait_for, timeout_ms=5_000)  # tests/support/waiting.py


@async_test
async def test_clustering_two_members_split_queues_and_commit_offsets():
    ns = await start_namesrv()
    fb = FakeBroker(3)
    await fb.server.start()
    await register(ns, fb.server, "b", TOPICS)
    nsaddr = [f"127.0.0.1:{ns.server.port}"]
    clock = [0]
    c1 = Consumer("G", nsaddr, "T", client_id="c1", clock_ms=lambda: clock[0])
    c2 = Consumer("G", nsaddr, "T", client_id="c2", clock_ms=lambda: clock[0])
    await c1.heartbeat()
    await c2.heartbeat()
    got1, got2 = await c1.poll(), await c2.poll()
    assert [m.queue_id for m in c1.assigned] == [0, 1]
    assert [m.queue_id for m in c2.assigned] == [2, 3]
    assert sorted(r.body for r in got1 + got2) == sorted(
        b"q%d-%d" % (q, i) for q in range(4) for i in range(3)
    )
    assert fb.pulls[0]["sysFlag"] == "4" and fb.pulls[0]["commitOffset"] == "0"
    await c1.poll()  # second pull carries the commit-offset flag
    assert int(fb.pulls[-1]["sysFlag"]) & 1 and fb.pulls[-1]["commitOffset"] == "3"
    assert fb.updates == []  # persist interval not reached
    clock[0] = 5000
    await c1.poll()
    await _poll_until(lambda: len(fb.updates) == 2)
    assert sorted(fb.updates) == [(("G", 0), 3), (("G", 1), 3)]
    # a broker notification triggers a rebalance on the next poll
    await fb.last_conn.invoke_oneway(
        RemotingCommand.request(RequestCode.NOTIFY_CONSUMER_IDS_CHANGED, {"consumerGroup": "G"})
    )
    await _poll_until(lambda: c2.rebalance_needed)
    fb.members.discard("c1")
    await c2.poll()
    assert [m.queue_id for m in c2.assigned] == [0, 1, 2, 3]
    await c1.close()
    await c2.close()
    await fb.server.stop()
    await ns.server.stop()


@async_test
async def test_broadcasting_reads_everything_and_writes_offset_file(tmp_path):
    ns = await start_namesrv()
    fb = FakeBroker(2)
    await fb.server.start()
    await register(ns, fb.server, "b", TOPICS)
    path = str(tmp_path / "off.json")
    c = Consumer("G", [f"127.0.0.1:{ns.server.port}"], "T", mode=BROADCASTING, offset_file=path)
    assert len(await c.poll()) == 8
    await c.close()
    doc = json.loads(open(path).read())
    assert doc["offsetTable"] == {f"T@b@{q}": 2 for q in range(4)}
    await fb.server.stop()
    await ns.server.stop()


def test_delivered_records_are_inflated_and_retries_keep_their_topic():
    import zlib

    from broker.client.consumer import as_delivered, decode_pull_body
    from contracts.record.layout import SYSFLAG_COMPRESSED

    body = b"x" * 5000
    msg = Message("%RETRY%G", zlib.compress(body), properties={"RETRY_TOPIC": "T"})
    msg.sysflag = SYSFLAG_COMPRESSED
    raw = bytes(encode_message(msg, ("127.0.0.1", 10911)).stamp(0, 0, 1))
    (rec,) = decode_pull_body(raw, "test")
    rec = as_delivered(rec, "G")
    assert rec.body == body and rec.topic == "T"
    (other,) = decode_pull_body(raw, "test")
    assert as_delivered(other, "OtherGroup").topic == "%RETRY%G"  # not this group's retry


async def _with_retry_topic(fb: FakeBroker):
    """A name server routing T and %RETRY%G to ``fb`` (started), and group G's consumer."""
    ns = await start_namesrv()
    await fb.server.start()
    topics = dict(TOPICS, **{"%RETRY%G": {"readQueueNums": 1, "writeQueueNums": 1, "perm": 6}})
    await register(ns, fb.server, "b", topics)
    return ns, Consumer("G", [f"127.0.0.1:{ns.server.port}"], "T", client_id="c1")


@async_test
async def test_clustering_consumer_subscribes_its_retry_topic():
    fb = FakeBroker(1)
    ns, c = await _with_retry_topic(fb)
    await c.poll()
    assert [(m.topic, m.queue_id) for m in c.assigned] == [
        *(("T", q) for q in range(4)),
        ("%RETRY%G", 0),
    ]
    assert {p["topic"] for p in fb.pulls} == {"T", "%RETRY%G"}
    await c.close()
    await fb.server.stop()
    await ns.server.stop()


class _RetryTopicRefused(FakeBroker):
    """Refuses pulls of the retry topic (as a slave that has not copied its config yet)."""

    refuse_retry = True

    async def pull(self, conn, req):
        if self.refuse_retry and req.field("topic").startswith("%RETRY%"):
            self.pulls.append(dict(req.ext_fields))
            return req.make_response(ResponseCode.SUBSCRIPTION_NOT_EXIST, remark="no such group")
        return await super().pull(conn, req)


@async_test
async def test_a_failed_pull_of_one_queue_keeps_the_records_of_the_others():
    fb = _RetryTopicRefused(3)
    ns, c = await _with_retry_topic(fb)
    got = await c.poll()  # the retry queue is pulled last and refused
    assert sorted(r.body for r in got) == sorted(
        b"q%d-%d" % (q, i) for q in range(4) for i in range(3)
    )
    assert any(p["topic"] == "%RETRY%G" for p in fb.pulls)
    # nothing new anywhere and the retry queue still refused: an empty poll, no raise
    assert await c.poll() == []
    fb.queues[0].append(fb.queues[0][0])  # one more record in queue 0 ...
    assert [r.queue_offset for r in await c.poll()] == [0]  # ... (a copy of its first)
    await c.close()
    await fb.server.stop()
    await ns.server.stop()


@async_test
async def test_a_queue_that_keeps_failing_warns_once_and_says_when_it_works_again(caplog):
    import logging

    fb = _RetryTopicRefused(1)
    ns, c = await _with_retry_topic(fb)
    with caplog.at_level(logging.DEBUG, logger="broker.client.consumer"):
        for _ in range(5):
            await c.poll()
        (retry_q,) = [mq for mq in c.assigned if mq.topic == "%RETRY%G"]
        assert c.failing == {retry_q: 5}
        failures = [r for r in caplog.records if "failed (" in r.getMessage()]
        assert [r.levelno for r in failures] == [logging.WARNING] + [logging.DEBUG] * 4
        assert "(5 in a row)" in failures[-1].getMessage()
        fb.refuse_retry = False  # the broker takes the retry queue's pulls again
        await c.poll()
    assert c.failing == {}
    assert any("works again after 5 failed polls" in r.getMessage() for r in caplog.records)
    await c.close()
    await fb.server.stop()
    await ns.server.stop()
