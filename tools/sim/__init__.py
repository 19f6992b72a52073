"""``haproof sim``: the real store, HA and failover code in a deterministic simulation."""
