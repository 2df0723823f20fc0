-- Top pgqueue's queue :'queue' ('plain', or 'grouped': 10,000 groups) up to 300,000 messages,
-- then vacuum; for run.sh, functions.sh and one_statement.sh (psql -v queue=NAME -f topup.sql).
SELECT count(*) < 300000 AS short, 300000 - count(*) AS n
  FROM pgqueue.message m JOIN pgqueue.queue q ON q.id = m.queue_id WHERE q.name = :'queue' \gset
\if :short
SELECT count(*) FROM pgqueue.message_create_batch(:'queue', array_fill('\x01'::bytea, ARRAY[:n]),
       p_groups => CASE WHEN :'queue' = 'grouped'
                        THEN ARRAY(SELECT 'g' || (i % 10000) FROM generate_series(0, :n - 1) i) END);
\endif
VACUUM pgqueue.message;
