# Concurrent inserts into shared sessions, with summaries written and the
# window read at the same time, from several connections (pgbench):
#  - the ids of a session are 1, 2, 3 ... in commit order: every snapshot
#    sees exactly ids 1..message_count, never a hole where a later id
#    committed before an earlier one; a rolled-back insert leaves no gap;
#    the messages of one transaction (a tool call group) and of one
#    multi-row INSERT ... SELECT get consecutive ids;
#  - the session counters (message_count, token_count, unsummarized_*) stay
#    equal to what the messages say, in every snapshot and at the end;
#  - invariant 2, "nothing skipped": with a budget that allows it,
#    build_context returns exactly the messages after summary_through_id,
#    in order, in every snapshot, while summaries move forward concurrently;
#  - the summary point only moves forward and never ends inside a tool call
#    group, also when the UPDATE is re-evaluated on a concurrently changed row.
# Then, step by step: an insert waits for an uncommitted insert into the same
# session (and not for one into another session), also when both are
# statements of several messages, and a rolled-back insert hands its id to
# the next one.
# A cluster of its own; pgbench is the server's own (its bin directory), and
# the step-by-step checks hold a transaction open in one psql while others
# act, waiting on conditions (a backend waiting on a lock), never on time.
use strict;
use warnings;
use FindBin;
use lib "$FindBin::RealBin/lib";
use CtxwinTest;
use IPC::Run;
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;

plan tests => 31;

my $node = ctxwin_node('concurrency');
my $db = 'ctxwin_concurrency';
my $tmp = PostgreSQL::Test::Utils::tempdir('concurrency');
sql_do($node, 'postgres', "CREATE DATABASE $db");

# sq(SQL): its output in $db, errors included
sub sq { return scalar sql($node, $db, @_); }

# show(SQL): each line SQL prints, as a diagnostic
sub show { diag("  $_") for grep { $_ ne '' } split /\n/, sq(@_); }

sql_do($node, $db, <<'SQL');
CREATE EXTENSION ctxwin;

-- four shared sessions with fixed ids, so the pgbench scripts can name them
CREATE FUNCTION sess(i int) RETURNS uuid LANGUAGE sql IMMUTABLE
RETURN ('00000000-0000-4000-8000-' || lpad(i::text, 12, '0'))::uuid;
INSERT INTO ctxwin.sessions (id, system_prompt)
SELECT sess(i), 'You are the support agent of shop ' || i FROM generate_series(1, 4) i;
-- two more for the deterministic lock-order checks at the end
INSERT INTO ctxwin.sessions (id) VALUES (sess(5)), (sess(6));

-- what a concurrent check saw go wrong
CREATE TABLE violations (kind text, detail text, at timestamptz DEFAULT clock_timestamp());

-- A compaction as an app or a worker would write it: lock the session, pick
-- a point that keeps the newest two messages and does not end inside a tool
-- call group, move the summary there and record the summary and flush rows.
-- On the way, check that the guard refuses a point inside a tool call group
-- and a point behind the current one.
CREATE FUNCTION summarize_locked(sid uuid) RETURNS void LANGUAGE plpgsql AS $$
DECLARE
    s ctxwin.sessions;
    target bigint;
    bad bigint;
    v int;
    txt text;
