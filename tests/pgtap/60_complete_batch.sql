-- message_complete_batch's two paths (up to 8 ids: one DELETE by id each; more: the rows locked
-- through a probe by id each, then deleted): the same answers. Each scenario runs twice, once
-- with its own ids only (at most 8) and once with 9 ids no message has around them (17 and
-- more), which come back stale in their places: stale tokens, ids listed twice with the same or
-- different tokens in either order, arrays whose lower bound is not 1, messages held by a Spark
-- claim, tokens of messages not leased (given back, never delivered), the turns of a grouped
-- queue handed on, the idempotency keys kept, the completions counted, and
-- message_complete_and_dequeue's deferred turns. A call of one id (below the scenarios) takes
-- message_complete's path, in message_complete_batch and in message_complete_and_dequeue: the
-- same answers.
BEGIN;
SELECT plan(55);

-- p_core with 4 unknown ids before it and 5 after it when p_pad
CREATE FUNCTION pg_temp.pad(p_core bigint[], p_pad boolean) RETURNS bigint[]
LANGUAGE sql IMMUTABLE
RETURN CASE WHEN p_pad THEN ARRAY[-1, -2, -3, -4]::bigint[] || p_core || ARRAY[-5, -6, -7, -8, -9]::bigint[]
            ELSE p_core END;
CREATE FUNCTION pg_temp.pad_tokens(p_core integer[], p_pad boolean) RETURNS integer[]
LANGUAGE sql IMMUTABLE
RETURN CASE WHEN p_pad THEN ARRAY[1, 1, 1, 1] || p_core || ARRAY[1, 1, 1, 1, 1] ELSE p_core END;
-- the ids of a queue's messages whose content is one of p_names, in the order of p_names
CREATE FUNCTION pg_temp.ids(p_queue text, p_names text[]) RETURNS bigint[]
LANGUAGE sql STABLE
RETURN ARRAY(SELECT m.id FROM unnest(p_names) WITH ORDINALITY AS n(name, i)
               JOIN pgqueue.message m ON m.content = convert_to(n.name, 'UTF8')
               JOIN pgqueue.queue q ON q.id = m.queue_id AND q.name = p_queue
              ORDER BY n.i);
CREATE FUNCTION pg_temp.left_in(p_queue text) RETURNS text
LANGUAGE sql STABLE
RETURN (SELECT string_agg(encode(m.content, 'escape'), ',' ORDER BY m.id)
          FROM pgqueue.message m JOIN pgqueue.queue q ON q.id = m.queue_id WHERE q.name = p_queue);

CREATE FUNCTION pg_temp.scenarios(p_pad boolean) RETURNS SETOF text
LANGUAGE plpgsql AS $$
DECLARE
    v_path  text := CASE WHEN p_pad THEN ' (more than 8 ids)' ELSE ' (up to 8 ids)' END;
    v_s     text := CASE WHEN p_pad THEN '_big' ELSE '_small' END;
    v_q     text;
    v_ids   bigint[];
    v_done  bigint;
    v_got   bigint[];
    v_seq   bigint;
    v_count bigint;
