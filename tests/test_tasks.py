"""The task registry (issue 16): one queue, several kinds of work dispatched by the task name in
the content type, which plain SQL sets as well as Python; unknown or missing task names and
Reject dead-letter the message at once; Queue.reject; the same with AsyncWorker."""

from __future__ import annotations

import email.message

import asyncio
import functools
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from typing import Any
from contextlib import contextmanager
from datetime import datetime, timezone
from pathlib import Path

import psycopg
import pytest

from pgqueue import AsyncQueue, AsyncWorker, Message, Queue, Reject, Tasks, Worker, errors
from pgqueue._worker_core import is_async_handler
from pgqueue.worker import Result
from test_worker import wait_for


@contextmanager
def running(worker: Worker) -> Iterator[None]:
    thread = threading.Thread(target=worker.run, daemon=True)
    thread.start()
    try:
        yield
    finally:
        worker.stop()
        thread.join(20)
        assert not thread.is_alive()


def test_dispatch_by_name_from_sql_and_python_and_dead_letter_the_unknown(dsn: str) -> None:
    queue = Queue(dsn, "work")
    queue.create(max_attempts=5, notify=True)
    with psycopg.connect(dsn, autocommit=True) as conn:
        row = conn.execute("SELECT pgqueue.message_create_json('work', '{\"to\": \"a@x\"}', NULL, 'send_email'), "
                           "pgqueue.message_create_json('work', '{}', NULL, 'no_such_task'), "
                           "pgqueue.message_create_json('work', '{}')").fetchone()
    assert row is not None
    from_sql, unknown, untasked = row
    resize = queue.enqueue(b"\x89PNG", task="resize")
    report = queue.enqueue("weekly", task="report")
    bad = queue.enqueue({"n": -1}, task="report")
    calls: list[tuple[str, int, object]] = []
    tasks = Tasks()

    @tasks.task("send_email")
    def send_email(msg: Message) -> None:
        calls.append(("send_email", msg.id, msg.payload))

    @tasks.task()
    def resize_image(msg: Message) -> None:
        calls.append(("resize", msg.id, msg.payload))

    tasks.register("resize", resize_image)

    @tasks.task("report")
    def make_report(msg: Message) -> None:
        if isinstance(msg.payload, dict):
            raise Reject(f"bad report request {msg.payload}")
        calls.append(("report", msg.id, msg.payload))

    results: list[Result] = []
    with running(Worker(queue, tasks, on_result=results.append)):
        wait_for(lambda: len(results) == 6, what="six results")
    assert sorted(calls) == sorted([("send_email", from_sql, {"to": "a@x"}), ("resize", resize, b"\x89PNG"),
                                    ("report", report, "weekly")])
    outcome = {r.message.id: r.outcome for r in results}
    assert outcome == {from_sql: "completed", resize: "completed", report: "completed",
                       unknown: "dead", untasked: "dead", bad: "dead"}
    dead = {d.id: d for d in queue.dead_letters()}
    assert all(d.attempts == 1 for d in dead.values())  # at once, though max_attempts is 5
    assert dead[unknown].last_error == ("UnknownTask: no task 'no_such_task' in this worker's registry "
                                        "(it has: report, resize, resize_image, send_email)")
    assert dead[untasked].last_error is not None and "names no task" in dead[untasked].last_error
    assert dead[bad].last_error == "Reject: bad report request {'n': -1}"
    assert queue.stats().total == 0


