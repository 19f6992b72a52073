"""The fault schedule of one seed: steps drawn up front, each removable by the shrinker.

A step names a role (``master``, ``slave``, ``any``) or two roles, resolved when it runs with
the run's random generator, so a step means the same thing in any schedule it is left in.
"""

from __future__ import annotations

import random
from dataclasses import dataclass

# kind -> weight
KINDS = {"kill": 3, "power": 3, "partition": 3, "slow-disk": 1, "clock-jump": 1}


@dataclass(frozen=True)
class Step:
    index: int
    at_s: float
    # kill, power, restart, partition, heal, slow-disk, fast-disk, clock-jump, ctl-kill,
    # ctl-power (the controller crashes; it restarts after ``value`` s)
    kind: str
    target: str  # master, slave, any, down (restart), all (heal), controller
    value: float = 0.0  # slow-disk ms, clock-jump ms, kill/power/ctl-*: s down (0: 1 to 3)

    def describe(self) -> str:
        extra = f" {self.value:+.0f}ms" if self.kind in ("slow-disk", "clock-jump") else ""
        if self.kind in ("kill", "power", "ctl-kill", "ctl-power") and self.value:
            extra = f" for {self.value:.1f}s"
        return f"step {self.index} {self.kind} {self.target}{extra}"


@dataclass(frozen=True)
class Knobs:
    """Per-seed choices that are not steps (FoundationDB's BUGGIFY-style crash points)."""

    crash_after_truncation: bool
    crash_after_ack: float  # probability a master loses power right after an acknowledgement
    producers: int
    careless: bool  # the operator sometimes names any up node (promote must refuse a lagging one)


def draw(seed: int, seconds: float, controller: bool = False) -> tuple[list[Step], Knobs]:
    """The steps and knobs of ``seed``; with ``controller``, partitions also cut the master
    from the controller (alone, or from everyone: #7017's two masters), and a lagging failover
    (a slave cut from the master, then the master killed) makes elections rank candidates."""
    rng = random.Random(seed)
    knobs = Knobs(
        crash_after_truncation=rng.random() < 0.75,
        crash_after_ack=rng.choice((0.0, 0.0, 0.01, 0.05)),
        producers=rng.randint(1, 3),
        careless=rng.random() < 0.5,
    )
    raw: list[tuple[float, str, str, float]] = []
    n = max(1, int(seconds / 3 * rng.uniform(0.5, 1.5)))
    kinds = list(KINDS) + (["lagging-failover"] if controller else [])
    weights = list(KINDS.values()) + ([2] if controller else [])
    for _ in range(n):
        at = round(rng.uniform(1.0, max(1.5, seconds - 2.0)), 3)
        kind = rng.choices(kinds, weights)[0]
        back = round(at + rng.uniform(0.5, 8.0), 3)
        if kind in ("kill", "power"):
            raw.append((at, kind, rng.choice(("master", "master", "slave", "any")), 0.0))
            raw.append((back, "restart", "down", 0.0))
        elif kind == "partition":
            targets = ("master-slave", "slave-slave", "master-all")
            if controller:
                targets += ("master-ctl", "master-all-ctl")
            raw.append((at, kind, rng.choice(targets), 0.0))
            raw.append((back, "heal", "all", 0.0))
        elif kind == "slow-disk":
            raw.append((at, kind, rng.choice(("master", "slave")), rng.uniform(50, 1500)))
            raw.append((back, "fast-disk", "all", 0.0))
        elif kind == "lagging-failover":  # a slave falls behind, then the master dies
            raw.append((at, "partition", "master-slave", 0.0))
            died = round(at + rng.uniform(0.3, 2.5), 3)
            down_s = rng.uniform(5.0, 8.0)  # past the controller's heartbeat timeout
            raw.append((died, rng.choice(("kill", "power")), "master", down_s))
            raw.append((round(died + rng.uniform(0.5, 3.0), 3), "heal", "all", 0.0))
            raw.append((back + 3.0, "restart", "down", 0.0))
        else:
            raw.append((at, kind, "any", rng.uniform(-2000, 2000)))
    raw.sort()
    steps = [Step(i, at, kind, target, value) for i, (at, kind, target, value) in enumerate(raw)]
    if controller:  # numbered after the others: a shrunk schedule's step numbers keep meaning
        extra = _controller_faults(seed, seconds)
        steps += [Step(len(steps) + i, *s) for i, s in enumerate(extra)]
        steps.sort(key=lambda s: (s.at_s, s.index))
    return steps, knobs


def _controller_faults(seed: int, seconds: float) -> list[tuple[float, str, str, float]]:
    """The controller's own faults, from a generator of their own (the other steps of a seed
    stay what they were): a crash (kill or power loss) and its restart after a drawn delay
    (a blink or seconds); every broker cut from the controller (leases end; nobody elects)
    until a heal; or the master cut from the controller, then the controller blinking (its
    slaves heartbeat the new process first, while the master's lease still holds)."""
    rng = random.Random(seed * 104_729 + 3)
    out: list[tuple[float, str, str, float]] = []
    for _ in range(rng.choice((0, 1, 1, 2))):
        at = round(rng.uniform(1.0, max(1.5, seconds - 2.0)), 3)
        kind = rng.choice(("ctl-kill", "ctl-power", "partition", "blind-restart"))
        down = round(rng.choice((rng.uniform(0.05, 0.5), rng.uniform(0.5, 8.0))), 3)
        if kind == "partition":
            out.append((at, kind, "all-ctl", 0.0))
            out.append((round(at + rng.uniform(0.3, 8.0), 3), "heal", "all", 0.0))
        elif kind == "blind-restart":
            out.append((at, "partition", "master-ctl", 0.0))
            crash = round(at + rng.uniform(0.0, 1.5), 3)
            out.append(
                (
                    crash,
                    rng.choice(("ctl-kill", "ctl-power")),
                    "controller",
                    max(0.05, round(down % 0.5, 3)),
                )
            )
            out.append((round(crash + rng.uniform(3.0, 8.0), 3), "heal", "all", 0.0))
        else:
            out.append((at, kind, "controller", down))
    return sorted(out)
