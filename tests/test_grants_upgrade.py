"""The GRANT recipes across an upgrade: a database that ran the 0.3 release's docs/grants.sql,
was updated with ALTER EXTENSION pgqueue UPDATE and ran the current docs/grants.sql (what a user
who upgrades does, docs/security.md) gives the same roles exactly the privileges of a fresh
install of the current version that ran the current docs/grants.sql.

A right the old recipe gave that the new release takes away (0.3's consumer read of dead letter
ids, its producer's writes of pgqueue.queue_size, its administrator's ALL with TRIGGER and
REFERENCES) must be taken back by the current recipe or the update; a right a new object needs
must be granted. Either shows up below as a privilege on one side only.

0.3's recipe is tests/fixtures/grants-0.3.sql, a copy of the released file (the test checks it
against the git blob, so the copy cannot drift; no git history is needed to run it).
"""

from __future__ import annotations

import hashlib
import os
import re
import subprocess
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import psycopg
import pytest
from psycopg import sql

from conftest import REPO, Server, admin_execute

CONTROL = (REPO / "pgqueue.control").read_text()
DEFAULT_VERSION = re.search(r"^default_version\s*=\s*'([^']+)'", CONTROL, re.M).group(1)  # type: ignore[union-attr]

OLD_VERSION = "0.3"
CURRENT_GRANTS = REPO / "docs" / "grants.sql"
#: docs/grants.sql as released with 0.3 (commit 5869520, the last before 0.4's work; last changed
#: in 88eb246), with a header above the line below
OLD_GRANTS = REPO / "tests" / "fixtures" / "grants-0.3.sql"
OLD_GRANTS_BLOB = "aafd25116f63061bb5e1b0f095fc19842f010458"
FIXTURE_RULE = "-- " + "-" * 94 + "\n"

#: The kinds of role the recipes know: 0.3's names the first three, the current one all five.
KINDS = ("producer", "consumer", "admin", "monitor", "spark")

#: Every object of schema pgqueue (and the schema): what it is, its name, its catalog address, its
#: owner, its ACL and the ACL PostgreSQL reads for a NULL one (acldefault's kind; columns: none).
OBJECTS = """
    SELECT 'schema' AS what, n.nspname::text AS object, 'pg_namespace'::regclass AS classoid, n.oid AS objoid,
           0 AS objsubid, n.nspowner AS owner, n.nspacl AS acl, 'n'::"char" AS kind
      FROM pg_namespace n WHERE n.nspname = 'pgqueue'
    UNION ALL
    SELECT CASE c.relkind WHEN 'S' THEN 'sequence' WHEN 'v' THEN 'view' ELSE 'table' END,
           c.oid::regclass::text, 'pg_class'::regclass, c.oid, 0, c.relowner, c.relacl,
           CASE c.relkind WHEN 'S' THEN 's' ELSE 'r' END::"char"
      FROM pg_class c WHERE c.relnamespace = 'pgqueue'::regnamespace AND c.relkind NOT IN ('i', 'I', 'c', 't')
    UNION ALL
    SELECT 'column', c.oid::regclass::text || '.' || quote_ident(a.attname), 'pg_class'::regclass, c.oid,
           a.attnum, c.relowner, a.attacl, NULL
      FROM pg_class c JOIN pg_attribute a ON a.attrelid = c.oid
     WHERE c.relnamespace = 'pgqueue'::regnamespace AND a.attnum > 0 AND NOT a.attisdropped
    UNION ALL
    SELECT 'function', p.oid::regprocedure::text, 'pg_proc'::regclass, p.oid, 0, p.proowner, p.proacl, 'f'
      FROM pg_proc p WHERE p.pronamespace = 'pgqueue'::regnamespace
    UNION ALL
    SELECT 'type', t.oid::regtype::text, 'pg_type'::regclass, t.oid, 0, t.typowner, t.typacl, 'T'
      FROM pg_type t WHERE t.typnamespace = 'pgqueue'::regnamespace
"""