def test_task_names_and_registry_rules(dsn: str) -> None:
    queue = Queue(dsn)
    msg_id = queue.enqueue({"a": 1}, task="a.b:c-d_9")
    [msg] = queue.dequeue(1)
    assert (msg.id, msg.task, msg.content_type, msg.payload) == (msg_id, "a.b:c-d_9", 'application/json; task="a.b:c-d_9"',
                                                                {"a": 1})
    # quoted, as a MIME parameter with a ':' must be (Python's email parser read "a.b" of the
    # bare form: a review); message_create_json writes the same
    with psycopg.connect(dsn, autocommit=True) as conn:
        sql_id = conn.execute("SELECT pgqueue.message_create_json('default', '{}', p_task => 'a.b:c-d_9')").fetchone()
        assert sql_id is not None
        [by_sql] = queue.dequeue(1)
        assert (by_sql.id, by_sql.content_type) == (sql_id[0], msg.content_type)
    header = email.message.Message()
    header["Content-Type"] = msg.content_type
    assert header.get_param("task") == "a.b:c-d_9"
    queue.enqueue(b"raw", task="t")
    [pending] = queue.peek()
    assert (pending.task, pending.content_type, pending.payload) == ("t", "application/octet-stream; task=t", b"raw")
    queue.cancel([pending.id])
    for name in ("", "a b", "a;b", "x" * 201):
        with pytest.raises(errors.InvalidArgument):
            queue.enqueue(1, task=name)
        with pytest.raises(ValueError):
            Tasks().register(name, print)
    tasks = Tasks()
    tasks.register("x", print)
    with pytest.raises(ValueError, match="already"):
        tasks.register("x", print)

    async def coro(msg: Message) -> None:
        pass

    with pytest.raises(TypeError, match="not both"):
        tasks.register("y", coro)
    async_tasks = Tasks()
    async_tasks.register("y", coro)
    with pytest.raises(TypeError, match="AsyncWorker"):
        Worker(queue, async_tasks)
    with pytest.raises(TypeError):
        AsyncWorker(AsyncQueue(dsn), tasks)  # type: ignore[arg-type]
    # Queue.reject: a leased message goes to the dead letters now; a stale token does nothing
    queue.alter(max_attempts=9)
    queue.enqueue("poison")
    [leased] = queue.dequeue(1)
    assert queue.reject(leased, ValueError("cannot parse")) is True
    assert queue.reject(leased, "again") is False
    [dead] = queue.dead_letters()
    assert (dead.id, dead.attempts, dead.last_error) == (leased.id, 1, "ValueError: cannot parse")
    queue.close()


def test_async_worker_dispatches_async_tasks(dsn: str) -> None:
    queue = Queue(dsn, "work")
    queue.create(max_attempts=3, notify=True)
    good = queue.enqueue_many([1, 2, 3], task="double")
    unknown = queue.enqueue(4, task="triple")
    doubled: list[int] = []
    tasks = Tasks()

    @tasks.task("double")
    async def double(msg: Message) -> None:
        await asyncio.sleep(0.01)
        assert isinstance(msg.payload, int)
        doubled.append(msg.payload * 2)

    results: list[Result] = []

    async def go() -> None:
        worker = AsyncWorker(AsyncQueue(dsn, "work"), tasks, on_result=results.append)
        task = asyncio.create_task(worker.run())
        while len(results) < 4:
            await asyncio.sleep(0.02)
        worker.stop()
        await task

    asyncio.run(asyncio.wait_for(go(), 20))
    assert sorted(doubled) == [2, 4, 6]
    assert {r.message.id: r.outcome for r in results} == {**{i: "completed" for i in good}, unknown: "dead"}
    [dead] = queue.dead_letters()
    assert dead.id == unknown and dead.attempts == 1 and "no task 'triple'" in (dead.last_error or "")


def _message(content_type: str | None) -> Message:
    return Message(id=1, queue="work", payload=None, attempts=1, state=None, dequeue_at=None,
                   created_at=datetime.now(timezone.utc), locked_until=None, content=b"null",
                   content_type=content_type)


def test_decorator_forms_and_handler_checks() -> None:
    tasks = Tasks()

    @tasks.task  # bare: before, it registered nothing and replaced the function by a decorator
    def bare(msg: Message) -> None:
        pass

    @tasks.task()
    def by_name(msg: Message) -> None:
        pass

    @tasks.task("named")
    def other(msg: Message) -> None:
        pass

    assert tasks.names == ["bare", "by_name", "named"]
    assert tasks.handler_for(_message("application/json; task=bare")) is bare
    assert tasks.handler_for(_message("application/json; task=by_name")) is by_name
    assert tasks.handler_for(_message("application/json; task=named")) is other
    # an empty name is refused, not silently replaced by the function's name
    with pytest.raises(ValueError, match="invalid task name ''"):
        tasks.task("")(other)
    assert tasks.names == ["bare", "by_name", "named"]
    # a handler that cannot be called is refused when registered, not when its messages fail
    with pytest.raises(TypeError, match="must be callable"):
        tasks.register("number", 42)  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="must be callable"):
        Tasks(default="send_email")  # type: ignore[arg-type]
    assert tasks.names == ["bare", "by_name", "named"]
    # a callable without a __name__ needs a name given, and says so (an AttributeError before)
    with pytest.raises(TypeError, match="has no __name__ to name its task"):
        tasks.task(functools.partial(other))
    with pytest.raises(TypeError, match="has no __name__ to name its task"):
        tasks.task()(functools.partial(other))
    tasks.task("partial")(functools.partial(other))
    assert tasks.names == ["bare", "by_name", "named", "partial"]


