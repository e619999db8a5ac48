------------------------------------------------------------------------------
-- Scaling out on Citus
--
-- ctxwin.distribute() turns the tables of a Citus coordinator's ctxwin into
-- Citus tables: sessions and the tables of each session's rows (messages,
-- summaries, flush_events, usage_log, summary_jobs) distributed by session id and
-- co-located, so a session and all its rows live on one node; models,
-- profiles and calibration reference tables, copied to every node.  The
-- functions that take one session are delegated to the node that holds it.
--
-- The foreign keys are dropped and added back around the conversion: with
-- them in place Citus would first turn the tables into Citus local tables,
-- which drops and recreates the views on them, and the extension's views
-- cannot be dropped.  The worker nodes' copies of ctxwin's tables (each
-- node has the extension) hold the same keys and lose them first, or Citus
-- could not add them back there.
------------------------------------------------------------------------------

-- The conversion itself, without Citus's notices of each table copied.
CREATE FUNCTION ctxwin._distribute(shard_count int)
RETURNS void
LANGUAGE plpgsql VOLATILE
SET search_path = pg_catalog, pg_temp
SET client_min_messages = warning AS $$
DECLARE
    -- (table, constraint, definition): every foreign key between ctxwin's tables
    fkeys CONSTANT text[][] := ARRAY[
        ['ctxwin.profiles', 'profiles_model_fkey',
         'FOREIGN KEY (model) REFERENCES ctxwin.models (name) ON UPDATE CASCADE'],
        ['ctxwin.calibration', 'calibration_model_fkey',
         'FOREIGN KEY (model) REFERENCES ctxwin.models (name) ON UPDATE CASCADE ON DELETE CASCADE'],
        ['ctxwin.sessions', 'sessions_profile_fkey',
         'FOREIGN KEY (profile) REFERENCES ctxwin.profiles (name) ON UPDATE CASCADE'],
        ['ctxwin.messages', 'messages_session_id_fkey',
         'FOREIGN KEY (session_id) REFERENCES ctxwin.sessions (id) ON DELETE CASCADE'],
        ['ctxwin.summaries', 'summaries_session_id_fkey',
         'FOREIGN KEY (session_id) REFERENCES ctxwin.sessions (id) ON DELETE CASCADE'],
        ['ctxwin.flush_events', 'flush_events_session_id_fkey',
         'FOREIGN KEY (session_id) REFERENCES ctxwin.sessions (id) ON DELETE CASCADE'],
        ['ctxwin.usage_log', 'usage_log_session_id_fkey',
         'FOREIGN KEY (session_id) REFERENCES ctxwin.sessions (id) ON DELETE CASCADE'],
        ['ctxwin.summary_jobs', 'summary_jobs_session_id_fkey',
         'FOREIGN KEY (session_id) REFERENCES ctxwin.sessions (id) ON DELETE CASCADE']];
    drops text := '';
    failed text;
    i int;
    t text;
    f regprocedure;