#: Every privilege on those objects, one row each: (what, object, grantee, privilege, grantable,
#: grantor). A NULL ACL is read as the object's default ACL: PostgreSQL treats the two alike, and
#: an object whose ACL an update's GRANT or REVOKE made explicit differs from a fresh one's only
#: there. Default privileges (ALTER DEFAULT PRIVILEGES) too, any in the database.
PRIVILEGES = f"""
WITH o AS ({OBJECTS}), acl(what, object, acl) AS (
    SELECT o.what, o.object, coalesce(o.acl, acldefault(o.kind, o.owner)) FROM o
    UNION ALL
    SELECT 'default privileges (' || d.defaclobjtype::text || ') of ' || pg_get_userbyid(d.defaclrole),
           coalesce(d.defaclnamespace::regnamespace::text, 'every schema'), d.defaclacl
      FROM pg_default_acl d
)
SELECT acl.what, acl.object,
       CASE e.grantee WHEN 0 THEN 'PUBLIC' ELSE pg_get_userbyid(e.grantee) END,
       e.privilege_type, CASE WHEN e.is_grantable THEN 'grantable' ELSE '' END,
       pg_get_userbyid(e.grantor)
  FROM acl, aclexplode(acl.acl) e
"""

#: The privileges the extension's scripts set (pg_init_privs), read the same way (no row: the
#: default ACL). pg_dump leaves these out of a dump and a restore's CREATE EXTENSION sets them
#: again, so a role's grant recorded here on one side only would be lost by a dump and restore
#: of that side, or a grant left out here dumped as a REVOKE.
INIT_PRIVILEGES = f"""
WITH o AS ({OBJECTS})
SELECT 'initial privileges of ' || o.what, o.object,
       CASE e.grantee WHEN 0 THEN 'PUBLIC' ELSE pg_get_userbyid(e.grantee) END,
       e.privilege_type, CASE WHEN e.is_grantable THEN 'grantable' ELSE '' END,
       pg_get_userbyid(e.grantor)
  FROM o LEFT JOIN pg_init_privs i
         ON i.classoid = o.classoid AND i.objoid = o.objoid AND i.objsubid = o.objsubid,
       aclexplode(coalesce(i.initprivs, acldefault(o.kind, o.owner))) e
"""

#: Who owns each object of schema pgqueue, the schema and the extension.
OWNERS = f"""
WITH o AS ({OBJECTS})
SELECT 'owner', o.what || ' ' || o.object, pg_get_userbyid(o.owner), '', '', '' FROM o WHERE o.what <> 'column'
UNION ALL
SELECT 'owner', 'extension ' || e.extname || ' ' || e.extversion || ' in ' || e.extnamespace::regnamespace,
       pg_get_userbyid(e.extowner), '', '', ''
  FROM pg_extension e WHERE e.extname = 'pgqueue'
"""

Row = tuple[str, ...]

#: What 0.3's recipe granted that the current one takes back with a REVOKE naming the role (the
#: update itself takes back 0.3's producer grants on pgqueue.queue_size): each stays behind after
#: the upgrade, and the comparison must say so, when the current recipe runs without those REVOKEs.
OLD_LEFTOVERS = {
    ("column", "pgqueue.dead_letter.id", "<consumer>", "SELECT"),
    ("table", "pgqueue.message", "<producer>", "INSERT"),
    ("table", "pgqueue.message", "<consumer>", "UPDATE"),
    *((("table", table, "<admin>", privilege) for table in ("pgqueue.queue", "pgqueue.message", "pgqueue.dead_letter")
       for privilege in ("TRIGGER", "REFERENCES"))),
}


def old_grants_text() -> str:
    """0.3's docs/grants.sql from the fixture, checked to be the released blob byte for byte."""
    header, sep, body = OLD_GRANTS.read_text().partition(FIXTURE_RULE)
    assert sep and "5869520" in header, f"{OLD_GRANTS} lost its header"
    data = body.encode()
    blob = hashlib.sha1(b"blob %d\0" % len(data) + data).hexdigest()  # what git hash-object gives
    assert blob == OLD_GRANTS_BLOB, f"{OLD_GRANTS} is no longer 0.3's docs/grants.sql (git blob {blob})"
    return body