class _AsyncCallable:
    async def __call__(self, msg: Message) -> None:
        pass


def test_an_object_with_an_async_call_is_an_async_task() -> None:
    """An object whose ``__call__`` is a coroutine function is an async task, as the workers count
    it (is_async_handler): a registry does not take it beside plain functions, and AsyncWorker
    takes a registry of them (before, the registry called it plain: Worker took it and every
    message failed with an un-awaited coroutine)."""
    tasks = Tasks()
    tasks.register("a", _AsyncCallable())
    assert tasks.is_async and is_async_handler(tasks)

    def plain(msg: Message) -> None:
        pass

    with pytest.raises(TypeError, match="not both"):
        tasks.register("b", plain)
    assert Tasks(default=_AsyncCallable()).is_async


TYPED_USE = '''\
from pgqueue import Message, Tasks

tasks = Tasks()


@tasks.task
def bare(msg: Message) -> None: ...


@tasks.task("send_email")
async def send_email(msg: Message) -> int:
    return 1


@tasks.task("wrong")
def wrong(count: int) -> None: ...


tasks.register("also_wrong", len)
reveal_type(bare)
reveal_type(send_email)
'''


def test_a_users_mypy_checks_handlers(tmp_path: Path) -> None:
    """Under ``mypy --strict`` the decorator keeps the function's type and refuses a function
    that does not take a Message (before, any callable passed, and the bare form was an error)."""
    (tmp_path / "use.py").write_text(TYPED_USE)
    mypy = Path(sys.executable).parent / "mypy"
    proc = subprocess.run([str(mypy), "--strict", "--no-incremental", "use.py"], cwd=tmp_path,
                          capture_output=True, text=True, timeout=300, check=False)
    errors_ = [line for line in proc.stdout.splitlines() if ": error:" in line]
    assert [line.split(":")[1] for line in errors_] == ["15", "19"], proc.stdout + proc.stderr
    assert 'Revealed type is "def (msg: pgqueue.message.Message)"' in proc.stdout, proc.stdout
    assert 'Revealed type is "def (msg: pgqueue.message.Message) -> typing.Coroutine[Any, Any, int]"' \
        in proc.stdout, proc.stdout


def test_the_module_docstring_quotes_the_unknown_task_error_as_it_is() -> None:
    """It showed ``no task "x"``; the error says ``no task 'x'``."""
    import pgqueue.tasks
    from pgqueue.codec import with_task
    from pgqueue.message import to_datetime

    tasks = Tasks()
    tasks.task("send_email")(lambda msg: None)
    at = to_datetime(0)
    msg = Message(1, "q", {}, 1, None, at, at, at, b"{}", with_task("application/json", "x"))
    with pytest.raises(pgqueue.tasks.UnknownTask) as raised:
        tasks.handler_for(msg)
    stored = f"{type(raised.value).__name__}: {raised.value}"
    assert stored in " ".join((pgqueue.tasks.__doc__ or "").split()), stored


