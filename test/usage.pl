# record_usage from several connections at once (pgbench), into shared
# sessions, between message inserts of the same sessions:
#  - the requests of a session are numbered 1, 2, 3 ... without a gap or a
#    duplicate (the session row's lock numbers them, as it numbers messages);
#  - every call commits: none deadlocks with a message insert, and none
#    fails on the model's calibration row, which every call updates;
#  - the calibration ends as its definition says (the newest 50 requests).
# Then, step by step: a transaction that holds a model's calibration row
# (it recorded usage and has not committed) does not make record_usage in
# another session of that model wait.
# A cluster of its own; pgbench's clients and the holding transaction are
# connections beside the test's.
use strict;
use warnings;
use FindBin;
use lib "$FindBin::RealBin/lib";
use CtxwinTest;
use IPC::Run;
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;

plan tests => 10;

my $node = ctxwin_node('usage');
my $db = 'ctxwin_usage_t';
my $tmp = PostgreSQL::Test::Utils::tempdir('usage');

sub sq { return sql($node, $db, @_); }

sql_do($node, 'postgres', "CREATE DATABASE $db");
sql_do($node, $db, <<'SQL');
CREATE EXTENSION ctxwin;
CREATE FUNCTION sess(i int) RETURNS uuid LANGUAGE sql IMMUTABLE
RETURN ('00000000-0000-4000-8000-' || lpad(i::text, 12, '0'))::uuid;
INSERT INTO ctxwin.profiles (name, model, max_messages_before_summary) VALUES ('claude', 'claude-sonnet-4-5', NULL);
INSERT INTO ctxwin.sessions (id, profile, system_prompt)
SELECT sess(i), 'claude', 'You answer for shop ' || i FROM generate_series(1, 6) i;
SQL

# a turn: the user's message, the answer's usage (with its window, counted
# 20 % higher by the provider), the answer; or the usage after the answer
append_to_file("$tmp/turn.sql", <<'EOF');
\set s random(1, 4)
BEGIN;
INSERT INTO ctxwin.messages (session_id, role, content) VALUES (sess(:s), 'user', 'Where is order ' || :client_id || '?');
SELECT ctxwin.record_usage(sess(:s), '{"input_tokens": 200, "cache_read_input_tokens": 1000, "cache_creation_input_tokens": 0, "output_tokens": 9}', 1, 1000);
INSERT INTO ctxwin.messages (session_id, role, content) VALUES (sess(:s), 'assistant', 'It ships today.');
COMMIT;
EOF
append_to_file("$tmp/after.sql", <<'EOF');
\set s random(1, 4)
BEGIN;
INSERT INTO ctxwin.messages (session_id, role, content) VALUES (sess(:s), 'assistant', 'Anything else?');
SELECT ctxwin.record_usage(sess(:s), '{"input_tokens": 1200, "output_tokens": 4}', NULL, 1000);
COMMIT;
EOF
append_to_file("$tmp/read.sql", <<'EOF');
\set s random(1, 4)
SELECT requests, cost FROM ctxwin.usage WHERE session_id = sess(:s);
SELECT budget, budget_margin FROM ctxwin.context_status(sess(:s));
EOF

my $start = now_ms();
my $out = '';
my $ok = IPC::Run::run(
	[
		'pgbench', '-n', '-c', '6', '-j', '2', '-t', '300',
		'-f', "$tmp/turn.sql\@6", '-f', "$tmp/after.sql\@2", '-f', "$tmp/read.sql\@2",
		$node->connstr($db)
	],
	'<', \undef, '>&', \$out);
diag('pgbench: '
	  . join(';', grep { /^(number of transactions actually processed|number of failed|tps)/ } split /\n/, $out)
	  . ' ' . int(elapsed_ms($start) / 1000) . ' s');
ok($ok, 'pgbench ran 6 clients x 300 transactions without an error');
unless ($ok)
{
	my @errors = grep { /error|abort/i } split /\n/, $out;
	diag(join("\n", splice(@errors, 0, 5)));
}
is(($out =~ /^number of transactions actually processed: (.*)$/m)[0] // '', '1800/1800', 'every transaction committed');

is(sq(q{SELECT count(*) FROM (SELECT session_id FROM ctxwin.usage_log GROUP BY session_id
                      HAVING count(*) <> max(id) OR count(DISTINCT id) <> count(*) OR min(id) <> 1) x}),
	'0', "every session's requests are numbered 1..n, without a gap or a duplicate");
my $n = sq('SELECT count(*) FROM ctxwin.usage_log');
ok($n =~ /^[0-9]+$/ && $n > 1000, "(the run recorded $n requests in 4 sessions)");
is(sq("SELECT format('%s %s %s %s', requests, provider_tokens, counted_tokens, margin) FROM ctxwin.calibration"),
	'50 60000 50000 1.2', 'the calibration is that of the newest 50 requests');

# A transaction holds the calibration row of claude-sonnet-4-5 ...
my ($hout, $herr) = ('', '');
my $holder = IPC::Run::start(
	[
		'psql', '-X', '-q', '-A', '-t', '-v', 'ON_ERROR_STOP=1', '-d', $node->connstr($db),
		'-c', 'BEGIN',
		'-c', q{SELECT ctxwin.record_usage(sess(5), '{"input_tokens": 1500, "output_tokens": 1}', NULL, 1000)},
		'-c', 'SELECT pg_sleep(30)', '-c', 'COMMIT'
	],
	'<', \undef, '>', \$hout, '2>', \$herr);
my $sleeping = "SELECT count(*) FROM pg_stat_activity WHERE datname = '$db' AND query LIKE '%pg_sleep(30)%' AND pid <> pg_backend_pid()";
wait_for($node, $db, "SELECT ($sleeping) = 1", 10);
is(sq($sleeping), '1', '(a transaction recorded usage of the model and sleeps, holding its calibration row)');
# ... and another records usage of the same model, with no time to wait
is(sq(q{SET lock_timeout = '500ms';
	SELECT ctxwin.record_usage(sess(6), '{"input_tokens": 1100, "output_tokens": 1}', NULL, 1000);}),
	'1', "record_usage does not wait for another transaction's update of the model's calibration");
is(sq('SELECT count(*) FROM ctxwin.usage_log WHERE session_id = sess(6)'), '1', '... and its request is recorded');
is(sq('SELECT margin FROM ctxwin.calibration'), '1.2', '... and leaves the calibration to the transaction that holds it');
sql_do($node, 'postgres', "SELECT pg_cancel_backend(pid) FROM pg_stat_activity WHERE datname = '$db' "
	  . "AND query LIKE '%pg_sleep(30)%' AND pid <> pg_backend_pid()");
$holder->finish;
is(sq('SELECT count(*) FROM ctxwin.usage_log WHERE session_id = sess(5)'), '0',
	'(the holder was cancelled: its request is not recorded)');