BEGIN
    SELECT * INTO s FROM ctxwin.sessions WHERE id = sid FOR UPDATE;
    SELECT max(m.id) INTO target FROM ctxwin.messages m
    WHERE m.session_id = sid AND m.id > s.summary_through_id AND m.id <= s.message_count - 2
      AND NOT EXISTS (SELECT 1 FROM ctxwin.messages n
                      WHERE n.session_id = sid AND n.id = m.id + 1 AND n.role = 'tool');
    IF target IS NULL THEN
        RETURN;
    END IF;

    -- an assistant message with tool calls: its results follow it
    SELECT min(m.id) INTO bad FROM ctxwin.messages m
    WHERE m.session_id = sid AND m.id > s.summary_through_id AND m.tool_calls IS NOT NULL;
    IF bad IS NOT NULL THEN
        BEGIN
            UPDATE ctxwin.sessions SET summary_through_id = bad WHERE id = sid;
            INSERT INTO violations (kind, detail)
            VALUES ('guard', format('%s: summary_through_id %s inside a tool call group was accepted', sid, bad));
        EXCEPTION WHEN check_violation THEN
            IF SQLERRM NOT LIKE '%would end inside a tool call group%' THEN
                INSERT INTO violations (kind, detail) VALUES ('guard', SQLERRM);
            END IF;
        END;
    END IF;
    IF s.summary_through_id > 0 THEN
        BEGIN
            UPDATE ctxwin.sessions SET summary_through_id = s.summary_through_id - 1 WHERE id = sid;
            INSERT INTO violations (kind, detail)
            VALUES ('guard', format('%s: summary_through_id moved back to %s', sid, s.summary_through_id - 1));
        EXCEPTION WHEN check_violation THEN
            IF SQLERRM NOT LIKE '%cannot move back%' THEN
                INSERT INTO violations (kind, detail) VALUES ('guard', SQLERRM);
            END IF;
        END;
    END IF;

    txt := format('Summary of %s messages of %s (locked)', target, sid);
    UPDATE ctxwin.sessions SET conversation_summary = txt, summary_through_id = target
    WHERE id = sid RETURNING summary_version INTO v;
    INSERT INTO ctxwin.summaries (session_id, version, from_id, through_id, content, token_count, strategy)
    VALUES (sid, v, s.summary_through_id + 1, target, txt, ctxwin.count_tokens(txt, 'o200k_base'), 'extractive');
    INSERT INTO ctxwin.flush_events (session_id, id, from_id, through_id)
    VALUES (sid, v, s.summary_through_id + 1, target);
END $$;

-- A compaction that does not lock first: the UPDATE computes the point from
-- the row it updates, so when an insert commits in between, PostgreSQL
-- re-evaluates it on the new row version and the session trigger must judge
-- (and count) against that version.  A point inside a tool call group is
-- refused; anything else that fails is a violation.
CREATE FUNCTION summarize_blind(sid uuid) RETURNS void LANGUAGE plpgsql AS $$
DECLARE
    v int;
    t bigint;
    prev bigint;
BEGIN
    BEGIN
        UPDATE ctxwin.sessions
        SET conversation_summary = format('Summary of %s messages of %s (blind)', message_count - 3, id),
            summary_through_id = message_count - 3
        WHERE id = sid AND message_count - 3 > summary_through_id
        RETURNING summary_version, summary_through_id INTO v, t;
    EXCEPTION WHEN check_violation THEN
        IF SQLERRM NOT LIKE '%would end inside a tool call group%' THEN
            INSERT INTO violations (kind, detail) VALUES ('blind', SQLERRM);
        END IF;
        RETURN;
    END;
    IF v IS NULL THEN
        RETURN;
    END IF;
    -- the row lock is ours now: every summary so far is committed
    SELECT coalesce(max(through_id), 0) INTO prev FROM ctxwin.summaries WHERE session_id = sid;
    IF EXISTS (SELECT 1 FROM ctxwin.messages WHERE session_id = sid AND id = t + 1 AND role = 'tool') THEN
        INSERT INTO violations (kind, detail)
        VALUES ('blind', format('%s: summary_through_id %s was accepted before a tool result', sid, t));
    END IF;
    INSERT INTO ctxwin.summaries (session_id, version, from_id, through_id, content, token_count, strategy)
    SELECT sid, v, prev + 1, t, conversation_summary, summary_tokens, 'extractive'
    FROM ctxwin.sessions WHERE id = sid;
    INSERT INTO ctxwin.flush_events (session_id, id, from_id, through_id) VALUES (sid, v, prev + 1, t);
END $$;

-- The message as build_context writes it in OpenAI form.
CREATE FUNCTION as_openai(m ctxwin.messages) RETURNS jsonb LANGUAGE sql IMMUTABLE
RETURN jsonb_strip_nulls(jsonb_build_object('role', m.role, 'content', m.content, 'name', m.name,
                                            'tool_calls', m.tool_calls, 'tool_call_id', m.tool_call_id));

-- The window's conversation (after the system messages) against the
-- messages after the summary point: equal unless something was skipped.
CREATE FUNCTION window_mismatch(s ctxwin.sessions) RETURNS boolean LANGUAGE sql STABLE
RETURN (SELECT coalesce(jsonb_agg(x ORDER BY o), '[]')
        FROM jsonb_array_elements(ctxwin.build_context(s.id, 10000000)) WITH ORDINALITY e(x, o)
        WHERE x ->> 'role' <> 'system')
   IS DISTINCT FROM
       (SELECT coalesce(jsonb_agg(as_openai(m) ORDER BY m.id), '[]')
        FROM ctxwin.messages m WHERE m.session_id = s.id AND m.id > s.summary_through_id);