def test_a_group_of_rejects_rejects_and_a_mixed_group_is_settled_as_the_group() -> None:
    """The rule of receive() and both workers for exception groups (an asyncio.TaskGroup's): a
    group whose leaves, nested groups opened, are all Rejects rejects, its last_error the Rejects'
    texts; anything else besides makes it what the group is: a failure (an ExceptionGroup) or an
    interruption (a BaseExceptionGroup holding a KeyboardInterrupt, a cancellation)."""
    from pgqueue import _core
    from pgqueue.tasks import UnknownTask

    one = ExceptionGroup("unhandled errors in a TaskGroup (1 sub-exception)", [Reject("bad payload")])
    nested = ExceptionGroup("outer", [ExceptionGroup("inner", [Reject("a"), UnknownTask("b")]), Reject("c")])
    assert [_core.outcome(e) for e in (Reject("x"), one, nested)] == ["reject"] * 3
    assert [_core.rejection_text(e) for e in (Reject("x"), one, nested)] == [
        "Reject: x", "Reject: bad payload", "Reject: a; UnknownTask: b; Reject: c"]
    assert [str(e) for e in _core.rejections(nested)] == ["a", "b", "c"]
    mixed = ExceptionGroup("m", [Reject("a"), ExceptionGroup("n", [Reject("b"), ValueError("c")])])
    interrupted = BaseExceptionGroup("i", [Reject("a"), KeyboardInterrupt()])
    cancelled = BaseExceptionGroup("c", [asyncio.CancelledError()])
    assert [_core.outcome(e) for e in (mixed, ValueError("v"), interrupted, cancelled, KeyboardInterrupt())] == [
        "fail", "fail", "release", "release", "release"]
    assert _core.rejections(mixed) == [] and _core.rejections(None) == []
    # a group that is not a rejection stores its own text and what it holds, not the count alone
    assert _core.rejection_text(mixed) == "ExceptionGroup: m (2 sub-exceptions): Reject: a; Reject: b; ValueError: c"
    assert _core.error_text(cancelled) == "BaseExceptionGroup: c (1 sub-exception): CancelledError"
    assert _core.error_text(ExceptionGroup("g", [ValueError("line\nbreak"), KeyError("k")])) == (
        "ExceptionGroup: g (2 sub-exceptions): ValueError: line break; KeyError: 'k'")
    # a huge group is read only as far as the stored text goes
    huge = ExceptionGroup("h", [ValueError("x" * 90) for _ in range(200_000)])
    started = time.monotonic()
    text = _core.error_text(huge)
    assert len(text) == _core.MAX_ERROR_CHARS and text.startswith("ExceptionGroup: h (200000 sub-exceptions): ValueError: xxx")
    assert time.monotonic() - started < 1.0
    # Queue.reject given a group of Rejects stores their texts as well
    msg = _message(None)
    assert _core.reject(msg, one).params["error"] == "Reject: bad payload"
    assert _core.reject(msg, "as given").params["error"] == "as given"
    # a group nested deeper than the recursion limit is read all the same
    deep: BaseException = Reject("deep")
    for _ in range(2000):  # (Python's recursion limit is 1000)
        deep = ExceptionGroup("g", [deep])
    assert _core.outcome(deep) == "reject" and _core.rejection_text(deep) == "Reject: deep"
    deep_failure: BaseException = ValueError("deep")
    for _ in range(2000):
        deep_failure = ExceptionGroup("g", [deep_failure])
    assert _core.error_text(deep_failure) == "ExceptionGroup: g (1 sub-exception): ValueError: deep"


