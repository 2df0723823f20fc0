"""The dashboard in a real headless browser (Debian's chromium and chromium-driver, driven by
Selenium with the driver's path given, so Selenium Manager never downloads anything): the page
loads and its counts follow an enqueue; a dead letter is requeued through the UI, confirmation
included; the read-only mode refuses it. One browser for the module, one server per test."""

from __future__ import annotations

import os
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psycopg
import pytest
from selenium import webdriver
from selenium.webdriver.chrome.service import Service
from selenium.webdriver.common.by import By
from selenium.webdriver.remote.webdriver import WebDriver
from selenium.webdriver.support.ui import WebDriverWait

from pgqueue import Queue
from pgqueue.dashboard import Options, Server, start

CHROMEDRIVER = "/usr/bin/chromedriver"  # Debian's chromium-driver (scripts/bootstrap.sh installs it)
CHROMIUM = "/usr/bin/chromium"


def new_browser(width: int = 1280, height: int = 900) -> WebDriver:
    """Start headless Chromium through Debian's chromedriver; fail (not skip) if either is missing."""
    assert Path(CHROMEDRIVER).exists() and Path(CHROMIUM).exists(), \
        "chromium and chromium-driver are missing: run scripts/bootstrap.sh"
    options = webdriver.ChromeOptions()
    options.binary_location = CHROMIUM
    for arg in ("--headless=new", "--no-sandbox", "--disable-dev-shm-usage", "--disable-gpu",
                f"--window-size={width},{height}", "--disable-extensions", "--no-first-run"):
        options.add_argument(arg)
    os.environ.setdefault("SE_AVOID_STATS", "true")
    return webdriver.Chrome(options=options, service=Service(executable_path=CHROMEDRIVER))


@pytest.fixture(scope="module")
def browser() -> Iterator[WebDriver]:
    driver = new_browser()
    driver.set_page_load_timeout(30)
    try:
        yield driver
    finally:
        driver.quit()


@pytest.fixture
def serve(dsn: str) -> Iterator[Any]:
    servers: list[Server] = []

    def run(**kwargs: Any) -> str:
        server = start(Options(dsn=dsn, sample_interval=0.5, **kwargs), port=0)
        servers.append(server)
        return server.url

    yield run
    for server in servers:
        server.stop()


def wait_for(browser: WebDriver, what: Any, timeout: float = 10) -> Any:
    return WebDriverWait(browser, timeout, poll_frequency=0.1).until(what)


def cell(browser: WebDriver, queue: str, field: str) -> str:
    text: str = browser.find_element(By.CSS_SELECTOR, f'tr[data-queue="{queue}"] [data-field="{field}"]').text
    return text


def dead_letter(conn: psycopg.Connection[Any], queue: str) -> int:
    q = Queue(conn, queue)
    q.enqueue({"order": 7})
    msg = q.dequeue()[0]
    q.reject(msg, "ValueError: order 7 is malformed")
    return msg.id


def test_counts_follow_an_enqueue_and_charts_draw(browser: WebDriver, serve: Any, conn: psycopg.Connection[Any]) -> None:
    conn.execute("SELECT pgqueue.queue_create('emails')")
    browser.get(serve())
    assert browser.title.startswith("Queues")
    assert cell(browser, "emails", "ready") == "0"
    Queue(conn, "emails").enqueue_many([{"n": i} for i in range(3)])
    wait_for(browser, lambda b: cell(b, "emails", "ready") == "3")  # no reload: the page polls
    # the charts: SVG lines drawn by the package's own script once two samples exist
    wait_for(browser, lambda b: len(b.find_elements(By.CSS_SELECTOR, '[data-chart="depth"] svg polyline')) == 4)
    legend = browser.find_element(By.CSS_SELECTOR, '[data-chart="depth"] .legend').text
    assert "ready 3" in legend
    wait_for(browser, lambda b: b.find_elements(By.CSS_SELECTOR, '[data-chart="throughput"] svg polyline'))
    wait_for(browser, lambda b: b.find_elements(By.CSS_SELECTOR, '[data-chart="oldest"] svg polyline'))
    assert not [e for e in browser.get_log("browser") if e["level"] == "SEVERE"]


def test_requeue_a_dead_letter_through_the_ui(browser: WebDriver, serve: Any, conn: psycopg.Connection[Any]) -> None:
    letter = dead_letter(conn, "default")
    browser.get(serve())
    browser.find_element(By.CSS_SELECTOR, 'tr[data-queue="default"] [data-field="dead"] a').click()
    wait_for(browser, lambda b: b.find_elements(By.ID, f"dead-{letter}"))
    row = browser.find_element(By.ID, f"dead-{letter}").text
    assert "ValueError: order 7 is malformed" in row and '"order": 7' in row
    browser.find_element(By.ID, f"pick-{letter}").click()
    browser.find_element(By.ID, "requeue-selected").click()
    # the confirmation page: nothing has happened yet
    confirm = wait_for(browser, lambda b: b.find_element(By.ID, "confirm-text")).text
    assert f"(id {letter})" in confirm and "new messages" in confirm
    assert Queue(conn, "default").stats().dead == 1
    browser.find_element(By.ID, "confirm").click()
    done = wait_for(browser, lambda b: b.find_element(By.ID, "done")).text
    assert done == "requeued 1 dead letter(s)"
    stats = Queue(conn, "default").stats()
    assert (stats.dead, stats.ready) == (0, 1)
    assert [p.payload for p in Queue(conn, "default").peek()] == [{"order": 7}]


