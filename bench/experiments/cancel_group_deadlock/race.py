"""Race, no helper lock: message_cancel([W of g0 (waiting), X of g3 (ready turn)]) against
message_complete_batch([lease of g3, lease of g0]) on a group_concurrency-2 queue; both autocommit
single calls, started together with a random offset of 0-3 ms. Usage: race.py N [DSN of a server where the role may create databases] (session 54, from a
review's script: 151 deadlocks in 2,000 pairs before the fix, 0 after)."""
import sys, threading, time, random, psycopg, collections
DSN = (sys.argv[2] if len(sys.argv) > 2 else "host=/tmp/dl/pg port=5491 user=postgres") + " dbname=%s"
N = int(sys.argv[1])
a = psycopg.connect(DSN % "postgres", autocommit=True)
a.execute("DROP DATABASE IF EXISTS race"); a.execute("CREATE DATABASE race"); a.close()
c = psycopg.connect(DSN % "race", autocommit=True)
c.execute("CREATE EXTENSION pgqueue")
c.execute("SELECT pgqueue.queue_create('qc2', p_lock_ms => 60000, p_group_concurrency => 2)")
mk = lambda g: c.execute("SELECT pgqueue.message_create('qc2', 'x'::bytea, NULL, NULL, %s)", (g,)).fetchone()[0]
c1 = psycopg.connect(DSN % "race", autocommit=True); c2 = psycopg.connect(DSN % "race", autocommit=True)
out = collections.Counter(); ctx = {}
def run(conn, name, sql, args, bar):
    bar.wait(); time.sleep(random.random() * 0.003)
    try:
        conn.execute(sql, args).fetchall(); out[(name, 'ok')] += 1
    except psycopg.Error as e:
        out[(name, e.sqlstate)] += 1; ctx[name] = (str(e).splitlines()[0], e.diag.context.splitlines()[-1])
for it in range(N):
    c.execute("SELECT pgqueue.message_cancel('qc2', array(SELECT id FROM pgqueue.message))")
    c.execute("DELETE FROM pgqueue.message")
    m1 = mk('g0'); m2 = mk('g0'); m4 = mk('g3')
    att = dict(c.execute("SELECT id, attempts FROM pgqueue.message_dequeue('qc2', 3)").fetchall())
    m5 = mk('g3'); m3 = mk('g0')
    bar = threading.Barrier(2)
    t1 = threading.Thread(target=run, args=(c1, "cancel", "SELECT count(*) FROM pgqueue.message_cancel('qc2', %s)", ([m3, m5],), bar))
    t2 = threading.Thread(target=run, args=(c2, "complete_batch", "SELECT pgqueue.message_complete_batch(%s, %s)", ([m4, m1], [att[m4], att[m1]]), bar))
    t1.start(); t2.start(); t1.join(); t2.join()
print("iterations", N, dict(out)); print(ctx)
