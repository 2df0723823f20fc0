-- Seed 000: reader.sql (delete based on select for update skip locked).
DELETE
FROM seed000.queue pse
WHERE pse.element_identifier =
    (SELECT pse_inner.element_identifier
    FROM seed000.queue pse_inner
    ORDER BY pse_inner.time_inserted ASC
        FOR UPDATE SKIP LOCKED
    LIMIT 1)
RETURNING pse.element_identifier, pse.time_inserted, pse.payload;
