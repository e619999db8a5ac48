# ALTER EXTENSION ctxwin UPDATE from 0.1.0 on a database that holds more
# than 10,000 messages, with writers inserting the whole time:
#
#  - no insert fails (pgbench's clients stop at their first error), and
#    every message a writer committed is there after the update;
#  - the update leaves the two indexes of ctxwin.messages whose build is
#    proportional to the table (the search index, the client keys) out of
#    its transaction and says so in a WARNING (an extension script shows nothing less); ctxwin.pending_indexes()
#    lists them, each with the statement that builds it concurrently;
#  - a search answers exactly as it does once the index is built (found by
#    reading the session's messages meanwhile);
#  - without a worker, the statements run at top level (psql's \gexec) build
#    them; in a database the worker serves, the worker builds them by
#    itself and says so in the log; either way the indexes are the ones a
#    fresh install makes (pg_get_indexdef), valid, and the list is empty;
#  - the search index's pending list: filled by inserts, merged into the
#    index by the worker where one serves the database.
#
# The longest insert's latency during the update is printed (a figure, not
# a check: bench/upgrade measures it on a million messages).
use strict;
use warnings;
use FindBin;
use lib "$FindBin::RealBin/lib";
use CtxwinTest;
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use Time::HiRes qw(usleep);

my $node = ctxwin_node(
	'online',
	preload => 1,
	conf => {
		'ctxwin.databases' => 'served',
		'ctxwin.naptime_ms' => '200',
		'ctxwin.llm_provider' => 'extractive',
		'log_lock_waits' => 'on',
	});
my $tmp = PostgreSQL::Test::Utils::tempdir();
my $pgbench = $node->config_data('--bindir') . '/pgbench';

sub sq { return sql($node, @_); }

# 21 sessions at 0.1.0: one of 12,000 messages, with needles to search for
# spread over it, and 20 the writers add to
for my $db (qw(manual served fresh))
{
	sql_do($node, 'postgres', "CREATE DATABASE $db");
}
sql_do($node, 'fresh', 'CREATE EXTENSION ctxwin');
for my $db (qw(manual served))
{
	sql_do($node, $db, "CREATE EXTENSION ctxwin VERSION '0.1.0'");
	sql_do(
		$node, $db, q{
INSERT INTO ctxwin.sessions (id)
SELECT ('00000000-0000-4000-8000-' || lpad(i::text, 12, '0'))::uuid FROM generate_series(0, 20) i;
INSERT INTO ctxwin.messages (session_id, role, content)
SELECT '00000000-0000-4000-8000-000000000000', CASE WHEN i % 2 = 0 THEN 'user' ELSE 'assistant' END,
       CASE WHEN i % 997 = 0 THEN format('order ORD-%s was refunded, ticket zebracorn %s', i, i)
            ELSE format('message %s about the weather and the rounding of totals', i) END
FROM generate_series(1, 12000) i;
});
}
is(sq('manual', 'SELECT count(*) FROM ctxwin.messages'), '12000', 'a 0.1.0 database with 12,000 messages');

my $search = "SELECT string_agg(id::text, ',' ORDER BY id) FROM ctxwin.search("
  . "'00000000-0000-4000-8000-000000000000', 'zebracorn', max_results => 50)";

# writers: pgbench, 2 clients, one message a transaction into one of the 20
# sessions, logging every transaction's latency
append_to_file("$tmp/insert.sql", <<'EOF');
\set s random(1, 20)
INSERT INTO ctxwin.messages (session_id, role, content)
VALUES (('00000000-0000-4000-8000-' || lpad(:s::text, 12, '0'))::uuid, 'user', 'a writer''s message ' || :client_id);
EOF

# update(DB): the update while the writers insert; returns its output
sub update
{
	my ($db) = @_;
	my ($out, $err) = ('', '');
	my $offset = log_offset($node);
	my $before = sq($db, 'SELECT count(*) FROM ctxwin.messages');
	my $bench = IPC::Run::start(
		[
			$pgbench, '-n', '-c', '2', '-j', '2', '-T', '6', '-f', "$tmp/insert.sql",
			'-l', '--log-prefix', "$tmp/$db", '-h', $node->host, '-p', $node->port, $db
		],
		'>', \$out, '2>', \$err);
	usleep(1_500_000);
	my $t0 = now_ms();
	my ($text, $rc) = sql($node, $db, 'ALTER EXTENSION ctxwin UPDATE');
	my $took = elapsed_ms($t0);
	$bench->finish;
	my $bench_rc = $? >> 8;
	is($rc, 0, "$db: ALTER EXTENSION ctxwin UPDATE succeeds while two writers insert") or diag($text);
	is($bench_rc, 0, "$db: ... and no insert fails") or diag("$out\n$err");
	unlike($err, qr/aborted|ERROR/, "$db: ... pgbench reports no error") or diag($err);
	like($out, qr/^number of failed transactions: 0 /m, "$db: ... and no failed transaction") or diag($out);
	my ($n, $max) = (0, 0);
	for my $f (glob("$tmp/$db.*"))
	{
		for (split /\n/, slurp_file($f))
		{
			my @c = split / /;
			$n++;
			$max = $c[2] if $c[2] > $max;
		}
	}
	ok($n > 0, "$db: the writers committed inserts ($n)");
	is(sq($db, 'SELECT count(*) FROM ctxwin.messages') - $before, $n,
		"$db: ... every one of them is stored");
	my @waits = grep { /still waiting|acquired|deadlock/ } split /\n/, log_since($node, $offset);
	diag(join("\n", "$db: waits over deadlock_timeout:", @waits)) if @waits;
	diag(sprintf('%s: the update took %d ms; the longest of %d inserts around it %.1f ms',
			$db, $took, $n, $max / 1000));
	return $text;
}

