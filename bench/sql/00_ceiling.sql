-- The machine's ceilings (issue 4): a single-row INSERT into a table whose only index is its
-- primary key. (`SELECT 1`, the other ceiling, needs no table.)
CREATE SCHEMA bench_raw;

CREATE TABLE bench_raw.message (
    id      bigint GENERATED ALWAYS AS IDENTITY,
    content bytea  NOT NULL,
    CONSTRAINT message_pkey PRIMARY KEY (id)
);