SQL

# script(NAME, TEXT): a pgbench script in the temporary directory
sub script
{
	my ($name, $text) = @_;
	append_to_file("$tmp/$name", $text);
	return;
}

# pgbench scripts.  :seq counts the messages each client inserts (pgbench
# variables live per client across its transactions), so each client's
# messages can be checked against the order it committed them in.
script('insert.sql', <<'EOF');
\set sid random(1, 4)
\set n random(0, 40)
\set seq :seq + 1
INSERT INTO ctxwin.messages (session_id, role, content, name, metadata)
VALUES (sess(:sid), CASE WHEN :seq % 2 = 0 THEN 'assistant' ELSE 'user' END,
        format('client %s message %s: %s%s', :client_id, :seq,
               repeat(CASE :n % 3 WHEN 0 THEN 'lorem ipsum ' WHEN 1 THEN 'Grüße, naïve café ✓ ' ELSE '日本語のテキスト ' END, :n),
               CASE WHEN :n = 7 THEN E'\n```sql\nSELECT 1;\n```' ELSE '' END),
        CASE WHEN :n % 5 = 0 THEN 'customer_' || :client_id END,
        jsonb_build_object('client', :client_id, 'seq', :seq));
EOF
# 2 to 8 messages in one INSERT ... SELECT (the counters are kept in memory
# for the statement and written at its end)
script('insertmany.sql', <<'EOF');
\set sid random(1, 4)
\set k random(2, 8)
\set b :seq + 1
INSERT INTO ctxwin.messages (session_id, role, content, metadata)
SELECT sess(:sid), CASE WHEN (:seq + i) % 2 = 0 THEN 'assistant' ELSE 'user' END,
       format('client %s batch %s message %s: %s', :client_id, :b, :seq + i, repeat('lorem ipsum ', i)),
       jsonb_build_object('client', :client_id, 'seq', :seq + i, 'batch', :b)
FROM generate_series(1, :k) i;
\set seq :seq + :k
EOF
# an assistant message with two tool calls and both results, one transaction
script('toolgroup.sql', <<'EOF');
\set sid random(1, 4)
\set seq :seq + 1
\set g :seq
BEGIN;
INSERT INTO ctxwin.messages (session_id, role, content, tool_calls, metadata)
VALUES (sess(:sid), 'assistant', CASE WHEN :g % 2 = 0 THEN 'Let me check.' END,
        jsonb_build_array(
          jsonb_build_object('id', format('call_%s_%s_a', :client_id, :g), 'type', 'function',
            'function', jsonb_build_object('name', 'get_order', 'arguments', format('{"order": %s}', :g))),
          jsonb_build_object('id', format('call_%s_%s_b', :client_id, :g), 'type', 'function',
            'function', jsonb_build_object('name', 'get_stock', 'arguments', '{"sku": "A-1"}'))),
        jsonb_build_object('client', :client_id, 'seq', :seq, 'grp', :g));
\set seq :seq + 1
INSERT INTO ctxwin.messages (session_id, role, content, tool_call_id, metadata)
VALUES (sess(:sid), 'tool', format('{"order": %s, "status": "shipped"}', :g), format('call_%s_%s_a', :client_id, :g),
        jsonb_build_object('client', :client_id, 'seq', :seq, 'grp', :g));
\set seq :seq + 1
INSERT INTO ctxwin.messages (session_id, role, content, tool_call_id, metadata)
VALUES (sess(:sid), 'tool', '{"sku": "A-1", "stock": 12}', format('call_%s_%s_b', :client_id, :g),
        jsonb_build_object('client', :client_id, 'seq', :seq, 'grp', :g));