# --- without a worker ----------------------------------------------------------
my $text = update('manual');
like($text, qr/WARNING:  the indexes messages_search and messages_client_key of ctxwin\.messages are built after this update, concurrently/,
	'the update says that it leaves the indexes to build after it');
like($text, qr/HINT:  The database's ctxwin worker builds them\. Without a worker, run at top level: SELECT statement FROM ctxwin\.pending_indexes\(\)/,
	'... and how they are built without a worker');
is(sq('manual', "SELECT extversion FROM pg_extension WHERE extname = 'ctxwin'"),
	ctxwin_version(), 'the database is at the new version');
is( sq('manual', "SELECT string_agg(index_name || ' ' || state, ', ') FROM ctxwin.pending_indexes()"),
	'messages_client_key missing, messages_search missing',
	'pending_indexes() lists the two indexes, missing');
like(sq('manual', "SELECT statement FROM ctxwin.pending_indexes() WHERE index_name = 'messages_search'"),
	qr/^CREATE INDEX CONCURRENTLY messages_search ON ctxwin\.messages USING gin/,
	'... with the statement that builds each concurrently');
my $found = sq('manual', $search);
is($found, join(',', map { $_ * 997 } 1 .. 12),
	'a search without the index finds every matching message, newest first');
like(sq('manual', "EXPLAIN (COSTS OFF) SELECT * FROM ctxwin.messages m WHERE ctxwin._search_vector(m.session_id, m.id, m.content, m.tool_calls) OPERATOR(ctxwin.\@\@) ctxwin._search_query('00000000-0000-4000-8000-000000000000', 3, 0, 'zebracorn', false)"),
	qr/^(?!.*messages_search)/s, '... which no index serves yet');

