"""Periodic schedules (issue 16) through the client and the command line: two schedulers racing
for the same slots enqueue each slot exactly once (merged from what each saw and checked
against the queue); the missed-slot policies after downtime; list and drop; `pgqueue schedule`
and a `pgqueue scheduler` process stopped by SIGTERM."""

from __future__ import annotations

import json
import logging
import os
import signal
import subprocess
import sys
import textwrap
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any

import psycopg
import pytest
from psycopg import sql
from psycopg_pool import ConnectionPool

from conftest import admin_execute, drop_database
from helpers import SIGNALLED_INSIDE_THE_LOCK, scheduler_running
from pgqueue import Queue, errors
from pgqueue.cli import main
from pgqueue.message import ScheduledMessage
from pgqueue.schedules import Scheduler, create_schedule, drop_schedule, list_schedules, run_schedules
from test_privileges import Roles, apply_recipes, denied, run
from test_privileges import roles as roles_fixture  # noqa: F401  (a fixture, used by name)

PGQUEUE = Path(sys.executable).with_name("pgqueue")


def test_two_schedulers_racing_enqueue_each_slot_once(dsn: str) -> None:
    Queue(dsn, "ticks").create()
    start = datetime.now(timezone.utc) - timedelta(seconds=120)
    # 121 slots due at once (missed = all), and one more every second while they race
    create_schedule(dsn, "tick", "ticks", "t", every=1, missed="all", start_at=start)
    seen: list[list[ScheduledMessage]] = [[], []]
    stop = time.monotonic() + 2.5
    give_up = stop + 30
    done = threading.Event()

    def over() -> None:
        # the barrier's action, run once per round before both threads go on, decides for both
        # whether the race is over: a clock read by each thread could let one leave and the other
        # wait alone. It lasts 2.5 s and until the 121 slots and two more are in (a loaded machine
        # may take longer over the catch-up), 32.5 s at most: the asserts below tell.
        now = time.monotonic()
        if now >= stop and len(seen[0]) + len(seen[1]) >= 121 + 2 or now >= give_up:
            done.set()

    barrier = threading.Barrier(2, action=over)

    def scheduler(i: int) -> None:
        with psycopg.connect(dsn, autocommit=True) as conn:
            rnd = 0
            while True:
                barrier.wait(30)  # both call schedule_run at the same instant, again and again
                if done.is_set():
                    break
                # the other thread goes first every other round, 0.1 ms ahead, so that each wins
                # some races (on a loaded machine one thread could otherwise win them all) while
                # the later call still meets the first one's transaction
                if (rnd + i) % 2:
                    time.sleep(0.0001)
                rnd += 1
                seen[i].extend(run_schedules(conn, limit=7))

    threads = [threading.Thread(target=scheduler, args=(i,)) for i in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    merged = seen[0] + seen[1]
    slots = sorted(m.slot for m in merged)
    assert len(slots) == len(set(slots)), "a slot was enqueued twice"
    assert all(b - a == timedelta(seconds=1) for a, b in zip(slots, slots[1:])), "a slot was skipped"
    assert slots[0] == start.replace(microsecond=start.microsecond // 1000 * 1000)
    assert len(slots) >= 121 + 2
    assert seen[0] and seen[1], "premise: both schedulers enqueued some slots"
    with psycopg.connect(dsn) as conn:
        ids = {r[0] for r in conn.execute("SELECT id FROM pgqueue.message")}
    assert ids == {m.message_id for m in merged}  # nothing enqueued that no scheduler reported
    [entry] = list_schedules(dsn)
    assert entry.next_run == slots[-1] + timedelta(seconds=1)


def test_missed_slots_policies_and_list_and_drop(dsn: str) -> None:
    queue = Queue(dsn, "jobs")
    queue.create()
    an_hour_ago = datetime.now(timezone.utc) - timedelta(hours=1)
    create_schedule(dsn, "latest", "jobs", {"kind": "latest"}, every=timedelta(minutes=10), start_at=an_hour_ago)
    create_schedule(dsn, "all", "jobs", {"kind": "all"}, every=600, missed="all", start_at=an_hour_ago,
                    task="report")
    create_schedule(dsn, "cron", "jobs", "c", cron="0 3 * * *")
    done = run_schedules(dsn)
    assert sorted(m.schedule for m in done) == ["all"] * 7 + ["latest"]  # 6 missed slots + the one due now
    payloads = sorted(json.dumps(p.payload) for p in queue.peek(20))
    assert payloads == sorted([json.dumps({"kind": "all"})] * 7 + [json.dumps({"kind": "latest"})])
    assert {p.task for p in queue.peek(20)} == {"report", None}
    assert run_schedules(dsn) == []
    entries = {e.name: e for e in list_schedules(dsn)}
    assert list(entries) == ["all", "cron", "latest"]
    assert entries["cron"].cron == "0 3 * * *" and entries["cron"].next_run.hour == 3
    assert entries["all"].every_ms == 600000 and entries["all"].next_run > datetime.now(timezone.utc)
    assert drop_schedule(dsn, "cron") and not drop_schedule(dsn, "cron")
    with pytest.raises(errors.PgQueueError) as info:
        create_schedule(dsn, "all", "jobs", 1, every=60)
    assert info.value.sqlstate == "42710"
    with pytest.raises(errors.InvalidArgument):
        create_schedule(dsn, "bad", "jobs", 1, cron="61 * * * *")
    with pytest.raises(errors.QueueNotFound):
        create_schedule(dsn, "bad", "nope", 1, every=60)
    queue.close()


def test_a_full_capped_queue_holds_up_its_own_schedule_only(dsn: str) -> None:
    full, other = Queue(dsn, "capped"), Queue(dsn, "free")
    full.create(max_size=1)
    other.create()
    full.enqueue("filler")
    ten_minutes_ago = datetime.now(timezone.utc) - timedelta(minutes=10)
    create_schedule(dsn, "to_full", "capped", "f", every=60, missed="all", start_at=ten_minutes_ago)
    create_schedule(dsn, "to_free", "free", "o", every=60, missed="all", start_at=ten_minutes_ago)
    done = run_schedules(dsn)  # to_full's first slot is refused (PQ003): it waits, to_free goes on
    assert {m.schedule for m in done} == {"to_free"} and len(done) == 11
    assert other.stats().ready == 11 and full.stats().ready == 1
    assert full.counters().enqueued == 1  # the refused slot counted nothing
    due = {e.name: e.next_run for e in list_schedules(dsn)}
    assert due["to_full"] <= ten_minutes_ago + timedelta(seconds=1)  # its slots are still due
    assert run_schedules(dsn) == []  # still full: nothing, and no error
    full.dequeue(1, lock_ms=0)
    done = run_schedules(dsn)  # room for one: the first slot; the cap refuses the second, which waits
    assert [m.schedule for m in done] == ["to_full"] and full.stats().ready == 1
    assert done[0].slot <= ten_minutes_ago + timedelta(seconds=1)
    assert full.counters().enqueued == 2
    assert {e.name: e.next_run for e in list_schedules(dsn)}["to_full"] == done[0].slot + timedelta(minutes=1)
    for queue in (full, other):
        queue.close()


def test_a_capped_catch_up_keeps_few_subtransactions(dsn: str) -> None:
    """An 'all' catch-up into a capped queue with room for fewer messages than its slots: it
    fills the room, the refused slot and those after it stay due, and the call keeps few
    subtransactions. Each subtransaction kept with an xid takes one from the server's counter;
    past 64 in one transaction its snapshot data overflows for every session of the server. Up
    to 0.3 each message was a subtransaction of its own (300 slots: 200 xids, one a message
    that fitted); the slots now go in batches, halved when refused (pgqueue._schedule_fire)."""
    capped = Queue(dsn, "capped_catch_up")
    capped.create(max_size=1000)
    capped.enqueue_many(["filler"] * 800)
    start = datetime.now(timezone.utc) - timedelta(seconds=299.5)
    create_schedule(dsn, "catch_up", "capped_catch_up", "c", every=1, missed="all", start_at=start)
    with psycopg.connect(dsn, autocommit=True) as conn:
        def xid() -> int:
            row = conn.execute("SELECT txid_current()").fetchone()
            assert row is not None
            return int(row[0])

        before = xid()
        done = run_schedules(conn)
        taken = xid() - before - 1  # the call's own xids (the second txid_current() takes one)
    assert len(done) == 200 and capped.stats(exact=True).ready == 1000
    slots = [m.slot for m in done]
    assert slots == sorted(slots) and len(set(slots)) == 200
    assert slots[0] <= start + timedelta(milliseconds=1)
    # one for the call and one a batch, kept or refused: 300 slots, room for 200, so 1 kept, 299
    # refused, 149 kept, 149 and 74 refused, 37 kept, 37 and 18 refused, 9 kept, 9 refused, 4
    # kept, 4, 2 and 1 refused: 16 (up to 0.3: one a message, 201)
    assert 1 <= taken <= 20, f"the catch-up took {taken} transaction ids"
    due = {e.name: e.next_run for e in list_schedules(dsn)}
    assert due["catch_up"] == slots[-1] + timedelta(seconds=1)  # the first refused slot is due
    assert run_schedules(dsn) == []  # full: nothing, and no error
    capped.dequeue(50, lock_ms=0)
    assert len(run_schedules(dsn)) == 50 and capped.stats(exact=True).ready == 1000
    capped.close()


@pytest.mark.slow
def test_a_capped_catch_up_of_a_large_content_is_not_an_array_of_copies(dsn: str) -> None:
    """A review's case: the batches of a capped catch-up were arrays of copies of the content
    (message_create_batch of array_fill): 99 copies of 11 MiB passed the 1-GiB limit of a value
    and the whole run failed (54000), every run after it too. One row at a time, no copies
    (about 8 s here: the 100 rows' contents are compressed)."""
    Queue(dsn, "capped_big").create(max_size=1000)
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("SELECT pgqueue.schedule_create('big', 'capped_big', convert_to(repeat('x', 11 * 1024 * 1024), "
                     "'UTF8'), p_every_ms => 1000, p_missed => 'all', p_start_at => pgqueue.now_ms() - 99500)")
        done = run_schedules(conn)
        assert len(done) == 100
        row = conn.execute("SELECT count(*), min(octet_length(content)) FROM pgqueue.message m "
                           "JOIN pgqueue.queue q ON q.id = m.queue_id WHERE q.name = 'capped_big'").fetchone()
    assert row == (100, 11 * 1024 * 1024)


def test_a_schedule_held_by_its_full_queue_is_said_once(dsn: str, caplog: pytest.LogCaptureFixture,
                                                        capsys: pytest.CaptureFixture[str]) -> None:
    """A schedule that its full capped queue holds back is a NOTICE (SQLSTATE PQ003) naming it:
    run_schedules(on_held=) gets its text, whatever the connection source; `pgqueue schedule run`
    prints it as a warning; `pgqueue scheduler` logs it once while it lasts and one line when
    the schedule fires again. It used to give no signal at all: the slot just stayed due."""
    full = Queue(dsn, "capped")
    full.create(max_size=1)
    full.enqueue("filler")
    create_schedule(dsn, "to_full", "capped", "f", every=1, missed="latest",
                    start_at=datetime.now(timezone.utc) - timedelta(minutes=1))
    expected = 'schedule "to_full" is held: its queue "capped" is full (max_size 1)'
    for source in (dsn, "connection", "pool"):
        held: list[str] = []
        if source == "connection":
            with psycopg.connect(dsn, autocommit=True) as conn:
                assert run_schedules(conn, on_held=held.append) == []
                assert run_schedules(conn) == []  # the hook is gone with the call
        elif source == "pool":
            with ConnectionPool(dsn, min_size=1, open=True) as pool:
                assert run_schedules(pool, on_held=held.append) == []
        else:
            assert run_schedules(source, on_held=held.append) == []
        assert held == [expected], (source, held)
    Queue(dsn, "free").create()  # a schedule stopped by the run's limit is not held
    create_schedule(dsn, "backlog", "free", "b", every=1, missed="all",
                    start_at=datetime.now(timezone.utc) - timedelta(minutes=1))
    held = []
    while not (done := run_schedules(dsn, 1, on_held=held.append)):  # (to_full may come first)
        pass
    assert [m.schedule for m in done] == ["backlog"] and set(held) <= {expected}, held
    drop_schedule(dsn, "backlog")
    assert main(["schedule", "run", "--dsn", dsn]) == 0
    out, err = capsys.readouterr()
    assert out == "" and err == (f"pgqueue: warning: {expected}; its slots wait for a later run\n"
                                 "enqueued 0 message(s)\n"), err

    caplog.set_level(logging.INFO, logger="pgqueue.scheduler")
    with scheduler_running(dsn, interval=0.05) as scheduler:
        wait_for_log(caplog, "logged once while it lasts")  # its first run (a loaded machine starts late)
        time.sleep(0.6)  # about ten more runs, all held
        assert scheduler.enqueued == 0
        full.dequeue(1, lock_ms=0)  # room: the next run fires it
        wait_for_log(caplog, "no longer held")
    lines = [r.getMessage() for r in caplog.records if "held" in r.getMessage()]
    assert lines == [f"{expected}; its slots wait for a later run (logged once while it lasts)",
                     "schedule to_full is no longer held: it enqueues again"], lines
    assert [r.levelno for r in caplog.records if "held" in r.getMessage()] == [logging.WARNING, logging.INFO]
    full.close()


def test_a_held_capped_queue_costs_a_run_one_wait_however_many_schedules_it_has(dsn: str) -> None:
    """Each schedule of a capped queue whose admission a producer's open transaction holds
    waited its own 100 ms: twenty schedules held a run 2 s (past a statement_timeout, which then
    cancelled every schedule's messages), and two schedulers held each other up (a review). Now
    the first waits, the queue's others are left due for a later run at once, each with its
    notice, which says the admission is held, not that the queue is full."""
    capped, other = Queue(dsn, "capped"), Queue(dsn, "free")
    capped.create(max_size=1000)
    other.create()
    a_minute_ago = datetime.now(timezone.utc) - timedelta(minutes=1)
    for i in range(12):
        create_schedule(dsn, f"c{i:02}", "capped", "c", every=60, missed="latest", start_at=a_minute_ago)
    create_schedule(dsn, "punctual", "free", "o", every=60, missed="latest", start_at=a_minute_ago)
    with psycopg.connect(dsn) as producer:  # a transaction left open after an enqueue
        producer.execute("SELECT pgqueue.message_create('capped', 'held')")
        with psycopg.connect(dsn) as scheduler:
            notices: list[str] = []
            scheduler.add_notice_handler(lambda d: notices.append(f"{d.sqlstate} {d.message_primary}"))
            took: list[float] = []
            while len(took) < 5 and not (took and min(took) < 0.6):  # (12 waits took 1.2 s or more)
                notices.clear()
                started = time.monotonic()
                fired = scheduler.execute("SELECT schedule FROM pgqueue.schedule_run()").fetchall()
                took.append(time.monotonic() - started)
                scheduler.rollback()
                assert fired == [("punctual",)]
            assert min(took) < 0.6, took
            assert sorted(notices) == [
                f'PQ003 schedule "c{i:02}" is held: an open transaction holds the admission of its queue "capped" '
                "(a producer's, or another scheduler's run)" for i in range(12)]
        producer.commit()
    assert sorted(m.schedule for m in run_schedules(dsn)) == [*(f"c{i:02}" for i in range(12)), "punctual"]
    assert capped.stats().ready == 13


def test_a_producer_holding_a_capped_queue_holds_up_its_schedule_only(dsn: str) -> None:
    """A producer's open transaction that enqueued into a capped queue holds the queue's admission
    row. schedule_run waited for it while holding the rows of the schedules it had fired, so every
    other scheduler skipped those and every schedule stalled until the producer ended (review of
    session 41). Now the capped queue's slot waits (100 ms at most for the row, or the caller's
    shorter lock_timeout), the others fire, and the caller's lock_timeout is its own again
    afterwards."""
    capped, other = Queue(dsn, "capped"), Queue(dsn, "free")
    capped.create(max_size=100)
    other.create()
    ten_minutes_ago = datetime.now(timezone.utc) - timedelta(minutes=10)
    create_schedule(dsn, "to_capped", "capped", "c", every=60, missed="latest", start_at=ten_minutes_ago)
    create_schedule(dsn, "to_free", "free", "o", every=60, missed="latest", start_at=ten_minutes_ago)
    with psycopg.connect(dsn) as producer:  # a transaction left open after an enqueue
        producer.execute("SELECT pgqueue.message_create('capped', 'held')")
        with psycopg.connect(dsn) as scheduler:
            # a caller's lock_timeout shorter than 100 ms is kept: its best run of up to twenty
            # (a loaded machine slows some) takes well under 100 ms (each waited 100 ms for the row
            # when it was replaced)
            scheduler.execute("SET lock_timeout = '20ms'")
            took: list[float] = []
            while len(took) < 20 and not (took and min(took) < 0.08):
                started = time.monotonic()
                assert scheduler.execute("SELECT schedule FROM pgqueue.schedule_run()").fetchall() == [("to_free",)]
                took.append(time.monotonic() - started)
                scheduler.rollback()
            assert min(took) < 0.08, took
            # a longer one does not hold the run up either: it waits 100 ms, not the caller's 30 s
            scheduler.execute("SET lock_timeout = '30s'")
            started = time.monotonic()
            fired = scheduler.execute("SELECT schedule FROM pgqueue.schedule_run()").fetchall()
            assert time.monotonic() - started < 15
            assert fired == [("to_free",)]
            assert scheduler.execute("SHOW lock_timeout").fetchone() == ("30s",)
            scheduler.commit()
            assert other.stats().ready == 1
            due = {e.name: e.next_run for e in list_schedules(dsn)}
            assert due["to_capped"] <= datetime.now(timezone.utc)  # its slot is still due
        producer.commit()
    assert [m.schedule for m in run_schedules(dsn)] == ["to_capped"]
    assert capped.stats().ready == 2
    for queue in (capped, other):
        queue.close()


@contextmanager
def busy_being_altered(dsn: str) -> Iterator[None]:
    """For the block: a producer's transaction on queue busy left open, and a queue_alter of
    busy's max_size waiting for it (on busy's lock stripe). Then the producer commits, and the
    alter ends (its connection ends first, also when an assert fails: the alter then ends)."""
    with psycopg.connect(dsn, autocommit=True) as admin, psycopg.connect(dsn) as producer:
        producer.execute("SELECT pgqueue.message_create('busy', 'in flight')")  # left open
        alter = threading.Thread(target=lambda: admin.execute(
            "SELECT pgqueue.queue_alter('busy', p_max_size => 1000)"), daemon=True)
        alter.start()
        try:
            with psycopg.connect(dsn, autocommit=True) as watch:
                deadline = time.monotonic() + 10
                while not watch.execute("SELECT count(*) FROM pg_stat_activity WHERE wait_event_type = 'Lock' "
                                        "AND query LIKE '%queue_alter%'").fetchone() == (1,):
                    assert time.monotonic() < deadline, "queue_alter never waited for the producer"
                    time.sleep(0.05)
            yield
        finally:
            producer.commit()
            alter.join(10)
    assert not alter.is_alive()


def test_a_queue_being_altered_holds_up_its_own_schedules_only(dsn: str) -> None:
    """A queue_alter that changes max_size waits for the queue's transactions in flight, and
    schedule_run's take of the queue's lock stripe queued behind it: the run stalled there with
    the rows of the schedules it had fired, and every scheduler after it, until the producer
    ended (a review of the schedules, session 44). Now the queue's schedules wait 100 ms at most
    and stay due; the others fire."""
    busy, other = Queue(dsn, "busy"), Queue(dsn, "calm")
    busy.create()
    other.create()
    ten_minutes_ago = datetime.now(timezone.utc) - timedelta(minutes=10)
    for name, queue in (("to_busy", "busy"), ("to_busy_too", "busy"), ("to_calm", "calm")):
        create_schedule(dsn, name, queue, "x", every=60, missed="latest", start_at=ten_minutes_ago)
    with busy_being_altered(dsn):
        with psycopg.connect(dsn) as scheduler:
            # a caller's lock_timeout shorter than 100 ms is kept: its best run of up to twenty
            # (a loaded machine slows some) takes well under 100 ms (each waited 100 ms for the
            # stripe when it was replaced)
            scheduler.execute("SET lock_timeout = '20ms'")
            took: list[float] = []
            while len(took) < 20 and not (took and min(took) < 0.08):
                started = time.monotonic()
                scheduler.execute("SELECT schedule FROM pgqueue.schedule_run()").fetchall()
                took.append(time.monotonic() - started)
                scheduler.rollback()
            assert min(took) < 0.08, took
            # a longer one does not hold the run up either: it waits 100 ms, not the caller's 30 s
            scheduler.execute("SET lock_timeout = '30s'")
            started = time.monotonic()
            fired = scheduler.execute("SELECT schedule FROM pgqueue.schedule_run()").fetchall()
            assert time.monotonic() - started < 15
            assert fired == [("to_calm",)]
            assert scheduler.execute("SHOW lock_timeout").fetchone() == ("30s",)
            scheduler.commit()
        assert other.stats().ready == 1
        due = {e.name: e.next_run for e in list_schedules(dsn)}
        assert due["to_busy"] <= datetime.now(timezone.utc) and due["to_busy_too"] <= datetime.now(timezone.utc)
    assert sorted(m.schedule for m in run_schedules(dsn)) == ["to_busy", "to_busy_too"]
    assert busy.stats().ready == 3
    for queue in (busy, other):
        queue.close()


def test_queues_on_an_altered_queues_lock_stripe_wait_once_and_each_schedule_says_so(dsn: str) -> None:
    """Queues whose ids are 64 apart share a lock stripe, which a queue_alter waiting for one of
    them holds for all. schedule_run waited its 100 ms for each due queue on that stripe (sixteen
    queues held a run 1.6 s, past a statement_timeout that then cancelled every schedule's
    messages), and said nothing of the schedules it left due, though README promises a PQ003
    NOTICE for each (a review). Now it waits once a stripe, and each of them has its NOTICE."""
    with psycopg.connect(dsn, autocommit=True) as admin:
        admin.execute("SELECT pgqueue.queue_create('busy'), pgqueue.queue_create('calm')")
        admin.execute("SELECT count(pgqueue.queue_create('filler' || i)) FROM generate_series(1, 64 * 6) i")
        sharing = [r[0] for r in admin.execute(
            "SELECT name FROM pgqueue.queue WHERE name LIKE 'filler%' "
            "AND id & 63 = (SELECT id & 63 FROM pgqueue.queue WHERE name = 'busy') ORDER BY id")]
        assert len(sharing) == 6, sharing  # (premise: six more queues on busy's stripe)
    ten_minutes_ago = datetime.now(timezone.utc) - timedelta(minutes=10)
    held = ["to_busy", *(f"to_{q}" for q in sharing)]
    for name, queue in ((n, n[3:]) for n in [*held, "to_calm"]):
        create_schedule(dsn, name, queue, "x", every=60, missed="latest", start_at=ten_minutes_ago)
    with busy_being_altered(dsn):
        with psycopg.connect(dsn) as scheduler:
            notices: list[tuple[str | None, str | None]] = []  # (a Diagnostic is read in its handler)
            scheduler.add_notice_handler(lambda n: notices.append((n.sqlstate, n.message_primary)))
            took: list[float] = []
            # the best of up to ten runs (a loaded machine slows some): seven waits of 100 ms
            # each took 0.7 s at least
            while len(took) < 10 and not (took and min(took) < 0.4):
                notices.clear()
                started = time.monotonic()
                fired = scheduler.execute("SELECT schedule FROM pgqueue.schedule_run()").fetchall()
                took.append(time.monotonic() - started)
                assert fired == [("to_calm",)]
                scheduler.rollback()
            assert min(took) < 0.4, took
            said = sorted(notices)
            assert said == sorted(
                ("PQ003", f'schedule "{name}" is held: a queue_drop or queue_alter holds the lock stripe of its '
                          f'queue "{name[3:]}"') for name in held), said
    assert sorted(m.schedule for m in run_schedules(dsn)) == sorted([*held, "to_calm"])


def test_schedule_commands_and_a_scheduler_process(capsys: pytest.CaptureFixture[str], dsn: str) -> None:
    Queue(dsn, "jobs").create()
    created = time.monotonic()  # the slots, one a second, count from a moment after this
    assert main(["schedule", "create", "ping", "jobs", '{"p": 1}', "--json", "--every", "1", "--dsn", dsn]) == 0
    out, _ = capsys.readouterr()
    assert "ping" in out and "every 1 s" in out
    assert main(["schedule", "create", "ping", "jobs", "x", "--every", "1", "--dsn", dsn]) == 1
    _, err = capsys.readouterr()
    assert 'schedule "ping" already exists' in err and len(err.strip().splitlines()) == 1
    assert main(["schedule", "create", "bad", "jobs", "x", "--cron", "* * *", "--dsn", dsn]) == 1
    _, err = capsys.readouterr()
    assert "invalid cron expression" in err and "Traceback" not in err
    assert main(["schedule", "list", "--dsn", dsn]) == 0
    out, _ = capsys.readouterr()
    assert out.splitlines()[2].startswith("ping ")

    proc = subprocess.Popen([str(PGQUEUE), "scheduler", "--interval", "0.2", "--dsn", dsn],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    queue = Queue(dsn, "jobs")
    try:
        deadline = time.monotonic() + 15
        while queue.stats().ready == 0:  # the first run (the process takes a moment to start)
            assert time.monotonic() < deadline, "the scheduler enqueued nothing"
            time.sleep(0.05)
        first = queue.stats().ready
        # two more slots, one a second: 2.2 s at least, longer if a loaded machine holds it up
        since = time.monotonic()
        while time.monotonic() < since + 2.2 or queue.stats().ready < first + 2:
            assert time.monotonic() < since + 30, "the scheduler enqueued no more"
            time.sleep(0.05)
        proc.send_signal(signal.SIGTERM)
        _, err = proc.communicate(timeout=15)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    took = time.monotonic() - created
    assert proc.returncode == 0, err
    assert "Traceback" not in err
    n = queue.stats().ready
    assert first + 2 <= n <= int(took) + 1, (first, n, took)  # no more than one a second since it was created
    queue.close()
    assert f"enqueued {n} message(s)" in err
    assert main(["schedule", "drop", "ping", "--dsn", dsn]) == 0
    assert main(["schedule", "drop", "ping", "--dsn", dsn]) == 1
    capsys.readouterr()


def test_producers_run_schedules_admins_create_them(request: pytest.FixtureRequest) -> None:
    """docs/grants.sql: a producer may run the schedules (a scheduler process), not create or drop them."""
    roles: Roles = request.getfixturevalue("roles_fixture")
    a, p, c = roles.dsn(roles.admin), roles.dsn(roles.producer), roles.dsn(roles.consumer)
    assert run(a, "SELECT pgqueue.schedule_create('tick', 'jobs', 'x', 60000, p_start_at => pgqueue.now_ms()) > 0") \
        == [(True,)]
    assert run(p, "SELECT count(*) FROM pgqueue.schedule_run()") == [(1,)]
    assert run(c, "SELECT convert_from(content, 'UTF8') FROM pgqueue.message_dequeue('jobs', 10, 0)") == [("x",)]
    assert run(p, "SELECT name FROM pgqueue.schedule_list()") == [("tick",)]
    denied(p, "SELECT pgqueue.schedule_create('mine', 'jobs', 'x', 60000)")
    denied(p, "SELECT pgqueue.schedule_drop('tick')")
    denied(c, "SELECT * FROM pgqueue.schedule_run()")
    denied(roles.dsn(roles.nobody), "SELECT * FROM pgqueue.schedule_run()")
    # `pgqueue scheduler` as a role that may not run them: one line, exit 1 (it retried every
    # second for ever and exited 0 on SIGTERM: a review of the CLI, session 43)
    proc = subprocess.run([str(PGQUEUE), "scheduler", "--interval", "0.1", "--dsn", c],
                          capture_output=True, text=True, timeout=60, check=False)
    assert proc.returncode == 1, proc.stderr
    assert proc.stderr.strip().splitlines()[-1].startswith("pgqueue: error: permission denied for function schedule_run"), \
        proc.stderr
    assert "Traceback" not in proc.stderr
    assert run(a, "SELECT pgqueue.schedule_drop('tick')") == [(True,)]


def test_producers_cannot_move_or_lock_the_schedules_by_sql(request: pytest.FixtureRequest) -> None:
    """schedule_run runs as the extension's owner, so the producers' recipe grants no UPDATE on
    pgqueue.schedule: with it (as before), plain SQL stopped every schedule by moving next_run to
    the end of time, or locked their rows without firing them so that every scheduler skipped
    them. Re-running the recipe takes back an UPDATE an earlier version of it gave. (A transaction
    that calls schedule_run still holds the schedules it fired until it ends: docs/security.md.)"""
    roles: Roles = request.getfixturevalue("roles_fixture")
    server, dbname = request.getfixturevalue("pg_server"), request.getfixturevalue("dbname")
    a, p = roles.dsn(roles.admin), roles.dsn(roles.producer)
    assert run(a, "SELECT pgqueue.schedule_create('tick', 'jobs', 'x', 60000, p_start_at => pgqueue.now_ms()) > 0") \
        == [(True,)]
    # an earlier recipe's grant, given by the owner
    run(server.dsn(dbname), f'GRANT UPDATE (next_run) ON pgqueue.schedule TO "{roles.producer}"')
    assert len(run(p, "SELECT id FROM pgqueue.schedule FOR UPDATE")) == 1
    apply_recipes(server, dbname, {"producer": roles.producer, "consumer": roles.consumer, "admin": roles.admin})
    denied(p, "UPDATE pgqueue.schedule SET next_run = 9223372036854775807")
    denied(p, "SELECT id FROM pgqueue.schedule FOR UPDATE")
    denied(p, "SELECT id FROM pgqueue.schedule FOR SHARE")
    # what schedule_run itself locks is released with the caller's transaction, as before
    assert run(p, "SELECT count(*) FROM pgqueue.schedule_run()") == [(1,)]
    assert run(a, "SELECT pgqueue.schedule_drop('tick')") == [(True,)]


def test_a_scheduler_interval_past_what_a_wait_takes_is_refused() -> None:
    """Scheduler(interval=...) takes more than 0 and at most 1e9 seconds (as `pgqueue scheduler
    --interval`): an infinite or huge one was accepted and run() died of an OverflowError after
    its first pass."""
    from pgqueue.schedules import Scheduler

    for bad in (0, -1, float("inf"), float("nan"), 1e10):
        with pytest.raises(ValueError, match="interval must be > 0 and at most 1e9 seconds"):
            Scheduler("dbname=unused", interval=bad, handle_signals=False)
    Scheduler("dbname=unused", interval=1e9, handle_signals=False)


def test_scheduler_options_of_the_wrong_kind_are_refused() -> None:
    """A dsn of 5 was an AttributeError, an interval of "1" a raw "'<' not supported" TypeError,
    an interval of True was taken as 1 s, a startup_timeout of "5" a raw TypeError, and
    run_schedules took an on_held of 5 (a review): each is a TypeError that names the option,
    raised before anything connects."""
    from pgqueue.schedules import Scheduler, run_schedules

    cases: list[tuple[dict[str, object], str]] = [
        ({"dsn": 5}, "dsn must be a conninfo string, got int"),
        ({"interval": "1"}, "interval must be a number of seconds, got str"),
        ({"interval": True}, "interval must be a number of seconds, got bool"),
        ({"handle_signals": "no"}, "handle_signals must be True or False, got str"),
        ({"startup_timeout": "5"}, "startup_timeout must be None or a number of seconds, got str"),
    ]
    for options, words in cases:
        arguments: dict[str, object] = {"dsn": "dbname=unused", "handle_signals": False, **options}
        with pytest.raises(TypeError, match=words):
            Scheduler(**arguments)  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="on_held must be callable or None, got int"):
        run_schedules("dbname=nowhere connect_timeout=1", on_held=5)  # type: ignore[arg-type]


def test_schedule_arguments_of_the_wrong_kind_are_refused_before_connecting() -> None:
    """create_schedule(conn, 5, ...) made a schedule named "5", drop_schedule(conn, 5) dropped
    it, a queue of 5 was "queue "5" does not exist", and a NUL in the name, the cron expression
    or the policy was psycopg's error that named no argument (a review). Each is InvalidArgument
    naming the argument, raised before anything connects ("dbname=unused" is never opened)."""
    cases: list[tuple[tuple[object, ...], dict[str, object], str]] = [
        ((5, "q", "x"), {"every": 60}, "name must be a str or None, got 5"),
        (("n\x00", "q", "x"), {"every": 60}, "name must not contain NUL"),
        (("n", 5, "x"), {"every": 60}, "queue must be a str, got 5"),
        (("n", "q", "x"), {"cron": 5}, "cron must be a str or None, got 5"),
        (("n", "q", "x"), {"cron": "* * * *\x00 *"}, "cron must not contain NUL"),
        (("n", "q", "x"), {"every": 60, "missed": 5}, "missed must be a str or None, got 5"),
        (("n", "q", "x"), {"every": 60, "missed": "al\x00l"}, "missed must not contain NUL"),
    ]
    for args, options, words in cases:
        with pytest.raises(errors.InvalidArgument, match=words.replace("\x00", "NUL")):
            create_schedule("dbname=unused", *args, **options)  # type: ignore[arg-type]
    with pytest.raises(errors.InvalidQueueName):  # a queue's name keeps its own class
        create_schedule("dbname=unused", "n", "q\x00", "x", every=60)
    for name, words in ((5, "name must be a str or None, got 5"), ("a\x00", "name must not contain NUL")):
        with pytest.raises(errors.InvalidArgument, match=words):
            drop_schedule("dbname=unused", name)  # type: ignore[arg-type]


def wait_for_log(caplog: pytest.LogCaptureFixture, text: str, timeout: float = 10.0) -> None:
    """Until a captured log line has ``text`` (at most ``timeout`` s; the caller's asserts tell)."""
    deadline = time.monotonic() + timeout
    while text not in caplog.text and time.monotonic() < deadline:
        time.sleep(0.05)


def test_a_scheduler_logs_an_outage_once_and_its_end(pg_server: Any, template_db: str,
                                                       caplog: pytest.LogCaptureFixture) -> None:
    """While the database cannot be reached, `pgqueue scheduler` retries every interval and says
    so once (a warning a second filled the log; again when the error changes: here the run that
    lost its connection, then the refused reconnections), then one line when the schedules run
    again. (The outage used to be a database that did not exist yet when the scheduler started:
    a database that does not exist now ends the start at once, see
    tests/test_worker_startup.py; the outage here comes once it runs.)"""
    name = f"sched_outage_{os.getpid()}"
    ident = sql.Identifier(name)
    admin_execute(pg_server, sql.SQL("CREATE DATABASE {} TEMPLATE {}").format(ident, sql.Identifier(template_db)))
    caplog.set_level(logging.DEBUG, logger="pgqueue.scheduler")
    scheduler = Scheduler(pg_server.dsn(name, connect_timeout="2"), interval=0.1, handle_signals=False)
    thread = threading.Thread(target=scheduler.run, daemon=True)
    thread.start()
    try:
        with psycopg.connect(pg_server.admin_dsn, autocommit=True) as admin:
            def connected() -> bool:
                # running: its session has run the schedules (its start's check connects too, and
                # an outage then ends a start refused as this one is, at once: a CI run, session 51)
                row = admin.execute("SELECT count(*) FROM pg_catalog.pg_stat_activity WHERE datname = %s "
                                    "AND application_name = 'pgqueue-scheduler' AND query LIKE %s",
                                    (name, "%pgqueue.schedule_run(%")).fetchone()
                return bool(row and row[0])

            deadline = time.monotonic() + 10
            while not connected() and time.monotonic() < deadline:
                time.sleep(0.05)
            assert connected(), "the scheduler never ran the schedules"
            # the database goes away: its sessions ended, new ones refused
            admin.execute(sql.SQL("ALTER DATABASE {} ALLOW_CONNECTIONS false").format(ident))
            admin.execute("SELECT pg_catalog.pg_terminate_backend(pid, 10000) FROM pg_catalog.pg_stat_activity "
                          "WHERE datname = %s", (name,))
            deadline = time.monotonic() + 10
            while sum("failed again" in r.getMessage() for r in caplog.records) < 3 and time.monotonic() < deadline:
                time.sleep(0.05)
            admin.execute(sql.SQL("ALTER DATABASE {} ALLOW_CONNECTIONS true").format(ident))  # back
        wait_for_log(caplog, "works again")
    finally:
        scheduler.stop()
        thread.join(timeout=10)
        drop_database(pg_server, name)
    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert 1 <= len(warnings) <= 2 and all("running the schedules failed" in w for w in warnings), warnings
    assert "not currently accepting connections" in warnings[-1], warnings
    assert sum("failed again" in r.getMessage() for r in caplog.records if r.levelno == logging.DEBUG) >= 3
    tries = sum(r.getMessage().startswith("running the schedules failed") for r in caplog.records)
    assert [r.getMessage() for r in caplog.records if "works again" in r.getMessage()] == [
        f"running the schedules works again (after {tries} failed tries)"]


def test_cron_schedules_under_standard_conforming_strings_off(dsn: str) -> None:
    """A cron expression is parsed by PL/pgSQL bodies read with the caller's
    standard_conforming_strings: with it off, a backslash in a pattern ('\\s+') became an escape,
    and every cron schedule failed with "expected 5 fields" (a review)."""
    with psycopg.connect(dsn, autocommit=True, options="-c standard_conforming_strings=off") as conn:
        assert conn.execute("SHOW standard_conforming_strings").fetchone() == ("off",)
        row = conn.execute("SELECT pgqueue._cron_next('  */5  * * * * ', 0)").fetchone()
        assert row == (300000,)
        conn.execute("SELECT pgqueue.schedule_create('scs_off', 'default', 'x'::bytea, p_cron => '*/5 * * * *')")
        assert [s.name for s in list_schedules(conn) if s.cron == "*/5 * * * *"] == ["scs_off"]


# A Scheduler on the main thread whose stop event delivers SIGTERM while the main thread holds the
# event's lock, as Event.wait holds it for a moment every round before it sleeps: the moment a real
# signal may land in. (signal.raise_signal runs the Python handler before it returns.)
SIGNAL_IN_THE_WAITS_LOCK = "import signal, sys, threading\n" + SIGNALLED_INSIDE_THE_LOCK + textwrap.dedent("""
    from pgqueue.schedules import Scheduler

    scheduler = Scheduler(sys.argv[1], interval=0.05)
    scheduler._stop = SignalledInsideTheLock()
    scheduler.run()
    print("stopped")
""")


def test_a_stop_signal_landing_inside_the_waits_lock_stops_the_scheduler(dsn: str) -> None:
    """Scheduler.run's signal handler called stop() on the main thread, between two of its
    bytecodes: a signal landing while the loop's wait held the stop event's lock (taken at each
    wait, before and after it sleeps) set that event inside its own lock, and the scheduler hung
    for good, SIGTERM and Ctrl-C ignored (`pgqueue scheduler` too, until a SIGKILL). It stops from
    a thread of its own now, as the worker does."""
    proc = subprocess.run([sys.executable, "-c", SIGNAL_IN_THE_WAITS_LOCK, dsn], capture_output=True, text=True,
                          timeout=20, check=False)
    assert (proc.returncode, proc.stdout) == (0, "stopped\n"), proc.stderr


# The same with the caller's own handler (handle_signals=False) that calls stop() on run()'s thread.
STOP_FROM_OWN_HANDLER_IN_THE_WAITS_LOCK = SIGNAL_IN_THE_WAITS_LOCK.replace(
    "scheduler = Scheduler(sys.argv[1], interval=0.05)",
    "scheduler = Scheduler(sys.argv[1], interval=0.05, handle_signals=False)\n"
    "signal.signal(signal.SIGTERM, lambda signum, frame: scheduler.stop())")


def test_stop_from_the_callers_own_handler_inside_the_waits_lock_stops_the_scheduler(dsn: str) -> None:
    """A handler of the caller's (handle_signals=False) that called stop() on the thread of run(),
    while the loop's wait held the stop event's lock, hung the scheduler for good, as its own
    handler had (above): stop() on run()'s thread stops from a thread of its own."""
    assert STOP_FROM_OWN_HANDLER_IN_THE_WAITS_LOCK != SIGNAL_IN_THE_WAITS_LOCK
    proc = subprocess.run([sys.executable, "-c", STOP_FROM_OWN_HANDLER_IN_THE_WAITS_LOCK, dsn], capture_output=True,
                          text=True, timeout=20, check=False)
    assert (proc.returncode, proc.stdout) == (0, "stopped\n"), proc.stderr


def test_a_scheduler_runs_once(dsn: str) -> None:
    """A stopped scheduler's second run() returned at once, doing nothing, where a worker's raises:
    it raises RuntimeError too (create a new one)."""
    from pgqueue.schedules import Scheduler

    scheduler = Scheduler(dsn, interval=0.05, handle_signals=False)
    scheduler.stop()
    scheduler.run()  # stopped before it started: returns at once
    with pytest.raises(RuntimeError, match="a Scheduler runs once; create a new one"):
        scheduler.run()


def test_schedule_names_are_printed_and_logged_escaped(dsn: str, capsys: pytest.CaptureFixture[str],
                                                       caplog: pytest.LogCaptureFixture) -> None:
    """A schedule's name may hold any character; `schedule list` escapes what is not printable,
    but `schedule run`'s warning of a held schedule, `schedule drop`'s line and the scheduler's
    log lines wrote it raw: an escape sequence drove the terminal of whoever read them (CSI 2J
    cleared it), and a newline forged a line of its own in the log."""
    name = "r\u00e4port\x1b[2J\nFAKE"
    shown = "r\u00e4port\\x1b[2J\\x0aFAKE"
    full = Queue(dsn, "capped")
    full.create(max_size=1)
    full.enqueue("filler")
    create_schedule(dsn, name, "capped", "x", every=60)
    assert main(["schedule", "run", "--dsn", dsn]) == 0
    _, err = capsys.readouterr()
    assert err == (f'pgqueue: warning: schedule "{shown}" is held: its queue "capped" is full (max_size 1); '
                   "its slots wait for a later run\nenqueued 0 message(s)\n"), err

    caplog.set_level(logging.INFO, logger="pgqueue.scheduler")
    with scheduler_running(dsn, interval=0.05):
        wait_for_log(caplog, "is held")
        full.dequeue(1, lock_ms=0)  # room: the next run fires it
        wait_for_log(caplog, "no longer held")
    lines = [r.getMessage() for r in caplog.records]
    assert f'schedule "{shown}" is held: its queue "capped" is full (max_size 1); its slots wait for a later run ' \
           "(logged once while it lasts)" in lines, lines
    assert f"schedule {shown} is no longer held: it enqueues again" in lines, lines
    assert any(line.startswith(f"schedule {shown}: message ") for line in lines), lines
    assert not any("\x1b" in line or "\n" in line for line in lines), lines

    assert main(["schedule", "drop", name, "--dsn", dsn]) == 0
    out, _ = capsys.readouterr()
    assert out == f"dropped schedule {shown}\n"
    assert main(["schedule", "drop", name, "--dsn", dsn]) == 1
    _, err = capsys.readouterr()
    assert err == f'pgqueue: error: schedule "{shown}" does not exist (see `pgqueue schedule list`)\n', err
    full.close()


def test_a_connection_the_server_closed_between_runs_is_replaced_at_once(
        dsn: str, caplog: pytest.LogCaptureFixture) -> None:
    """The scheduler keeps its connection between runs; a server that closes idle sessions
    (idle_session_timeout shorter than --interval, as some managed services set it, or a
    restart) made every other run fail with a warning ("running the schedules failed:
    terminating connection due to idle-session timeout") and the schedules wait a whole interval
    for the next try. The run connects again at once, without a warning."""
    create_schedule(dsn, "tick", "default", "x", every=1)
    caplog.set_level(logging.DEBUG, logger="pgqueue.scheduler")
    closing = psycopg.conninfo.make_conninfo(dsn, options="-c idle_session_timeout=200")
    with scheduler_running(closing, interval=0.5) as scheduler:
        wait_for_log(caplog, "was closed", timeout=10)
        time.sleep(2)
    warnings = [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING]
    assert warnings == [], warnings
    assert "connecting again" in caplog.text
    assert scheduler.enqueued >= 2, caplog.text


@pytest.mark.parametrize("every_ms, shown", [
    (1000, "1 s"), (1500, "1.5 s"), (60_000, "1 min"), (61_000, "1 min 1 s"), (89_999, "1 min 29.999 s"),
    (86_401_000, "1 d 1 s"), (3_600_000, "1 h"), (3_153_600_000_000, "36500 d")])
def test_schedule_list_shows_the_interval_exactly(every_ms: int, shown: str) -> None:
    """`schedule list` showed one decimal of the largest unit: 60 s and 61 s were both
    "every 1.0 min", 86401 s "every 1.0 d" (a review)."""
    from pgqueue.cli import format_interval

    assert format_interval(every_ms) == shown


class _FakeConnection:
    """A connection of :func:`_scripted_scheduler`'s: closed or not."""

    closed = False

    def close(self) -> None:
        self.closed = True


def _scripted_scheduler(monkeypatch: pytest.MonkeyPatch, runs: list[Any], *, interval: float = 0.01,
                        handle_signals: bool = False,
                        on_run: Any = None) -> tuple[Scheduler, list[_FakeConnection], list[float]]:
    """A Scheduler whose database is a script: its start finds a (fake) connection at once, and
    its runs take the items of ``runs`` in turn (an exception is raised, the connection closed
    as a failed run closes it; a list of ScheduledMessage is returned; a list of str are the
    held notices of a run that enqueued nothing); it stops itself after the last. Returns it,
    the connections it was given and the times of its runs."""
    import pgqueue.schedules as schedules

    conns = [_FakeConnection()]
    monkeypatch.setattr(schedules, "wait_for_database", lambda *args, **kwargs: conns[0])
    scheduler = Scheduler("dbname=unused", interval=interval, handle_signals=handle_signals)
    script, times = list(runs), []

    def run_once(kept: Any, notices: list[str]) -> tuple[Any, list[ScheduledMessage]]:
        times.append(time.monotonic())
        if kept is None:  # connected again, after a failed run
            conns.append(_FakeConnection())
            kept = conns[-1]
        if on_run is not None:
            on_run()
        step = script.pop(0)
        if not script:
            scheduler.stop()
        if isinstance(step, BaseException):
            kept.close()
            raise step
        if step and isinstance(step[0], str):
            notices.extend(step)
            return kept, []
        return kept, step

    monkeypatch.setattr(scheduler, "_run_once", run_once)
    return scheduler, conns, times


def _sent(schedule: str, n: int = 1) -> list[ScheduledMessage]:
    slot = datetime(2026, 1, 1, tzinfo=timezone.utc)
    return [ScheduledMessage(schedule, i + 1, slot + timedelta(seconds=i)) for i in range(n)]


def test_a_scheduler_warns_of_a_second_outage_as_of_the_first(monkeypatch: pytest.MonkeyPatch,
                                                              caplog: pytest.LogCaptureFixture) -> None:
    """An outage is one warning (again when its error changes: the connection lost, then
    refused), its end one line; the next outage is a warning again (not a DEBUG line that only
    says it failed "again"); the runs that worked count what they enqueued, every run's; and the
    connection it holds when it stops is closed."""
    lost = errors.PgQueueError("server closed the connection unexpectedly")
    refused = errors.PgQueueError("connection refused\n\tIs the server running?")
    scheduler, conns, _ = _scripted_scheduler(
        monkeypatch, [lost, lost, refused, refused, _sent("a", 2), lost, _sent("b")])
    caplog.set_level(logging.DEBUG, logger="pgqueue.scheduler")
    scheduler.run()
    lines = [(r.levelno, r.getMessage()) for r in caplog.records
             if "failed" in r.getMessage() or "works again" in r.getMessage()]
    warned = (logging.WARNING, "running the schedules failed: server closed the connection unexpectedly; "
                               "retrying every 0.01s")
    assert lines == [warned,
                     (logging.DEBUG, "running the schedules failed again (2 tries): server closed the connection "
                                     "unexpectedly"),
                     (logging.WARNING, "running the schedules failed: connection refused; retrying every 0.01s"),
                     (logging.DEBUG, "running the schedules failed again (4 tries): connection refused"),
                     (logging.INFO, "running the schedules works again (after 4 failed tries)"),
                     warned, (logging.INFO, "running the schedules works again (after 1 failed tries)")], lines
    assert scheduler.enqueued == 3
    assert len(conns) == 6 and all(c.closed for c in conns)  # the last one too, when it stops


def test_a_scheduler_raises_a_missing_privilege_instead_of_retrying(monkeypatch: pytest.MonkeyPatch) -> None:
    """A role without EXECUTE on schedule_run (42501) is raised by run(): no retry mends it."""
    denied = errors.PgQueueError("permission denied for function schedule_run", sqlstate="42501")
    scheduler, _, times = _scripted_scheduler(monkeypatch, [denied, _sent("a")])
    with pytest.raises(errors.PgQueueError, match="permission denied"):
        scheduler.run()
    assert len(times) == 1


def test_a_scheduler_waits_its_interval_between_runs_and_a_stop_ends_the_wait(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """The runs are ``interval`` apart (not back to back), and a stop() ends the wait between
    two runs at once, not when the interval is over."""
    scheduler, _, times = _scripted_scheduler(monkeypatch, [[], [], []], interval=0.2)
    scheduler.run()
    assert len(times) == 3 and all(b - a >= 0.19 for a, b in zip(times, times[1:])), times

    scheduler, _, times = _scripted_scheduler(monkeypatch, [[], [], []], interval=60)
    thread = threading.Thread(target=scheduler.run, daemon=True)
    thread.start()
    deadline = time.monotonic() + 10
    while not times and time.monotonic() < deadline:
        time.sleep(0.01)
    stopped = time.monotonic()
    scheduler.stop()
    thread.join(10)
    assert not thread.is_alive() and time.monotonic() - stopped < 5 and len(times) == 1


def test_a_held_schedule_is_warned_again_when_its_notice_changes_and_not_said_free_unless_it_fired(
        monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture) -> None:
    """A held schedule is one warning while it lasts, another when why it is held changes
    (full, then its admission held by a transaction); "no longer held" only once it enqueues
    again: not for a schedule whose notice stopped because it was dropped, or did not fire."""
    full = 'schedule "a" is held: its queue "q" is full (max_size 1)'
    admission = 'schedule "a" is held: an open transaction holds the admission of its queue "q"'
    other = 'schedule "b" is held: its queue "r" is full (max_size 1)'
    scheduler, _, _ = _scripted_scheduler(
        monkeypatch, [[full], [full], [admission], [other], _sent("c"), [other], _sent("b")])
    caplog.set_level(logging.INFO, logger="pgqueue.scheduler")
    scheduler.run()
    lines = [r.getMessage() for r in caplog.records if "held" in r.getMessage()]
    logged_once = "; its slots wait for a later run (logged once while it lasts)"
    assert lines == [full + logged_once, admission + logged_once, other + logged_once, other + logged_once,
                     "schedule b is no longer held: it enqueues again"], lines


def test_a_scheduler_takes_the_stop_signals_only_when_asked_and_gives_them_back(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """On the main thread, run() handles SIGTERM while it runs with handle_signals=True (the
    default) and gives the previous handler back when it returns; with handle_signals=False it
    leaves the caller's handler alone."""
    assert threading.current_thread() is threading.main_thread()

    def mine(signum: int, frame: Any) -> None:
        pass

    previous = signal.signal(signal.SIGTERM, mine)
    try:
        for handle in (True, False):
            seen: list[Any] = []
            scheduler, _, _ = _scripted_scheduler(monkeypatch, [[]], handle_signals=handle,
                                                  on_run=lambda: seen.append(signal.getsignal(signal.SIGTERM)))
            scheduler.run()
            assert (seen[0] is mine) is not handle, (handle, seen)
            assert signal.getsignal(signal.SIGTERM) is mine
    finally:
        signal.signal(signal.SIGTERM, previous)


def test_on_held_gets_the_held_notices_only_and_the_call_keeps_its_limit(dsn: str,
                                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    """run_schedules(on_held=) passes on the notices of held schedules (SQLSTATE PQ003) and no
    other (a trigger's, an extension's RAISE NOTICE), whatever the connection source; it closes
    the connection it opened itself; and it keeps its ``limit`` through a pool too."""
    import pgqueue.schedules as schedules

    held_text = 'schedule "a" is held: its queue "q" is full (max_size 1)'
    used: list[psycopg.Connection[Any]] = []

    def noisy_run(conn: psycopg.Connection[Any], command: Any) -> list[ScheduledMessage]:
        used.append(conn)
        conn.execute("DO $$ BEGIN RAISE NOTICE 'something else'; "
                     f"RAISE NOTICE USING ERRCODE = 'PQ003', MESSAGE = '{held_text}'; END $$")
        return []

    with monkeypatch.context() as patched:
        patched.setattr(schedules, "_run_once", noisy_run)
        for source in ("dsn", "connection", "pool"):
            held: list[str] = []
            if source == "connection":
                with psycopg.connect(dsn, autocommit=True) as conn:
                    run_schedules(conn, on_held=held.append)
            elif source == "pool":
                with ConnectionPool(dsn, min_size=1, open=True) as pool:
                    run_schedules(pool, on_held=held.append)
            else:
                run_schedules(dsn, on_held=held.append)
                assert used[-1].closed  # its own connection, closed
            assert held == [held_text], (source, held)

    Queue(dsn, "backlog").create()
    create_schedule(dsn, "backlog", "backlog", "b", every=1, missed="all",
                    start_at=datetime.now(timezone.utc) - timedelta(minutes=1))
    with ConnectionPool(dsn, min_size=1, open=True) as pool:
        assert len(run_schedules(pool, 2, on_held=lambda notice: None)) == 2
    assert len(run_schedules(dsn, 3, on_held=lambda notice: None)) == 3


def test_the_clock_set_back_warns_only_when_the_next_slot_moves(conn: psycopg.Connection[Any]) -> None:
    """schedule_run's WARNING for a clock set back (a last run more than a second ahead) says that
    the next slot moves from A to B: only when it does. An interval schedule whose next slot is
    still the first after now on its grid keeps it, and nothing is said (a review: "moves from X
    to X"); one whose next slot lies whole intervals on is taken back, and the WARNING says so."""
    warnings: list[str] = []
    conn.add_notice_handler(lambda d: warnings.append(f"{d.severity_nonlocalized} {d.message_primary}"))
    conn.execute("SELECT pgqueue.queue_create('wq')")
    conn.execute("SELECT pgqueue.schedule_create('w1', 'wq', 'x', p_every_ms => 7200000, "
                 "p_start_at => pgqueue.now_ms() + 3600000)")
    conn.execute("SELECT pgqueue.schedule_create('w2', 'wq', 'x', p_every_ms => 60000, "
                 "p_start_at => pgqueue.now_ms() + 3600000)")
    before = dict(conn.execute("SELECT name, next_run FROM pgqueue.schedule").fetchall())
    conn.execute("UPDATE pgqueue.schedule SET last_run = pgqueue.now_ms() + 5000")
    assert conn.execute("SELECT * FROM pgqueue.schedule_run()").fetchall() == []
    after = dict(conn.execute("SELECT name, next_run FROM pgqueue.schedule").fetchall())
    assert after["w1"] == before["w1"], "premise: the first slot after now on w1's grid is its next slot"
    assert after["w2"] < before["w2"], "premise: w2's next slot is taken back"
    said = [w for w in warnings if "clock was set back" in w]
    assert len(said) == 1 and said[0].startswith("WARNING") and '"w2"' in said[0], warnings
