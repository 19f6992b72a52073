"""Ctrl-C and SIGTERM for a command that starts Spark: one line, the shell's exit status, no
process of the run left behind.

A terminal's Ctrl-C sends SIGINT to the whole foreground process group. Left alone, the Spark
driver JVM (which pyspark starts ignoring SIGINT) outlives the command when the signal comes
during its start-up, and every Python worker prints a KeyboardInterrupt traceback. So:

- the JVM is started in a session of its own (``spark_jobs.session.get_spark(own_session=True)``):
  the terminal's signal reaches this process only;
- this process becomes a child subreaper (Linux ``PR_SET_CHILD_SUBREAPER``): a descendant
  whose parent dies is re-parented here, not to init, so the walk below still finds it;
- on SIGINT/SIGTERM the handler stops every descendant (SIGSTOP, walking again until no new
  one appears, so none forks away), kills them (SIGKILL), prints ``<prog>: interrupted`` and
  ends the process with 130 (SIGINT) or 143 (SIGTERM) without unwinding: no py4j or worker
  traceback, no ``finally`` talking to a dead JVM.

Nothing is half-written: every state file and output is written to a temporary name and renamed
(``contracts/object_store``); an interrupted write leaves at most that temporary file.
"""

from __future__ import annotations

import ctypes
import os
import signal
import sys
import time

PR_SET_CHILD_SUBREAPER = 36
EXIT_STATUS = {signal.SIGINT: 130, signal.SIGTERM: 143}
_KILL_DEADLINE_S = 5.0


def children(pid: int) -> list[int]:
    """The direct children of ``pid`` (Linux /proc; empty where there is none). Each thread
    lists the children it forked (a JVM forks from other threads than its main one)."""
    out: list[int] = []
    try:
        tasks = os.listdir(f"/proc/{pid}/task")
    except OSError:
        return _children_by_scan(pid)
    for tid in tasks:
        try:
            with open(f"/proc/{pid}/task/{tid}/children") as fh:
                out.extend(int(p) for p in fh.read().split())
        except (OSError, ValueError):
            return _children_by_scan(pid)
    return out


def _children_by_scan(pid: int) -> list[int]:
    out = []
    try:
        names = os.listdir("/proc")
    except OSError:
        return out
    for name in names:
        if not name.isdigit():
            continue
        try:
            with open(f"/proc/{name}/stat") as fh:
                stat = fh.read()
        except OSError:
            continue
        # the command name may hold spaces and parentheses: the fields follow the last ')'
        fields = stat[stat.rfind(")") + 2 :].split()
        if len(fields) > 1 and fields[1] == str(pid):
            out.append(int(name))
    return out


def descendants(pid: int) -> list[int]:
    """Every process below ``pid``, parents before their children."""
    out, todo = [], [pid]
    while todo:
        for child in children(todo.pop()):
            if child not in out:
                out.append(child)
                todo.append(child)
    return out


def _signal(pid: int, sig: int) -> None:
    try:
        os.kill(pid, sig)
    except (ProcessLookupError, PermissionError):
        pass


def kill_descendants(pid: int | None = None, deadline_s: float = _KILL_DEADLINE_S) -> int:
    """Stop, then kill, every descendant of ``pid`` (this process by default); returns how many
    were killed. Stopping first keeps a parent from forking a child the walk has not seen."""
    pid = os.getpid() if pid is None else pid
    seen: list[int] = []
    end = time.monotonic() + deadline_s
    while time.monotonic() < end:
        new = [p for p in descendants(pid) if p not in seen]
        if not new:
            break
        for p in new:
            _signal(p, signal.SIGSTOP)
        seen.extend(new)
    for p in seen:
        _signal(p, signal.SIGKILL)
    # reap our children, and the descendants re-parented to us (a subreaper) as their
    # parents die, until none of them is alive
    while time.monotonic() < end and any(_alive(p) for p in seen):
        try:
            os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            pass
        time.sleep(0.01)
    return len(seen)


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as fh:
            stat = fh.read()
    except OSError:
        return False
    return stat[stat.rfind(")") + 2 :].split()[:1] != ["Z"]


def become_subreaper() -> bool:
    """Make orphaned descendants re-parent to this process (Linux); False where unsupported."""
    if not sys.platform.startswith("linux"):
        return False
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        return libc.prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) == 0
    except (OSError, AttributeError):
        return False


_CLEANUPS: list = []  # called (each at most a few seconds) before an interrupted run exits


def at_interrupt(fn) -> None:
    """Call ``fn()`` when a signal ends the run (the audit's leases: released, not left to
    expire)."""
    _CLEANUPS.append(fn)


def forget(fn) -> None:
    if fn in _CLEANUPS:
        _CLEANUPS.remove(fn)


def install(prog: str) -> None:
    """SIGINT and SIGTERM end ``prog`` as described above (call once, from the main thread)."""
    become_subreaper()

    def handler(signum, _frame):
        # a second signal while cleaning up must not interrupt the cleanup
        for s in EXIT_STATUS:
            signal.signal(s, signal.SIG_IGN)
        kill_descendants()
        for fn in list(_CLEANUPS):
            try:
                fn()
            except Exception:  # noqa: BLE001 (exiting anyway)
                pass
        try:
            sys.stdout.flush()
        except (OSError, ValueError, RuntimeError):
            pass
        try:
            sys.stderr.write(f"{prog}: interrupted\n")
            sys.stderr.flush()
        except (OSError, ValueError, RuntimeError):
            pass
        os._exit(EXIT_STATUS.get(signum, 128 + signum))

    for s in EXIT_STATUS:
        signal.signal(s, handler)