BEGIN
    -- Citus creates the tables' triggers on their shards only with this on:
    -- ctxwin's insert trigger numbers and counts a message on the shard
    -- that holds its session (co-located with the session's row).
    PERFORM set_config('citus.enable_unsafe_triggers', 'on', true);
    -- reference tables are written after distributed ones in this transaction
    PERFORM set_config('citus.multi_shard_modify_mode', 'sequential', true);

    FOR i IN 1 .. array_length(fkeys, 1) LOOP
        drops := drops || format('ALTER TABLE %s DROP CONSTRAINT IF EXISTS %I; ',
                                 fkeys[i][1], fkeys[i][2]);
    END LOOP;
    SELECT string_agg(format('%s:%s: %s', w.nodename, w.nodeport, w.result), '; ')
    INTO failed
    FROM run_command_on_workers(drops) w
    WHERE NOT w.success;
    IF failed IS NOT NULL THEN
        RAISE EXCEPTION 'could not prepare the worker nodes'' copies of ctxwin''s tables'
            USING ERRCODE = 'object_not_in_prerequisite_state',
                  DETAIL = 'Dropping their foreign keys failed: ' || failed || '.',
                  HINT = 'Make every worker node reachable, then run ctxwin.distribute() again.';
    END IF;
    EXECUTE drops;

    PERFORM create_reference_table('ctxwin.models');
    PERFORM create_reference_table('ctxwin.profiles');
    PERFORM create_reference_table('ctxwin.calibration');
    PERFORM create_distributed_table('ctxwin.sessions', 'id', shard_count => shard_count);
    FOREACH t IN ARRAY ARRAY['ctxwin.messages', 'ctxwin.summaries', 'ctxwin.flush_events',
                             'ctxwin.usage_log', 'ctxwin.summary_jobs'] LOOP
        PERFORM create_distributed_table(t::regclass, 'session_id', colocate_with => 'ctxwin.sessions');
    END LOOP;

    FOR i IN 1 .. array_length(fkeys, 1) LOOP
        EXECUTE format('ALTER TABLE %s ADD CONSTRAINT %I %s', fkeys[i][1], fkeys[i][2], fkeys[i][3]);
    END LOOP;

    -- the coordinator's own copies of the rows, now in the shards
    FOREACH t IN ARRAY ARRAY['ctxwin.summary_jobs', 'ctxwin.usage_log', 'ctxwin.flush_events', 'ctxwin.summaries',
                             'ctxwin.messages', 'ctxwin.sessions', 'ctxwin.calibration',
                             'ctxwin.profiles', 'ctxwin.models'] LOOP
        PERFORM truncate_local_data_after_distributing_table(t::regclass);
    END LOOP;

    -- one call, one round trip to the node that holds the session.  Not
    -- the summary jobs: claim_summary and claim_next_summary take the
    -- session's claim, which lives on the coordinator with the worker's,
    -- and complete_summary and fail_summary take a token, not a session.
    FOREACH f IN ARRAY ARRAY['ctxwin.build_context(uuid,integer,text,jsonb,boolean)',
                             'ctxwin.build_window(uuid,integer,text,jsonb,boolean)',
                             'ctxwin.build_request(uuid,integer,text,jsonb,boolean,boolean)',
                             'ctxwin.context_status(uuid)',
                             'ctxwin.context_report(uuid)',
                             'ctxwin.messages_after(uuid,bigint)',
                             'ctxwin.search(uuid,text,text[],timestamp with time zone,timestamp with time zone,integer)',
                             'ctxwin.answer_tool_call(uuid,jsonb)',
                             'ctxwin.retract(uuid,bigint)']::regprocedure[] LOOP
        PERFORM create_distributed_function(f, 'session', colocate_with => 'ctxwin.sessions');
    END LOOP;
END $$;

COMMENT ON FUNCTION ctxwin._distribute(int) IS
'The conversion of ctxwin.distribute(): foreign keys dropped, tables made Citus tables, foreign keys added back, functions delegated';

REVOKE ALL ON FUNCTION ctxwin._distribute(int) FROM PUBLIC;

CREATE FUNCTION ctxwin.distribute(shard_count int DEFAULT NULL)
RETURNS void
LANGUAGE plpgsql VOLATILE
SET search_path = pg_catalog, pg_temp AS $$
BEGIN
    IF NOT EXISTS (SELECT FROM pg_extension WHERE extname = 'citus') THEN
        RAISE EXCEPTION 'ctxwin.distribute() needs the citus extension'
            USING ERRCODE = 'feature_not_supported',
                  DETAIL = 'The extension citus is not installed in this database.',
                  HINT = 'On a Citus coordinator, run CREATE EXTENSION citus and add the worker nodes first.';
    END IF;
    IF NOT citus_is_coordinator() THEN
        RAISE EXCEPTION 'ctxwin.distribute() must run on the Citus coordinator'
            USING ERRCODE = 'feature_not_supported',
                  HINT = 'Connect to the coordinator, or add this node as the coordinator with citus_set_coordinator_host().';
    END IF;
    IF EXISTS (SELECT FROM pg_dist_partition WHERE logicalrelid = 'ctxwin.sessions'::regclass) THEN
        RAISE NOTICE 'ctxwin is distributed already';
        RETURN;
    END IF;
    IF NOT EXISTS (SELECT FROM pg_dist_node WHERE noderole = 'primary' AND groupid <> 0) THEN
        RAISE EXCEPTION 'the Citus cluster has no worker nodes'
            USING ERRCODE = 'feature_not_supported',
                  HINT = 'Add them with citus_add_node() first.';
    END IF;
    IF shard_count IS NOT NULL AND shard_count < 1 THEN
        RAISE EXCEPTION 'shard_count must be at least 1'
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    PERFORM ctxwin._distribute(shard_count);
END $$;

COMMENT ON FUNCTION ctxwin.distribute(int) IS
'On a Citus coordinator: distributes ctxwin''s tables by session (models, profiles and calibration as reference tables) and delegates the functions that take a session to the node that holds it';

REVOKE ALL ON FUNCTION ctxwin.distribute(int) FROM PUBLIC;
