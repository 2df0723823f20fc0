$pgqueue_script$;
    PERFORM pg_catalog.set_config('search_path', v_path, true);
    PERFORM pg_catalog.set_config('pgqueue.plain_script', COALESCE(v_mark, ''), true);
EXCEPTION WHEN OTHERS OR query_canceled THEN
    -- the error as it came, without the context of the EXECUTE (which quotes the whole script;
    -- query_canceled, which OTHERS leaves out, too: a statement_timeout or a Ctrl-C)
    GET STACKED DIAGNOSTICS v_state = RETURNED_SQLSTATE, v_text = MESSAGE_TEXT,
                            v_detail = PG_EXCEPTION_DETAIL, v_hint = PG_EXCEPTION_HINT;
    IF v_detail OPERATOR(pg_catalog.<>) '' AND v_hint OPERATOR(pg_catalog.<>) '' THEN
        RAISE EXCEPTION USING ERRCODE = v_state, MESSAGE = v_text, DETAIL = v_detail, HINT = v_hint;
    ELSIF v_detail OPERATOR(pg_catalog.<>) '' THEN
        RAISE EXCEPTION USING ERRCODE = v_state, MESSAGE = v_text, DETAIL = v_detail;
    ELSIF v_hint OPERATOR(pg_catalog.<>) '' THEN
        RAISE EXCEPTION USING ERRCODE = v_state, MESSAGE = v_text, HINT = v_hint;
    ELSE
        RAISE EXCEPTION USING ERRCODE = v_state, MESSAGE = v_text;
    END IF;
END
$pgqueue_plain$;
