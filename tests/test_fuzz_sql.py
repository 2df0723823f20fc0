"""Property-based bad input: every public SQL function of schema pgqueue, called with random
arguments, either works or fails with a documented SQLSTATE, and the invariants hold after
every example.

Random by nature, so it may hit cases of the fixed error matrix (tests/pgtap/20_errors.sql,
the one home of "which bad call gets which SQLSTATE"): it checks what no list can, that no call
of any function fails in an undocumented way or breaks an invariant.

The functions are discovered from pg_proc when the tests run (names not starting with "_"), so
a new function (the spark_* family of 0.2, or anything later) is fuzzed without editing this
file. Arguments come from one hand-written strategy per parameter type, refined for
parameters whose name says more (p_queue, p_id, p_attempts, p_lock_ms, ...): NULLs, extreme
integers, empty and multi-megabyte payloads, unicode and hostile queue names, arrays with NULLs
and of two dimensions, and references to live, leased, claimed and dead messages so that the
calls also act on real rows. Two calls in three are "clean" (call_strategy): no NULL where one is
refused, batch arrays of one length, on a queue that exists (one with message groups and one with
a rate limit among them), so that they get past the argument checks;
test_every_function_with_random_arguments fails when a function never does. A parameter type
without a strategy fails test_every_parameter_type_has_a_strategy: write one.

Documented SQLSTATEs (README "Error codes"; PQ005-PQ007 from the 0.2 upgrade script):
PQ001-PQ007, 22004, 22023, 42602, 42710. Anything else fails the test with the function, the arguments
and the error, except two narrow lists below: CONVERSION_LIMITS (from_epoch/to_epoch asked for a
time their result type cannot hold) and KNOWN_BUGS (each names its regression test at the end of
this file, marked xfail(strict=True); test_every_known_bug_has_its_regression_test checks both). The
fuzzer found seven extension bugs; all are fixed, KNOWN_BUGS is empty, and their regression tests
pass.

Invariants (checked after each example, see invariant_problems): no orphan messages, dead
letters or Spark rows; attempts never negative; a leased message carries a token (attempts >= 1)
and a claimed one the endless lease; no id both live and dead; the default queue exists; the
back-pressure bound (queue_size.upper) is never below the real count; queue_stats equals direct
counts of the tables.

Calls that wait: test_random_calls_that_wait_for_a_lock_keep_the_invariants runs a random call on
a queue while a second session holds, in an open transaction, a lock the call may need (the
queue's stripe, held by a queue_alter or a queue_drop; a group's lock, held by an enqueue into
the group: docs/locking.md, LOCK_HOLDERS), then commits or rolls back; the call must end as any
other, and the test fails unless a message_dequeue waited for each kind of lock.

Runs: PGQUEUE_FUZZ_EXAMPLES scales the number of examples (default: CI-sized, well under a
minute); the examples are derandomized unless PGQUEUE_FUZZ_RANDOM=1.
"""

from __future__ import annotations

import os
import random
import threading
import time
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import psycopg
import pytest
from hypothesis import HealthCheck, Phase, event, given, note, settings
from hypothesis import strategies as st
from psycopg import sql
from psycopg.types.string import TextLoader

import soak

Conn = psycopg.Connection[Any]

DOCUMENTED = {"PQ001", "PQ002", "PQ003", "PQ004", "PQ005", "PQ006", "PQ007", "22004", "22023", "42602",
              "42710"}

SCALE = float(os.environ.get("PGQUEUE_FUZZ_EXAMPLES", "1"))
FUZZ = settings(
    deadline=None,
    derandomize=os.environ.get("PGQUEUE_FUZZ_RANDOM") != "1",
    database=None,
    # no shrinking: a database that changes under the examples makes it slow and not minimal; the
    # failure message lists every call of the failing example with its arguments instead
    phases=[Phase.explicit, Phase.generate],
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow,
                           HealthCheck.data_too_large, HealthCheck.large_base_example],
    print_blob=True,
)

INT4 = (0, 1, -1, 2, 2**31 - 1, -(2**31))
INT8 = INT4 + (2**63 - 1, -(2**63), 2**31, 31_536_000_000, 31_536_000_001, 253_402_300_799_999)

# -- references to live rows and the clock, resolved when the call runs ---------------------------


@dataclass(frozen=True)
class Ref:
    """A value taken from the database when the call runs: the call's target row, or the clock."""

    what: str  # "id" / "attempts" of the call's target message, or "now" (+ offset ms)
    offset: int = 0

    def __repr__(self) -> str:
        return f"<{self.what}{'+' + str(self.offset) if self.offset else ''}>"


TARGETS = ("leased", "claimed", "ready", "scheduled", "dead", "none")
TARGET_SQL = {
    "leased": "SELECT id, attempts FROM pgqueue.message WHERE locked_until IS NOT NULL AND {claim_null} ORDER BY random() LIMIT 1",
    "claimed": "SELECT id, attempts FROM pgqueue.message WHERE {claim_not_null} ORDER BY random() LIMIT 1",
    "ready": "SELECT id, attempts FROM pgqueue.message WHERE locked_until IS NULL AND dequeue_at <= pgqueue.now_ms() ORDER BY random() LIMIT 1",
    "scheduled": "SELECT id, attempts FROM pgqueue.message WHERE locked_until IS NULL AND dequeue_at > pgqueue.now_ms() ORDER BY random() LIMIT 1",
    "dead": "SELECT id, attempts FROM pgqueue.dead_letter ORDER BY random() LIMIT 1",
}


def now_ms() -> int:
    return int(time.time() * 1000)


# -- strategies ----------------------------------------------------------------------------------

NULL = st.none()
ints = st.one_of(st.sampled_from(INT4), st.integers(-3, 20), st.integers(-(2**31), 2**31 - 1), NULL)
bigints = st.one_of(st.sampled_from(INT8), st.integers(-3, 50), st.integers(-(2**63), 2**63 - 1), NULL)
times = st.one_of(st.sampled_from(INT8), st.integers(-60_000, 3_600_000).map(lambda o: Ref("now", o)), NULL)
booleans = st.one_of(st.booleans(), NULL)

#: text without NUL (PostgreSQL text cannot hold it) or lone surrogates (not UTF-8)
any_text = st.text(st.characters(exclude_categories=("Cs",), exclude_characters="\x00"), max_size=60)
HOSTILE_NAMES = [
    "", " ", "x" * 48, "x" * 49, "y" * 10_000, "it's", "a;b", "a\\b", "'; DROP TABLE pgqueue.message; --",
    'a"b', '"q"', "q ", " q", "Q", "ünïcödé", "队列", "🚀", ".dot", "-dash", "default", "DEFAULT", "Default",
    "default ", "pgqueue.message", "pg_catalog", "%s", "%(x)s", "$1", "\\x00", "NULL", "q\n", "q\t",
]
#: queues prepare() makes (fz_a and fz.b-1 only by chance): "grouped" has message groups and a
#: key window, "rated" a rate limit, so that their paths meet random arguments too
EXISTING_QUEUES = ["default", "q", "capped", "retry", "grouped", "rated", "fz_a", "fz.b-1"]
valid_names = st.from_regex(r"\A[A-Za-z0-9_][A-Za-z0-9_.-]{0,47}\Z")
queue_names = st.one_of(st.sampled_from(EXISTING_QUEUES), st.sampled_from(EXISTING_QUEUES),
                        st.sampled_from(HOSTILE_NAMES), valid_names, any_text, NULL)
consumer_names = st.one_of(st.sampled_from(["etl", "etl:2", "other", "x" * 100, "x" * 101, "a b", ":x", ""]),
                           st.from_regex(r"\A[A-Za-z0-9_][A-Za-z0-9_.:-]{0,99}\Z"), any_text, NULL)
