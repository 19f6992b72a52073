"""Test harness: ``haproof audit`` as the CLI runs it, with the driver's UI on; once the session
is up, its /environment/ page is saved to ``$HAPROOF_TEST_ENV_PAGE`` for the test to grep."""

from __future__ import annotations

import os
import sys
import time
import urllib.request

from broker.cli import main
from spark_jobs import session


def fetch_environment_page(port: int, out_path: str, deadline_s: float = 120.0) -> None:
    end = time.monotonic() + deadline_s
    while time.monotonic() < end:
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/environment/", timeout=5) as r:
                body = r.read()
            if b"spark.master" in body:  # not the "starting up" placeholder
                with open(out_path, "wb") as fh:
                    fh.write(body)
                return
        except OSError:
            pass
        time.sleep(0.2)


if __name__ == "__main__":
    ui_port = int(os.environ["HAPROOF_TEST_UI_PORT"])
    session.DEFAULT_CONF.update({"spark.ui.enabled": "true", "spark.ui.port": str(ui_port)})
    make_session = session.get_spark

    def get_spark_and_read_its_ui(*args, **kwargs):
        spark = make_session(*args, **kwargs)
        fetch_environment_page(ui_port, os.environ["HAPROOF_TEST_ENV_PAGE"])
        return spark

    session.get_spark = get_spark_and_read_its_ui
    sys.exit(main(sys.argv[1:]))