def test_errors_quote_at_most_the_start_of_a_long_value(dsn: str) -> None:
    """A task name, a content type, a group or a queue name of 10,000 characters was echoed in
    full in its error: the first 100 characters are quoted, with an ellipsis and the length."""
    from pgqueue.errors import quoted

    assert quoted("abc") == "'abc'" and quoted("a" * 100) == repr("a" * 100)
    assert quoted("a" * 10_000) == f"'{'a' * 100}\u2026' (10000 characters)"
    assert quoted("it's" * 50) == '"' + "it's" * 25 + '\u2026" (200 characters)'
    assert quoted("\x00" * 101) == "'" + "\\x00" * 100 + "\u2026' (101 characters)"
    assert quoted([1] * 5000) == f"{str([1] * 5000)[:100]}\u2026 (a repr of {len(str([1] * 5000))} characters)"
    tasks = Tasks()
    with pytest.raises(ValueError) as raised:
        tasks.register("a" * 10_000, lambda msg: None)
    assert str(raised.value) == (f"invalid task name '{'a' * 100}\u2026' (10000 characters): 1 to 200 letters, "
                                 "digits, '_', '.', ':' or '-'")
    with pytest.raises(Reject) as rejected:
        tasks.handler_for(_message("text/plain; x=" + "y" * 10_000))
    assert "(10014 characters)" in str(rejected.value) and len(str(rejected.value)) < 300
    queue = Queue(dsn, "work")
    for call in (lambda: queue.enqueue(1, group="g\x00" + "g" * 10_000),
                 lambda: queue.enqueue(1, key=["k"] * 10_000),  # type: ignore[arg-type]
                 lambda: queue.enqueue(1, delay="1" * 10_000),  # type: ignore[arg-type]
                 lambda: Queue(dsn, "q\x00" + "q" * 10_000).stats()):
        with pytest.raises(errors.PgQueueError) as error:
            call()
        assert "\u2026" in str(error.value) and "characters)" in str(error.value), str(error.value)[:300]
        assert len(str(error.value)) < 500
    # a value whose repr cannot be made is named by its type: the error is still the documented one
    huge = 10 ** 5000  # (more digits than Python converts to text)

    class Unprintable:
        def __repr__(self) -> str:
            raise RuntimeError("no repr")

    assert quoted(huge) == f"an int of more than {sys.get_int_max_str_digits()} digits"
    assert quoted(Unprintable()) == "a Unprintable whose repr could not be made"
    assert quoted([huge]) == "a list whose repr could not be made"
    for call in (lambda: queue.enqueue(1, delay=huge), lambda: queue.enqueue(1, at=huge),
                 lambda: queue.enqueue(1, priority=huge)):
        with pytest.raises(errors.InvalidArgument) as bad:
            call()
        assert "an int of more than" in str(bad.value), str(bad.value)[:300]
    with pytest.raises(ValueError, match="concurrency must be at least 1, got an int of more than"):
        Worker(queue, lambda msg: None, concurrency=-huge)
    queue.close()


def test_an_empty_task_name_is_said_so() -> None:
    """A content type with an empty task parameter (``; task=``, from a producer in another
    language) was dead-lettered as "no task ''"; the reason says the name is empty."""
    import pgqueue.tasks
    from pgqueue.message import to_datetime

    tasks = Tasks()
    tasks.task("send_email")(lambda msg: None)
    at = to_datetime(0)
    for content_type in ("application/json; task=", 'application/json; task=""'):
        msg = Message(1, "q", {}, 1, None, at, at, at, b"{}", content_type)
        with pytest.raises(pgqueue.tasks.UnknownTask) as raised:
            tasks.handler_for(msg)
        assert str(raised.value) == (f"the message names an empty task (content type '{content_type}'); "
                                     "a task name has 1 to 200 characters")


def test_the_default_handler_takes_the_messages_that_name_no_task_only() -> None:
    """``Tasks(default=h)``: h runs the messages that name no task, and calling the registry
    returns what h returns; a message naming a task the registry lacks is still UnknownTask (the
    default is not a catch-all), and a registered task still goes to its own handler."""
    from pgqueue.tasks import UnknownTask

    def fallback(msg: Message) -> str:
        return "default"

    tasks = Tasks(default=fallback)
    tasks.task("named")(lambda msg: "named")
    assert tasks.handler_for(_message("application/json")) is fallback
    assert tasks.handler_for(_message(None)) is fallback
    assert tasks(_message("application/json")) == "default"
    assert tasks(_message("application/json; task=named")) == "named"
    with pytest.raises(UnknownTask, match="no task 'other' in this worker's registry \\(it has: named\\)"):
        tasks.handler_for(_message("application/json; task=other"))
    assert not tasks.is_async


def test_a_handler_that_returned_a_generator_of_either_kind_has_its_message_failed() -> None:
    """What a worker checks of a handler's result: a generator or an async generator (a plain
    handler that returns one, `lambda msg: agen(msg)`) ran none of its body, so its message must
    not be completed: TypeError, the generator closed without a "never awaited" warning (it
    said "returned a async_generator")."""
    import gc
    import inspect
    import warnings

    from pgqueue.tasks import returned_generator

    def gen() -> Iterator[int]:
        yield 1

    async def agen() -> Any:
        yield 1

    returned_generator(None)
    returned_generator(asyncio.sleep)  # a function, not a generator: nothing to say
    plain = gen()
    with pytest.raises(TypeError, match="the handler returned a generator: none of its body ran"):
        returned_generator(plain)
    assert inspect.getgeneratorstate(plain) == inspect.GEN_CLOSED
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        with pytest.raises(TypeError, match="the handler returned an async_generator: none of its body ran"):
            returned_generator(agen())
        gc.collect()