def test_cancelling_the_confirmation_changes_nothing(browser: WebDriver, serve: Any,
                                                     conn: psycopg.Connection[Any]) -> None:
    letter = dead_letter(conn, "default")
    browser.get(serve() + "queues/default/dead")
    browser.find_element(By.ID, "all").click()
    browser.find_element(By.ID, "purge-selected").click()
    assert "deleted for good" in wait_for(browser, lambda b: b.find_element(By.ID, "confirm-text")).text
    browser.find_element(By.ID, "cancel").click()
    wait_for(browser, lambda b: b.find_elements(By.ID, f"dead-{letter}"))
    assert Queue(conn, "default").stats().dead == 1


def test_read_only_mode_refuses_a_requeue(browser: WebDriver, serve: Any, conn: psycopg.Connection[Any]) -> None:
    letter = dead_letter(conn, "default")
    browser.get(serve(read_only=True) + "queues/default/dead")
    assert "read-only mode" in browser.find_element(By.ID, "mode").text
    assert "Read-only mode" in browser.find_element(By.ID, "read-only").text
    assert not browser.find_elements(By.ID, "requeue-selected") and not browser.find_elements(By.ID, f"pick-{letter}")
    # a hand-made form with the page's own CSRF token: the server refuses it all the same
    browser.execute_script(
        "var f = document.createElement('form'); f.method = 'post'; f.action = 'dead/requeue';"
        "[['csrf_token', document.querySelector('meta[name=csrf-token]').content], ['id', arguments[0]],"
        " ['confirm', 'yes']].forEach(function (kv) { var i = document.createElement('input');"
        " i.type = 'hidden'; i.name = kv[0]; i.value = kv[1]; f.appendChild(i); });"
        "document.body.appendChild(f); f.submit();", str(letter))
    error = wait_for(browser, lambda b: b.find_element(By.ID, "error")).text
    assert "read-only mode" in error
    assert Queue(conn, "default").stats().dead == 1


def test_sign_out_through_the_ui(browser: WebDriver, serve: Any) -> None:
    url = serve(token="a-long-token-1")  # (the URL carries the token: the browser logs in)
    browser.get(url)
    wait_for(browser, lambda b: b.find_elements(By.ID, "logout"))
    assert browser.title.startswith("Queues")
    browser.find_element(By.ID, "logout").click()
    assert wait_for(browser, lambda b: b.find_element(By.ID, "signed-out")).text == "Signed out."
    browser.get(url.split("?", 1)[0])  # the session is over: the login form again
    assert "needs its access token" in browser.find_element(By.TAG_NAME, "h1").text
    assert not browser.find_elements(By.ID, "logout")


def test_page_through_dead_letters(browser: WebDriver, serve: Any, conn: psycopg.Connection[Any]) -> None:
    ids = [dead_letter(conn, "default") for _ in range(130)]
    browser.get(serve() + "queues/default/dead")

    def shown(b: WebDriver) -> list[int]:
        return [int(str(r.get_attribute("id"))[5:]) for r in b.find_elements(By.CSS_SELECTOR, "#dead tbody tr")]

    assert shown(browser) == ids[:100] and not browser.find_elements(By.ID, "previous-page")
    browser.find_element(By.ID, "next-page").click()
    wait_for(browser, lambda b: shown(b) == ids[100:])
    assert not browser.find_elements(By.ID, "next-page")
    browser.find_element(By.ID, "previous-page").click()
    wait_for(browser, lambda b: shown(b) == ids[:100])


def test_browser_tools_are_debians() -> None:
    """Selenium is told where the driver is: it must not look for (or fetch) one of its own."""
    assert shutil.which("chromedriver") == CHROMEDRIVER


def test_the_dead_count_links_to_dead_letters_that_come_in(browser: WebDriver, serve: Any,
                                                           conn: psycopg.Connection[Any]) -> None:
    """A dead count that went from 0 to N by the page's refresh stayed plain text until a reload:
    only a count the server rendered above 0 was a link. It links (and unlinks at 0) live now."""
    browser.get_log("browser")  # (what the tests before left there: the browser is the module's)
    browser.get(serve())
    link = 'tr[data-queue="default"] [data-field="dead"] a'
    assert cell(browser, "default", "dead") == "0" and not browser.find_elements(By.CSS_SELECTOR, link)
    dead_letter(conn, "default")
    wait_for(browser, lambda b: cell(b, "default", "dead") == "1" and b.find_elements(By.CSS_SELECTOR, link))
    Queue(conn, "default").purge_dead()
    wait_for(browser, lambda b: cell(b, "default", "dead") == "0" and not b.find_elements(By.CSS_SELECTOR, link))
    letter = dead_letter(conn, "default")
    wait_for(browser, lambda b: cell(b, "default", "dead") == "1" and b.find_elements(By.CSS_SELECTOR, link))
    browser.find_element(By.CSS_SELECTOR, link).click()
    wait_for(browser, lambda b: b.find_elements(By.ID, f"dead-{letter}"))
    assert not [e for e in browser.get_log("browser") if e["level"] == "SEVERE"]
