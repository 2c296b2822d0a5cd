"""A version-stable text description of one Postgres schema, built from the system
catalogs (not ``pg_dump``, whose output changes between Postgres versions): every table,
column, constraint, index, sequence, view, type, function, trigger, rule and policy, the
relation options and the rows of ``cyclone_schema_version``, one sorted entry per object,
with the schema's own name replaced by ``<schema>``.

Used for the committed reference of the migrated schema (``tests/migration``) and by the
schema pool (``helpers.schema_pool``) to notice a test that left objects behind."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import psycopg
from psycopg import sql

PLACEHOLDER = "<schema>"
# The order of the kinds in a description (then by name).
KINDS = (
    "migration",
    "relation",
    "column",
    "constraint",
    "index",
    "sequence",
    "view",
    "type",
    "function",
    "trigger",
    "rule",
    "policy",
    "object",
)

# One row per object: (kind, name, detail). ``name`` identifies the object within the
# schema (kind + name is unique); ``detail`` is its definition. Owners, privileges and
# comments are left out (they name roles that differ between servers), and so are NOT NULL
# constraints as rows of pg_constraint (Postgres 18 adds them there; nullability is in the
# column entry).
_DESCRIBE = """
WITH ns AS (SELECT oid FROM pg_namespace WHERE nspname = %(schema)s)
SELECT 'relation', c.relname,
       concat_ws(' ', 'kind=' || c.relkind::text, 'persistence=' || c.relpersistence::text,
                 'options=' || coalesce(array_to_string(c.reloptions, ','), ''),
                 'rls=' || c.relrowsecurity::text || '/' || c.relforcerowsecurity::text,
                 'replica_identity=' || c.relreplident::text)
FROM pg_class c WHERE c.relnamespace = (SELECT oid FROM ns)
  AND c.relkind IN ('r', 'p', 'v', 'm', 'S', 'f', 'c')
UNION ALL
SELECT 'column', c.relname || '.' || a.attname,
       concat_ws(' ',
                 '#' || row_number() OVER (PARTITION BY c.oid ORDER BY a.attnum),
                 format_type(a.atttypid, a.atttypmod),
                 CASE WHEN a.attnotnull THEN 'NOT NULL' END,
                 CASE WHEN a.attidentity <> '' THEN 'IDENTITY ' || a.attidentity::text END,
                 CASE WHEN a.attgenerated <> '' THEN 'GENERATED ' || a.attgenerated::text END,
                 'DEFAULT ' || pg_get_expr(d.adbin, d.adrelid),
                 CASE WHEN a.attcollation <> 0 AND a.attcollation <> t.typcollation
                      THEN 'COLLATE ' || a.attcollation::regcollation END)
FROM pg_class c
JOIN pg_attribute a ON a.attrelid = c.oid AND a.attnum > 0 AND NOT a.attisdropped
JOIN pg_type t ON t.oid = a.atttypid
LEFT JOIN pg_attrdef d ON d.adrelid = c.oid AND d.adnum = a.attnum
WHERE c.relnamespace = (SELECT oid FROM ns) AND c.relkind IN ('r', 'p', 'v', 'm', 'f', 'c')
UNION ALL
SELECT 'constraint', c.relname || '.' || k.conname,
       pg_get_constraintdef(k.oid)
           || CASE WHEN k.convalidated THEN '' ELSE ' NOT VALID' END
FROM pg_constraint k JOIN pg_class c ON c.oid = k.conrelid
WHERE c.relnamespace = (SELECT oid FROM ns) AND k.contype <> 'n'
UNION ALL
SELECT 'index', i.relname, pg_get_indexdef(i.oid)
FROM pg_class i WHERE i.relnamespace = (SELECT oid FROM ns) AND i.relkind IN ('i', 'I')
UNION ALL
SELECT 'sequence', c.relname,
       concat_ws(' ', format_type(s.seqtypid, NULL), 'start=' || s.seqstart,
                 'increment=' || s.seqincrement, 'min=' || s.seqmin, 'max=' || s.seqmax,
                 'cache=' || s.seqcache, 'cycle=' || s.seqcycle::text)
FROM pg_sequence s JOIN pg_class c ON c.oid = s.seqrelid
WHERE c.relnamespace = (SELECT oid FROM ns)
UNION ALL
SELECT 'view', c.relname, pg_get_viewdef(c.oid)
FROM pg_class c WHERE c.relnamespace = (SELECT oid FROM ns) AND c.relkind IN ('v', 'm')
UNION ALL
SELECT 'type', t.typname,
       concat_ws(' ', 'kind=' || t.typtype::text,
                 CASE t.typtype
                     WHEN 'e' THEN (SELECT string_agg(quote_literal(e.enumlabel), ', '
                                                      ORDER BY e.enumsortorder)
                                    FROM pg_enum e WHERE e.enumtypid = t.oid)
                     WHEN 'd' THEN format_type(t.typbasetype, t.typtypmod)
                                   || CASE WHEN t.typnotnull THEN ' NOT NULL' ELSE '' END
                                   || coalesce(' DEFAULT ' || t.typdefault, '')
                                   || coalesce((SELECT ' ' || string_agg(
                                                    pg_get_constraintdef(k.oid), ' '
                                                    ORDER BY k.conname)
                                                FROM pg_constraint k
                                                WHERE k.contypid = t.oid), '')
                 END)
