CREATE FUNCTION ctxwin.context_status(
    session uuid,
    OUT session_id uuid,
    OUT profile text,
    OUT model text,
    OUT encoding text,
    OUT context_window int,
    OUT budget int,
    OUT message_count bigint,
    OUT summary_through_id bigint,
    OUT messages_since_summary bigint,
    OUT tokens_since_summary bigint,
    OUT max_messages_before_summary int,
    OUT messages_pct numeric,
    OUT max_tokens_before_summary int,
    OUT tokens_pct numeric,
    OUT trigger_ratio real,
    OUT context_tokens bigint,
    OUT context_pct numeric,
    OUT ratio_pct numeric,
    OUT will_trigger boolean,
    OUT triggers_firing text[],
    OUT summary_version int,
    OUT summary_tokens int,
    OUT summary_updated_at timestamptz,
    OUT summary_age interval,
    OUT window_messages bigint,
    OUT window_tokens int,
    OUT dropped_messages bigint,
    OUT queued_at timestamptz,
    OUT compaction_failures int,
    OUT last_error text,
    OUT last_error_at timestamptz,
    OUT note text,
    OUT budget_margin real)
AS 'MODULE_PATHNAME', 'ctxwin_context_status'
LANGUAGE C STABLE
SET search_path = pg_catalog, pg_temp;

COMMENT ON FUNCTION ctxwin.context_status(uuid) IS
'Where a session stands: messages and tokens since the summary against each trigger, will_trigger, summary, window, dropped messages, the last compaction error and the budget margin of its model';

CREATE FUNCTION ctxwin._progress_bar(pct numeric, width int DEFAULT 24)
RETURNS text
LANGUAGE sql IMMUTABLE PARALLEL SAFE
SET search_path = pg_catalog, pg_temp
RETURN '[' || repeat('#', least(greatest(round(coalesce(pct, 0::numeric) * width::numeric / 100::numeric), 0), width)::int)
    || repeat('.', width - least(greatest(round(coalesce(pct, 0::numeric) * width::numeric / 100::numeric), 0), width)::int) || ']';

COMMENT ON FUNCTION ctxwin._progress_bar(numeric, int) IS 'A text progress bar for a percentage';

CREATE FUNCTION ctxwin.context_report(session uuid)
RETURNS text
LANGUAGE plpgsql STABLE SET search_path = pg_catalog, pg_temp AS $$
DECLARE
    c record;
    lines text[];
BEGIN
    SELECT * INTO c FROM ctxwin.context_status(session);
    lines := ARRAY[
        format('Session %s: profile %s, model %s (%s), window %s tokens',
               c.session_id, c.profile, c.model, c.encoding, to_char(c.context_window, 'FM999,999,999')),
        CASE WHEN c.trigger_ratio IS NULL
             THEN format('  context   %s %6s%%  %s of %s tokens; ratio trigger off',
                         ctxwin._progress_bar(c.context_pct), c.context_pct, to_char(c.context_tokens, 'FM999,999,999'),
                         to_char(c.context_window, 'FM999,999,999'))
             ELSE format('  context   %s %6s%%  %s of %s tokens; summary at %s%%',
                         ctxwin._progress_bar(c.context_pct), c.context_pct, to_char(c.context_tokens, 'FM999,999,999'),
                         to_char(c.context_window, 'FM999,999,999'), round(c.trigger_ratio::numeric * 100::numeric)) END,
        CASE WHEN c.max_messages_before_summary IS NULL THEN '  messages  trigger off'
             ELSE format('  messages  %s %6s%%  %s since the summary; summary at %s',
                         ctxwin._progress_bar(c.messages_pct), c.messages_pct, c.messages_since_summary,
                         c.max_messages_before_summary) END,
        CASE WHEN c.max_tokens_before_summary IS NULL THEN '  tokens    trigger off'
             ELSE format('  tokens    %s %6s%%  %s since the summary; summary at %s',
                         ctxwin._progress_bar(c.tokens_pct), c.tokens_pct, to_char(c.tokens_since_summary, 'FM999,999,999'),
                         to_char(c.max_tokens_before_summary, 'FM999,999,999')) END,
        CASE WHEN c.summary_version = 0 OR (c.summary_through_id = 0 AND c.summary_tokens = 0) THEN '  summary   none yet'
             ELSE format('  summary   version %s, %s tokens, covers messages 1-%s, updated %s ago',
                         c.summary_version, c.summary_tokens, c.summary_through_id,
                         CASE WHEN c.summary_age < interval '1 minute' THEN extract(epoch FROM c.summary_age)::int || ' s'
                              WHEN c.summary_age < interval '1 hour' THEN extract(epoch FROM c.summary_age)::int / 60 || ' min'
                              WHEN c.summary_age < interval '2 days' THEN extract(epoch FROM c.summary_age)::int / 3600 || ' h'
                              ELSE extract(epoch FROM c.summary_age)::int / 86400 || ' days' END) END,
        format('  window    %s messages, %s tokens of a %s-token budget%s; %s dropped',
               coalesce(c.window_messages, 0), to_char(coalesce(c.window_tokens, 0), 'FM999,999,999'),
               to_char(c.budget, 'FM999,999,999'),
               CASE WHEN c.budget_margin > 1::real
                    THEN format(' (provider margin %s)', round(c.budget_margin::numeric, 2)) ELSE '' END,
               coalesce(c.dropped_messages, 0)),
        format('  compaction %s%s',
               CASE WHEN c.will_trigger THEN 'due (' || array_to_string(c.triggers_firing, ', ') || ')'
                    ELSE 'not due' END,
               CASE WHEN c.queued_at IS NOT NULL THEN ', queued since ' || to_char(c.queued_at, 'YYYY-MM-DD HH24:MI:SS')
                    ELSE '' END),
        CASE WHEN c.last_error IS NOT NULL
             THEN format('  last error (%s failures): %s', c.compaction_failures, c.last_error) END,
        CASE WHEN c.note IS NOT NULL THEN '  note: ' || c.note END];
    RETURN array_to_string(lines, E'\n');
END $$;

COMMENT ON FUNCTION ctxwin.context_report(uuid) IS
'context_status as text for a person in psql, with progress bars';

