"""broker/admin/common.py's shared pieces: what a verb raises becomes one stderr line and an exit
code, per-node blocks, per-row errors."""

from __future__ import annotations

import argparse

import pytest

from broker.admin.common import (
    AdminError,
    UsageError,
    need_targets,
    print_blocks,
    report_errors,
    signed,
)


def _args(**kw) -> argparse.Namespace:
    base = {"namesrv": None, "broker_addr": None, "access_key": None, "secret_key_file": None}
    return argparse.Namespace(**{**base, **kw})


@pytest.fixture(autouse=True)
def _no_account(monkeypatch):
    monkeypatch.delenv("HAPROOF_ACCESS_KEY", raising=False)
    monkeypatch.delenv("HAPROOF_SECRET_KEY", raising=False)


@pytest.mark.parametrize(
    ("raised", "code"), [(UsageError("give --namesrv"), 2), (AdminError("refused"), 1)]
)
def test_the_verb_wrapper_turns_errors_into_one_line_and_an_exit_code(raised, code, capsys):
    def run(args):
        raise raised

    assert signed("someVerb", run)(_args()) == code
    assert capsys.readouterr().err == f"haproof admin someVerb: {raised}\n"


def test_the_verb_wrapper_passes_other_errors_and_results_through():
    assert signed("v", lambda args: 0)(_args()) == 0

    def boom(args):
        raise KeyError("a bug, not an operator's mistake")

    with pytest.raises(KeyError):
        signed("v", boom)(_args())


def test_need_targets():
    need_targets(_args(namesrv="a:1"))
    need_targets(_args(broker_addr="b:2"))
    with pytest.raises(UsageError, match="give --broker-addr or --namesrv"):
        need_targets(_args())
    with pytest.raises(UsageError, match="^give --namesrv$"):
        need_targets(_args(broker_addr="b:2"), broker_addr=False)


def test_blocks_and_errors(capsys):
    docs = [{"brokerAddr": "a:1", "n": 1}, {"brokerAddr": "b:2", "error": "unreachable: x"}]
    print_blocks(docs, lambda d: print(f"  n={d['n']}"))
    assert capsys.readouterr().out == "broker a:1\n  n=1\n\nbroker b:2\n  unreachable: x\n"
    assert report_errors("v", docs) == 1
    assert capsys.readouterr().err == "haproof admin v: b:2: unreachable: x\n"
    assert report_errors("v", docs[:1]) == 0
    assert report_errors("v", docs, lambda r: f"G {r['brokerAddr']}") == 1
    assert capsys.readouterr().err == "haproof admin v: G b:2: unreachable: x\n"
