-- Plants hostile operators and functions in schema :"schema" for every
-- operator name and built-in function name the ctxwin install script uses,
-- over the argument types it uses.  Each one records its call in
-- public.pwned and returns NULL.  An object whose exact signature already
-- exists in that schema is skipped.  Run by test/hostile.pl.
-- the planting itself must not run what it plants
SET search_path = pg_catalog, pg_temp;
CREATE TABLE IF NOT EXISTS public.pwned (what text, at timestamptz DEFAULT clock_timestamp());
GRANT INSERT, SELECT ON public.pwned TO PUBLIC;
CREATE OR REPLACE FUNCTION public.pwn(what text) RETURNS void
LANGUAGE plpgsql SECURITY INVOKER AS $$
BEGIN
    INSERT INTO public.pwned (what) VALUES (what);
    RAISE WARNING 'hostile object ran: %', what;
END $$;
GRANT EXECUTE ON FUNCTION public.pwn(text) TO PUBLIC;

SET client_min_messages = warning;
SELECT set_config('plant.schema', :'schema', false),
       set_config('plant.full', :'full', false);
DO $plant$
DECLARE
    nsp text := current_setting('plant.schema');
    everything boolean := current_setting('plant.full')::boolean;
    types text[];
    types3 text[] := ARRAY['integer', 'bigint', 'text', 'jsonb'];
    ops text[] := ARRAY['+', '-', '*', '/', '%', '^', '=', '<>', '<', '>', '<=', '>=', '||',
                        '->', '->>', '#>', '#>>', '@>', '<@', '?', '~', '~~', '~*', '!~'];
    funcs text[];
    l text; r text; t3 text; o text; f text; fn text; n int := 0;