# Until the unique index of client keys is built, an INSERT of the
# application's own can repeat a key (append_messages would not): the
# index's build then fails and leaves it invalid, pending_indexes() says so,
# and once one of the two messages has another key (or none) its statement
# builds it (docs/upgrading.md).
my $s3 = '00000000-0000-4000-8000-000000000003';
sq('manual', "INSERT INTO ctxwin.messages (session_id, role, content, client_key)
              VALUES ('$s3', 'user', 'a key given twice', 'twice'), ('$s3', 'user', 'a key given twice, again', 'twice')");
my ($out, $rc) = sql($node, 'manual',
	"SELECT statement FROM ctxwin.pending_indexes() WHERE index_name = 'messages_client_key' \\gexec");
isnt($rc, 0, 'a client key stored twice before the index exists makes its build fail');
like($out, qr/could not create unique index "messages_client_key"/, '... as a duplicate key') or diag($out);
is( sq('manual', "SELECT string_agg(index_name || ' ' || state, ', ') FROM ctxwin.pending_indexes()"),
	'messages_client_key invalid, messages_search missing',
	'... which pending_indexes() lists as invalid');
sq('manual', "UPDATE ctxwin.messages SET client_key = NULL WHERE session_id = '$s3' AND content = 'a key given twice, again'");

($out, $rc) = sql($node, 'manual',
	"SELECT statement FROM ctxwin.pending_indexes() WHERE state <> 'building' \\gexec");
is($rc, 0, 'with the key given once, running the statements at top level (psql \\gexec) builds them') or diag($out);
is(sq('manual', 'SELECT count(*) FROM ctxwin.pending_indexes()'), '0', '... and the list is empty');
is(sq('manual', $search), $found, 'the search answers the same with the index');

my $defs = "SELECT string_agg(pg_get_indexdef(i.indexrelid) || ' ' || i.indisvalid, E'\\n' ORDER BY c.relname) "
  . "FROM pg_index i JOIN pg_class c ON c.oid = i.indexrelid WHERE i.indrelid = 'ctxwin.messages'::regclass";
my $fresh = sq('fresh', $defs);
like($fresh, qr/messages_search.*true/, 'a fresh install has the search index');
is(sq('manual', $defs), $fresh, 'the indexes of ctxwin.messages are those of a fresh install, valid');

# --- with the worker -------------------------------------------------------------
my $offset = log_offset($node);
update('served');
ok( wait_for($node, 'served', 'SELECT count(*) = 0 FROM ctxwin.pending_indexes()', 60),
	'the worker builds the indexes the update left, by itself');
is(sq('served', $defs), $fresh, '... the indexes of a fresh install, valid');
my $log = log_since($node, $offset);
like($log, qr/LOG:  ctxwin worker is building the index ctxwin\.messages_search concurrently/,
	'... saying so in the log');
like($log, qr/LOG:  ctxwin worker built the index ctxwin\.messages_search/, '... and when it is built');
is(sq('served', $search), $found, 'the search answers the same there');

# The search index's pending list (fastupdate on): an insert appends its
# entries to it, and the worker merges it into the index every second; in
# a database no worker serves, it stays until an insert fills it (1 MB)
my $pending = "SELECT pending_pages || ' ' || pending_tuples FROM pgstatginindex('ctxwin.messages_search')";
my $fill = "INSERT INTO ctxwin.messages (session_id, role, content) "
  . "SELECT ('00000000-0000-4000-8000-' || lpad((1 + i % 20)::text, 12, '0'))::uuid, 'user', "
  . "format('pending %s: order ORD-%s shipped to web-%s.shop.internal', i, i, i % 7) FROM generate_series(1, 300) i";
for my $db (qw(manual served))
{
	sql_do($node, $db, 'CREATE EXTENSION pgstattuple');
	is( sq($db, "SELECT array_to_string(reloptions, ', ') FROM pg_class WHERE oid = 'ctxwin.messages_search'::regclass"),
		'fastupdate=on, gin_pending_list_limit=1024', "$db: the search index has a pending list of 1 MB");
}
sql_do($node, 'manual', $fill);
like(sq('manual', $pending), qr/^[1-9]\d* [1-9]\d*$/, 'an insert appends its entries to the pending list');
is(sq('manual', "SELECT count(*) FROM ctxwin.search('00000000-0000-4000-8000-000000000003', 'ORD-42')"), '1',
	'... where a search finds them');
sql_do($node, 'served', $fill);
ok(wait_for($node, 'served', "SELECT pending_pages = 0 AND pending_tuples = 0 FROM pgstatginindex('ctxwin.messages_search')", 30),
	'the worker merges the pending list into the index');
is(sq('served', "SELECT count(*) FROM ctxwin.search('00000000-0000-4000-8000-000000000003', 'ORD-42')"), '1',
	'... where a search finds them as before');
usleep(2_500_000);
like(sq('manual', $pending), qr/^[1-9]\d* [1-9]\d*$/, 'in a database no worker serves, the list stays until an insert fills it');

# --- an update that cannot get its locks -----------------------------------------
# A transaction holds one of ctxwin's tables the whole time (a long report on
# the models, say): each attempt of the update gives way at once, and after
# 500 it fails with SQLSTATE 55P03 and a hint, having changed nothing.  Each
# lock waits at most half of deadlock_timeout, here 2 ms, which keeps this
# check to some 20 s (at the default, 100 ms: about a minute).  Once the
# holder is gone the update goes through.
sql_do($node, 'postgres', 'CREATE DATABASE giveup');
sql_do($node, 'giveup', "CREATE EXTENSION ctxwin VERSION '0.1.0'");
my $holder = bg_sql($node, 'giveup', { appname => 'holder' },
	'BEGIN; LOCK TABLE ctxwin.models IN ACCESS SHARE MODE; SELECT pg_sleep(300); COMMIT');
ok(wait_for($node, 'giveup', "SELECT count(*) > 0 FROM pg_locks WHERE relation = 'ctxwin.models'::regclass AND granted", 30),
	'(a transaction holds ctxwin.models)');
my $started = now_ms();
($out, $rc) = sql($node, 'giveup', "\\set VERBOSITY verbose\nSET deadlock_timeout = '2ms';\nALTER EXTENSION ctxwin UPDATE;");
my $took = elapsed_ms($started);
isnt($rc, 0, 'an update that cannot lock the tables fails');
like($out, qr/ERROR:  55P03: could not lock ctxwin's tables for the update\n.*DETAIL:  500 attempts found one of them held by another transaction\.\n.*HINT:  Look for long transactions in pg_stat_activity/s,
	'... with SQLSTATE 55P03, how many attempts it made and what to look for') or diag($out);
note("the update gave up after $took ms");
is(sq('giveup', "SELECT extversion FROM pg_extension WHERE extname = 'ctxwin'"), '0.1.0', '... and changes nothing');
sq('postgres', "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE application_name = 'holder'");
bg_done($holder);
($out, $rc) = sql($node, 'giveup', 'ALTER EXTENSION ctxwin UPDATE');
is($rc, 0, 'without the holder, the update goes through') or diag($out);
is(sq('giveup', "SELECT extversion FROM pg_extension WHERE extname = 'ctxwin'"), ctxwin_version(), '... to the new version');

$node->stop;
done_testing();
