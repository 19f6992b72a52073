"""Real local servers an alert reaches: an HTTP server recording POSTs (the webhook) and an SMTP
server (aiosmtpd) recording messages, both on 127.0.0.1 with an ephemeral port."""

from __future__ import annotations

import email
import json
import socket
import threading
import time
from email import policy
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

BODY_MAX_BYTES = 1 << 20


class WebhookServer:
    """Records each POST's path, headers and JSON body; answers ``status``."""

    def __init__(self, status: int = 204):
        self.posts: list[dict] = []
        self.status = status
        outer = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self):  # noqa: N802 (http.server's name)
                n = min(int(self.headers.get("Content-Length", "0")), BODY_MAX_BYTES)
                body = self.rfile.read(n)
                outer.posts.append(
                    {"path": self.path, "headers": dict(self.headers), "json": json.loads(body)}
                )
                self.send_response(outer.status)
                self.send_header("Content-Length", "0")
                self.end_headers()

            def log_message(self, *args):
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.port = self.server.server_address[1]
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    def url(self, path: str = "/hook") -> str:
        return f"http://127.0.0.1:{self.port}{path}"

    def __enter__(self) -> WebhookServer:
        self.thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self.server.shutdown()
        self.server.server_close()


class SmtpServer:
    """aiosmtpd's Controller with a handler keeping each message (parsed)."""

    def __init__(self):
        from aiosmtpd.controller import Controller

        self.messages: list[email.message.EmailMessage] = []
        self.envelopes: list[tuple[str, list[str]]] = []
        outer = self

        class Handler:
            async def handle_DATA(self, server, session, envelope):  # noqa: N802 (aiosmtpd's)
                outer.envelopes.append((envelope.mail_from, list(envelope.rcpt_tos)))
                outer.messages.append(
                    email.message_from_bytes(envelope.content, policy=policy.default)
                )
                return "250 OK"

        # aiosmtpd's readiness probe connects to the port it was given: a free one, not 0
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            self.port = s.getsockname()[1]
        self.controller = Controller(Handler(), hostname="127.0.0.1", port=self.port)

    def connection_json(self, from_email: str = "haproof@example.com") -> str:
        """An Airflow SMTP Connection (AIRFLOW_CONN_...) for this server: plain SMTP."""
        return json.dumps(
            {
                "conn_type": "smtp",
                "host": "127.0.0.1",
                "port": self.port,
                "extra": {"disable_ssl": True, "disable_tls": True, "from_email": from_email},
            }
        )

    def __enter__(self) -> SmtpServer:
        self.controller.start()
        return self

    def __exit__(self, *exc) -> None:
        self.controller.stop()


def html_of(msg: email.message.EmailMessage) -> str:
    part = msg.get_body(preferencelist=("html", "plain"))
    return part.get_content() if part is not None else ""


def wait_for(predicate, timeout_s: float = 10.0, what: str = "condition") -> None:
    deadline = time.monotonic() + timeout_s
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout_s}s waiting for {what}")
        time.sleep(0.02)