long_text = st.sampled_from(["", "x" * 100_000, "ü" * 1000])
texts = st.one_of(any_text, long_text, st.sampled_from(HOSTILE_NAMES), NULL)
#: group and idempotency keys: a few that repeat (so that groups queue and keys are found taken),
#: the bounds (1 and 200 characters; 201), and any text
group_keys = st.one_of(st.sampled_from(["g1", "g2", "g3"]), st.sampled_from(["x" * 200, "ü" * 200, "x" * 201]), texts)
idem_keys = st.one_of(st.sampled_from(["k1", "k2", "k3"]), st.sampled_from(["x" * 200, "x" * 201]), texts)


def _big(n: int) -> bytes:
    return random.Random(n).randbytes(n)  # incompressible, so TOAST really stores n bytes


small_payloads = st.one_of(st.binary(max_size=64), st.just(b""), st.just(b"\x00" * 7))
payloads = st.one_of(small_payloads, small_payloads, small_payloads,
                     st.sampled_from([100_000, 1 << 20, 3 << 20]).map(_big), NULL)
ids = st.one_of(st.just(Ref("id")), st.just(Ref("id")), st.sampled_from(INT8), st.integers(1, 500), NULL)
tokens = st.one_of(st.just(Ref("attempts")), st.just(Ref("attempts")), st.integers(0, 5),
                   st.sampled_from(INT4), NULL)
lock_ms = st.one_of(st.sampled_from([0, 1, 10, 1000, 60_000, 31_536_000_000, 31_536_000_001]), st.sampled_from(INT8), NULL)
limits = st.one_of(st.sampled_from([1, 2, 10, 10_000, 10_001, 1_000_000, 1_000_001]), ints)
uuids = st.one_of(st.sampled_from(["00000000-0000-0000-0000-00000000000a", "00000000-0000-0000-0000-00000000000b"]),
                  st.uuids().map(str), NULL)


def arrays(element: st.SearchStrategy[Any], *, max_size: int = 8) -> st.SearchStrategy[Any]:
    """NULL, empty, one-dimensional (with NULL elements) and two-dimensional arrays."""
    flat = st.lists(st.one_of(element, NULL), max_size=max_size)
    square = st.integers(1, 3).flatmap(lambda n: st.lists(st.lists(element, min_size=n, max_size=n),
                                                          min_size=1, max_size=3))
    return st.one_of(NULL, st.just([]), flat, flat, square)


byte_arrays = st.one_of(arrays(small_payloads), st.integers(0, 2000).map(lambda n: [b"m"] * n))
bigint_arrays = st.one_of(arrays(st.one_of(st.sampled_from(INT8), st.integers(0, 500))),
                          st.lists(st.just(Ref("id")), min_size=1, max_size=2))
int_arrays = arrays(st.one_of(st.sampled_from(INT4), st.integers(-2, 5)))
text_arrays = arrays(st.one_of(any_text, st.sampled_from(["text/plain", "application/json"])))
timestamps = st.one_of(
    st.datetimes(timezones=st.timezones()),
    st.sampled_from(["infinity", "-infinity", "epoch", "4713-01-01 00:00:00+00 BC", "294276-12-31 23:59:59+00",
                     "2000-01-01 00:00:00.000999+00", "1969-12-31 23:59:59.9999+00"]),
    NULL)

#: One strategy per parameter type ...
BY_TYPE: dict[str, st.SearchStrategy[Any]] = {
    "text": texts,
    "bytea": payloads,
    "integer": ints,
    "bigint": bigints,
    "boolean": booleans,
    "uuid": uuids,
    "timestamp with time zone": timestamps,
    "bytea[]": byte_arrays,
    "bigint[]": bigint_arrays,
    "integer[]": int_arrays,
    "text[]": text_arrays,
    "jsonb": st.one_of(NULL, st.sampled_from(['{}', '[]', '"x"', 'null', '{"a": [1, 2.5, "\\u00e9", "C:\\\\x"]}'])),
}
#: ... refined where the parameter's name says what it is.
BY_NAME: dict[tuple[str, str], st.SearchStrategy[Any]] = {
    ("p_queue", "text"): queue_names,
    ("p_consumer", "text"): consumer_names,
    ("p_id", "bigint"): ids,
    ("p_attempts", "integer"): tokens,
    ("p_lock_ms", "bigint"): lock_ms,
    ("p_limit", "integer"): limits,
    ("p_max_messages", "integer"): limits,
    ("p_dequeue_at", "bigint"): times,
    ("p_before", "bigint"): times,
    ("p_ids", "bigint[]"): bigint_arrays,
    ("p_max_size", "bigint"): st.one_of(st.sampled_from([0, 1, 2, 5, 2**62, 2**63 - 2]), bigints),
    ("p_max_attempts", "integer"): st.one_of(st.integers(0, 3), ints),
    ("p_content_type", "text"): st.one_of(st.sampled_from(["application/json", "text/plain; charset=utf-8"]), texts),
    ("p_task", "text"): st.one_of(st.sampled_from(["send_email", "a.b:c-d"]), texts),
    ("p_cron", "text"): st.one_of(st.sampled_from(["* * * * *", "*/5 1-3 * * 1,7", "0 0 31 2 *", "60 * * * *"]), texts),
    ("p_missed", "text"): st.one_of(st.sampled_from(["latest", "all"]), texts),
    ("p_every_ms", "bigint"): st.one_of(st.sampled_from([1000, 60000, 999]), bigints),
    ("p_start_at", "bigint"): times,
    ("p_publish_key", "text"): st.one_of(st.sampled_from(["job-1", "job-2"]), texts),
    ("p_partition", "integer"): st.one_of(st.integers(0, 2), ints),
    ("p_attempt", "bigint"): st.one_of(st.integers(0, 2), bigints),
    ("p_partitions", "integer[]"): st.one_of(st.lists(st.integers(0, 2), max_size=3, unique=True), int_arrays),
    ("p_attempts", "bigint[]"): st.one_of(st.lists(st.integers(0, 2), max_size=3), bigint_arrays),
    ("p_counts", "bigint[]"): st.one_of(st.lists(st.integers(0, 3), max_size=3), bigint_arrays),
    ("p_up_to_seq", "bigint"): st.one_of(st.integers(0, 5), bigints),
    ("p_after_seq", "bigint"): st.one_of(st.integers(0, 5), bigints),
    ("p_group", "text"): group_keys,
    ("p_key", "text"): idem_keys,
    ("p_groups", "text[]"): arrays(group_keys),
    ("p_keys", "text[]"): arrays(idem_keys),
    ("p_group_concurrency", "integer"): st.one_of(st.integers(0, 3), ints),
    ("p_rate_limit", "integer"): st.one_of(st.sampled_from([0, 1, 1000, 1_000_000, 1_000_001]), ints),
    ("p_key_window_ms", "bigint"): st.one_of(st.sampled_from([0, 1000, 31_536_000_000, 31_536_000_001]), bigints),
}

