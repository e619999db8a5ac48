# A summary never stalls a chat: summarize_session() and compact() hold no
# lock an application's write needs while their LLM request is in flight,
# plan from committed messages (never covering one still uncommitted), and
# one request is made per summary, whoever asks for it (two
# summarize_session calls at once, the worker and a manual call).
# A cluster of its own with the worker preloaded, over real loopback HTTP
# to test/mockllm.py; the mock's slow-N models keep a request in flight
# while the other connections act, and every check waits on a condition
# (a request logged, a backend waiting on a lock, a row written).
use strict;
use warnings;
use FindBin;
use lib "$FindBin::RealBin/lib";
use CtxwinTest;
use IPC::Run;
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;

my $mock = CtxwinTest::Mock->start;
# the worker serves app only; the manual database has no worker
my $node = ctxwin_node(
	'locks',
	preload => 1,
	mock => $mock,
	conf => {
		'ctxwin.databases' => 'app',
		'ctxwin.naptime_ms' => '60000',
		'ctxwin.llm_timeout_ms' => '60000',
	});
for my $db (qw(app manual))
{
	sql_do($node, 'postgres', "CREATE DATABASE $db");
	sql_do($node, $db, 'CREATE EXTENSION ctxwin');
	# manual: no trigger (nothing queued); trig: queued at 8 unsummarized messages
	sql_do($node, $db, q{
		INSERT INTO ctxwin.profiles (name, model, max_messages_before_summary, max_tokens_before_summary,
		                             trigger_ratio, min_recent_messages, max_summary_tokens, summary_strategy,
		                             window_policy)
		VALUES ('manual', 'gpt-4o', NULL, NULL, NULL, 2, 300, 'llm', 'sliding'),
		       ('trig', 'gpt-4o', 8, NULL, NULL, 2, 300, 'llm', 'sliding')});
}

sub sq { return sql($node, @_); }

# session(DB, PROFILE, N): a new session with N messages, each naming it
sub session
{
	my ($db, $profile, $n) = @_;
	my $id = sql_do($node, $db, "INSERT INTO ctxwin.sessions (profile) VALUES ('$profile') RETURNING id");
	chomp $id;
	add($db, $id, $n) if $n;
	return $id;
}

