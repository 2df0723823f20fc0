// pgqueue from Node.js with the `pg` driver (node-postgres).
//
//   cd examples/node && npm install
//   psql "$DATABASE_URL" -c "SELECT pgqueue.queue_create('emails')"   # once (or: pgqueue queue create emails)
//   DATABASE_URL=postgresql://user@localhost/app node pg_example.mjs produce emails
//   DATABASE_URL=postgresql://user@localhost/app node pg_example.mjs consume emails
//
// produce enqueues text, JSON and raw bytes so that none is changed on the way; consume leases
// messages (whoever sent them: Python, SQL, Node), decodes each by its content type and
// acknowledges it. Each prints one JSON line of what it did.
//
// Why not message_create with a string: its content is bytea, and a JS string sent for a bytea
// parameter is parsed as bytea's text form, so "\\x4869" would be stored as "Hi" and "C:\\temp"
// lose a backslash, silently. Strings go to message_create_text / message_create_json; only a
// Buffer goes to message_create.
import pg from "pg";

const [mode, queue = "default"] = process.argv.slice(2);
const client = new pg.Client({ connectionString: process.env.DATABASE_URL });
await client.connect();
try {
  if (mode === "produce") {
    const id = async (sql, params) => (await client.query(sql, params)).rows[0].id;
    const text = await id("SELECT pgqueue.message_create_text($1, $2) AS id", [queue, "C:\\temp \\x4869 ✓"]);
    // pg sends an object as its JSON text; the task name is for a worker's task registry
    const json = await id("SELECT pgqueue.message_create_json($1, $2, NULL, $3) AS id",
                          [queue, { to: "a@example.com", dir: "C:\\temp" }, "send_email"]);
    const bytes = await id("SELECT pgqueue.message_create($1, $2) AS id", [queue, Buffer.from([0, 1, 92, 120, 255])]);
    // delivered in 60 s (the server's clock); message_create_text takes p_dequeue_at too
    const later = await id("SELECT pgqueue.message_create_text($1, $2, pgqueue.now_ms() + 60000) AS id",
                           [queue, "in a minute"]);
    console.log(JSON.stringify({ text, json, bytes, later }));
  } else if (mode === "consume") {
    const { rows } = await client.query(
      "SELECT id, attempts, content, content_type FROM pgqueue.message_dequeue($1, 100)", [queue]);
    const seen = [];
    for (const m of rows) {
      const type = m.content_type ?? "";
      let payload;
      if (type.startsWith("application/json")) payload = JSON.parse(m.content.toString("utf8"));
      else if (type.startsWith("text/")) payload = m.content.toString("utf8");
      else payload = { base64: m.content.toString("base64") };  // raw bytes
      const task = /;\s*task=([^;\s]+)/.exec(type)?.[1] ?? null;
      // ... do the work; on an error: SELECT pgqueue.message_fail($1, $2, $3) ...
      const { rows: [done] } = await client.query("SELECT pgqueue.message_complete($1, $2) AS ok", [m.id, m.attempts]);
      seen.push({ id: m.id, task, payload, completed: done.ok });
    }
    console.log(JSON.stringify(seen));
  } else {
    throw new Error("usage: node pg_example.mjs produce|consume [QUEUE]");
  }
} finally {
  await client.end();
}
