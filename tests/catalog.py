"""The catalog of schema pgqueue as text, for comparing two installs: a plain install with the
extension (tests/test_install_plain.py), an upgraded install with a fresh one (tests/test_upgrade.py,
tests/test_install_plain.py), a restored database with its source.

Every object is rendered with its definition, COMMENT, owner and grants, so two installs agree
only if their functions, relations, columns, indexes, constraints, triggers, views, types, schema,
comments and privileges all do; and the flags around them: sequence parameters, a trigger's
enabled state, row security and policies, rules, column collations and storage, the internal
dependencies (a sequence owned by its column), statistics objects, operators and casts; for two
extensions also the initial privileges pg_dump starts from (pg_init_privs). The plain install's own version record (pgqueue.install, its
primary key and row type) is left out: it is the one object an extension has no use for.
"""

from __future__ import annotations

import psycopg

Catalog = dict[str, list[tuple[object, ...]]]

_NOT_INSTALL = "NOT IN ('install', 'install_pkey')"

#: What every install, plain or extension, must agree on.
QUERIES: dict[str, str] = {
    "functions": """
        SELECT p.oid::regprocedure::text, pg_get_function_identity_arguments(p.oid),
               pg_get_function_result(p.oid), pg_get_functiondef(p.oid),
               obj_description(p.oid, 'pg_proc'), p.proconfig::text, p.proacl::text, p.proowner::regrole::text
          FROM pg_proc p WHERE p.pronamespace = 'pgqueue'::regnamespace""",
    "relations": f"""
        SELECT c.relname, c.relkind, obj_description(c.oid, 'pg_class'), c.reloptions::text, c.relacl::text,
               c.relpersistence
          FROM pg_class c WHERE c.relnamespace = 'pgqueue'::regnamespace AND c.relname {_NOT_INSTALL}""",
    "columns": f"""
        SELECT c.relname, a.attnum, a.attname, format_type(a.atttypid, a.atttypmod), a.attnotnull,
               a.attidentity, pg_get_expr(d.adbin, d.adrelid), col_description(c.oid, a.attnum), a.attacl::text
          FROM pg_class c JOIN pg_attribute a ON a.attrelid = c.oid
          LEFT JOIN pg_attrdef d ON d.adrelid = c.oid AND d.adnum = a.attnum
         WHERE c.relnamespace = 'pgqueue'::regnamespace AND a.attnum > 0 AND NOT a.attisdropped
           AND c.relname {_NOT_INSTALL}""",
    "indexes": f"""
        SELECT c.relname, pg_get_indexdef(i.indexrelid), obj_description(i.indexrelid, 'pg_class')
          FROM pg_index i JOIN pg_class c ON c.oid = i.indexrelid
         WHERE c.relnamespace = 'pgqueue'::regnamespace AND c.relname {_NOT_INSTALL}""",
    "constraints": f"""
        SELECT conrelid::regclass::text, conname, pg_get_constraintdef(oid), obj_description(oid, 'pg_constraint')
          FROM pg_constraint WHERE connamespace = 'pgqueue'::regnamespace AND conname {_NOT_INSTALL}""",
    "triggers": """
        SELECT tgrelid::regclass::text, tgname, pg_get_triggerdef(oid)
          FROM pg_trigger WHERE NOT tgisinternal
           AND tgrelid IN (SELECT oid FROM pg_class WHERE relnamespace = 'pgqueue'::regnamespace)""",
    "views": """
        SELECT c.relname, pg_get_viewdef(c.oid)
          FROM pg_class c WHERE c.relnamespace = 'pgqueue'::regnamespace AND c.relkind = 'v'""",
    "types": """
        SELECT t.typname, t.typtype, obj_description(t.oid, 'pg_type'), t.typacl::text
          FROM pg_type t WHERE t.typnamespace = 'pgqueue'::regnamespace AND t.typname NOT IN ('install', '_install')""",
    "schema": """
        SELECT n.nspowner::regrole::text, n.nspacl::text, obj_description(n.oid, 'pg_namespace')
          FROM pg_namespace n WHERE n.nspname = 'pgqueue'""",
    # what a relation is beyond its name and grants: owner, row security, replica identity, the
    # index's own flags and each column's collation, storage and statistics target
    "relation_flags": f"""
        SELECT c.relname, c.relowner::regrole::text, c.relrowsecurity, c.relforcerowsecurity,
               c.relreplident, c.relispartition, pg_get_partkeydef(c.oid)
          FROM pg_class c WHERE c.relnamespace = 'pgqueue'::regnamespace AND c.relname {_NOT_INSTALL}""",
    "column_flags": f"""
        SELECT c.relname, a.attname, co.collname, a.attstorage, a.attstattarget, a.attcompression
          FROM pg_class c JOIN pg_attribute a ON a.attrelid = c.oid
          LEFT JOIN pg_collation co ON co.oid = a.attcollation
         WHERE c.relnamespace = 'pgqueue'::regnamespace AND a.attnum > 0 AND NOT a.attisdropped
           AND c.relname {_NOT_INSTALL}""",
    "sequences": f"""
        SELECT c.relname, s.seqtypid::regtype::text, s.seqstart, s.seqincrement, s.seqmax, s.seqmin,
               s.seqcache, s.seqcycle
          FROM pg_sequence s JOIN pg_class c ON c.oid = s.seqrelid
         WHERE c.relnamespace = 'pgqueue'::regnamespace AND c.relname {_NOT_INSTALL}""",
    # a sequence owned by a column (dropped with it), and what else one object needs another for
    "dependencies": f"""
        SELECT pg_describe_object(d.classid, d.objid, d.objsubid),
               pg_describe_object(d.refclassid, d.refobjid, d.refobjsubid), d.deptype
          FROM pg_depend d JOIN pg_class c ON d.classid = 'pg_class'::regclass AND c.oid = d.objid
         WHERE c.relnamespace = 'pgqueue'::regnamespace AND d.deptype IN ('a', 'i')
           AND c.relname {_NOT_INSTALL}""",
    "trigger_flags": """
        SELECT tgrelid::regclass::text, tgname, tgenabled, tgdeferrable, tginitdeferred
          FROM pg_trigger WHERE NOT tgisinternal
           AND tgrelid IN (SELECT oid FROM pg_class WHERE relnamespace = 'pgqueue'::regnamespace)""",
    "policies": """
        SELECT polrelid::regclass::text, polname, polcmd, polpermissive, polroles::regrole[]::text,
               pg_get_expr(polqual, polrelid), pg_get_expr(polwithcheck, polrelid)
          FROM pg_policy WHERE polrelid IN (SELECT oid FROM pg_class WHERE relnamespace = 'pgqueue'::regnamespace)""",
    "rules": """
        SELECT ev_class::regclass::text, rulename, ev_enabled
          FROM pg_rewrite WHERE rulename <> '_RETURN'
           AND ev_class IN (SELECT oid FROM pg_class WHERE relnamespace = 'pgqueue'::regnamespace)""",
    "type_owners": """
        SELECT t.typname, t.typowner::regrole::text
          FROM pg_type t WHERE t.typnamespace = 'pgqueue'::regnamespace AND t.typname NOT IN ('install', '_install')""",
    "statistics": """
        SELECT s.stxname, pg_get_statisticsobjdef(s.oid), s.stxowner::regrole::text
          FROM pg_statistic_ext s WHERE s.stxnamespace = 'pgqueue'::regnamespace""",
    "operators_and_casts": """
        SELECT 'operator', o.oid::regoperator::text FROM pg_operator o WHERE o.oprnamespace = 'pgqueue'::regnamespace
        UNION ALL
        SELECT 'cast', format('%s -> %s', c.castsource::regtype, c.casttarget::regtype)
          FROM pg_cast c JOIN pg_proc p ON p.oid = c.castfunc WHERE p.pronamespace = 'pgqueue'::regnamespace""",
}

