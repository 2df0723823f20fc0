// pgqueue from Node.js with the `pg` driver (node-postgres).
//
//   cd examples/node && npm install
//   psql "$DATABASE_URL" -c "SELECT pgqueue.queue_create('emails')"   # once (or: pgqueue queue create emails)
//   DATABASE_URL=postgresql://user@localhost/app node pg_example.mjs produce emails
//   DATABASE_URL=postgresql://user@localhost/app node pg_example.mjs consume emails
//
// produce enqueues text, JSON and raw bytes so that none is changed on the way; consume leases
// messages (whoever sent them: Python, SQL, Node), keeps the leases of those waiting their turn,
// decodes each by its content type (content.mjs) and acknowledges it with its fencing token; one that does not decode is
// dead-lettered, one whose work throws is given back to be retried. Each prints one JSON line
// of what it did.
//
// Why not message_create with a string: its content is bytea, and a JS string sent for a bytea
// parameter is parsed as bytea's text form, so "\\x4869" would be stored as "Hi", silently, and
// "C:\\temp" refused (22P02: a backslash starts an escape there). Strings go to
// message_create_text / message_create_json; only a Buffer goes to message_create.
import pg from "pg";

import { decode, mediaType } from "./content.mjs";

// The work for one message (payload decoded by its content type, task from ";task=" or null).
// It must end within the lease: see consume.
async function work(payload, task) {
  // ... do the work here
}

const [mode, queue = "default"] = process.argv.slice(2);
const client = new pg.Client({ connectionString: process.env.DATABASE_URL });
await client.connect();
try {
  if (mode === "produce") {
    // One transaction: all five messages or none (a refusal midway, a full capped queue say,
    // left the first ones enqueued, and a retry of the run sent them twice).
    await client.query("BEGIN");
    try {
      const id = async (sql, params) => (await client.query(sql, params)).rows[0].id;
      const text = await id("SELECT pgqueue.message_create_text($1, $2) AS id", [queue, "C:\\temp \\x4869 ✓"]);
      // JSON.stringify, not the value itself: pg sends a plain object as its JSON text, but an
      // array as a PostgreSQL array literal ('{"a@example.com","b@example.com"}', refused as
      // JSON) and a string as it is ('true' would arrive as JSON true). The task name is for a
      // worker's task registry.
      const json = await id("SELECT pgqueue.message_create_json($1, $2, NULL, $3) AS id",
                            [queue, JSON.stringify({ to: "a@example.com", dir: "C:\\temp" }), "send_email"]);
      const list = await id("SELECT pgqueue.message_create_json($1, $2) AS id",
                            [queue, JSON.stringify(["a@example.com", "b@example.com"])]);
      const bytes = await id("SELECT pgqueue.message_create($1, $2) AS id", [queue, Buffer.from([0, 1, 92, 120, 255])]);
      // delivered in 60 s (the server's clock); message_create_text takes p_dequeue_at too
      const later = await id("SELECT pgqueue.message_create_text($1, $2, pgqueue.now_ms() + 60000) AS id",
                             [queue, "in a minute"]);
      await client.query("COMMIT");
      console.log(JSON.stringify({ text, json, list, bytes, later }));
    } catch (err) {
      await client.query("ROLLBACK");
      throw err;
    }
  } else if (mode === "consume") {
    // Ten leases at a time, each of the queue's lock_ms (30 s by default). A lease left alone
    // could run out while its message waits for the work on those before it, and the message
    // would be handed to another consumer too: so before each message's work, its lease and those of the
    // messages still waiting are renewed to lock_ms from now (message_heartbeat_batch, one
    // statement), and a message whose lease was already lost (it was delivered again: its
    // token is stale) is skipped, not done twice. One message's work must end within lock_ms:
    // longer work heartbeats during it (message_heartbeat) or dequeues with a longer p_lock_ms.
    const { rows } = await client.query(
      "SELECT id, attempts, content, content_type FROM pgqueue.message_dequeue($1, 10)", [queue]);
    const ok = async (sql, params) => (await client.query(sql, params)).rows[0].ok;
    const lost = new Set();  // ids whose lease was found stale
    const seen = [];
    for (const [i, m] of rows.entries()) {
      const held = rows.slice(i).filter((r) => !lost.has(String(r.id)));
      if (held[0] === m) {
        const { rows: [{ stale }] } = await client.query(
          "SELECT pgqueue.message_heartbeat_batch($1, $2) AS stale",
          [held.map((r) => r.id), held.map((r) => r.attempts)]);
        for (const id of stale) lost.add(String(id));
      }
      if (lost.has(String(m.id))) {
        console.error(`message ${m.id}: lease lost while waiting (delivered again), skipped`);
        seen.push({ id: m.id, lost: true });
        continue;
      }
      // Each message settles on its own: an error must not end the loop, or the messages
      // after it wait out their leases, and a bad one that comes first again stops them at
      // every run.
      let payload;
      try {
        payload = decode(m.content, m.content_type);
      } catch (err) {
        // content that does not decode never will: dead-letter it now rather than retry it
        const rejected = await ok("SELECT pgqueue.message_reject($1, $2, $3) AS ok",
                                  [m.id, m.attempts, `cannot decode: ${err.message}`]);
        seen.push({ id: m.id, error: err.message, rejected });
        continue;
      }
      const task = mediaType(m.content_type).params.task ?? null;
      let completed;
      try {
        await work(payload, task);
        completed = await ok("SELECT pgqueue.message_complete($1, $2) AS ok", [m.id, m.attempts]);
      } catch (err) {
        // retried after the queue's back-off, or dead-lettered at its max_attempts
        await ok("SELECT pgqueue.message_fail($1, $2, $3) AS ok", [m.id, m.attempts, String(err)]);
        seen.push({ id: m.id, task, error: String(err) });
        continue;
      }
      // false: the token is stale (the lease ran out during the work and the message was
      // delivered again, so another consumer may be doing it too); say so rather than count
      // it as done
      if (!completed) console.error(`message ${m.id}: lease lost before completion, not completed here`);
      seen.push({ id: m.id, task, payload, completed });
    }
    console.log(JSON.stringify(seen));
  } else {
    throw new Error("usage: node pg_example.mjs produce|consume [QUEUE]");
  }
} finally {
  await client.end();
}