COMMIT;
EOF
# holds the session's lock a moment, then rolls back: the waiting inserts
# must take the id it had
script('rollback.sql', <<'EOF');
\set sid random(1, 4)
BEGIN;
INSERT INTO ctxwin.messages (session_id, role, content, metadata)
VALUES (sess(:sid), 'user', 'rolled back', jsonb_build_object('rolled_back', true));
SELECT pg_sleep(0.002);
ROLLBACK;
EOF
script('summarize_locked.sql', <<'EOF');
\set sid random(1, 4)
SELECT summarize_locked(sess(:sid));
EOF
script('summarize_blind.sql', <<'EOF');
\set sid random(1, 4)
SELECT summarize_blind(sess(:sid));
EOF
# Readers: in one snapshot, the visible ids are exactly 1..message_count and
# the counters match the visible messages (an id assigned out of commit order
# shows up as a hole), and build_context skips nothing.
script('check.sql', <<'EOF');
INSERT INTO violations (kind, detail)
SELECT 'snapshot', format('%s: %s visible, ids %s..%s, message_count %s, token_count %s/%s, unsummarized %s/%s tokens %s/%s',
                          s.id, count(m.id), min(m.id), max(m.id), s.message_count,
                          s.token_count, sum(m.token_count),
                          s.unsummarized_messages, count(m.id) FILTER (WHERE m.id > s.summary_through_id),
                          s.unsummarized_tokens, sum(m.token_count) FILTER (WHERE m.id > s.summary_through_id))
FROM ctxwin.sessions s LEFT JOIN ctxwin.messages m ON m.session_id = s.id
GROUP BY s.id
HAVING count(m.id) <> s.message_count OR coalesce(max(m.id), 0) <> s.message_count
    OR s.token_count <> coalesce(sum(m.token_count), 0)
    OR s.unsummarized_messages <> count(m.id) FILTER (WHERE m.id > s.summary_through_id)
    OR s.unsummarized_tokens <> coalesce(sum(m.token_count) FILTER (WHERE m.id > s.summary_through_id), 0);
INSERT INTO violations (kind, detail)
SELECT 'window', format('%s: summary_through_id %s, message_count %s', s.id, s.summary_through_id, s.message_count)
FROM ctxwin.sessions s WHERE window_mismatch(s);
EOF

my $pgbench = $node->config_data('--bindir') . '/pgbench';
my $start = time;
my $out = '';
my $ran = IPC::Run::run(
	[
		$pgbench, '-n', '-c', '6', '-j', '2', '-t', '1000', '-D', 'seq=0',
		'-h', $node->host, '-p', $node->port,
		'-f', "$tmp/insert.sql\@10", '-f', "$tmp/insertmany.sql\@4",
		'-f', "$tmp/toolgroup.sql\@3", '-f', "$tmp/rollback.sql\@1",
		'-f', "$tmp/summarize_locked.sql\@2", '-f', "$tmp/summarize_blind.sql\@2",
		'-f', "$tmp/check.sql\@2", $db
	],
	'<', \undef, '>&', \$out);
diag('pgbench: '
	  . join(';', grep { /^(number of transactions actually processed|number of failed|tps)/ } split /\n/, $out)
	  . ' ' . (time - $start) . ' s');