#: What two extension installs must also agree on: what pg_dump keeps, and which objects belong
#: to the extension (so that DROP EXTENSION removes them).
EXTENSION_QUERIES: dict[str, str] = {
    "dumped": """
        SELECT cfg::regclass::text, cond
          FROM pg_extension e, unnest(e.extconfig, e.extcondition) AS u(cfg, cond)
         WHERE e.extname = 'pgqueue'""",
    "members": """
        SELECT pg_describe_object(classid, objid, objsubid)
          FROM pg_depend
         WHERE refclassid = 'pg_extension'::regclass AND deptype = 'e'
           AND refobjid = (SELECT oid FROM pg_extension WHERE extname = 'pgqueue')""",
    # the privileges the extension's script left, which pg_dump takes as the starting point
    "initial_privileges": """
        SELECT pg_describe_object(i.classoid, i.objoid, i.objsubid), i.privtype, i.initprivs::text
          FROM pg_init_privs i
          JOIN pg_depend d ON d.classid = i.classoid AND d.objid = i.objoid AND d.deptype = 'e'
         WHERE d.refclassid = 'pg_extension'::regclass
           AND d.refobjid = (SELECT oid FROM pg_extension WHERE extname = 'pgqueue')""",
    "extension": """
        SELECT e.extname, e.extversion, e.extrelocatable, e.extnamespace::regnamespace::text,
               e.extowner::regrole::text
          FROM pg_extension e WHERE e.extname = 'pgqueue'""",
}


def catalog(dsn: str, *, extension: bool = False) -> Catalog:
    """Every kind of object of schema pgqueue in the database at dsn, each kind sorted; with
    extension=True also what only an extension has (pg_dump's list and the member objects)."""
    queries = {**QUERIES, **EXTENSION_QUERIES} if extension else QUERIES
    with psycopg.connect(dsn) as conn:
        return {name: sorted(conn.execute(query).fetchall(), key=repr)  # type: ignore[arg-type]
                for name, query in queries.items()}
