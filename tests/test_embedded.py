"""pgqueue.embedded, the throwaway server of the demo and of the test suite: what its start
must not get wrong (another server on its port, an interrupted start)."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import psycopg
import pytest

from helpers import processes_from
from pgqueue.embedded import PORT_ATTEMPTS, EmbeddedPostgres


@pytest.fixture(scope="module")
def other() -> Iterator[EmbeddedPostgres]:
    """Another throwaway server, whose port the tests hand to a new one, with a database of
    its own to tell it apart."""
    with EmbeddedPostgres() as pg:
        with psycopg.connect(pg.dsn(), autocommit=True) as conn:
            conn.execute("CREATE DATABASE only_on_the_other")
        yield pg


def test_a_server_that_took_the_port_is_not_taken_for_ours(other: EmbeddedPostgres,
                                                           monkeypatch: pytest.MonkeyPatch) -> None:
    """testing.postgresql picks a free port, closes it and waits until something answers there:
    a server that took the port meanwhile (our own server, failing to bind it, exited) made the
    start succeed on that server (a review). Now the server must answer from our data directory;
    a start whose port was taken goes on to another."""
    import testing.common.database as tcd

    real = tcd.get_unused_port
    picked: list[int] = []

    def taken_first() -> int:  # the race: the first port picked is taken meanwhile
        picked.append(other.port if not picked else real())
        return picked[-1]

    monkeypatch.setattr(tcd, "get_unused_port", taken_first)
    with EmbeddedPostgres() as pg:
        assert len(picked) == 2 and pg.port == picked[1] != other.port
        with psycopg.connect(pg.dsn(), autocommit=True) as conn:
            assert conn.execute("SHOW data_directory").fetchone() == (pg.data_dir,)
            assert conn.execute("SELECT count(*) FROM pg_database WHERE datname = 'only_on_the_other'").fetchone() == (0,)
        base_dir = pg.base_dir
    assert not os.path.exists(base_dir)

    monkeypatch.setattr(tcd, "get_unused_port", lambda: other.port)  # taken every time: a clear error
    made: list[str] = []
    original_mkdir = os.mkdir

    def mkdir(path: str, mode: int = 0o777) -> None:
        made.append(path)
        original_mkdir(path, mode)

    monkeypatch.setattr(os, "mkdir", mkdir)
    with pytest.raises(RuntimeError, match=f"each of the {PORT_ATTEMPTS} ports picked was taken"):
        EmbeddedPostgres().start()
    assert made and not any(os.path.exists(m) for m in made)
    with psycopg.connect(other.dsn(), autocommit=True) as conn:  # the other server is untouched
        assert conn.execute("SELECT count(*) FROM pg_database WHERE datname = 'only_on_the_other'").fetchone() == (1,)


def test_a_start_interrupted_right_after_its_directory_is_made_deletes_it(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A Ctrl-C that landed right after the temporary directory was made (in testing.postgresql's
    constructor, before it recorded the directory as its own to delete) left the directory
    behind (a review). The directory is now named before it is made, and deleted by
    EmbeddedPostgres itself; so is one of a constructor interrupted later."""
    import testing.postgresql

    monkeypatch.setattr("tempfile.tempdir", str(tmp_path))  # where the temporary directory is made
    made = os.mkdir

    def mkdir_then_interrupted(path: str, mode: int = 0o777) -> None:
        made(path, mode)
        raise KeyboardInterrupt  # the Ctrl-C lands as the directory is there

    with monkeypatch.context() as m:
        m.setattr(os, "mkdir", mkdir_then_interrupted)
        with pytest.raises(KeyboardInterrupt):
            EmbeddedPostgres().start()
    assert list(tmp_path.iterdir()) == []

    def interrupted(self: object) -> None:
        raise KeyboardInterrupt

    monkeypatch.setattr(testing.postgresql.Postgresql, "initialize", interrupted)
    with pytest.raises(KeyboardInterrupt):
        EmbeddedPostgres().start()
    assert list(tmp_path.iterdir()) == []


def test_a_start_interrupted_while_the_server_boots_deletes_its_directory_and_stops_it(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """The directory is EmbeddedPostgres's own now (testing.postgresql no longer deletes it): an
    interruption once the server runs still stops it and deletes the directory."""
    import testing.postgresql

    booted: list[str] = []

    def interrupted(self: testing.postgresql.Postgresql) -> None:
        booted.append(self.base_dir)
        raise KeyboardInterrupt

    monkeypatch.setattr(testing.postgresql.Postgresql, "poststart", interrupted)
    pg = EmbeddedPostgres()
    with pytest.raises(KeyboardInterrupt):
        pg.start()
    assert booted and not os.path.exists(booted[0])
    assert processes_from(booted[0]) == []
    with pytest.raises(RuntimeError, match="not running"):
        pg.base_dir


def test_a_start_ignores_the_callers_libpq_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    """The check that the server answering is ours ran through libpq, which read the caller's
    PG* environment: with PGSSLMODE=require (set for a cloud database, say) every check failed
    on the server without SSL, and the start waited out its boot_timeout (a review). It goes
    through pg8000 now, as testing.postgresql's own check did."""
    import time

    monkeypatch.setenv("PGSSLMODE", "require")
    monkeypatch.setenv("PGHOSTADDR", "192.0.2.1")  # TEST-NET-1: nothing answers there
    started = time.monotonic()
    with EmbeddedPostgres(boot_timeout=15) as pg:
        assert time.monotonic() - started < 10
        monkeypatch.delenv("PGSSLMODE")
        monkeypatch.delenv("PGHOSTADDR")
        with psycopg.connect(pg.dsn()) as conn:
            assert conn.execute("SELECT 1").fetchone() == (1,)
