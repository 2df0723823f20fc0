"""Run the SQL-level suites against the test server: pg_regress and isolation specs
(`make installcheck`) and the pgTAP files (`pg_prove`).

One home per behaviour: pgTAP (tests/pgtap/) holds the SQL API's error contract, every error
path with its SQLSTATE (20_errors.sql), and the catalog assertions; pg_regress (sql/) holds
readable scenarios whose output documents behaviour; the isolation specs (specs/) the races;
pytest (tests/test_*.py) what needs Python, a client, real roles, concurrency or random input."""

from __future__ import annotations

import subprocess
from pathlib import Path

import psycopg

from conftest import REPO, Server, create_database, drop_database
from helpers import server_pg_config


def _tail(path: Path, limit: int = 20000) -> str:
    return path.read_text()[-limit:] if path.exists() else ""


def test_pg_regress_and_isolation(pg_server: Server) -> None:
    proc = subprocess.run(
        ["make", "-s", "installcheck", f"PG_CONFIG={server_pg_config()}"],
        cwd=REPO, env=pg_server.libpq_env(), capture_output=True, text=True, check=False,
    )
    report = proc.stdout + proc.stderr + _tail(REPO / "regression.diffs") + _tail(REPO / "output_iso" / "regression.diffs")
    assert proc.returncode == 0, report
    assert "failed" not in proc.stdout.replace("0 failed", ""), report


def test_pgtap(pg_server: Server, template_db: str) -> None:
    name = create_database(pg_server, template_db, prefix="pgtap")
    try:
        with psycopg.connect(pg_server.dsn(name), autocommit=True) as conn:
            conn.execute("CREATE EXTENSION pgtap")
        files = sorted(str(p) for p in (REPO / "tests" / "pgtap").glob("*.sql"))
        assert files, "no pgTAP files found in tests/pgtap"
        proc = subprocess.run(
            ["pg_prove", "--failures", "-d", name, *files],
            cwd=REPO, env=pg_server.libpq_env(), capture_output=True, text=True, check=False,
        )
        assert proc.returncode == 0, proc.stdout + proc.stderr
        assert "Result: PASS" in proc.stdout, proc.stdout
    finally:
        drop_database(pg_server, name)
