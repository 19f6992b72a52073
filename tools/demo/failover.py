"""The demo's failover: kill -9 the master, promote the slave (``haproof admin promote``), go
on with traffic on the new master, and bring the old master back as its slave."""

from __future__ import annotations

import asyncio

from tools.demo.base import (
    CONSUMER_GROUP,
    GROUP,
    MASTER,
    SLAVE,
    Demo,
    DemoError,
    haproof,
    has_module,
)
from tools.demo.cluster import start_node, wait_slave
from tools.demo.traffic import consume, produce, wait_snapshot_offsets


def promote_slave(d: Demo) -> None:
    """``haproof admin promote`` the slave, as an operator would."""
    res = haproof(d, "admin", "promote", "--broker-name", GROUP, "--node", SLAVE,
                  "--namesrv", d.procs["namesrv"].addr, timeout_s=120)  # fmt: skip
    if res.returncode != 0:
        raise DemoError(f"promote failed: {res.stderr.strip() or res.stdout.strip()}")
    d.say(f"  {res.stdout.strip() or f'{SLAVE} promoted'}")


def failover(d: Demo) -> None:
    d.step("failover: kill -9 the master, promote the slave, old master rejoins")
    if not has_module("broker.ha.failover"):
        d.skip("failover", "promotion is not built yet (issue #4)")
        return
    d.procs[MASTER].kill()
    d.say(f"  {MASTER} killed (-9)")
    promote_slave(d)
    start_node(d, MASTER, 1, "SLAVE", master=SLAVE)
    d.say(f"  {MASTER} restarted as a slave of {SLAVE} (it truncates what it alone had)")
    wait_slave(d, d.procs[SLAVE].addr)
    d.roles = {MASTER: (1, "SLAVE", 2), SLAVE: (0, "SYNC_MASTER", 2)}
    asyncio.run(produce(d, d.args.messages // 2, "after-failover"))
    got, committed = asyncio.run(consume(d, d.args.messages // 2))
    d.say(
        f"  consumer group {CONSUMER_GROUP} consumed {got} from the new master and "
        f"committed {sum(committed.values())} (before the failover: "
        f"{sum(d.committed.values())})"
    )
    wait_snapshot_offsets(d, SLAVE, committed)