#: The elements of a batch's arrays, NULL-free, for calls whose arrays have one length (see
#: call_strategy): without them nearly every batch call stops at its argument checks (an array
#: with a NULL, or of another length than its companions) and what comes after them goes untested.
ALIGNED: dict[tuple[str, str], st.SearchStrategy[Any]] = {
    ("p_contents", "bytea[]"): small_payloads,
    ("p_dequeue_ats", "bigint[]"): st.one_of(times, st.just(None)),
    ("p_content_types", "text[]"): st.one_of(st.sampled_from(["text/plain", "application/json"]), NULL),
    ("p_groups", "text[]"): st.one_of(st.sampled_from(["g1", "g2", "g3"]), group_keys, NULL),
    ("p_keys", "text[]"): st.one_of(st.sampled_from(["k1", "k2", "k3"]), idem_keys, NULL),
    ("p_delays_ms", "bigint[]"): st.one_of(st.sampled_from([0, 1000, 2**62]), NULL),
    ("p_ids", "bigint[]"): st.one_of(st.just(Ref("id")), st.integers(1, 500)),
    ("p_attempts", "integer[]"): st.one_of(st.just(Ref("attempts")), st.integers(0, 3)),
    ("p_partitions", "integer[]"): st.integers(0, 2),
    ("p_attempts", "bigint[]"): st.integers(0, 2),
    ("p_counts", "bigint[]"): st.integers(0, 3),
}
#: What a clean call draws for these (a queue that exists, of each kind: replenish() makes them)
#: and one schedule kind or the other (by n)
CLEAN_QUEUES = ("q", "grouped", "rated", "capped", "default")
CLEAN: dict[tuple[str, str], Callable[[int], st.SearchStrategy[Any]]] = {
    ("p_queue", "text"): lambda n: st.sampled_from(CLEAN_QUEUES),
    ("p_limit", "integer"): lambda n: st.integers(1, 20),
    ("p_group", "text"): lambda n: st.sampled_from(["g1", "g2", "g3", None]),
    ("p_key", "text"): lambda n: st.sampled_from(["k1", "k2", "k3", None]),
    ("p_task", "text"): lambda n: st.sampled_from(["send_email", "a.b:c-d", None]),
    ("p_every_ms", "bigint"): lambda n: st.sampled_from([1000, 60000, 3_153_600_000_000]) if n % 2 else st.none(),
    ("p_cron", "text"): lambda n: st.none() if n % 2 else st.sampled_from(["* * * * *", "*/5 1-3 * * 1,7", "0 0 29 2 1"]),
    ("p_consumer", "text"): lambda n: st.sampled_from(["etl", "etl:2"]),
    ("p_name", "text"): lambda n: st.from_regex(r"\A[a-z0-9]{1,12}\Z"),
    ("p_missed", "text"): lambda n: st.sampled_from(["latest", "all"]),
    ("p_start_at", "bigint"): lambda n: st.one_of(st.none(), st.integers(-3_600_000, 3_600_000).map(lambda o: Ref("now", o))),
}
#: a group (p_group, p_groups) only on the queue with groups: elsewhere it is refused (22023)
GROUP_PARAMETERS = {("p_group", "text"), ("p_groups", "text[]")}
#: What a clean call passes for a required argument drawn NULL (by name and type, else by type).
NOT_NULL: dict[tuple[str, str], Any] = {
    ("p_queue", "text"): "q", ("p_consumer", "text"): "etl", ("p_id", "bigint"): Ref("id"),
    ("p_attempts", "integer"): Ref("attempts"), ("p_missed", "text"): "latest", ("p_name", "text"): "sched",
    # queue_create's settings that have a default but refuse NULL
    ("p_lock_ms", "bigint"): 1000, ("p_retry_base_ms", "bigint"): 0, ("p_retry_cap_ms", "bigint"): 1000,
    ("p_notify", "boolean"): False, ("p_if_not_exists", "boolean"): False, ("p_key_window_ms", "bigint"): 0,
    ("", "text"): "x", ("", "bytea"): b"", ("", "integer"): 1, ("", "bigint"): 1, ("", "boolean"): False,
    ("", "uuid"): "00000000-0000-0000-0000-00000000000a", ("", "timestamp with time zone"): "epoch",
    ("", "jsonb"): "{}",
}


def strategy_for(name: str, type_: str) -> st.SearchStrategy[Any] | None:
    return BY_NAME.get((name, type_), BY_TYPE.get(type_))


# -- the functions -------------------------------------------------------------------------------


@dataclass(frozen=True)
class Function:
    name: str
    signature: str
    args: tuple[tuple[str, str], ...]  # (name, type) of each input parameter
    n_defaults: int

    def __repr__(self) -> str:
        return self.signature


def public_functions(conn: Conn) -> list[Function]:
    """Every function of schema pgqueue whose name does not start with "_"."""
    rows = conn.execute("""
        SELECT p.proname, p.oid::regprocedure::text, p.pronargdefaults,
               coalesce(p.proargnames, '{}'), coalesce(p.proargmodes::text[], '{}'),
               ARRAY(SELECT format_type(t, NULL) FROM unnest(p.proargtypes::oid[]) WITH ORDINALITY u(t, n) ORDER BY n)
          FROM pg_proc p JOIN pg_namespace n ON n.oid = p.pronamespace
         WHERE n.nspname = 'pgqueue' AND p.proname !~ '^_' AND p.prokind = 'f'
         ORDER BY 2""").fetchall()
    out = []
    for name, signature, n_defaults, names, modes, types in rows:
        inputs = [n for n, m in zip(names, modes) if m in ("i", "b")] if modes else list(names[: len(types)])
        if len(inputs) != len(types):  # unnamed parameters: positional
            inputs = [f"${i + 1}" for i in range(len(types))]
        out.append(Function(name, signature, tuple(zip(inputs, types)), n_defaults))
    return out


@dataclass
class Call:
    function: Function
    target: str
    args: list[tuple[str, str, Any]]  # (name, type, value) of the arguments passed

    def __repr__(self) -> str:
        def short(v: Any) -> str:
            r = repr(v)
            return r if len(r) <= 80 else f"{r[:60]}...<{len(v) if hasattr(v, '__len__') else '?'}>"
        return f"{self.function.name}({', '.join(f'{n} => {short(v)}' for n, _, v in self.args)}) [target {self.target}]"


def call_strategy(function: Function, queue: str | None = None) -> st.SearchStrategy[Call]:
    """Arguments for one call: each parameter drawn from its strategy, defaulted ones maybe left out.

    Two calls in three are "clean": no required argument is NULL and the arrays of a batch have one
    length, n, and no NULL element, so that the call gets past its argument checks (with
    random values still in every argument) and reaches the rows, on queue (if given) or one of
    CLEAN's; test_every_function_with_random_arguments checks that every function does. A clean
    call without a queue given draws its queue first, so that its group (p_group, p_groups) is
    drawn only on the queue with groups (elsewhere 22023): drawn apart, a function with a group
    and a key and a task to get right, message_create_json, went 40 examples without a clean
    success (a CI run, session 51)."""
    clean = st.sampled_from([True, True, False])  # two in three
    takes_queue = function.name not in ("queue_create", "queue_drop") and ("p_queue", "text") in function.args

    def build(t: tuple[bool, int]) -> st.SearchStrategy[Call]:
        if t[0] and queue is None and takes_queue:
            return st.sampled_from(CLEAN_QUEUES).flatmap(lambda q: _call_strategy(function, *t, q))
        return _call_strategy(function, *t, queue)

    return st.tuples(clean, st.integers(1, 4)).flatmap(build)


def _call_strategy(function: Function, clean: bool, n: int, queue: str | None = None) -> st.SearchStrategy[Call]:
    first_default = len(function.args) - function.n_defaults
    parts = []
    for i, (name, type_) in enumerate(function.args):
        strategy = strategy_for(name, type_)
        assert strategy is not None, f"no strategy for {name} {type_} of {function}"
        if clean:
            aligned = ALIGNED.get((name, type_))
            if name == "p_queue" and function.name in ("queue_create", "queue_drop"):
                strategy = valid_names  # a new queue, mostly (not one the other clean calls aim at)
            elif name == "p_queue" and type_ == "text" and queue is not None:
                strategy = st.just(queue)
            elif (name, type_) in GROUP_PARAMETERS and queue not in (None, "grouped"):
                strategy = st.none()
            elif (name, type_) in CLEAN:
                strategy = CLEAN[name, type_](n)
            elif aligned is not None:
                strategy = st.lists(aligned, min_size=n, max_size=n)
            elif (name, type_) in NOT_NULL or i < first_default:
                instead = NOT_NULL.get((name, type_), NOT_NULL.get(("", type_)))
                strategy = strategy.map(lambda v, instead=instead: instead if v is None else v)
        value = strategy.map(lambda v, n=name, t=type_: (n, t, v))
        if i >= first_default and not (clean and (name, type_) in CLEAN):
            parts.append(st.one_of(st.just(None), value))  # None: leave it out, use the default
        else:
            parts.append(value)
    return st.builds(lambda target, args: Call(function, target, [a for a in args if a is not None]),
                     st.sampled_from(TARGETS), st.tuples(*parts))


