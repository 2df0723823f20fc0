"""The pgqueue_spark recipe of docs/grants.sql: the rights every entry point of the Spark data
source needs (the Spark tests connect the data source as that role), and nothing an
administrator does. Plain SQL, no JVM."""

from __future__ import annotations

from typing import Any

import psycopg
import pytest
from psycopg import errors

from spark_helpers import SparkRole, role_fixtures

role, dsn, owner_dsn, conn = role_fixtures("sql")


def run(dsn: str, statement: str) -> list[tuple[Any, ...]]:
    with psycopg.connect(dsn, autocommit=True) as conn:
        cur = conn.execute(statement)  # type: ignore[arg-type]
        return cur.fetchall() if cur.description else []


def test_the_spark_role_runs_the_data_source_sql_and_nothing_more(owner_dsn: str, dsn: str, role: SparkRole) -> None:
    owner, s = owner_dsn, dsn
    run(owner, "SELECT pgqueue.queue_create('jobs', p_max_attempts => 1)")
    assert run(s, "SELECT current_user, rolsuper FROM pg_roles WHERE rolname = current_user") == [(role.name, False)]
    # task mode, job mode / writeStream (stage, publish, forget or prune the log), snapshots, claims, acks
    assert run(s, "SELECT count(*) FROM pgqueue.message_create_batch('jobs', ARRAY['a','b','c']::bytea[])") == [(3,)]
    run(s, "SELECT pgqueue.spark_stage('00000000-0000-0000-0000-000000000001', 0, 1, 0, ARRAY['d']::bytea[])")
    assert run(s, "SELECT pgqueue.spark_publish('stream:q:0', 'jobs', '00000000-0000-0000-0000-000000000001', "
                  "ARRAY[0], ARRAY[1::bigint], ARRAY[1::bigint])") == [(1,)]
    run(s, "DELETE FROM pgqueue.spark_publish_log WHERE starts_with(publish_key, 'stream:q:')")
    key = "00000000-0000-0000-0000-000000000003"  # a job-mode write publishes under its write id
    assert run(s, f"SELECT pgqueue.spark_publish('{key}', 'jobs', '{key}', '{{}}', '{{}}', '{{}}')") == [(0,)]
    assert run(s, f"DELETE FROM pgqueue.spark_publish_log WHERE publish_key = '{key}' RETURNING 1") == [(1,)]
    run(s, "SELECT pgqueue.spark_stage('00000000-0000-0000-0000-000000000002', 0, 1, 0, ARRAY['e']::bytea[])")
    run(s, "SELECT pgqueue.spark_discard('00000000-0000-0000-0000-000000000002')")
    assert run(s, "SELECT count(*) FROM pgqueue.spark_snapshot('jobs', 0, 1000, true)") == [(4,)]
    assert run(s, "SELECT min_id IS NOT NULL FROM pgqueue.spark_snapshot_range('jobs', true)") == [(True,)]
    with psycopg.connect(s, autocommit=True) as query:
        assert query.execute("SELECT pgqueue.spark_consumer_open('jobs', 'etl')").fetchone() == (0,)
        assert query.execute("SELECT pgqueue.spark_claim('jobs', 'etl', 2)").fetchone() == (1,)
        assert query.execute("SELECT count(*) FROM pgqueue.spark_claimed('jobs', 'etl', 0, 1, 0, 1000)"
                             ).fetchone() == (2,)
        assert query.execute("SELECT pgqueue.spark_ack('jobs', 'etl', 1)").fetchone() == (2,)
        assert query.execute("SELECT pgqueue.spark_claim('jobs', 'etl', 1)").fetchone() == (2,)
        assert query.execute("SELECT pgqueue.spark_consumer_close('jobs', 'etl')").fetchone() == (True,)
    assert run(s, "SELECT pgqueue.spark_release('jobs', 'etl')") == [(1,)]
    # a poison message dead-letters through a claim, as through message_dequeue (max_attempts 1)
    run(s, "SELECT pgqueue.message_dequeue('jobs', 10, 1)")
    run(owner, "SELECT pg_sleep(0.01)")
    assert run(s, "SELECT pgqueue.spark_claim('jobs', 'etl', 10)") == [(None,)]
    assert run(s, "SELECT dead FROM pgqueue.queue_stats('jobs')") == [(2,)]
    for statement in [
        "SELECT pgqueue.queue_create('mine')",
        "SELECT pgqueue.queue_alter('jobs', p_lock_ms => 1000)",
        "SELECT pgqueue.queue_drop('jobs')",
        "SELECT pgqueue.dead_letter_purge('jobs')",
        "SELECT pgqueue.dead_letter_requeue('jobs')",
        "DELETE FROM pgqueue.spark_consumer",
        "UPDATE pgqueue.queue SET max_attempts = 5",
        "UPDATE pgqueue.spark_publish_log SET n = 0",
        # ids the sequence hands out next, taken by plain SQL, fail every producer's enqueue
        # (23505): not on its INSERT or UPDATE columns (a security review)
        "INSERT INTO pgqueue.message (id, queue_id, dequeue_at, created_at, content) "
        "SELECT last_value + 1, 1, 0, 0, 'squat' FROM pgqueue.message_id_seq",
        "UPDATE pgqueue.message SET id = id + 1000000",
        "UPDATE pgqueue.message SET queue_id = queue_id",
        "INSERT INTO pgqueue.message (queue_id, dequeue_at, created_at, content, claim_id) VALUES (1, 0, 0, 'x', 1)",
    ]:
        with pytest.raises(errors.InsufficientPrivilege):
            run(s, statement)
