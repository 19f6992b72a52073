"""What every ``haproof admin`` verb shares: addresses, one remoting client factory, calls to
each node, the name server's cluster table, a plain-text table and time parsing."""

from __future__ import annotations

import contextvars
import datetime
import json
import os
import sys
import time

from broker.remoting.client import RemotingClient
from broker.remoting.codes import RequestCode, ResponseCode
from broker.remoting.command import RemotingCommand
from contracts.errors import HaproofError, RemotingError

TIMEOUT_MS = 5000

EXIT_CODES = """exit codes:
  0  done
  1  a broker or name server could not be reached, refused, or answered an error
  2  bad usage or input (missing or malformed option, unknown or refused config key)"""


class AdminError(HaproofError):
    """A broker or name server could not be reached or refused (exit 1)."""


class UsageError(HaproofError):
    """The operator's input is unusable (exit 2)."""


def addrs(raw: str | None) -> list[str]:
    return [a.strip() for a in (raw or "").split(";") if a.strip()]


# This command's ACL signer (from --access-key / HAPROOF_ACCESS_KEY and the secret key);
# asyncio.run copies the context, so every client made below signs with it.
SIGNER: contextvars.ContextVar = contextvars.ContextVar("haproof_admin_signer", default=None)


def new_client() -> RemotingClient:
    """The one place admin verbs get a remoting client (signing when an account is given)."""
    return RemotingClient(rpc_hook=SIGNER.get())


def signed(verb: str, run):
    """Wrap a verb's ``run``: sign with the credentials its arguments name (exit 2 if they are
    incomplete or unreadable), and turn what it raises into one line and an exit code:
    :class:`UsageError` 2, :class:`AdminError` 1."""
    from broker.acl.signing import AclSigner

    def wrapped(args) -> int:
        ak = getattr(args, "access_key", None) or os.environ.get("HAPROOF_ACCESS_KEY")
        sk = os.environ.get("HAPROOF_SECRET_KEY")
        key_file = getattr(args, "secret_key_file", None)
        if key_file:
            try:
                with open(key_file, encoding="utf-8") as fh:
                    sk = fh.read().strip()
            except OSError as exc:
                return fail("", f"cannot read --secret-key-file {key_file}: {exc.strerror}", 2)
        if bool(ak) != bool(sk):
            return fail(
                "",
                "an access key needs a secret key (HAPROOF_SECRET_KEY or "
                "--secret-key-file) and the other way round",
                2,
            )
        SIGNER.set(AclSigner(ak, sk) if ak else None)
        default_namesrv(args)
        try:
            return run(args)
        except UsageError as exc:
            return fail(verb, str(exc), 2)
        except AdminError as exc:
            return fail(verb, str(exc), 1)

    return wrapped


def default_namesrv(args) -> None:
    """mqadmin's habit: without ``-n``, the name servers in ``$NAMESRV_ADDR``, unless the
    verb was pointed at brokers with ``-b``."""
    if getattr(args, "namesrv", None) or getattr(args, "broker_addr", None):
        return
    if os.environ.get("NAMESRV_ADDR"):
        args.namesrv = os.environ["NAMESRV_ADDR"]


def fail(verb: str, message: str, code: int) -> int:
    print(f"haproof admin {verb}: {message}", file=sys.stderr)
    return code


def need_targets(args, *, broker_addr: bool = True) -> None:
    """UsageError unless ``--namesrv`` (or, when the verb takes it, ``--broker-addr``) is given."""
    if args.namesrv or (broker_addr and args.broker_addr):
        return
    raise UsageError("give --broker-addr or --namesrv" if broker_addr else "give --namesrv")


def report_errors(verb: str, rows: list[dict], who=lambda r: r["brokerAddr"]) -> int:
    """Each row's ``error`` as one line on stderr naming ``who(row)``; 1 if there was one."""
    bad = [r for r in rows if "error" in r]
    for r in bad:
        fail(verb, f"{who(r)}: {r['error']}", 1)
    return 1 if bad else 0


def print_blocks(docs: list[dict], body) -> None:
    """One block per node: ``broker ADDR``, then ``body(doc)`` or the node's error, indented."""
    for i, d in enumerate(docs):
        if i:
            print()
        print(f"broker {d['brokerAddr']}")
        if "error" in d:
            print(f"  {d['error']}")
            continue
        body(d)


async def invoke_all(targets: list[str], make_request) -> list[tuple[str, object]]:
    """(addr, response or the RemotingError) for each address, in order."""
    client = new_client()
    out: list[tuple[str, object]] = []
    try:
        for addr in targets:
            try:
                out.append((addr, await client.invoke(addr, make_request(), TIMEOUT_MS)))
            except RemotingError as exc:
                out.append((addr, exc))
    finally:
        await client.close()
    return out


def error_of(resp: object) -> str | None:
    """Why ``resp`` (an invoke_all result) is not a success; None when it is one."""
    if isinstance(resp, Exception):
        return f"unreachable: {resp}"
    if resp.code != ResponseCode.SUCCESS:
        return resp.remark or f"code {resp.code}"
    return None