# -- running calls -------------------------------------------------------------------------------


def resolve(conn: Conn, call: Call) -> list[Any]:
    target: tuple[int, int] | None = None
    if call.target != "none":
        has_claim = has_spark(conn)
        query = TARGET_SQL[call.target].format(
            claim_null="claim_id IS NULL" if has_claim else "true",
            claim_not_null="claim_id IS NOT NULL" if has_claim else "false")
        target = conn.execute(query).fetchone()  # type: ignore[assignment]

    def one(v: Any) -> Any:
        if isinstance(v, Ref):
            if v.what == "now":
                return now_ms() + v.offset
            if target is None:
                return 424242 if v.what == "id" else 1
            return target[0] if v.what == "id" else target[1]
        if isinstance(v, list):
            return [one(x) for x in v]
        return v

    return [one(v) for _, _, v in call.args]


def has_spark(conn: Conn) -> bool:
    """Whether the 0.2 Spark tables are installed (they change what a message row can be)."""
    return bool(_one(conn, "SELECT to_regclass('pgqueue.spark_claim') IS NOT NULL", ()))


@dataclass
class Outcome:
    call: Call
    values: list[Any]
    sqlstate: str | None
    message: str = ""

    def arg(self, name: str, default: Any = None) -> Any:
        for (n, _, _), v in zip(self.call.args, self.values):
            if n == name:
                return v
        return default


def run_call(conn: Conn, call: Call, *, savepoint: bool) -> Outcome:
    values = resolve(conn, call)
    query = sql.SQL("SELECT * FROM {}({})").format(
        sql.Identifier("pgqueue", call.function.name),
        sql.SQL(", ").join(
            sql.SQL("{} => %s::{}").format(sql.Identifier(name), sql.SQL(type_))  # types come from pg_catalog
            if not name.startswith("$") else sql.SQL("%s::{}").format(sql.SQL(type_))
            for name, type_, _ in call.args))
    try:
        if savepoint:
            with conn.transaction():
                conn.execute(query, values).fetchall()
        else:
            conn.execute(query, values).fetchall()
    except psycopg.Error as exc:
        if exc.sqlstate is None:
            raise  # a client-side problem (adaptation): a bug of this test, not of the extension
        return Outcome(call, values, exc.sqlstate, str(exc).strip().splitlines()[0][:300])
    return Outcome(call, values, None)


# -- errors outside the README table -----------------------------------------------------------
#
# Each entry recognises one undocumented error precisely (function, SQLSTATE and the condition
# that causes it, checked against the arguments and the database right after the call).
#
# CONVERSION_LIMITS: the honest answer of a time conversion asked for a value its result type
# cannot hold; accepted, and reported for the README's error table.
#
# KNOWN_BUGS: extension bugs this fuzzer found and not yet fixed. The fuzz tests do not fail on
# them again (so that they keep looking for new ones), but each names (regression_test) a test
# function below, marked xfail(strict=True), that asserts the correct behaviour: when the
# extension is fixed it XPASSes, the suite fails, and the entry here and the xfail mark are to be
# removed together (known_bug_problems: every entry names such a test, every xfail test is named).

#: the epoch milliseconds of the first and last timestamptz PostgreSQL has (4714-11-24 BC, 294276 AD)
TIMESTAMPTZ_MS = (-210_866_803_200_000, 9_224_318_015_999_999)


def _one(conn: Conn, query: str, params: Sequence[Any]) -> Any:
    row = conn.execute(query, params).fetchone()
    return None if row is None else row[0]


def _outside_timestamptz(conn: Conn, o: Outcome) -> bool:
    ms = o.arg("p_ms")
    return ms is not None and not TIMESTAMPTZ_MS[0] <= ms <= TIMESTAMPTZ_MS[1]


def _infinite(conn: Conn, o: Outcome) -> bool:
    return o.arg("p_ts") in ("infinity", "-infinity")


@dataclass(frozen=True)
class Excused:
    functions: frozenset[str]
    sqlstate: str
    applies: Callable[[Conn, Outcome], bool]
    why: str


def _grouped_queue(conn: Conn, o: Outcome) -> bool:
    return bool(_one(conn, "SELECT group_concurrency IS NOT NULL FROM pgqueue.queue WHERE name = %s",
                     (o.arg("p_queue"),)))


CONVERSION_LIMITS = [
    Excused(frozenset({"from_epoch"}), "22008", _outside_timestamptz,
            "from_epoch beyond the timestamptz range: 22008 timestamp out of range"),
    Excused(frozenset({"to_epoch"}), "0A000", _infinite,
            "to_epoch(+-infinity): 0A000 cannot convert infinity to bigint"),
    # (not a conversion: the README's 0A000 row, a feature not supported)
    Excused(frozenset({"spark_consumer_open", "spark_claim"}), "0A000", _grouped_queue,
            "a Spark stream's consumer or claim on a queue with message groups: 0A000"),
]


@dataclass(frozen=True)
class KnownBug(Excused):
    regression_test: str  # the name of a test function of this module, marked xfail(strict=True)


KNOWN_BUGS: list[KnownBug] = []


def classify(conn: Conn, o: Outcome) -> str | None:
    """None if the outcome is acceptable (or a known bug), else why it is not."""
    if o.sqlstate is None or o.sqlstate in DOCUMENTED:
        return None
    for exc in CONVERSION_LIMITS + KNOWN_BUGS:
        if o.call.function.name in exc.functions and o.sqlstate == exc.sqlstate and exc.applies(conn, o):
            return None
    return f"undocumented {o.sqlstate}"


# -- the state each test starts from, and the invariants -----------------------------------------


def prepare(conn: Conn) -> None:
    """Queues with ready, scheduled, leased, claimed and dead messages, and staged Spark rows."""
    conn.execute("SELECT pgqueue.queue_create('q')")
    conn.execute("SELECT pgqueue.queue_create('capped', p_max_size => 5, p_max_attempts => 1)")
    conn.execute("SELECT pgqueue.queue_create('retry', p_max_attempts => 2, p_lock_ms => 50, "
                 "p_retry_base_ms => 0, p_retry_cap_ms => 0)")
    replenish(conn)
    if has_spark(conn):
        conn.execute("SELECT pgqueue.spark_claim('q', 'etl', 2)")
        conn.execute("SELECT pgqueue.spark_stage('00000000-0000-0000-0000-00000000000a', 0, 1, 0, ARRAY['s0', 's1']::bytea[])")


#: The queues clean calls aim at, as prepare() makes them: the fuzzed calls drop and alter them
CLEAN_QUEUES_BACK = (
    "SELECT pgqueue.queue_create('q', p_if_not_exists => true)",
    "SELECT pgqueue.queue_create('grouped', p_group_concurrency => 1, p_key_window_ms => 60000, "
    "p_max_attempts => 2, p_if_not_exists => true)",
    "SELECT pgqueue.queue_create('rated', p_rate_limit => 1000, p_if_not_exists => true)",
    "SELECT pgqueue.queue_create('capped', p_max_size => 5, p_max_attempts => 1, p_if_not_exists => true)",
)
CLEAN_QUEUES_RESET = (
    "SELECT pgqueue.queue_alter('q', p_max_size => 0)",
    "SELECT pgqueue.queue_alter('grouped', p_max_size => 0, p_group_concurrency => 1)",
    "SELECT pgqueue.queue_alter('rated', p_max_size => 0, p_rate_limit => 1000)",
)