BEGIN
    IF everything THEN
        types := ARRAY['smallint', 'integer', 'bigint', 'real', 'double precision', 'numeric',
                       'text', 'jsonb', 'uuid', 'timestamptz', 'boolean', 'interval'];
        funcs := ARRAY['array_agg', 'array_remove', 'array_to_string', 'btrim', 'cardinality',
            'clock_timestamp', 'concat_ws', 'current_setting', 'format', 'gen_random_uuid',
            'generate_subscripts', 'hashtext', 'json_build_object', 'jsonb_agg',
            'jsonb_array_elements', 'jsonb_array_elements_text', 'jsonb_array_length',
            'jsonb_build_array', 'jsonb_build_object', 'jsonb_set', 'jsonb_typeof', 'left',
            'length', 'lower', 'max', 'min', 'now', 'pg_notify', 'pg_sleep',
            'pg_try_advisory_xact_lock', 'pg_advisory_xact_lock', 'power', 'regexp_matches',
            'regexp_replace', 'regexp_split_to_table', 'repeat', 'round', 'string_agg', 'substr',
            'sum', 'to_char', 'to_jsonb', 'unnest', 'upper', 'right', 'position', 'strpos',
            'char_length', 'octet_length', 'ceil', 'floor', 'abs', 'trunc', 'div', 'mod', 'sqrt',
            'exp', 'ln', 'log', 'make_interval', 'to_timestamp', 'date_part', 'jsonb_object_keys',
            'jsonb_strip_nulls', 'jsonb_path_query', 'array_length', 'array_position', 'encode',
            'decode', 'md5', 'split_part', 'replace', 'translate', 'lpad', 'rpad', 'reverse',
            'starts_with', 'count', 'avg', 'bool_or', 'bool_and', 'every', 'percentile_cont',
            'uuid_eq', 'texteq', 'int8pl', 'timestamptz_pl_interval', 'set_config',
            'pg_backend_pid', 'txid_current', 'pg_current_xact_id', 'statement_timestamp',
            'transaction_timestamp', 'to_json', 'row_to_json', 'quote_literal', 'quote_ident'];
    ELSE
        -- exactness: only where pg_catalog has no exact match (CREATE skips
        -- duplicates), for the numeric mixes an expression like real * int makes
        types := ARRAY['smallint', 'integer', 'bigint', 'real', 'double precision', 'numeric'];
        ops := ARRAY['+', '-', '*', '/', '%', '^', '=', '<>', '<', '>', '<=', '>='];
        funcs := ARRAY['power', 'round', 'ceil', 'floor', 'abs', 'trunc', 'div', 'mod', 'sqrt',
                       'exp', 'ln', 'log', 'left', 'right', 'repeat', 'substr', 'lpad', 'rpad',
                       'make_interval', 'to_timestamp', 'pg_sleep', 'length', 'to_char'];
    END IF;
    FOREACH l IN ARRAY types LOOP
        FOREACH r IN ARRAY types LOOP
            fn := format('%I.pwn_op_%s_%s', nsp, replace(l, ' ', '_'), replace(r, ' ', '_'));
            EXECUTE format('CREATE FUNCTION %s(%s, %s) RETURNS boolean LANGUAGE plpgsql AS $f$ BEGIN PERFORM public.pwn(%L); RETURN NULL; END $f$',
                           fn, l, r, format('operator (%s, %s)', l, r));
            FOREACH o IN ARRAY ops LOOP
                BEGIN
                    EXECUTE format('CREATE OPERATOR %I.%s (LEFTARG = %s, RIGHTARG = %s, FUNCTION = %s)',
                                   nsp, o, l, r, fn);
                    n := n + 1;
                EXCEPTION WHEN duplicate_function OR duplicate_object THEN NULL;
                END;
            END LOOP;
        END LOOP;
        fn := format('%I.pwn_prefix_%s', nsp, replace(l, ' ', '_'));
        EXECUTE format('CREATE FUNCTION %s(%s) RETURNS boolean LANGUAGE plpgsql AS $f$ BEGIN PERFORM public.pwn(%L); RETURN NULL; END $f$',
                       fn, l, format('prefix operator (%s)', l));
        FOREACH o IN ARRAY ARRAY['-', '+', '~', '@'] LOOP
            BEGIN
                EXECUTE format('CREATE OPERATOR %I.%s (RIGHTARG = %s, FUNCTION = %s)', nsp, o, l, fn);
                n := n + 1;
            EXCEPTION WHEN duplicate_function OR duplicate_object THEN NULL;
            END;
        END LOOP;
    END LOOP;
    FOREACH f IN ARRAY funcs LOOP
        FOREACH l IN ARRAY types LOOP
            BEGIN
                EXECUTE format('CREATE FUNCTION %I.%I(%s) RETURNS text LANGUAGE plpgsql AS $f$ BEGIN PERFORM public.pwn(%L); RETURN NULL; END $f$',
                               nsp, f, l, format('%s(%s)', f, l));
                n := n + 1;
            EXCEPTION WHEN duplicate_function THEN NULL;
            END;
            FOREACH r IN ARRAY types LOOP
                BEGIN
                    EXECUTE format('CREATE FUNCTION %I.%I(%s, %s) RETURNS text LANGUAGE plpgsql AS $f$ BEGIN PERFORM public.pwn(%L); RETURN NULL; END $f$',
                                   nsp, f, l, r, format('%s(%s, %s)', f, l, r));
                    n := n + 1;
                EXCEPTION WHEN duplicate_function THEN NULL;
                END;
                IF everything AND l = ANY (types3) AND r = ANY (types3) THEN
                    FOREACH t3 IN ARRAY types3 LOOP
                        BEGIN
                            EXECUTE format('CREATE FUNCTION %I.%I(%s, %s, %s) RETURNS text LANGUAGE plpgsql AS $f$ BEGIN PERFORM public.pwn(%L); RETURN NULL; END $f$',
                                           nsp, f, l, r, t3, format('%s(%s, %s, %s)', f, l, r, t3));
                            n := n + 1;
                        EXCEPTION WHEN duplicate_function THEN NULL;
                        END;
                    END LOOP;
                END IF;
            END LOOP;
        END LOOP;
    END LOOP;
    RAISE NOTICE 'planted % objects in %', n, nsp;
    PERFORM set_config('plant.count', n::text, false);
END $plant$;
SELECT current_setting('plant.count') AS planted;