@dataclass(frozen=True)
class Setup:
    """Two empty databases, the role that installs pgqueue in both, updates it and runs the
    recipes (the server's superuser, or the databases' owner without superuser), and one role of
    each kind (roles belong to the cluster: both databases grant to the same ones)."""

    upgraded: str
    fresh: str
    owner: str
    roles: dict[str, str]


@pytest.fixture(params=["superuser", "database owner"])
def setup(pg_server: Server, request: pytest.FixtureRequest) -> Iterator[Setup]:
    pid = os.getpid()
    roles = {kind: f"pq_gu_{kind}_{pid}" for kind in KINDS}
    owner = pg_server.user if request.param == "superuser" else f"pq_gu_owner_{pid}"
    made_roles = [*roles.values(), *([] if owner == pg_server.user else [owner])]
    databases = (f"grants_upgraded_{pid}", f"grants_fresh_{pid}")

    def clean() -> None:
        admin_execute(pg_server, *(sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(sql.Identifier(db))
                                   for db in databases),
                      *(sql.SQL("DROP ROLE IF EXISTS {}").format(sql.Identifier(role)) for role in made_roles))

    clean()
    try:
        admin_execute(pg_server, *(sql.SQL("CREATE ROLE {} NOLOGIN").format(sql.Identifier(role))
                                   for role in roles.values()))
        if owner != pg_server.user:
            admin_execute(pg_server, sql.SQL("CREATE ROLE {} LOGIN NOSUPERUSER").format(sql.Identifier(owner)))
        admin_execute(pg_server, *(sql.SQL("CREATE DATABASE {} OWNER {} TEMPLATE template0")
                                   .format(sql.Identifier(db), sql.Identifier(owner)) for db in databases))
        yield Setup(*databases, owner=owner, roles=roles)
    finally:
        clean()


def apply_grants(pg_server: Server, setup: Setup, dbname: str, script: str | Path) -> None:
    """Run a grants.sql (a path, or its text) with psql as the owner, naming every kind of role
    (a recipe that does not know a kind ignores its variable)."""
    source = ["-f", str(script)] if isinstance(script, Path) else []
    proc = subprocess.run(
        ["psql", "-X", "-q", "-v", "ON_ERROR_STOP=1", "-d", dbname, *source,
         *(f"-v{kind}={name}" for kind, name in setup.roles.items())],
        input=script if isinstance(script, str) else None,
        env={**pg_server.libpq_env(), "PGUSER": setup.owner}, capture_output=True, text=True, check=False,
    )
    assert proc.returncode == 0, proc.stderr


def extension_version(conn: psycopg.Connection[tuple[object, ...]]) -> str:
    row = conn.execute("SELECT extversion FROM pg_extension WHERE extname = 'pgqueue'").fetchone()
    assert row is not None
    return str(row[0])


def privileges(pg_server: Server, setup: Setup, dbname: str) -> set[Row]:
    """Every privilege, owner and initial privilege of pgqueue's objects, the test's role names
    replaced by their kind (<producer>, ..., <owner>)."""
    kind_of = {name: f"<{kind}>" for kind, name in setup.roles.items()} | {setup.owner: "<owner>"}
    with psycopg.connect(pg_server.dsn(dbname)) as conn:
        rows = [row for query in (PRIVILEGES, OWNERS, INIT_PRIVILEGES)
                for row in conn.execute(query).fetchall()]
    return {tuple(kind_of.get(str(v), str(v)) for v in row) for row in rows}