def clean_queues_back(conn: Conn) -> None:
    """The queues of CLEAN_QUEUES as prepare() made them, after a queue_drop or queue_alter."""
    for step in CLEAN_QUEUES_BACK + CLEAN_QUEUES_RESET:
        try:
            with conn.transaction():
                conn.execute(step)  # type: ignore[arg-type]
        except psycopg.Error:
            pass


def replenish(conn: Conn) -> None:
    """Keep something of every kind around, so that calls keep meeting real rows.

    The fuzzed calls may have changed (capped, dropped) the fuzzed queues: what cannot be done
    is skipped; the queue fz_seed, whose name the strategies never draw, always works.
    """
    counts = conn.execute("""
        SELECT count(*) FILTER (WHERE locked_until IS NULL), count(*) FILTER (WHERE locked_until IS NOT NULL),
               (SELECT count(*) FROM pgqueue.dead_letter)
          FROM pgqueue.message""").fetchone()
    assert counts is not None
    steps = ["SELECT pgqueue.queue_create('fz_seed', p_max_attempts => 2, p_if_not_exists => true)", *CLEAN_QUEUES_BACK]
    if counts[0] < 5:
        steps += [f"SELECT pgqueue.message_create_batch('{q}', ARRAY['r1', 'r2', 'r3', 'r4', 'r5']::bytea[])"
                  for q in ("fz_seed", "q")]
        steps += [f"SELECT pgqueue.message_create('{q}', 'later', pgqueue.now_ms() + 3600000)" for q in ("fz_seed", "q")]
        steps += ["SELECT pgqueue.message_create_batch('grouped', ARRAY['g1', 'g1', 'g2', 'g3']::bytea[], "
                  "p_groups => ARRAY['g1', 'g1', 'g2', NULL])",
                  "SELECT pgqueue.message_create_batch('rated', ARRAY['r1', 'r2']::bytea[])"]
    if counts[1] < 2:
        for q in ("fz_seed", "q"):
            steps += [f"SELECT pgqueue.message_create_batch('{q}', ARRAY['l1', 'l2']::bytea[], pgqueue.priority_dequeue_at(1000))",
                      f"SELECT * FROM pgqueue.message_dequeue('{q}', 2, 600000)"]
        steps += ["SELECT pgqueue.message_create('grouped', 'l3', pgqueue.priority_dequeue_at(1000), p_group => 'g3')",
                  "SELECT * FROM pgqueue.message_dequeue('grouped', 2, 600000)"]
    if counts[2] < 1:
        steps += ["SELECT pgqueue.message_create('fz_seed', 'doomed', pgqueue.priority_dequeue_at(1001))"]
        steps += ["SELECT pgqueue.message_fail(id, attempts, 'fuzz', 0) FROM pgqueue.message_dequeue('fz_seed', 1, 600000)"] * 2
    for step in steps:
        try:
            with conn.transaction():
                conn.execute(step)
        except psycopg.Error:
            pass


INVARIANTS = {
    "orphan messages": "SELECT count(*) FROM pgqueue.message m WHERE NOT EXISTS (SELECT 1 FROM pgqueue.queue q WHERE q.id = m.queue_id)",
    "orphan dead letters": "SELECT count(*) FROM pgqueue.dead_letter d WHERE NOT EXISTS (SELECT 1 FROM pgqueue.queue q WHERE q.id = d.queue_id)",
    "orphan queue_size rows": "SELECT count(*) FROM pgqueue.queue_size s WHERE NOT EXISTS (SELECT 1 FROM pgqueue.queue q WHERE q.id = s.queue_id)",
    "negative attempts": "SELECT (SELECT count(*) FROM pgqueue.message WHERE attempts < 0) + (SELECT count(*) FROM pgqueue.dead_letter WHERE attempts < 0)",
    "leased without a token": "SELECT count(*) FROM pgqueue.message WHERE locked_until IS NOT NULL AND attempts < 1",
    "both live and dead": "SELECT count(*) FROM pgqueue.message m JOIN pgqueue.dead_letter d ON d.id = m.id",
    "no default queue": "SELECT count(*) = 0 FROM pgqueue.queue WHERE name = 'default'",
    # the bound of pgqueue._queue_reserve: upper, plus what the stripe enqueued since mark (a
    # counter below the mark: no bound, the next admission recounts)
    "queue_size below the real count": """
        SELECT count(*) FROM pgqueue.queue_size s,
               LATERAL (SELECT coalesce(pg_sequence_last_value(pgqueue._count_seq(s.queue_id, 0)), 0)
                               + coalesce(pg_sequence_last_value(pgqueue._count_seq(s.queue_id, 6)), 0) AS e) c
         WHERE (s.mark IS NULL OR c.e >= s.mark)
           AND s.upper + CASE WHEN s.mark IS NULL THEN 0 ELSE c.e - s.mark END
               < (SELECT count(*) FROM pgqueue.message m WHERE m.queue_id = s.queue_id)""",
}
SPARK_INVARIANTS = {
    "claimed message without its claim": """
        SELECT count(*) FROM pgqueue.message m
         WHERE m.claim_id IS NOT NULL AND NOT EXISTS (SELECT 1 FROM pgqueue.spark_claim k WHERE k.id = m.claim_id)""",
    "claimed message without the endless lease": """
        SELECT count(*) FROM pgqueue.message WHERE claim_id IS NOT NULL AND locked_until IS DISTINCT FROM 253402300799999""",
    "claim of another queue's consumer": """
        SELECT count(*) FROM pgqueue.message m JOIN pgqueue.spark_claim k ON k.id = m.claim_id
          JOIN pgqueue.spark_consumer c ON c.id = k.consumer_id WHERE c.queue_id <> m.queue_id""",
    "orphan claims": "SELECT count(*) FROM pgqueue.spark_claim k WHERE NOT EXISTS (SELECT 1 FROM pgqueue.spark_consumer c WHERE c.id = k.consumer_id)",
    "orphan consumers": "SELECT count(*) FROM pgqueue.spark_consumer c WHERE NOT EXISTS (SELECT 1 FROM pgqueue.queue q WHERE q.id = c.queue_id)",
    "claim at or below the acknowledged position": """
        SELECT count(*) FROM pgqueue.spark_claim k JOIN pgqueue.spark_consumer c ON c.id = k.consumer_id
         WHERE k.seq <= c.acked_seq OR k.seq >= c.next_seq""",
}


def invariant_problems(conn: Conn) -> list[str]:
    checks = dict(INVARIANTS)
    if has_spark(conn):
        checks.update(SPARK_INVARIANTS)
    problems = []
    for name, query in checks.items():
        row = conn.execute(query).fetchone()
        assert row is not None
        if row[0]:
            problems.append(f"{name}: {row[0]}")
    queues = [r[0] for r in conn.execute("SELECT name FROM pgqueue.queue ORDER BY name").fetchall()]
    problems += soak.stats_problems(conn, queues)
    return problems


@pytest.fixture
def fuzz_conn(conn: Conn) -> Conn:
    conn.execute("SET statement_timeout = '20s'")
    conn.adapters.register_loader("timestamptz", TextLoader)  # from_epoch can go past year 9999
    prepare(conn)
    assert invariant_problems(conn) == []
    return conn


def report(bad: list[Outcome]) -> str:
    return "\n".join(f"{o.sqlstate} {o.message}\n    from {o.call!r}" for o in bad)


# -- the tests -----------------------------------------------------------------------------------


def test_every_parameter_type_has_a_strategy(conn: Conn) -> None:
    functions = public_functions(conn)
    missing = [f"{f.signature}: {n} {t}" for f in functions for n, t in f.args if strategy_for(n, t) is None]
    assert not missing, "write an argument strategy for: " + "; ".join(missing)
    names = {f.name for f in functions}
    assert {"message_create", "message_dequeue", "queue_drop", "to_epoch"} <= names  # premise: discovery works
    if has_spark(conn):
        assert {"spark_claim", "spark_ack", "spark_publish"} <= names


