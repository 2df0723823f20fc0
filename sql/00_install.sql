\set VERBOSITY terse
SET client_min_messages = warning;
SELECT extname, extversion FROM pg_extension WHERE extname = 'pgqueue';