def upgrade_and_install(pg_server: Server, setup: Setup, current_grants: Path) -> tuple[set[Row], set[Row]]:
    """What the user who upgrades does (0.3 with 0.3's recipe, ALTER EXTENSION pgqueue UPDATE,
    current_grants) and what a fresh install does (CREATE EXTENSION, docs/grants.sql), each in
    its database as the owner: the privileges found only after the upgrade, and only after the
    fresh install."""
    with psycopg.connect(pg_server.dsn(setup.upgraded, user=setup.owner), autocommit=True) as conn:
        conn.execute(sql.SQL("CREATE EXTENSION pgqueue VERSION {}").format(sql.Literal(OLD_VERSION)))
        assert extension_version(conn) == OLD_VERSION
    apply_grants(pg_server, setup, setup.upgraded, old_grants_text())
    with psycopg.connect(pg_server.dsn(setup.upgraded, user=setup.owner), autocommit=True) as conn:
        # the update starts from a database with 0.3's rights, among them those it must lose
        assert conn.execute("SELECT has_column_privilege(%s, 'pgqueue.dead_letter', 'id', 'SELECT'), "
                            "has_table_privilege(%s, 'pgqueue.queue_size', 'UPDATE')",
                            (setup.roles["consumer"], setup.roles["producer"])).fetchone() == (True, True)
        conn.execute("ALTER EXTENSION pgqueue UPDATE")
        assert extension_version(conn) == DEFAULT_VERSION
    apply_grants(pg_server, setup, setup.upgraded, current_grants)

    with psycopg.connect(pg_server.dsn(setup.fresh, user=setup.owner), autocommit=True) as conn:
        conn.execute("CREATE EXTENSION pgqueue")
        assert extension_version(conn) == DEFAULT_VERSION
    apply_grants(pg_server, setup, setup.fresh, CURRENT_GRANTS)

    upgraded, fresh = privileges(pg_server, setup, setup.upgraded), privileges(pg_server, setup, setup.fresh)
    # the comparison compares something: the recipes' grants (every kind's) are there on both sides
    for rows in (upgraded, fresh):
        assert ("column", "pgqueue.dead_letter.queue_id", "<consumer>", "SELECT", "", "<owner>") in rows
        assert {row[2] for row in rows} >= {f"<{kind}>" for kind in KINDS} | {"PUBLIC", "<owner>"}
    return upgraded - fresh, fresh - upgraded


def describe(rows: set[Row]) -> str:
    def line(what: str, name: str, grantee: str, privilege: str, grantable: str, grantor: str) -> str:
        if what == "owner":
            return f"  {name} owned by {grantee}"
        return f"  {what} {name}: {privilege} to {grantee}{' ' + grantable if grantable else ''} (granted by {grantor})"
    return "\n".join(line(*row) for row in sorted(rows)) or "  (none)"


def test_old_grants_then_update_then_current_grants_equal_a_fresh_install(pg_server: Server, setup: Setup) -> None:
    assert DEFAULT_VERSION != OLD_VERSION
    only_upgraded, only_fresh = upgrade_and_install(pg_server, setup, CURRENT_GRANTS)
    assert not only_upgraded and not only_fresh, (
        f"{OLD_VERSION} + its grants.sql + ALTER EXTENSION pgqueue UPDATE + the current grants.sql differs from "
        f"a fresh {DEFAULT_VERSION} + the current grants.sql (installed, updated and granted by role {setup.owner}).\n"
        f"Only after the upgrade:\n{describe(only_upgraded)}\nOnly in the fresh install:\n{describe(only_fresh)}")


@pytest.mark.parametrize("setup", ["superuser"], indirect=True)
def test_the_comparison_finds_what_the_old_recipe_leaves_behind(pg_server: Server, setup: Setup,
                                                                 tmp_path: Path) -> None:
    """The comparison above sees a right 0.3's recipe gave and the current one fails to take
    back: the current recipe without its REVOKEs that name a role leaves each of 0.3's rights
    that those REVOKEs are there for, and the comparison lists them on the upgraded side."""
    recipe = CURRENT_GRANTS.read_text()
    without = "".join(line for line in recipe.splitlines(keepends=True)
                      if not re.match(r'REVOKE .* FROM :"(producer|consumer|admin)";$', line))
    assert recipe.count("\n") - without.count("\n") >= 4, "the recipe's REVOKEs were not found"
    (tmp_path / "grants.sql").write_text(without)
    only_upgraded, only_fresh = upgrade_and_install(pg_server, setup, tmp_path / "grants.sql")
    assert only_fresh == set()
    assert {row[:4] for row in only_upgraded} >= OLD_LEFTOVERS, describe(only_upgraded)