def test_the_invariant_checks_catch_corruption(conn: Conn) -> None:
    """The checks are not vacuous: each corruption, made behind pgqueue's back, is reported."""
    prepare(conn)
    assert invariant_problems(conn) == []
    corruptions = {
        "orphan messages": "INSERT INTO pgqueue.message (queue_id, dequeue_at, created_at, content) VALUES (999999, 0, 0, 'x')",
        "negative attempts": "UPDATE pgqueue.message SET attempts = -1 WHERE id = (SELECT min(id) FROM pgqueue.message WHERE locked_until IS NULL)",
        "leased without a token": "UPDATE pgqueue.message SET locked_until = 1, attempts = 0 "
                                  "WHERE id = (SELECT max(id) FROM pgqueue.message WHERE locked_until IS NULL)",
        "both live and dead": "INSERT INTO pgqueue.dead_letter (id, queue_id, dequeue_at, attempts, created_at, dead_at, content) "
                              "SELECT id, queue_id, 0, 1, 0, 0, 'x' FROM pgqueue.message ORDER BY id DESC LIMIT 1",
        "queue_size below the real count": "UPDATE pgqueue.queue_size SET upper = 0, mark = NULL",
        "no default queue": "DELETE FROM pgqueue.queue WHERE name = 'default'",
        "queue_stats": """
            ALTER FUNCTION pgqueue.queue_stats(text) RENAME TO queue_stats_right;
            CREATE FUNCTION pgqueue.queue_stats(p_queue text DEFAULT NULL)
            RETURNS TABLE (queue text, ready bigint, scheduled bigint, leased bigint, dead bigint,
                           oldest_ready_age_ms bigint)
            LANGUAGE sql AS $$ SELECT s.queue, s.ready + 1, s.scheduled, s.leased, s.dead, s.oldest_ready_age_ms
                                 FROM pgqueue.queue_stats_right(p_queue) s $$""",  # off by one
    }
    for name, corruption in corruptions.items():
        conn.execute("BEGIN")
        try:
            if name == "queue_size below the real count":
                conn.execute("SELECT pgqueue.message_create('capped', 'counted')")
            conn.execute(corruption)
            problems = invariant_problems(conn)
        finally:
            conn.execute("ROLLBACK")
        assert any(p.startswith(name) or name in p for p in problems), (name, problems)


def test_every_function_with_random_arguments(fuzz_conn: Conn) -> None:
    """Each example calls every public function once, in a random order, each in autocommit.
    Over the examples every function must also succeed sometimes, on a queue with message groups
    and on a rate-limited one too where it takes a queue: calls that all stop at the argument
    checks test nothing behind them (message_create_batch, message_complete_batch, spark_stage and
    schedule_create never got past them, and no queue had groups or a rate limit, until the
    strategies made clean calls)."""
    conn = fuzz_conn
    functions = public_functions(conn)
    succeeded: Counter[str] = Counter()

    @settings(FUZZ, max_examples=max(1, int(40 * SCALE)))
    @given(data=st.data())
    def example(data: st.DataObject) -> None:
        replenish(conn)
        bad = []
        for i in data.draw(st.permutations(range(len(functions))), label="order"):
            function = functions[i]
            call = data.draw(call_strategy(function), label=function.name)
            outcome = run_call(conn, call, savepoint=False)
            if classify(conn, outcome):
                bad.append(outcome)
            elif outcome.sqlstate is None:
                succeeded[function.name] += 1
                if outcome.arg("p_queue") in ("grouped", "rated") and function.name in PRODUCE_CONSUME:
                    succeeded[f"enqueue or dequeue on {outcome.arg('p_queue')}"] += 1
                if function.name in ("queue_drop", "queue_alter"):
                    clean_queues_back(conn)
        assert not bad, "undocumented errors:\n" + report(bad)
        problems = invariant_problems(conn)
        assert not problems, problems

    example()
    if SCALE < 1:
        return  # too few examples to expect every function to succeed
    reached = {f.name for f in functions} | {f"enqueue or dequeue on {q}" for q in ("grouped", "rated")}
    never = sorted(reached - set(succeeded))
    assert not never, f"never got past the argument checks: {never}"


#: the calls that must also succeed on the queue with groups and on the rate-limited one (test above)
PRODUCE_CONSUME = frozenset({"message_create", "message_create_batch", "message_create_text", "message_create_json",
                             "message_dequeue", "message_complete_and_dequeue"})


@settings(FUZZ, max_examples=max(1, int(200 * SCALE)))
@given(data=st.data(), mode=st.sampled_from(["autocommit", "commit", "rollback"]))
def test_random_call_sequences_keep_the_invariants(fuzz_conn: Conn, data: st.DataObject, mode: str) -> None:
    """Sequences of random calls (so a queue_create with odd settings meets a message_create),
    in autocommit or in one transaction with a savepoint per call, committed or rolled back."""
    conn = fuzz_conn
    functions = public_functions(conn)
    replenish(conn)
    calls = data.draw(st.lists(st.sampled_from(functions).flatmap(call_strategy), min_size=1, max_size=6), label="calls")
    bad: list[Outcome] = []
    outcomes = []
    if mode != "autocommit":
        conn.execute("BEGIN")
    try:
        for call in calls:
            outcome = run_call(conn, call, savepoint=mode != "autocommit")
            outcomes.append(outcome)
            if classify(conn, outcome):  # judged at once, in the state the call saw
                bad.append(outcome)
    finally:
        if mode != "autocommit":
            conn.execute("COMMIT" if mode == "commit" else "ROLLBACK")
    note(f"outcomes: {Counter(o.sqlstate or 'ok' for o in outcomes)}")
    assert not bad, "undocumented errors:\n" + report(bad)
    problems = invariant_problems(conn)
    assert not problems, problems


#: What another session holds, in an open transaction, while a random call on a queue runs
#: (docs/locking.md): the queue's stripe, by a queue_alter of its cap (to the cap it has) or of
#: its group concurrency (to the one it has), or by a queue_drop; or a group's lock, by an
#: enqueue into the group. Each is committed or rolled back once the call waits for it.
LOCK_HOLDERS: dict[str, tuple[str, str]] = {
    "stripe: queue_alter(p_max_size)": (
        "", "SELECT pgqueue.queue_alter(q.name, p_max_size => coalesce(q.max_size, 0)) FROM pgqueue.queue q "
            "WHERE q.name = %(queue)s"),
    "stripe: queue_alter(p_group_concurrency)": (
        "grouped", "SELECT pgqueue.queue_alter(q.name, p_group_concurrency => q.group_concurrency) "
                   "FROM pgqueue.queue q WHERE q.name = %(queue)s"),
    "stripe: queue_drop": ("", "SELECT pgqueue.queue_drop(%(queue)s)"),
    "group lock: message_create": ("grouped2", "SELECT pgqueue.message_create(%(queue)s, 'held', p_group => %(group)s)"),
}
#: the queue of the group lock's holder: with a group concurrency other than 1 every dequeue that
#: hands a group's turn on takes the group's lock, a lease too (docs/locking.md, rule 5); each
#: example gives the group three messages first, so that a lease hands its turn on
GROUPED2 = "SELECT pgqueue.queue_create('grouped2', p_group_concurrency => 2, p_if_not_exists => true)"
#: the calls that take a queue; message_dequeue is drawn as often as all the others together
QUEUE_CALLS = ("message_dequeue", "message_create", "message_create_batch", "message_complete_and_dequeue",
               "message_cancel", "dead_letter_requeue", "dead_letter_purge", "queue_stats", "message_peek")