BEGIN
    -- stale tokens and ids listed twice: a completed once (same token twice), b stale at both
    -- of its places, c completed at its second place (a stale token first), d at its first
    v_q := 'cb_p' || v_s;
    PERFORM pgqueue.queue_create(v_q);
    PERFORM pgqueue.message_create(v_q, convert_to(n, 'UTF8')) FROM unnest(ARRAY['a', 'b', 'c', 'd', 'e', 'f']) AS n;
    PERFORM count(*) FROM pgqueue.message_dequeue(v_q, 6, 600000);
    v_count := (SELECT completed FROM pgqueue.queue_counters(v_q));
    v_ids := pg_temp.ids(v_q, ARRAY['a', 'b', 'a', 'c', 'c', 'd', 'd', 'b']);
    v_got := pgqueue.message_complete_batch(pg_temp.pad(v_ids, p_pad),
                                            pg_temp.pad_tokens(ARRAY[1, 2, 1, 5, 1, 1, 7, 3], p_pad));
    RETURN NEXT is(v_got, pg_temp.pad(ARRAY[v_ids[2], v_ids[2]], p_pad),
                   'stale ids in input order, an id stale at each of its places' || v_path);
    RETURN NEXT is(pg_temp.left_in(v_q), 'b,e,f', 'a, c and d completed, once each; b left' || v_path);
    RETURN NEXT is((SELECT completed FROM pgqueue.queue_counters(v_q)) - v_count, 3::bigint,
                   'three completions counted' || v_path);
    -- arrays whose lower bound is not 1: the i-th id goes with the i-th token
    v_ids := pg_temp.pad(pg_temp.ids(v_q, ARRAY['e', 'f']), p_pad);
    v_got := pgqueue.message_complete_batch(('[5:' || 4 + cardinality(v_ids) || ']=' || v_ids::text)::bigint[],
                                            pg_temp.pad_tokens(ARRAY[1, 1], p_pad));
    RETURN NEXT is(v_got, pg_temp.pad('{}', p_pad), 'ids from 5 on, tokens from 1 on: none stale' || v_path);
    RETURN NEXT is(pg_temp.left_in(v_q), 'b', 'ids from 5 on: e and f completed' || v_path);
    v_ids := pg_temp.ids(v_q, ARRAY['b']);
    v_got := pgqueue.message_complete_batch(pg_temp.pad(v_ids, p_pad),
                                            ('[0:' || cardinality(pg_temp.pad(v_ids, p_pad)) - 1 || ']='
                                             || pg_temp.pad_tokens(ARRAY[1], p_pad)::text)::integer[]);
    RETURN NEXT is(v_got, pg_temp.pad('{}', p_pad), 'tokens from 0 on: b completed' || v_path);

    -- a message held by a Spark claim is not completed with its token
    v_q := 'cb_s' || v_s;
    PERFORM pgqueue.queue_create(v_q);
    PERFORM pgqueue.message_create(v_q, convert_to(n, 'UTF8')) FROM unnest(ARRAY['s1', 's2']) AS n;
    PERFORM pgqueue.spark_consumer_open(v_q, 'etl');
    v_seq := pgqueue.spark_claim(v_q, 'etl', 1);
    v_ids := pg_temp.ids(v_q, ARRAY['s1']);
    v_got := pgqueue.message_complete_batch(pg_temp.pad(v_ids, p_pad),
                                            pg_temp.pad_tokens(ARRAY(SELECT m.attempts FROM pgqueue.message m
                                                                      WHERE m.id = v_ids[1]), p_pad));
    RETURN NEXT is(v_got, pg_temp.pad(v_ids, p_pad), 'a claimed message: stale' || v_path);
    RETURN NEXT is(pg_temp.left_in(v_q), 's1,s2', 'a claimed message stays with its claim' || v_path);

    -- a token that is the message's attempts but whose lease is gone: given back by a defer or a
    -- fail (they keep the attempts) or never delivered (0). Stale, and the message stays: only
    -- the lease test refuses these (a review: without it in the path for up to 8 ids, a late
    -- acknowledgement deleted a deferred message, its checkpoint with it, and no test noticed)
    v_q := 'cb_n' || v_s;
    PERFORM pgqueue.queue_create(v_q, p_retry_base_ms => 3600000, p_retry_cap_ms => 3600000);
    PERFORM pgqueue.message_create(v_q, convert_to(n, 'UTF8')) FROM unnest(ARRAY['n1', 'n2', 'n3', 'n4']) AS n;
    PERFORM count(*) FROM pgqueue.message_dequeue(v_q, 3, 600000);  -- n1 to n3 leased, attempts 1
    v_ids := pg_temp.ids(v_q, ARRAY['n1', 'n2', 'n3', 'n4']);
    PERFORM pgqueue.message_defer(v_ids[1], 1, pgqueue.now_ms() + 3600000);
    PERFORM pgqueue.message_fail(v_ids[2], 1, 'later');
    v_got := pgqueue.message_complete_batch(pg_temp.pad(ARRAY[v_ids[1], v_ids[2], v_ids[4]], p_pad),
                                            pg_temp.pad_tokens(ARRAY[1, 1, 0], p_pad));
    RETURN NEXT is(v_got, pg_temp.pad(ARRAY[v_ids[1], v_ids[2], v_ids[4]], p_pad),
                   'deferred, failed, never delivered: stale' || v_path);
    RETURN NEXT is((SELECT count(*) FROM pgqueue.message_complete_and_dequeue(
                              pg_temp.pad(ARRAY[v_ids[1]], p_pad), pg_temp.pad_tokens(ARRAY[1], p_pad), v_q, 1, 600000) d
                     WHERE d.id = v_ids[1] AND d.stale), 1::bigint,
                   'acknowledge-and-fetch of the deferred one: stale' || v_path);
    RETURN NEXT is(pg_temp.left_in(v_q), 'n1,n2,n3,n4', 'none of them completed' || v_path);

    -- a grouped queue (group_concurrency 1): each completion hands its group's turn on
    v_q := 'cb_g' || v_s;
    PERFORM pgqueue.queue_create(v_q, p_group_concurrency => 1);
    PERFORM pgqueue.message_create(v_q, convert_to(n, 'UTF8'), p_group => left(n, 2))
       FROM unnest(ARRAY['g1a', 'g2a', 'g3a', 'g1b', 'g2b', 'g3b']) AS n;
    v_ids := ARRAY(SELECT d.id FROM pgqueue.message_dequeue(v_q, 6, 600000) d ORDER BY d.id);
    RETURN NEXT is(v_ids, pg_temp.ids(v_q, ARRAY['g1a', 'g2a', 'g3a']), 'one lease a group' || v_path);
    v_got := pgqueue.message_complete_batch(pg_temp.pad(v_ids, p_pad), pg_temp.pad_tokens(ARRAY[1, 1, 1], p_pad));
    RETURN NEXT is(v_got, pg_temp.pad('{}', p_pad), 'three groups completed' || v_path);
    RETURN NEXT is((SELECT string_agg(convert_from(d.content, 'UTF8'), ',' ORDER BY d.id)
                      FROM pgqueue.message_dequeue(v_q, 6, 600000) d), 'g1b,g2b,g3b',
                   'each group''s next message has its turn' || v_path);

    -- a queue with idempotency keys: the keys are kept for the window, the stale one's not
    v_q := 'cb_k' || v_s;
    PERFORM pgqueue.queue_create(v_q, p_key_window_ms => 600000);
    PERFORM pgqueue.message_create(v_q, convert_to(n, 'UTF8'), p_key => 'key-' || n)
       FROM unnest(ARRAY['k1', 'k2', 'k3']) AS n;
    PERFORM count(*) FROM pgqueue.message_dequeue(v_q, 3, 600000);
    v_ids := pg_temp.ids(v_q, ARRAY['k1', 'k2', 'k3']);
    v_got := pgqueue.message_complete_batch(pg_temp.pad(v_ids, p_pad), pg_temp.pad_tokens(ARRAY[1, 9, 1], p_pad));
    RETURN NEXT is(v_got, pg_temp.pad(ARRAY[v_ids[2]], p_pad), 'keyed: k2''s token stale' || v_path);
    RETURN NEXT is((SELECT string_agg(k.idem_key || '=' || (k.id = v_ids[array_position(ARRAY['key-k1', 'key-k2', 'key-k3'], k.idem_key)]),
                                      ',' ORDER BY k.idem_key)
                      FROM pgqueue.message_key k JOIN pgqueue.queue q ON q.id = k.queue_id AND q.name = v_q),
                   'key-k1=true,key-k3=true', 'keyed: the completed messages'' keys kept with their ids' || v_path);

    -- acknowledge-and-fetch on a queue of group_concurrency 2: the lease taken first leaves its
    -- turn to the batch, which hands it on with the acknowledgement's
    v_q := 'cb_d' || v_s;
    PERFORM pgqueue.queue_create(v_q, p_group_concurrency => 2);
    PERFORM pgqueue.message_create(v_q, convert_to(n, 'UTF8'), p_group => 'g') FROM unnest(ARRAY['d1', 'd2', 'd3', 'd4']) AS n;
    PERFORM count(*) FROM pgqueue.message_dequeue(v_q, 1, 600000);
    v_ids := pg_temp.ids(v_q, ARRAY['d1']);
    RETURN NEXT is((SELECT string_agg(coalesce(convert_from(d.content, 'UTF8'), d.id::text) || ':' || d.stale, ',')
                      FROM pgqueue.message_complete_and_dequeue(pg_temp.pad(v_ids, p_pad),
                                                                pg_temp.pad_tokens(ARRAY[1], p_pad), v_q, 1, 600000) d),
                   CASE WHEN p_pad THEN 'd2:false,-1:true,-2:true,-3:true,-4:true,-5:true,-6:true,-7:true,-8:true,-9:true'
                        ELSE 'd2:false' END,
                   'acknowledge-and-fetch: d2 handed out, the unknown ids stale' || v_path);
    RETURN NEXT is((SELECT string_agg(encode(m.content, 'escape') || ':' || (m.turn_at IS NOT NULL) || ':'
                                      || (m.locked_until IS NOT NULL), ',' ORDER BY m.id)
                      FROM pgqueue.message m JOIN pgqueue.queue q ON q.id = m.queue_id AND q.name = v_q),
                   'd2:true:true,d3:true:false,d4:false:false',
                   'acknowledge-and-fetch: d1 gone, d2 in flight, d3 has the other turn' || v_path);