async def update_config(
    targets: list[str], code: int, updates: dict[str, str], addr_key: str
) -> list[dict]:
    """Send ``updates`` (``key=value`` lines) with request ``code`` to each target:
    ``{addr_key: addr, key, from, to[, effect]}`` per changed key it answers (an empty body: none), or
    ``{addr_key: addr, error}``."""
    body = "".join(f"{k}={v}\n" for k, v in updates.items()).encode("utf-8")
    out: list[dict] = []
    for addr, resp in await invoke_all(targets, lambda: RemotingCommand.request(code, body=body)):
        err = error_of(resp)
        if err is None:
            try:
                changes = json.loads(resp.body) if resp.body else {}
                out += [
                    {addr_key: addr, "key": k, "from": c["from"], "to": c["to"]}
                    | ({"effect": c["effect"]} if "effect" in c else {})
                    for k, c in changes.items()
                ]
                continue
            except (ValueError, KeyError, TypeError, AttributeError) as exc:
                err = f"unreadable answer: {exc!r}"
        out.append({addr_key: addr, "error": err})
    return out


async def cluster_info(namesrv_addrs: list[str], client: RemotingClient | None = None) -> dict:
    """GET_BROKER_CLUSTER_INFO's document from the first name server that answers (asked
    through ``client``, else a client of its own)."""
    if client is None:
        own = new_client()
        try:
            return await cluster_info(namesrv_addrs, own)
        finally:
            await own.close()
    last: Exception | None = None
    for addr in namesrv_addrs:
        try:
            resp = await client.invoke(
                addr, RemotingCommand.request(RequestCode.GET_BROKER_CLUSTER_INFO), TIMEOUT_MS
            )
        except RemotingError as exc:
            last = exc
            continue
        if resp.code != ResponseCode.SUCCESS:
            last = AdminError(f"name server {addr} refused: {resp.remark}")
            continue
        try:
            return json.loads(resp.body)
        except ValueError as exc:
            last = AdminError(f"name server {addr} sent unreadable cluster info: {exc}")
    raise AdminError(f"no name server answered ({'; '.join(namesrv_addrs)}): {last}")


async def cluster_table(namesrv_addrs: list[str], client: RemotingClient | None = None) -> dict:
    """brokerName → {brokerId: addr} from the first name server that answers."""
    table = (await cluster_info(namesrv_addrs, client)).get("brokerAddrTable", {})
    return {
        name: {int(i): a for i, a in (data.get("brokerAddrs") or {}).items()}
        for name, data in table.items()
    }


def print_table(headers: list[str], rows: list[list[object]], numeric: set[int] = frozenset()):
    """Columns as wide as their widest cell; columns in ``numeric`` right-aligned."""
    cells = [[str(c) for c in r] for r in rows]
    widths = [max([len(h), *(len(r[i]) for r in cells)]) for i, h in enumerate(headers)]

    def line(values: list[str]) -> str:
        out = [
            v.rjust(w) if i in numeric else v.ljust(w)
            for i, (v, w) in enumerate(zip(values, widths, strict=True))
        ]
        return "  ".join(out).rstrip()

    print(line(headers))
    for r in cells:
        print(line(r))


_EPOCH = datetime.datetime(1970, 1, 1, tzinfo=datetime.UTC)


def parse_time_ms(raw: str) -> int:
    """Milliseconds since the epoch from ``raw``: an integer (ms), ``now``, ISO 8601
    (``2026-11-24T09:30:00Z``; no zone means UTC) or mqadmin's ``yyyy-MM-dd#HH:mm:ss:SSS``
    (UTC here). UsageError naming the value otherwise."""
    text = raw.strip()
    if text.isdigit():
        return int(text)
    if text.lower() == "now":
        return time.time_ns() // 1_000_000
    for parse in (_iso, _mqadmin):
        try:
            when = parse(text)
        except ValueError:
            continue
        if when.tzinfo is None:
            when = when.replace(tzinfo=datetime.UTC)
        ms = (when - _EPOCH) // datetime.timedelta(milliseconds=1)  # exact: no float rounding
        if ms >= 0:
            return ms
    raise UsageError(
        f"timestamp {raw!r}: expected milliseconds, now, ISO 8601 (2026-11-24T09:30:00Z) "
        "or yyyy-MM-dd#HH:mm:ss:SSS"
    )


def _iso(text: str) -> datetime.datetime:
    return datetime.datetime.fromisoformat(text.replace("Z", "+00:00"))


def _mqadmin(text: str) -> datetime.datetime:
    return datetime.datetime.strptime(text, "%Y-%m-%d#%H:%M:%S:%f")


def iso_ms(ms: int) -> str:
    """``2026-11-24T09:30:00.123Z`` for ``ms`` (0 or less: "-")."""
    if ms <= 0:
        return "-"
    when = _EPOCH + datetime.timedelta(milliseconds=ms)
    return when.isoformat(timespec="milliseconds").replace("+00:00", "Z")