def test_random_calls_that_wait_for_a_lock_keep_the_invariants(fuzz_conn: Conn, dsn: str) -> None:
    """A random call on a queue while another session holds a lock it needs (LOCK_HOLDERS): it
    waits, then, once the holder commits or rolls back, works or fails with a documented
    SQLSTATE, and the invariants hold. Every other test here runs its calls in one session,
    where no call ever waits: here a message_dequeue must have waited for each kind of lock
    by the end, or the test fails (so that the coverage cannot vanish unnoticed)."""
    conn = fuzz_conn
    conn.execute(GROUPED2)
    functions = public_functions(conn)
    waits: Counter[tuple[str, str]] = Counter()

    @settings(FUZZ, max_examples=max(1, int(40 * SCALE)))
    @given(data=st.data())
    def example(data: st.DataObject) -> None:
        replenish(conn)
        holder_kind = data.draw(st.sampled_from([*sorted(LOCK_HOLDERS), "group lock: message_create"]),
                                label="holder")  # (a group's lock as often as the stripe by each)
        only, statement = LOCK_HOLDERS[holder_kind]
        queue = only or data.draw(st.sampled_from([q for q in CLEAN_QUEUES if not (q == "default" and "drop" in holder_kind)]),
                                  label="queue")  # (the default queue cannot be dropped)
        names = data.draw(st.sampled_from([("message_dequeue",), QUEUE_CALLS]), label="calls")
        function = data.draw(st.sampled_from([f for f in functions if f.name in names]), label="function")
        call = data.draw(call_strategy(function, queue), label="call")
        group = data.draw(st.sampled_from(["g1", "g2", "g3"]), label="group")
        commit = data.draw(st.booleans(), label="commit")
        lock = holder_kind.split(":")[0]
        if lock == "group lock":
            conn.execute("SELECT pgqueue.message_create_batch(%s, ARRAY['1', '2', '3']::bytea[], p_groups => %s)",
                         (queue, [group] * 3))
        outcome: list[Outcome] = []
        holder.execute(statement, {"queue": queue, "group": group})  # type: ignore[arg-type]
        thread = threading.Thread(target=lambda: outcome.append(run_call(conn, call, savepoint=False)))
        thread.start()
        waited = False
        try:
            deadline = time.monotonic() + 10
            while thread.is_alive() and time.monotonic() < deadline and not waited:
                row = watch.execute("SELECT %s = ANY (pg_blocking_pids(%s))",
                                    (holder.info.backend_pid, conn.info.backend_pid)).fetchone()
                waited = bool(row and row[0])
                thread.join(0.002)
        finally:
            if commit:
                holder.commit()
            else:
                holder.rollback()
            thread.join(30)
        assert outcome, f"the call did not end once the {holder_kind} holder ended: {call!r}"
        if waited:
            waits[function.name, lock] += 1
            event(f"{function.name} waited for the {lock}")
        note(f"{call!r} behind {holder_kind} ({'commit' if commit else 'rollback'}): waited {waited}, "
             f"{outcome[0].sqlstate or 'ok'} {outcome[0].message}")
        bad = [o for o in outcome if classify(conn, o)]
        assert not bad, "undocumented errors:\n" + report(bad)
        clean_queues_back(conn)
        problems = invariant_problems(conn)
        assert not problems, problems

    with psycopg.connect(dsn) as holder, psycopg.connect(dsn, autocommit=True) as watch:
        example()
    print("calls that waited for a lock:", dict(sorted(waits.items())))
    if SCALE >= 1:
        assert waits["message_dequeue", "stripe"] and waits["message_dequeue", "group lock"], dict(waits)


_BIGINTS = st.one_of(st.integers(-2**63, 2**63 - 1), st.sampled_from([-2**63, 2**63 - 1, 0, -1, 10**18, -10**18]))


_TEXT = st.text(st.characters(blacklist_categories=("Cs",), blacklist_characters="\x00"), max_size=40)  # text: no NUL


def _laid_out_hint_states(pid: int) -> st.SearchStrategy[str]:
    """States laid out as pgqueue._message_take writes them: pid, 14 values (hints, candidates,
    xids, stripe, fast start), n, then n set-aside xids and n restart points of 4 values; all
    random."""
    return st.integers(0, 3).flatmap(lambda n: st.tuples(
        st.sampled_from([pid, pid + 1]), st.lists(_BIGINTS, min_size=14, max_size=14),
        st.lists(_BIGINTS, min_size=5 * n, max_size=5 * n)).map(
            lambda t, n=n: "{" + ",".join(str(x) for x in (t[0], *t[1], n, *t[2])) + "}"))


def _shaped_hint_states(pid: int) -> st.SearchStrategy[str]:
    """Arrays of the hint state's shape (this backend's pid first, or another) with random hints,
    candidates, xids and set-aside lists: laid out as pgqueue writes them, or of any length."""
    return st.one_of(_laid_out_hint_states(pid),
                     st.tuples(st.sampled_from([pid, pid + 1, -pid]),
                               st.lists(_BIGINTS, min_size=0, max_size=20)).map(
                         lambda t: "{" + ",".join(str(x) for x in (t[0], *t[1])) + "}"))


def _hint_states(pid: int) -> st.SearchStrategy[str]:
    """Values of the session hint setting pgqueue.hint_<queue id> as a session may set it by hand:
    garbage, numbers out of bigint range, shaped arrays without their checksum."""
    return st.one_of(_TEXT, _shaped_hint_states(pid),
                     st.just("{" + ",".join(["99999999999999999999"] * 13) + "}"),
                     st.just("{" + str(pid) + "," + ",".join(["9223372036854775808"] * 12) + "}"))


@settings(FUZZ, max_examples=max(1, int(60 * SCALE)))
@given(data=st.data())
def test_any_session_hint_setting_is_used_or_ignored_never_an_error(fuzz_conn: Conn, data: st.DataObject) -> None:
    """The session hint (pgqueue._message_take) lives in settings a session can also write by hand:
    pgqueue.hint_<queue id>, and pgqueue.turn_hint_<queue id> for a queue with message groups,
    each with the time of its last look at pg_locks (the same name with _look after it).
    Whatever is there, a dequeue works; a state not written for this backend
    (another pid, or not a state at all) is ignored, so the message is delivered."""
    conn = fuzz_conn
    pid = conn.execute("SELECT pg_backend_pid()").fetchone()[0]  # type: ignore[index]
    grouped = data.draw(st.booleans(), label="grouped")
    queue, setting, group = ("fuzz_turns", "pgqueue.turn_hint_", "g") if grouped else ("default", "pgqueue.hint_", None)
    if grouped and conn.execute("SELECT 1 FROM pgqueue.queue WHERE name = %s", [queue]).fetchone() is None:
        conn.execute("SELECT pgqueue.queue_create(%s, p_group_concurrency => 1)", [queue])
    qid = conn.execute("SELECT id FROM pgqueue.queue WHERE name = %s", [queue]).fetchone()[0]  # type: ignore[index]
    # with its checksum (as pgqueue writes it), a shaped state is used: its random hints drive the
    # logic; without it, any value is ignored
    signed = data.draw(st.booleans(), label="with checksum")
    state = data.draw(_shaped_hint_states(pid) if signed else _hint_states(pid), label="state")
    conn.execute("DELETE FROM pgqueue.message WHERE queue_id = %s", [qid])
    mid = conn.execute("SELECT pgqueue.message_create(%s, '\\x01'::bytea, p_group => %s)",
                       [queue, group]).fetchone()[0]  # type: ignore[index]
    if signed:
        conn.execute("SELECT set_config(%s, %s || ' ' || hashtext(%s), false)", [f"{setting}{qid}", state, state])
    else:
        conn.execute("SELECT set_config(%s, %s, false)", [f"{setting}{qid}", state])
    # when the session last looked at pg_locks for its set-aside transactions (<setting>_look)
    look = data.draw(st.one_of(_TEXT, _BIGINTS.map(str)), label="look")
    conn.execute("SELECT set_config(%s, %s, false)", [f"{setting}{qid}_look", look])
    got = conn.execute("SELECT id FROM pgqueue.message_dequeue(%s, 1, 0)", [queue]).fetchall()
    if not signed or not state.startswith("{" + str(pid) + ","):
        assert got == [(mid,)], f"{setting}: state {state!r}: message {mid} not delivered"


