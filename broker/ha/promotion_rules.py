"""Who ``promote`` (``haproof admin promote``, classic HA) may make master without losing
acknowledged bytes.

A candidate ranks by (the epoch of the last byte it holds, its log end): an epoch entry naming
no byte the node holds (a power loss took them) does not rank it (``broker/store/epoch.py``).
One behind another reachable node is refused: the bytes only the others hold, acknowledged ones
included, would be cut when they follow it.

With SYNC_MASTER every acknowledged byte is on the master and on at least one slave, and the
slaves' logs are prefixes of the master's: so while at most one node of the group is
unreachable (the failed master, or a slave while the master answers), the reachable nodes hold
every acknowledged byte and the best-ranked of them holds them all. With two or more
unreachable, one of them may be the only holder of the newest acknowledged bytes (a slave that
went down during the failover; ``haproof sim`` seed 664625287): refused too.
"""

from __future__ import annotations

from broker import planted_bugs
from broker.ha.reconcile import FailoverError
from broker.store.epoch import EpochFile, held_epoch


class UncleanPromotionError(FailoverError):
    """The node to promote may lack acknowledged bytes (see ``promote``'s ``unclean``)."""


def rank(doc: dict) -> tuple[int, int]:
    """(the epoch of the last byte held, log end) of a node's GET_BROKER_EPOCH_CACHE answer."""
    end = int(doc.get("maxOffset", 0))
    if "epochList" not in doc:
        return int(doc.get("epoch", 0)), end
    return held_epoch(EpochFile.from_json(doc["epochList"] or []), end), end


def refuse_unclean(target: dict, nodes: dict[str, dict], unreachable: list[str]) -> None:
    """Refuse to promote ``target`` when a reachable node is ahead of it, or when two or more
    nodes of the group did not answer."""
    if planted_bugs.active("unclean-election"):
        return  # the planted bug: any named node is promoted
    if len(unreachable) >= 2:
        raise UncleanPromotionError(
            f"{len(unreachable)} nodes of the group are unreachable ({', '.join(unreachable)}): "
            "beside the failed master, one may hold acknowledged bytes the reachable nodes "
            "lack; bring them back, or pass --unclean to accept that loss"
        )
    ahead = [d for d in nodes.values() if rank(d) > rank(target)]
    if ahead:
        best = max(ahead, key=rank)
        raise UncleanPromotionError(
            f"node {target['nodeName']} (epoch {rank(target)[0]}, log end {rank(target)[1]}) "
            f"is behind {best['nodeName']} (epoch {rank(best)[0]}, log end {rank(best)[1]}): "
            "promoting it would cut what only the others hold; promote the node ahead, or "
            "pass --unclean to accept that loss"
        )
