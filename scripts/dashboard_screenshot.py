#!/usr/bin/env python3
"""Take docs/img/dashboard.png: the dashboard beside a running demo, in headless Chromium.

    .venv/bin/python scripts/dashboard_screenshot.py [--dsn DSN] [--out docs/img/dashboard.png]

Without --dsn it starts a throwaway PostgreSQL. Two more queues sit beside the demo's (one with
scheduled mail, one with dead webhooks), the demo runs for a while at a varying rate, and the
dashboard, sampling every second, is photographed while the demo still runs.
"""

from __future__ import annotations

import argparse
import contextlib
import threading
import time
from pathlib import Path

from selenium import webdriver
from selenium.webdriver.chrome.service import Service

from pgqueue import Queue
from pgqueue.dashboard import Options, start
from pgqueue.demo import DemoOptions, database, run_demo


def fixture(dsn: str) -> None:
    emails = Queue(dsn, "emails")
    emails.create(max_attempts=5, notify=True, if_not_exists=True)
    emails.enqueue_many([{"to": f"user{i}@example.com", "template": "welcome"} for i in range(40)], delay=900)
    emails.enqueue_many([{"to": f"user{i}@example.com", "template": "digest"} for i in range(12)])
    hooks = Queue(dsn, "webhooks")
    hooks.create(max_attempts=3, lock_ms=10_000, if_not_exists=True)
    hooks.enqueue_many([{"url": f"https://shop.example/hook/{i}", "event": "order.paid"} for i in range(6)])
    for msg in hooks.dequeue(4):
        hooks.reject(msg, "HTTPError: 410 Gone from shop.example")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--dsn")
    parser.add_argument("--out", default=str(Path(__file__).resolve().parents[1] / "docs" / "img" / "dashboard.png"))
    parser.add_argument("--seconds", type=float, default=75.0, help="how long the dashboard samples first")
    args = parser.parse_args()
    with database(args.dsn, open("/dev/null", "w")) as dsn:
        fixture(dsn)
        server = start(Options(dsn=dsn, sample_interval=1.0), port=0)
        demo = threading.Thread(target=run_demo, args=(DemoOptions(
            messages=int((args.seconds + 10) * 150), rate=150, dsn=dsn, progress=False), open("/dev/null", "w")), daemon=True)
        demo.start()
        time.sleep(args.seconds)
        options = webdriver.ChromeOptions()
        options.binary_location = "/usr/bin/chromium"
        for arg in ("--headless=new", "--no-sandbox", "--disable-dev-shm-usage", "--window-size=1400,1000",
                    "--hide-scrollbars", "--force-device-scale-factor=1"):
            options.add_argument(arg)
        browser = webdriver.Chrome(options=options, service=Service(executable_path="/usr/bin/chromedriver"))
        try:
            browser.get(server.url)
            time.sleep(2.5)  # the charts' first fetch and a count refresh
            height = browser.execute_script("return document.documentElement.scrollHeight")
            browser.set_window_size(1400, min(int(height) + 20, 1500))
            time.sleep(1)
            browser.save_screenshot(args.out)
        finally:
            browser.quit()
            server.stop()
        demo.join(timeout=120)
        with contextlib.suppress(Exception):
            for name in ("emails", "webhooks"):
                Queue(dsn, name).drop()
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