FROM pg_type t
WHERE t.typnamespace = (SELECT oid FROM ns)
  AND t.typrelid = 0                                   -- not the row type of a relation
  AND NOT EXISTS (SELECT 1 FROM pg_type e WHERE e.typarray = t.oid)  -- not an array type
UNION ALL
SELECT 'function', p.proname || '(' || pg_get_function_identity_arguments(p.oid) || ')',
       CASE WHEN p.prokind = 'a' THEN 'aggregate' ELSE pg_get_functiondef(p.oid) END
FROM pg_proc p WHERE p.pronamespace = (SELECT oid FROM ns)
UNION ALL
SELECT 'trigger', c.relname || '.' || g.tgname,
       pg_get_triggerdef(g.oid) || ' enabled=' || g.tgenabled::text
FROM pg_trigger g JOIN pg_class c ON c.oid = g.tgrelid
WHERE c.relnamespace = (SELECT oid FROM ns) AND NOT g.tgisinternal
UNION ALL
SELECT 'rule', r.tablename || '.' || r.rulename, r.definition
FROM pg_rules r WHERE r.schemaname = %(schema)s
UNION ALL
SELECT 'policy', p.tablename || '.' || p.policyname,
       concat_ws(' ', p.permissive, p.cmd, 'roles=' || array_to_string(p.roles, ','),
                 'using=' || p.qual, 'check=' || p.with_check)
FROM pg_policies p WHERE p.schemaname = %(schema)s
UNION ALL
SELECT 'object', o.kind || ' ' || o.name, ''
FROM (
    SELECT 'operator' AS kind, oprname || '(' || oprleft::regtype || ',' || oprright::regtype
           || ')' AS name, oprnamespace AS nsp FROM pg_operator
    UNION ALL SELECT 'collation', collname, collnamespace FROM pg_collation
    UNION ALL SELECT 'conversion', conname, connamespace FROM pg_conversion
    UNION ALL SELECT 'operator class', opcname, opcnamespace FROM pg_opclass
    UNION ALL SELECT 'operator family', opfname, opfnamespace FROM pg_opfamily
    UNION ALL SELECT 'statistics', stxname, stxnamespace FROM pg_statistic_ext
    UNION ALL SELECT 'text search configuration', cfgname, cfgnamespace FROM pg_ts_config
    UNION ALL SELECT 'text search dictionary', dictname, dictnamespace FROM pg_ts_dict
    UNION ALL SELECT 'extension', extname, extnamespace FROM pg_extension
) o WHERE o.nsp = (SELECT oid FROM ns)
"""


@dataclass(frozen=True)
class Entry:
    """One object of a schema: ``kind`` (``table``, ``column``, ``index``...), ``name``
    (unique within its kind) and ``detail`` (its definition), with the schema's name
    replaced by :data:`PLACEHOLDER`."""

    kind: str
    name: str
    detail: str

    def render(self) -> str:
        """``kind name: detail``, the detail's lines indented under it."""
        detail = self.detail.strip("\n").replace("\n", "\n    ")
        return f"{self.kind} {self.name}: {detail}" if detail else f"{self.kind} {self.name}"


def describe_schema(conn: psycopg.Connection[Any], schema: str) -> list[Entry]:
    """Every object of ``schema`` plus its ``cyclone_schema_version`` rows (version and
    name), sorted; empty when the schema does not exist. ``conn`` may be in autocommit."""
    rows = conn.execute(_DESCRIBE, {"schema": schema}).fetchall()
    entries = [
        Entry(kind, _anonymise(name, schema), _anonymise(detail, schema))
        for kind, name, detail in rows
    ]
    if conn.execute(
        "SELECT to_regclass(format('%%I.cyclone_schema_version', %s::text))", (schema,)
    ).fetchone() != (None,):
        versions = conn.execute(
            sql.SQL("SELECT version, name FROM {}.cyclone_schema_version").format(
                sql.Identifier(schema)
            )
        ).fetchall()
        entries += [Entry("migration", f"{v:04d}", name) for v, name in versions]
    return sorted(entries, key=lambda e: (KINDS.index(e.kind), e.name, e.detail))


def render(entries: list[Entry]) -> str:
    """The text form of :func:`describe_schema`: one entry a line (definitions indented)."""
    return "".join(entry.render() + "\n" for entry in entries)


def _anonymise(text: str | None, schema: str) -> str:
    if not text:
        return ""
    return text.replace(f'"{schema}".', f"{PLACEHOLDER}.").replace(f"{schema}.", f"{PLACEHOLDER}.")
