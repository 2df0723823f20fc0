// pgqueue from Node.js with the `postgres` driver (postgres.js): the same as pg_example.mjs.
//
//   DATABASE_URL=postgresql://user@localhost/app node postgresjs_example.mjs produce|consume emails
//
// postgres.js sends a JS string as text and a Buffer as bytea: strings go to
// message_create_text / message_create_json, never to message_create (bytea), where its escape
// syntax would change them ("\\x4869" would be stored as "Hi").
import postgres from "postgres";

import { decode, mediaType } from "./content.mjs";

// The work for one message; it must end within the lease (see pg_example.mjs).
async function work(payload, task) {
  // ... do the work here
}

const [mode, queue = "default"] = process.argv.slice(2);
const sql = postgres(process.env.DATABASE_URL, { max: 1, onnotice: () => {} });
try {
  if (mode === "produce") {
    // One transaction (sql.begin): all five messages or none, as in pg_example.mjs. sql.json is
    // the helper of the outer sql.
    const made = await sql.begin(async (tx) => {
      const [{ id: text }] = await tx`SELECT pgqueue.message_create_text(${queue}, ${"C:\\temp \\x4869 ✓"}) AS id`;
      const [{ id: json }] = await tx`
        SELECT pgqueue.message_create_json(${queue}, ${sql.json({ to: "a@example.com", dir: "C:\\temp" })},
                                           NULL, ${"send_email"}) AS id`;
      // sql.json sends any value as its JSON text, an array too
      const [{ id: list }] = await tx`
        SELECT pgqueue.message_create_json(${queue}, ${sql.json(["a@example.com", "b@example.com"])}) AS id`;
      const [{ id: bytes }] = await tx`SELECT pgqueue.message_create(${queue}, ${Buffer.from([0, 1, 92, 120, 255])}) AS id`;
      const [{ id: later }] = await tx`
        SELECT pgqueue.message_create_text(${queue}, ${"in a minute"}, pgqueue.now_ms() + 60000) AS id`;
      return { text, json, list, bytes, later };
    });
    console.log(JSON.stringify(made));
  } else if (mode === "consume") {
    // Ten leases at a time, renewed before each message's work for it and the messages still
    // waiting; one whose lease was lost while it waited is skipped (as in pg_example.mjs)
    const rows = await sql`SELECT id, attempts, content, content_type FROM pgqueue.message_dequeue(${queue}, 10)`;
    const lost = new Set();  // ids whose lease was found stale
    const seen = [];
    for (const [i, m] of rows.entries()) {
      const held = rows.slice(i).filter((r) => !lost.has(String(r.id)));
      if (held[0] === m) {
        const [{ stale }] = await sql`
          SELECT pgqueue.message_heartbeat_batch(${held.map((r) => r.id)}::bigint[],
                                                 ${held.map((r) => r.attempts)}::integer[]) AS stale`;
        for (const id of stale) lost.add(String(id));
      }
      if (lost.has(String(m.id))) {
        console.error(`message ${m.id}: lease lost while waiting (delivered again), skipped`);
        seen.push({ id: m.id, lost: true });
        continue;
      }
      // each message settles on its own, as in pg_example.mjs: an error does not end the loop
      let payload;
      try {
        payload = decode(m.content, m.content_type);
      } catch (err) {
        const [{ ok: rejected }] = await sql`
          SELECT pgqueue.message_reject(${m.id}, ${m.attempts}, ${`cannot decode: ${err.message}`}) AS ok`;
        seen.push({ id: m.id, error: err.message, rejected });
        continue;
      }
      const task = mediaType(m.content_type).params.task ?? null;
      let completed;
      try {
        await work(payload, task);
        [{ ok: completed }] = await sql`SELECT pgqueue.message_complete(${m.id}, ${m.attempts}) AS ok`;
      } catch (err) {
        await sql`SELECT pgqueue.message_fail(${m.id}, ${m.attempts}, ${String(err)})`;
        seen.push({ id: m.id, task, error: String(err) });
        continue;
      }
      if (!completed) console.error(`message ${m.id}: lease lost before completion, not completed here`);
      seen.push({ id: m.id, task, payload, completed });
    }
    console.log(JSON.stringify(seen));
  } else {
    throw new Error("usage: node postgresjs_example.mjs produce|consume [QUEUE]");
  }
} finally {
  await sql.end();
}
