-- The machine's ceilings, which target 1 compares message_create with (docs/benchmarks.md):
-- a single-row INSERT into a table whose only index is its primary key. (`SELECT 1`, the
-- other ceiling, needs no table.)
CREATE SCHEMA bench_raw;

CREATE TABLE bench_raw.message (
    id      bigint GENERATED ALWAYS AS IDENTITY,
    content bytea  NOT NULL,
    CONSTRAINT message_pkey PRIMARY KEY (id)
);