ok($ran, 'pgbench ran 6 clients x 1000 transactions without an error');
unless ($ran)
{
	my @errors = grep { /error|abort/i } split /\n/, $out;
	diag("  $_") for @errors[ 0 .. ($#errors < 4 ? $#errors : 4) ];
}
my ($processed) = $out =~ /^number of transactions actually processed: (.*)$/m;
is($processed, '6000/6000', 'every transaction committed');

is(sq("SELECT count(*) FROM violations WHERE kind IN ('snapshot')"), '0',
	'every snapshot saw ids 1..message_count and counters that match its messages');
show("SELECT kind || ': ' || detail FROM violations WHERE kind = 'snapshot' LIMIT 3");
is(sq("SELECT count(*) FROM violations WHERE kind = 'window'"), '0',
	'in every snapshot build_context returned exactly the messages after summary_through_id');
show("SELECT kind || ': ' || detail FROM violations WHERE kind = 'window' LIMIT 3");
is(sq("SELECT count(*) FROM violations WHERE kind IN ('guard', 'blind')"), '0',
	'the guard refused points inside a tool group or behind the summary, and only those');
show("SELECT kind || ': ' || detail FROM violations WHERE kind IN ('guard', 'blind') LIMIT 3");

# The run did what it is meant to: every session got many messages, tool
# groups and several summaries.
diag(sq("SELECT string_agg(format('%s msgs, summary through %s (v%s)', message_count, summary_through_id, summary_version), '; ' ORDER BY id) FROM ctxwin.sessions WHERE message_count > 0"));
is(sq("SELECT count(*) FROM ctxwin.sessions s WHERE s.id IN (sess(1), sess(2), sess(3), sess(4))
	AND message_count >= 50 AND summary_version >= 3
	AND EXISTS (SELECT 1 FROM ctxwin.messages m WHERE m.session_id = s.id AND m.role = 'tool')"), '4',
	'all four sessions got messages, tool groups and summaries concurrently');

# Final state, session by session.
is(sq("SELECT count(*) FROM ctxwin.sessions s WHERE message_count <> (SELECT count(DISTINCT id) FROM ctxwin.messages m WHERE m.session_id = s.id)
	OR message_count <> (SELECT count(*) FROM ctxwin.messages m WHERE m.session_id = s.id)
	OR message_count <> coalesce((SELECT max(id) FROM ctxwin.messages m WHERE m.session_id = s.id), 0)
	OR (message_count > 0 AND (SELECT min(id) FROM ctxwin.messages m WHERE m.session_id = s.id) <> 1)"), '0',
	"every session's ids are exactly 1..message_count, no gaps or duplicates");
is(sq("SELECT count(*) FROM ctxwin.sessions s
	WHERE token_count <> (SELECT coalesce(sum(token_count), 0) FROM ctxwin.messages m WHERE m.session_id = s.id)"), '0',
	"token_count is the sum of the messages' token counts");
is(sq("SELECT count(*) FROM ctxwin.sessions s WHERE unsummarized_messages <> message_count - summary_through_id"), '0',
	'unsummarized_messages = message_count - summary_through_id');
is(sq("SELECT count(*) FROM ctxwin.sessions s WHERE unsummarized_tokens <> (SELECT coalesce(sum(token_count), 0)
	FROM ctxwin.messages m WHERE m.session_id = s.id AND m.id > s.summary_through_id)"), '0',
	'unsummarized_tokens is the sum over the messages after summary_through_id');
is(sq("SELECT count(*) FROM ctxwin.messages m
	WHERE token_count <> ctxwin.count_message_tokens(as_openai(m), 'o200k_base') OR token_encoding <> 'o200k_base'"), '0',
	"every message's token_count is its count_message_tokens, counted in the model's encoding");
is(sq("SELECT count(*) FROM ctxwin.sessions s WHERE window_mismatch(s)"), '0',
	'nothing skipped: build_context returns exactly the messages after summary_through_id, in order');
is(sq("SELECT count(*) FROM ctxwin.sessions s
	WHERE jsonb_array_length(ctxwin.build_context(s.id, 10000000)) <> s.message_count - s.summary_through_id
	      + (s.system_prompt IS NOT NULL OR s.conversation_summary IS NOT NULL)::int"), '0',
	'the window is one system message plus every unsummarized message');
is(sq("SELECT count(*) FROM ctxwin.sessions s WHERE summary_through_id > 0 AND EXISTS (
	SELECT 1 FROM ctxwin.messages m WHERE m.session_id = s.id AND m.id = s.summary_through_id + 1 AND m.role = 'tool')"), '0',
	'no summary ends inside a tool call group');
# every summary newly covers the messages right after the previous one
is(sq("SELECT count(*) FROM ctxwin.sessions s WHERE summary_version <> (SELECT count(*) FROM ctxwin.summaries x WHERE x.session_id = s.id)
	OR summary_through_id <> (SELECT coalesce(max(through_id), 0) FROM ctxwin.summaries x WHERE x.session_id = s.id)
	OR EXISTS (SELECT 1 FROM (SELECT version, from_id, lag(through_id, 1, 0::bigint) OVER (ORDER BY version) AS prev,
	                                 row_number() OVER (ORDER BY version) AS n
	                          FROM ctxwin.summaries x WHERE x.session_id = s.id) y
	           WHERE from_id <> prev + 1 OR version <> n)"), '0',
	'summary versions count up by one and their ranges follow each other up to summary_through_id');

# Commit order, seen from each client: a client's transactions commit one
# after the other, so its messages in one session have increasing ids.
is(sq("SELECT count(*) FROM (SELECT (metadata ->> 'seq')::int AS seq,
	lag((metadata ->> 'seq')::int) OVER (PARTITION BY session_id, metadata ->> 'client' ORDER BY id) AS prev
	FROM ctxwin.messages) x WHERE seq <= prev"), '0',
	'each client\'s messages have ids in the order the client committed them');
# nothing lost, nothing doubled: each client's sequence numbers are 1..its count
is(sq("SELECT count(*) FROM (SELECT metadata ->> 'client' AS c, count(*) AS n,
	count(DISTINCT metadata ->> 'seq') AS d, max((metadata ->> 'seq')::int) AS mx
	FROM ctxwin.messages WHERE metadata ? 'client' GROUP BY 1) x WHERE n <> d OR n <> mx"), '0',
	'every message each client committed is there, once');
is(sq("SELECT count(DISTINCT metadata ->> 'client') FROM ctxwin.messages"), '6', 'all six clients inserted');
# one transaction's messages are consecutive: no other insert came between
is(sq("SELECT count(*) FROM (SELECT session_id, metadata ->> 'client', metadata ->> 'grp', min(id), max(id), count(*) AS n
	FROM ctxwin.messages WHERE metadata ? 'grp' GROUP BY 1, 2, 3 HAVING max(id) - min(id) <> 2 OR count(*) <> 3) x"), '0',
	'each tool call group (one transaction) has three consecutive ids');
is(sq("SELECT count(*) FROM (SELECT session_id, metadata ->> 'client', metadata ->> 'batch', min(id), max(id), count(*) AS n
	FROM ctxwin.messages WHERE metadata ? 'batch' GROUP BY 1, 2, 3 HAVING max(id) - min(id) <> count(*) - 1) x")
	  . '|' . sq("SELECT count(DISTINCT (metadata ->> 'client', metadata ->> 'batch')) > 50 FROM ctxwin.messages WHERE metadata ? 'batch'"),
	'0|t', 'each multi-row INSERT ... SELECT (one statement) has consecutive ids');
is(sq("SELECT count(*) FROM ctxwin.messages WHERE metadata ? 'rolled_back'"), '0',
	'no rolled-back message is visible');

# Deterministic: an insert that rolls back leaves no gap.
my $n = sq("SELECT message_count FROM ctxwin.sessions WHERE id = sess(5)");
my $got = sq("BEGIN;
	INSERT INTO ctxwin.messages (session_id, role, content) VALUES (sess(5), 'user', 'oops') RETURNING id;
	ROLLBACK;
	INSERT INTO ctxwin.messages (session_id, role, content) VALUES (sess(5), 'user', 'again') RETURNING id;");
is(join(' ', split /\n/, $got), ($n + 1) . ' ' . ($n + 1),
	'after a rolled-back insert the next insert takes the same id');

# psql(NAME, @args): psql in the background, application_name NAME, as
# [harness, \stdin, \stdout+stderr]; psql stops at the first error
sub psql_bg
{
	my ($name, @args) = @_;
	my ($in, $out) = ('', '');
	my $h = IPC::Run::start(
		[
			'psql', '-X', '-q', '-A', '-t', '-v', 'ON_ERROR_STOP=1',
			'-d', $node->connstr($db) . " application_name=$name", @args
		],
		'<', \$in, '>&', \$out);
	return [ $h, \$in, \$out ];
}

# hold(NAME, SQL): a transaction that ran SQL and stays open until
# release() ends it: returns once SQL has run (dies if it did not in 20 s)
sub hold
{
	my ($name, $stmt) = @_;
	my $p = psql_bg($name);
	${ $p->[1] } .= "BEGIN;\n$stmt;\nSELECT 'held';\n";
	wait_until(20, sub { eval { $p->[0]->pump_nb }; ${ $p->[2] } =~ /^held$/m })
	  or die "$name did not run its statement: ${ $p->[2] }\n";
	return $p;
}

# release(P, COMMIT | ROLLBACK): ends a held transaction, waits for psql
# to exit; what its statement printed
sub release
{
	my ($p, $how) = @_;
	${ $p->[1] } .= "$how;\n";
	return finish($p);
}

# finish(P): waits for a background psql; what it printed, one line per row
sub finish
{
	my ($p) = @_;
	$p->[0]->finish;
	my $out = ${ $p->[2] };
	$out =~ s/^held\n//m;
	chomp $out;
	return $out;
}

# the backend of application NAME waits on a lock (true), for at most 20 s
sub waits_on_lock
{
	my ($name) = @_;
	return wait_for($node, $db,
		"SELECT wait_event_type = 'Lock' FROM pg_stat_activity WHERE application_name = '$name' AND state = 'active'",
		20);
}

# Deterministic lock order: while one transaction has inserted into a session
# and not committed, a second insert into the same session waits (ids by a
# sequence would let it commit id n+2 before n+1 is visible), an insert into
# another session does not, and the waiting insert takes the next id.
$n = sq("SELECT message_count FROM ctxwin.sessions WHERE id = sess(5)");
my $first = hold('ctxwin_t_first',
	"INSERT INTO ctxwin.messages (session_id, role, content) VALUES (sess(5), 'user', 'first') RETURNING id");
my $second = psql_bg('ctxwin_t_second', '-c',
	"INSERT INTO ctxwin.messages (session_id, role, content) VALUES (sess(5), 'assistant', 'second') RETURNING id");
ok(waits_on_lock('ctxwin_t_second'), 'an insert into a session waits for an uncommitted insert into it');
is(sq("SET lock_timeout = '500ms';
	INSERT INTO ctxwin.messages (session_id, role, content) VALUES (sess(6), 'user', 'elsewhere') RETURNING id"),
	'1', 'an insert into another session does not wait');
is(sq("SELECT message_count FROM ctxwin.sessions WHERE id = sess(5)") . ' '
	  . sq("SELECT count(*) FROM ctxwin.messages WHERE session_id = sess(5)"),
	"$n $n", 'meanwhile readers see neither insert');
my $r1 = release($first, 'COMMIT');
is("$r1 " . finish($second), ($n + 1) . ' ' . ($n + 2),
	'the waiting insert takes the next id once the first commits');

# The same with statements of three messages each: the second statement waits
# at its first message, and takes the three ids after the first's.
$n = sq("SELECT message_count FROM ctxwin.sessions WHERE id = sess(5)");
$first = hold('ctxwin_t_first3',
	"INSERT INTO ctxwin.messages (session_id, role, content) SELECT sess(5), 'user', 'first ' || i FROM generate_series(1, 3) i RETURNING id");
$second = psql_bg('ctxwin_t_second3', '-c',
	"INSERT INTO ctxwin.messages (session_id, role, content) SELECT sess(5), 'assistant', 'second ' || i FROM generate_series(1, 3) i RETURNING id");
ok(waits_on_lock('ctxwin_t_second3'),
	'a statement of several messages waits for an uncommitted one into the same session');
$r1 = release($first, 'COMMIT');
is(join(' ', split /\n/, $r1 . "\n" . finish($second)), join(' ', map { $n + $_ } 1 .. 6),
	'and takes the ids after it, in commit order');
is(sq("SELECT message_count = $n + 6 AND token_count = (SELECT sum(token_count) FROM ctxwin.messages WHERE session_id = sess(5))
	FROM ctxwin.sessions WHERE id = sess(5)"), 't', 'with the counters of both');

# An insert reads its session's row without a lock and writes the counters
# to the version it read; when an application's UPDATE of the session
# (here its metadata) commits in between, the insert reads the row again
# and counts again: the update is kept and the counters are right.  The
# same when that update rolls back instead.
for my $how (qw(COMMIT ROLLBACK))
{
	$n = sq("SELECT message_count FROM ctxwin.sessions WHERE id = sess(5)");
	my $app = hold('ctxwin_t_app', qq{UPDATE ctxwin.sessions SET metadata = '{"end": "$how"}' WHERE id = sess(5)});
	my $insert = psql_bg('ctxwin_t_insert', '-c',
		"INSERT INTO ctxwin.messages (session_id, role, content) VALUES (sess(5), 'user', 'after $how') RETURNING id");
	# the insert waits for the update; then the update ends
	my $waited = waits_on_lock('ctxwin_t_insert') ? 'waited' : 'did not wait';
	release($app, $how);
	my $id = finish($insert);
	# the rolled-back update leaves the metadata the committed one set
	is("$waited|$id|"
		  . sq("SELECT metadata::text, message_count = $n + 1 AND token_count = (SELECT sum(token_count) FROM ctxwin.messages WHERE session_id = sess(5))
		FROM ctxwin.sessions WHERE id = sess(5)"),
		'waited|' . ($n + 1) . '|{"end": "COMMIT"}|t',
		"an insert that waited for an update of its session ($how) takes the next id, keeps the update's outcome, and counts right");
}