# -- the bugs the fuzzer found, pinned: fixed ones stay as regression tests; open ones are -------
# -- xfail(strict=True) and listed in KNOWN_BUGS ---------------------------------------------

def _spark(conn: Conn) -> None:
    if not has_spark(conn):
        pytest.fail("premise: the 0.2 Spark functions are installed")


def sqlstate(conn: Conn, query: str, params: Sequence[Any] = ()) -> str | None:
    try:
        with conn.transaction():
            conn.execute(query, params).fetchall()
    except psycopg.Error as exc:
        return exc.sqlstate
    return None


def test_lease_calls_on_a_claimed_message_return_false(conn: Conn) -> None:
    """A claim is not a lease: the attempts token of a claimed message (spark_claimed shows it) must
    not let the lease calls touch it. Each returns false (a stale token) and changes nothing."""
    _spark(conn)
    conn.execute("SELECT pgqueue.message_create('default', 'claimed')")
    assert _one(conn, "SELECT pgqueue.spark_claim('default', 'etl', 1)", ()) == 1
    msg_id, token = conn.execute("SELECT id, attempts FROM pgqueue.message").fetchone()  # type: ignore[misc]
    before = conn.execute("SELECT m.* FROM pgqueue.message m").fetchall()
    results = {}
    for name, query in {
        "heartbeat": "SELECT pgqueue.message_heartbeat(%s, %s, 1000)",
        "defer": "SELECT pgqueue.message_defer(%s, %s, 0, 'state')",
        "fail": "SELECT pgqueue.message_fail(%s, %s, 'boom')",
        "complete": "SELECT pgqueue.message_complete(%s, %s)",
    }.items():
        try:
            with conn.transaction():
                results[name] = _one(conn, query, (msg_id, token))
        except psycopg.Error as exc:
            results[name] = exc.sqlstate
    assert results == {"heartbeat": False, "defer": False, "fail": False, "complete": False}
    assert conn.execute("SELECT m.* FROM pgqueue.message m").fetchall() == before


def test_the_largest_max_size_works_or_is_refused(conn: Conn) -> None:
    """queue_create accepts max_size 9223372036854775807; then enqueueing must work (or the setting
    be refused up front with 22023), not fail with 22003 bigint out of range on every enqueue."""
    created = sqlstate(conn, "SELECT pgqueue.queue_create('huge', p_max_size => 9223372036854775807)")
    if created == "22023":
        return
    assert created is None
    assert sqlstate(conn, "SELECT pgqueue.message_create('huge', 'x')") is None
    assert sqlstate(conn, "SELECT pgqueue.message_create_batch('huge', ARRAY['a', 'b']::bytea[])") is None


def test_a_bad_publish_key_is_22023(conn: Conn) -> None:
    _spark(conn)
    for key in ("", "k" * 201):
        assert sqlstate(conn, "SELECT pgqueue.spark_publish(%s, 'default', gen_random_uuid(), '{}', '{}', '{}')",
                        (key,)) == "22023"


def test_staging_numbers_past_int8_max_are_22023(conn: Conn) -> None:
    _spark(conn)
    assert sqlstate(conn, "SELECT pgqueue.spark_stage(gen_random_uuid(), 0, 1, 9223372036854775806, "
                          "ARRAY['a', 'b', 'c']::bytea[])") == "22023"
    # the last number that fits is fine
    assert sqlstate(conn, "SELECT pgqueue.spark_stage(gen_random_uuid(), 0, 1, 9223372036854775806, "
                          "ARRAY['a', 'b']::bytea[])") is None


def test_staging_the_same_rows_twice(conn: Conn) -> None:
    """A task attempt that stages a chunk again (a retried call whose first COMMIT was lost) gets
    either success without duplicates or a documented SQLSTATE, not a raw unique violation."""
    _spark(conn)
    stage = ("SELECT pgqueue.spark_stage('00000000-0000-0000-0000-0000000000aa', 0, 1, 0, "
             "ARRAY['a', 'b']::bytea[])")
    assert sqlstate(conn, stage) is None
    again = sqlstate(conn, stage)
    assert again is None or again in DOCUMENTED, again
    assert _one(conn, "SELECT count(*) FROM pgqueue.spark_staging", ()) == 2


def test_a_huge_staged_delay_publishes_or_is_refused(conn: Conn) -> None:
    """spark_stage accepts any delay >= 0; publishing it must then work (scheduled far away), or the
    delay must be refused when staged (22023)."""
    _spark(conn)
    staged = sqlstate(conn, "SELECT pgqueue.spark_stage('00000000-0000-0000-0000-0000000000bb', 0, 1, 0, "
                            "ARRAY['a']::bytea[], p_delays_ms => ARRAY[9223372036854775807])")
    if staged == "22023":
        return
    assert staged is None
    assert sqlstate(conn, "SELECT pgqueue.spark_publish('k', 'default', '00000000-0000-0000-0000-0000000000bb', "
                          "'{0}', '{1}', '{1}')") is None


def _xfail_marks(test: Any) -> list[pytest.Mark]:
    return [mark for mark in getattr(test, "pytestmark", []) if mark.name == "xfail"]


def known_bug_problems(bugs: Sequence[KnownBug], namespace: dict[str, Any]) -> list[str]:
    """Each bug's regression_test is a test function of namespace marked xfail(strict=True), and
    each test function marked xfail is some bug's regression_test; one line per problem."""
    problems = []
    for bug in bugs:
        test = namespace.get(bug.regression_test)
        if not bug.regression_test.startswith("test_") or not callable(test):
            problems.append(f"{bug.regression_test}: no such test function ({bug.why})")
        elif not any(mark.kwargs.get("strict") is True for mark in _xfail_marks(test)):
            problems.append(f"{bug.regression_test}: not marked xfail(strict=True) ({bug.why})")
    named = {bug.regression_test for bug in bugs}
    problems += [f"{name}: marked xfail, but no KNOWN_BUGS entry names it" for name, test in namespace.items()
                 if name.startswith("test_") and callable(test) and _xfail_marks(test) and name not in named]
    return problems


def test_every_known_bug_has_its_regression_test() -> None:
    assert known_bug_problems(KNOWN_BUGS, globals()) == []


def test_known_bug_problems_finds_each_wrong_entry() -> None:
    @pytest.mark.xfail(strict=True)
    def test_pinned() -> None: ...

    @pytest.mark.xfail
    def test_lax() -> None: ...

    def test_plain() -> None: ...

    @pytest.mark.xfail(strict=True)
    def test_unlisted() -> None: ...

    def bug(regression_test: str) -> KnownBug:
        return KnownBug(frozenset({"message_create"}), "XX000", lambda conn, o: True, "a fake bug", regression_test)

    namespace = {test.__name__: test for test in (test_pinned, test_lax, test_plain, test_unlisted)}
    assert known_bug_problems([bug("test_pinned")], {"test_pinned": test_pinned}) == []
    problems = known_bug_problems([bug(name) for name in ("test_pinned", "test_lax", "test_plain", "test_gone")],
                                  namespace)
    assert [problem.split(":")[0] for problem in problems] == ["test_lax", "test_plain", "test_gone", "test_unlisted"]


def test_complete_batch_refuses_two_dimensional_arrays(conn: Conn) -> None:
    """Found when issue 16's functions shifted the derandomized examples (it answered 0A000): a
    two-dimensional p_ids or p_attempts is refused with 22023, as message_create_batch refuses
    its arrays."""
    assert sqlstate(conn, "SELECT pgqueue.message_complete_batch('{{1,2},{3,4}}'::bigint[], "
                          "'{{1,1},{1,1}}'::integer[])") == "22023"