END;
$$;

SELECT * FROM pg_temp.scenarios(false);
SELECT * FROM pg_temp.scenarios(true);

-- One id, and no turns deferred by message_complete_and_dequeue: message_complete's one DELETE
CREATE FUNCTION pg_temp.one_id() RETURNS SETOF text
LANGUAGE plpgsql AS $$
DECLARE
    v_ids   bigint[];
    v_count bigint;
BEGIN
    PERFORM pgqueue.queue_create('cb_one_g', p_group_concurrency => 1);
    PERFORM pgqueue.message_create('cb_one_g', convert_to(n, 'UTF8'), p_group => left(n, 2))
       FROM unnest(ARRAY['g1a', 'g2a', 'g1b']) AS n;
    v_ids := ARRAY(SELECT d.id FROM pgqueue.message_dequeue('cb_one_g', 3, 600000) d ORDER BY d.id);
    RETURN NEXT is(v_ids, pg_temp.ids('cb_one_g', ARRAY['g1a', 'g2a']), 'one id: one lease a group');
    v_count := (SELECT completed FROM pgqueue.queue_counters('cb_one_g'));
    RETURN NEXT is(pgqueue.message_complete_batch(ARRAY[v_ids[1]], ARRAY[2]), ARRAY[v_ids[1]],
                   'one id with a stale token: it comes back');
    RETURN NEXT is(pgqueue.message_complete_batch(('[3:3]={' || v_ids[1] || '}')::bigint[], '[7:7]={1}'::integer[]),
                   '{}'::bigint[], 'one id from 3 on, its token from 7 on: completed');
    RETURN NEXT is((SELECT completed FROM pgqueue.queue_counters('cb_one_g')) - v_count, 1::bigint,
                   'one id: one completion counted');
    RETURN NEXT is((SELECT string_agg(convert_from(d.content, 'UTF8'), ',')
                      FROM pgqueue.message_dequeue('cb_one_g', 3, 600000) d), 'g1b',
                   'one id: its group''s next message has its turn');
    RETURN NEXT is(pgqueue.message_complete_batch(('[0:0]={' || v_ids[1] || '}')::bigint[], ARRAY[1]),
                   ARRAY[v_ids[1]], 'one id completed already: stale, from any lower bound');

    PERFORM pgqueue.queue_create('cb_one_k', p_key_window_ms => 600000);
    PERFORM pgqueue.message_create('cb_one_k', convert_to('k1', 'UTF8'), p_key => 'key-k1');
    PERFORM count(*) FROM pgqueue.message_dequeue('cb_one_k', 1, 600000);
    v_ids := pg_temp.ids('cb_one_k', ARRAY['k1']);
    RETURN NEXT is(pgqueue.message_complete_batch(v_ids, ARRAY[1]), '{}'::bigint[], 'one keyed id: completed');
    RETURN NEXT is((SELECT k.id FROM pgqueue.message_key k JOIN pgqueue.queue q ON q.id = k.queue_id
                     WHERE q.name = 'cb_one_k' AND k.idem_key = 'key-k1'), v_ids[1],
                   'one keyed id: its key kept with its id for the window');
    RETURN NEXT is(pg_temp.left_in('cb_one_k'), NULL, 'one keyed id: the message is gone');

    -- acknowledge-and-fetch of one id of another group, on a queue of group_concurrency 2: the
    -- lease of d1 leaves g's turn to the acknowledgement's call, which must hand it on to d2
    -- (not message_complete's path, which knows nothing of deferred turns)
    PERFORM pgqueue.queue_create('cb_one_d', p_group_concurrency => 2);
    PERFORM pgqueue.message_create('cb_one_d', convert_to(n, 'UTF8'), p_group => CASE WHEN n = 'x' THEN 'h' ELSE 'g' END)
       FROM unnest(ARRAY['x', 'd1', 'd2']) AS n;
    v_ids := ARRAY(SELECT d.id FROM pgqueue.message_dequeue('cb_one_d', 1, 600000) d);
    RETURN NEXT is((SELECT string_agg(coalesce(convert_from(d.content, 'UTF8'), d.id::text) || ':' || d.stale, ',')
                      FROM pgqueue.message_complete_and_dequeue(v_ids, ARRAY[1], 'cb_one_d', 1, 600000) d),
                   'd1:false', 'one id of another group: d1 handed out');
    RETURN NEXT is((SELECT string_agg(encode(m.content, 'escape') || ':' || (m.turn_at IS NOT NULL) || ':'
                                      || (m.locked_until IS NOT NULL), ',' ORDER BY m.id)
                      FROM pgqueue.message m JOIN pgqueue.queue q ON q.id = m.queue_id AND q.name = 'cb_one_d'),
                   'd1:true:true,d2:true:false', 'one id of another group: x gone, d2 has g''s other turn');

    -- acknowledge-and-fetch of one id, no turns deferred: message_complete_and_dequeue calls
    -- message_complete itself (not message_complete_batch): the same answers
    PERFORM pgqueue.queue_create('cb_af', p_group_concurrency => 1);
    PERFORM pgqueue.message_create('cb_af', convert_to(n, 'UTF8'), p_group => left(n, 2))
       FROM unnest(ARRAY['g1a', 'g2a', 'g1b']) AS n;
    v_ids := ARRAY(SELECT d.id FROM pgqueue.message_dequeue('cb_af', 3, 600000) d ORDER BY d.id);
    v_count := (SELECT completed FROM pgqueue.queue_counters('cb_af'));
    RETURN NEXT is((SELECT string_agg(d.id || ':' || d.attempts || ':' || d.stale || ':' || (d.content IS NULL), ',')
                      FROM pgqueue.message_complete_and_dequeue(ARRAY[v_ids[1]], ARRAY[2], 'cb_af', 1, 600000) d),
                   v_ids[1] || ':2:true:true', 'acknowledge-and-fetch of one id, stale: its row, the token given');
    RETURN NEXT is(pg_temp.left_in('cb_af'), 'g1a,g2a,g1b', 'acknowledge-and-fetch of one id, stale: nothing changed');
    -- g1a completed from lower bounds 3 and 7: g1's turn passes to g1b, which the call's
    -- further take hands out
    RETURN NEXT is((SELECT string_agg(convert_from(d.content, 'UTF8') || ':' || d.stale, ',')
                      FROM pgqueue.message_complete_and_dequeue(('[3:3]={' || v_ids[1] || '}')::bigint[],
                                                                '[7:7]={1}'::integer[], 'cb_af', 1, 600000) d),
                   'g1b:false', 'acknowledge-and-fetch of one id from 3 on: g1b handed out after the turn it gave');
    RETURN NEXT is(pg_temp.left_in('cb_af'), 'g2a,g1b', 'acknowledge-and-fetch of one id: g1a gone');
    RETURN NEXT is((SELECT completed FROM pgqueue.queue_counters('cb_af')) - v_count, 1::bigint,
                   'acknowledge-and-fetch of one id: one completion counted');
    RETURN NEXT is(current_setting('pgqueue.ack_call'), '', 'acknowledge-and-fetch: its setting cleared after the call');
    PERFORM pgqueue.queue_create('cb_af_k', p_key_window_ms => 600000);
    PERFORM pgqueue.message_create('cb_af_k', convert_to('k1', 'UTF8'), p_key => 'key-k1');
    PERFORM count(*) FROM pgqueue.message_dequeue('cb_af_k', 1, 600000);
    v_ids := pg_temp.ids('cb_af_k', ARRAY['k1']);
    RETURN NEXT is((SELECT count(*) FROM pgqueue.message_complete_and_dequeue(v_ids, ARRAY[1], 'cb_af_k', 1, 600000)),
                   0::bigint, 'acknowledge-and-fetch of one keyed id: nothing stale, nothing left to hand out');
    RETURN NEXT is((SELECT k.id FROM pgqueue.message_key k JOIN pgqueue.queue q ON q.id = k.queue_id
                     WHERE q.name = 'cb_af_k' AND k.idem_key = 'key-k1'), v_ids[1],
                   'acknowledge-and-fetch of one keyed id: its key kept with its id');
END;
$$;
SELECT * FROM pg_temp.one_id();

SELECT * FROM finish();
ROLLBACK;
