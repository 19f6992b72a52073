"""UNIQ_KEY ids in RocketMQ's layout: ip, pid, instance, ms since the 1st of the month, counter."""

import os
import socket
import struct
import time

from broker.client.uniq_id import UniqIdGenerator, ip_of, month_start_ms, nearly_time_ms


def test_layout_and_fields_read_back() -> None:
    gen = UniqIdGenerator(ip=socket.inet_aton("10.1.2.3"), pid=0x12345)
    before = time.time_ns() // 1_000_000
    a, b = gen(), gen()
    after = time.time_ns() // 1_000_000
    assert len(a) == 32 and a == a.upper() and bytes.fromhex(a)
    ip, pid, _instance, elapsed, counter = struct.unpack(">4sHIIH", bytes.fromhex(a))
    assert ip_of(a) == "10.1.2.3" and ip == bytes([10, 1, 2, 3])
    assert pid == 0x2345  # the low 16 bits
    assert a[:20] == b[:20] == gen.prefix
    assert int(b[-4:], 16) == counter + 1
    assert before <= month_start_ms(before) + elapsed <= after
    assert before <= nearly_time_ms(a, after + 1) <= after


def test_ids_are_unique_and_differ_between_instances() -> None:
    gen, other = UniqIdGenerator(), UniqIdGenerator()
    ids = {gen() for _ in range(70_000)}  # past the 16-bit counter's wrap
    assert len(ids) == 70_000
    assert gen.prefix != other.prefix


def test_month_start_is_the_first_at_midnight() -> None:
    now_ms = time.time_ns() // 1_000_000
    start = time.localtime(month_start_ms(now_ms) / 1000)
    assert (start.tm_mday, start.tm_hour, start.tm_min, start.tm_sec) == (1, 0, 0, 0)
    assert start.tm_mon == time.localtime(now_ms / 1000).tm_mon


def test_an_id_from_last_month_reads_back_in_last_month() -> None:
    gen = UniqIdGenerator()
    made = gen()
    start = month_start_ms(time.time_ns() // 1_000_000)
    # read just after the 1st of next month: the elapsed field puts it in the month before
    next_month = month_start_ms(start + 32 * 86_400_000)
    assert abs(nearly_time_ms(made, next_month + 1000) - time.time_ns() // 1_000_000) < 60_000


def test_a_forked_child_gets_its_own_prefix() -> None:
    from broker.client.uniq_id import new_uniq_id

    parent = new_uniq_id()
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child
        os.write(w, new_uniq_id().encode())
        os._exit(0)
    os.close(w)
    child = os.read(r, 64).decode()
    os.waitpid(pid, 0)
    os.close(r)
    assert child[:20] != parent[:20]
