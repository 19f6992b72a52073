"""``haproof sim``: run seeded schedules of the deterministic simulation, shrink a failure,
replay a seed.

    haproof sim --seeds 1000 [--first-seed K] [--seconds 30] [--inject-bug NAME]
    haproof sim --budget-s 3600                   # as many schedules as fit an hour (nightly)
    haproof sim --seed 123 --trace [--steps 0,4]  # replay one schedule, print its trace
    haproof sim --list-bugs

The last line on stdout is one JSON object: schedules, failures, first_failing_seed,
schedules_per_s, simulated_s_per_wall_s and more. Exit 0: no invariant broke; 1: one did (the
seed, the shrunk trace and the replay command are printed before the JSON); 2: bad usage.
"""

from __future__ import annotations

import argparse
import concurrent.futures
import json
import multiprocessing
import sys
import time
from collections import Counter

from broker import planted_bugs
from tools.sim.world import CONTROLLER_BUGS, Outcome, run_seed

EPILOG = """exit codes:
  0  no invariant broke in any schedule
  1  an invariant broke (seed, shrunk trace and replay command printed)
  2  bad usage (unknown option or planted bug name)"""
SHRINK_BUDGET_S = 60.0


def shrink(
    outcome: Outcome, seconds: float, bugs: frozenset[str], budget_s: float, strict_reads=None
) -> Outcome:
    """Drop schedule steps while the same invariant still breaks (delta debugging, greedy)."""
    best = outcome
    name = outcome.violation.name
    deadline = time.monotonic() + budget_s
    chunk = max(1, len(best.steps) // 2)
    while chunk >= 1 and time.monotonic() < deadline:
        i = 0
        changed = False
        while i < len(best.steps) and time.monotonic() < deadline:
            keep = {s.index for s in best.steps[:i] + best.steps[i + chunk :]}
            trial = run_seed(outcome.seed, seconds, bugs, keep, strict_reads, outcome.controller)
            if trial.failed and trial.violation.name == name:
                best, changed = trial, True
            else:
                i += chunk
        if not changed:
            chunk //= 2
    return best


def replay_command(outcome: Outcome, seconds: float, bugs: frozenset[str], full: int) -> str:
    cmd = f"haproof sim --seed {outcome.seed} --seconds {seconds:g} --trace"
    if len(outcome.steps) != full:
        cmd += " --steps " + (",".join(str(s.index) for s in outcome.steps) or "none")
    for bug in sorted(bugs):
        cmd += f" --inject-bug {bug}"
    if outcome.controller and not bugs & CONTROLLER_BUGS:
        cmd += " --controller"
    return cmd


def _steps(text: str | None) -> set[int] | None:
    if text is None:
        return None
    if text == "none":
        return set()
    try:
        return {int(x) for x in text.split(",") if x}
    except ValueError:
        raise argparse.ArgumentTypeError(f"--steps {text!r}: not a list of step numbers") from None


def run(args: argparse.Namespace) -> int:
    if args.list_bugs:
        for name in planted_bugs.KNOWN:
            print(name)
        return 0
    bugs = frozenset(args.inject_bug or ())
    unknown = sorted(bugs - set(planted_bugs.KNOWN))
    if unknown:
        print(f"haproof sim: unknown planted bug {unknown[0]!r} (see --list-bugs)", file=sys.stderr)
        return 2
    if args.seed is not None:
        return _replay(args, bugs)
    return _many(args, bugs)


def _replay(args: argparse.Namespace, bugs: frozenset[str]) -> int:
    start = time.monotonic()
    outcome = run_seed(
        args.seed, args.seconds, bugs, _steps(args.steps), args.strict_reads, args.controller
    )
    wall = time.monotonic() - start
    if args.trace:
        print("\n".join(outcome.trace))
    summary = _summary([outcome], wall, args.seed, args.seconds, bugs)
    print(json.dumps(summary, sort_keys=True))
    return 1 if outcome.failed else 0


def _many(args: argparse.Namespace, bugs: frozenset[str]) -> int:
    first = args.first_seed if args.first_seed is not None else int(time.time()) % 1_000_000_000
    limit = args.seeds if args.seeds is not None else (None if args.budget_s else 100)
    print(f"haproof sim: seeds from {first}, {args.seconds:g} simulated s each", file=sys.stderr)
    start = time.monotonic()
    outcomes = run_many(
        first,
        limit,
        args.seconds,
        bugs,
        args.jobs,
        args.budget_s,
        args.stop_at_first,
        args.strict_reads,
        args.controller,
    )
    wall = time.monotonic() - start
    summary = _summary(outcomes, wall, first, args.seconds, bugs)
    failed = [o for o in outcomes if o.failed]
    if failed:
        # again here, with its trace
        first_fail = run_seed(
            failed[0].seed, args.seconds, bugs, None, args.strict_reads, args.controller
        )
        full = len(first_fail.steps)
        small = shrink(first_fail, args.seconds, bugs, args.shrink_budget_s, args.strict_reads)
        print(f"seed {small.seed}: {small.violation}")
        print(f"shrunk from {full} to {len(small.steps)} schedule steps; trace:")
        print("\n".join(line for line in small.trace if " ack #" not in line))
        replay = replay_command(small, args.seconds, bugs, full)
        reads = {None: "", True: " --strict-reads", False: " --no-strict-reads"}[args.strict_reads]
        print(f"replay: {replay}{reads}")
        summary["shrunk_steps"] = [s.index for s in small.steps]
    print(json.dumps(summary, sort_keys=True))
    return 1 if failed else 0


def _one(
    seed: int, seconds: float, bugs: frozenset[str], strict_reads: bool | None, controller: bool
) -> Outcome:
    """A schedule in a worker process: the outcome without its trace (replayed if needed)."""
    outcome = run_seed(seed, seconds, bugs, strict_reads=strict_reads, controller=controller)
    outcome.trace = []
    return outcome


def run_many(
    first: int,
    limit: int | None,
    seconds: float,
    bugs: frozenset[str],
    jobs: int,
    budget_s: float | None,
    stop_at_first: bool,
    strict_reads: bool | None = None,
    controller: bool = False,
) -> list[Outcome]:
    """Schedules ``first``, ``first + 1``, ... until ``limit`` ran or ``budget_s`` passed, over
    ``jobs`` processes (each schedule is independent; results come back in seed order)."""
    start = time.monotonic()
    outcomes: list[Outcome] = []

    def more() -> bool:
        if limit is not None and len(outcomes) >= limit:
            return False
        if stop_at_first and any(o.failed for o in outcomes):
            return False
        return not (budget_s and time.monotonic() - start > budget_s)

    seed = first
    if jobs <= 1:
        while more():
            outcomes.append(run_seed(seed, seconds, bugs, None, strict_reads, controller))
            seed += 1
        return outcomes
    ctx = multiprocessing.get_context("fork")
    with concurrent.futures.ProcessPoolExecutor(max_workers=jobs, mp_context=ctx) as pool:
        while more():
            n = jobs * 4 if limit is None else min(jobs * 4, limit - len(outcomes))
            batch = list(range(seed, seed + n))
            seed += n
            outcomes.extend(
                pool.map(
                    _one, batch, [seconds] * n, [bugs] * n, [strict_reads] * n, [controller] * n
                )
            )
    return outcomes


def _summary(outcomes: list[Outcome], wall: float, first: int, seconds: float, bugs) -> dict:
    failed = [o for o in outcomes if o.failed]
    simulated = sum(o.simulated_s for o in outcomes)
    wall = max(wall, 1e-9)
    return {
        "schedules": len(outcomes),
        "failures": len(failed),
        "first_failing_seed": failed[0].seed if failed else None,
        "first_seed": first,
        "last_seed": outcomes[-1].seed if outcomes else None,
        "seconds": seconds,
        "bugs": sorted(bugs),
        "controller": any(o.controller for o in outcomes),
        "acks": sum(o.acks for o in outcomes),
        "needless_cuts": sum(o.needless_cuts for o in outcomes),
        "reads": sum(o.reads for o in outcomes),
        "reads_beyond_confirm": sum(o.reads_beyond_confirm for o in outcomes),
        "reads_lost": sum(o.reads_lost for o in outcomes),
        "violations": dict(Counter(o.violation.name for o in failed)),
        "wall_s": round(wall, 3),
        "schedules_per_s": round(len(outcomes) / wall, 3),
        "simulated_s_per_wall_s": round(simulated / wall, 2),
    }


def register(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser(
        "sim",
        help="deterministic simulation of replication and failover (seeded schedules)",
        description=__doc__,
        epilog=EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("--seeds", type=int, default=None, help="how many schedules (default 100)")
    p.add_argument(
        "--first-seed",
        type=int,
        default=None,
        help="seed of the first schedule (default: from the clock, printed)",
    )
    p.add_argument("--seed", type=int, default=None, help="replay this one seed")
    p.add_argument(
        "--steps",
        default=None,
        help="with --seed: the schedule steps to keep (from a shrunk failure)",
    )
    p.add_argument("--trace", action="store_true", help="with --seed: print the trace")
    p.add_argument(
        "--seconds",
        type=float,
        default=30.0,
        help="simulated seconds of faults per schedule (default 30)",
    )
    p.add_argument(
        "--budget-s",
        type=float,
        default=None,
        help="wall seconds to keep running schedules (nightly: 3600)",
    )
    p.add_argument(
        "--inject-bug",
        action="append",
        metavar="NAME",
        help="switch on a planted bug (repeatable; see --list-bugs)",
    )
    p.add_argument("--list-bugs", action="store_true", help="print the planted bugs")
    p.add_argument(
        "--jobs",
        type=int,
        default=1,
        help="worker processes (default 1; the machine's cores: as many)",
    )
    p.add_argument(
        "--strict-reads",
        action=argparse.BooleanOptionalAction,
        default=None,
        help="a consumer read beyond the master's confirmOffset is a violation (default: with "
        "--controller, whose nodes gate reads at it; classic HA serves such reads, counted as "
        "reads_beyond_confirm)",
    )
    p.add_argument(
        "--controller",
        action="store_true",
        help="the real controller elects (and leases); default: the operator promotes "
        "(implied by election-overflow and write-after-lease)",
    )
    p.add_argument("--stop-at-first", action="store_true", help="stop at the first failure")
    p.add_argument(
        "--shrink-budget-s",
        type=float,
        default=SHRINK_BUDGET_S,
        help="wall seconds the shrinker may use (default 60)",
    )
    p.set_defaults(func=run)