# add(DB, ID, N): N more messages, in one statement
sub add
{
	my ($db, $id, $n) = @_;
	sql_do($node, $db, "INSERT INTO ctxwin.messages (session_id, role, content)
		SELECT '$id', CASE WHEN g % 2 = 1 THEN 'user' ELSE 'assistant' END,
		       'session $id, turn ' || g || ': deploy billing-' || g || ' and check E' || (4000 + g)
		FROM generate_series(1, $n) g");
	return;
}

# bg(DB, SQL): psql running SQL in the background; done(BG): its output
sub bg { my ($db, $sql) = @_; return bg_sql($node, $db, {}, $sql); }
sub done { return bg_done(@_); }


# a request for session ID has reached the mock since the FROM-th
sub in_flight
{
	my ($from, $id) = @_;
	return wait_until(20, sub { $mock->requests_naming($from, $id) > 0 });
}

# the backend running a statement like PATTERN waits on a lock of kind TYPE
sub waits_on
{
	my ($db, $pattern, $type) = @_;
	return wait_for($node, $db,
		"SELECT count(*) > 0 FROM pg_stat_activity WHERE datname = '$db' AND wait_event_type = 'Lock' "
		  . "AND wait_event = '$type' AND query LIKE '%$pattern%' AND pid <> pg_backend_pid()", 20);
}

# --- 1. an insert while summarize_session's request is in flight -------------
my $s = session('manual', 'manual', 10);
my $from = $mock->nreq;
my $b = bg('manual', "SET ctxwin.llm_model = 'slow-3000'; "
	  . "SELECT version || '|' || through_id FROM ctxwin.summarize_session('$s', true)");
ok(in_flight($from, $s), 'summarize_session sent its request (3 s to answer)');
my $t0 = now_ms();
my $id = sq('manual', "INSERT INTO ctxwin.messages (session_id, role, content) VALUES ('$s', 'user', 'typed meanwhile') RETURNING id");
my $insert_ms = elapsed_ms($t0);
is($id, '11', 'an insert into the session commits while the request is in flight');
is(sq('manual', "SELECT count(*) FROM ctxwin.summaries WHERE session_id = '$s'"), '0',
	'before the summary is written: the insert did not wait for it');
diag("insert during a summary request in flight: $insert_ms ms");
is(done($b), '1|8', 'the summary is written after, covering messages 1-8 (the newest 2 of the 10 it saw kept)');
is(sq('manual', "SELECT message_count || '|' || summary_through_id || '|' || unsummarized_messages FROM ctxwin.sessions WHERE id = '$s'"),
	'11|8|3', "the session's counters count the message inserted meanwhile as unsummarized");
is(sq('manual', "SELECT unsummarized_tokens = (SELECT sum(token_count) FROM ctxwin.messages WHERE session_id = '$s' AND id > 8) FROM ctxwin.sessions WHERE id = '$s'"),
	't', 'and its tokens');

# --- 1b. the same with compact() ---------------------------------------------
my $q = session('manual', 'trig', 10);
is(sq('manual', "SELECT compaction_queued_at IS NOT NULL FROM ctxwin.sessions WHERE id = '$q'"), 't', 'a queued session');
$from = $mock->nreq;
$b = bg('manual', "SET ctxwin.llm_model = 'slow-3000'; SELECT ctxwin.compact()");
ok(in_flight($from, $q), 'compact() sent its request');
is(sq('manual', "INSERT INTO ctxwin.messages (session_id, role, content) VALUES ('$q', 'user', 'typed meanwhile') RETURNING id"),
	'11', 'an insert into the session commits while it is in flight');
is(sq('manual', "SELECT count(*) FROM ctxwin.summaries WHERE session_id = '$q'"), '0',
	'before the summary is written');
is(done($b), '1', 'compact() then summarizes the session');
is(sq('manual', "SELECT summary_through_id || '|' || unsummarized_messages FROM ctxwin.sessions WHERE id = '$q'"),
	'8|3', 'through message 8 of the 10 it saw; the new one unsummarized');

# --- 2. summarize_session with another connection's insert open --------------
$s = session('manual', 'manual', 10);
my ($in, $out, $err) = ('', '', '');
my $app = IPC::Run::start([ 'psql', '-X', '-q', '-A', '-t', '-d', $node->connstr('manual') ],
	'<', \$in, '>', \$out, '2>', \$err);
$in .= "BEGIN;\nINSERT INTO ctxwin.messages (session_id, role, content) VALUES ('$s', 'user', 'still typing') RETURNING id;\n";
ok(wait_until(20, sub { $app->pump_nb; $out =~ /^11$/m }), 'another connection inserts message 11 and keeps its transaction open');
$from = $mock->nreq;
$b = bg('manual', "SELECT version || '|' || through_id FROM ctxwin.summarize_session('$s', true)");
ok(in_flight($from, $s), 'summarize_session plans and sends its request meanwhile');
ok(waits_on('manual', 'summarize_session', 'transactionid'),
	'then its write waits for the open transaction, which holds the session row');
$in .= "COMMIT;\n";
$app->finish;
is(done($b), '1|8', 'it succeeds once that commits, and does not cover the message that was uncommitted');
is($mock->requests_naming($from, $s), 1, 'one request');
is(sq('manual', "SELECT message_count || '|' || unsummarized_messages FROM ctxwin.sessions WHERE id = '$s'"),
	'11|3', 'message 11 is counted, unsummarized');

# an extractive summary the same way: no request, the write waits
sql_do($node, 'manual', "UPDATE ctxwin.profiles SET summary_strategy = 'extractive' WHERE name = 'manual'");
$s = session('manual', 'manual', 10);
($in, $out, $err) = ('', '', '');
$app = IPC::Run::start([ 'psql', '-X', '-q', '-A', '-t', '-d', $node->connstr('manual') ],
	'<', \$in, '>', \$out, '2>', \$err);
$in .= "BEGIN;\nINSERT INTO ctxwin.messages (session_id, role, content) VALUES ('$s', 'user', 'still typing') RETURNING id;\n";
ok(wait_until(20, sub { $app->pump_nb; $out =~ /^11$/m }), 'an insert open in another connection');
$b = bg('manual', "SELECT version || '|' || through_id || '|' || strategy FROM ctxwin.summarize_session('$s', true)");
ok(waits_on('manual', 'summarize_session', 'transactionid'), 'an extractive summary waits for it to write');
$in .= "ROLLBACK;\n";
$app->finish;
is(done($b), '1|8|extractive', 'and is written once it rolls back');
is(sq('manual', "SELECT message_count FROM ctxwin.sessions WHERE id = '$s'"), '10', 'the rolled-back message is gone');
sql_do($node, 'manual', "UPDATE ctxwin.profiles SET summary_strategy = 'llm' WHERE name = 'manual'");

# --- 3. two summarize_session calls at once on one session -------------------
$s = session('manual', 'manual', 10);
$from = $mock->nreq;
my $b1 = bg('manual', "SET ctxwin.llm_model = 'slow-3000'; "
	  . "SELECT version || '|' || through_id || '|' || created_at FROM ctxwin.summarize_session('$s', true)");
ok(in_flight($from, $s), 'the first call sent its request');
my $b2 = bg('manual', "SET ctxwin.llm_model = 'slow-3000'; "
	  . "SELECT version || '|' || through_id || '|' || created_at FROM ctxwin.summarize_session('$s', true)");
ok(waits_on('manual', 'summarize_session', 'advisory'), 'the second waits for the first');
my ($r1, $r2) = (done($b1), done($b2));
like($r1, qr/^1\|8\|/, 'the first writes version 1');
is($r2, $r1, 'the second returns the same summary');
is($mock->requests_naming($from, $s), 1, 'one LLM request for both');
is(sq('manual', "SELECT count(*) FROM ctxwin.summaries WHERE session_id = '$s'"), '1', 'one summary');

# a summarize_session waiting for a claim can be bounded with lock_timeout
add('manual', $s, 4);
$from = $mock->nreq;
$b1 = bg('manual', "SET ctxwin.llm_model = 'slow-3000'; SELECT version FROM ctxwin.summarize_session('$s', true)");
ok(in_flight($from, $s), 'a forced summary in flight');
like(sq('manual', "SET lock_timeout = '200ms'; SELECT ctxwin.summarize_session('$s', true)"),
	qr/canceling statement due to lock timeout/, 'another call with lock_timeout gives up waiting');
is(done($b1), '2', 'the first writes version 2');
is($mock->requests_naming($from, $s), 1, 'with one request');

# --- 4. the worker and a manual call on one session --------------------------
# the worker's request first: summarize_session waits for it and returns its summary
set_conf($node, 'ctxwin.llm_model' => 'slow-3000');
ok(wait_for($node, 'app', "SELECT state = 'idle' FROM ctxwin.worker_status", 20), 'the worker serves app');
my $w = session('app', 'trig', 0);
$from = $mock->nreq;
add('app', $w, 10);
ok(in_flight($from, $w), "the worker sent the queued session's request");
is(sq('app', "SET ctxwin.llm_model = 'mock'; SELECT version || '|' || through_id FROM ctxwin.summarize_session('$w', true)"),
	'1|8', "summarize_session waits for the worker and returns the worker's summary");
is($mock->requests_naming($from, $w), 1, 'one request');
is(sq('app', "SELECT count(*) FROM ctxwin.summaries WHERE session_id = '$w'"), '1', 'one summary');

# the manual call's request first: the worker passes the session over
$w = session('app', 'trig', 7);
$from = $mock->nreq;
$b = bg('app', "SET ctxwin.llm_model = 'slow-3000'; SELECT version || '|' || through_id FROM ctxwin.summarize_session('$w', true)");
ok(in_flight($from, $w), 'summarize_session sent its request');
add('app', $w, 1);
is(sq('app', "SELECT compaction_queued_at IS NOT NULL FROM ctxwin.sessions WHERE id = '$w'"), 't',
	'a message inserted meanwhile queues the session for the worker, and wakes it');
is(done($b), '1|5', 'the manual summary is written (messages 1-5 of the 7 it saw)');
is(sq('app', "SELECT compaction_queued_at IS NULL FROM ctxwin.sessions WHERE id = '$w'"), 't',
	'which takes the session off the queue');
# the worker has swept the queue since: a session queued after is summarized
set_conf($node, 'ctxwin.llm_model' => 'mock');
my $later = session('app', 'trig', 10);
ok(wait_for($node, 'app', "SELECT summary_through_id > 0 FROM ctxwin.sessions WHERE id = '$later'", 30),
	'the worker summarizes a session queued after');
is($mock->requests_naming($from, $w), 1, 'and made no request of its own for the manual one');

done_testing();
