# A retract while the background worker summarizes the messages it takes
# back, over real loopback HTTP to test/mockllm.py (whose summary keeps every
# identifier of its prompt): the worker's request is in flight with the
# messages that are then retracted; the retract does not wait for it; the
# summary that comes back is refused (the summary version moved on) and
# never lands; the next summary, planned after the retract, covers no
# retracted message.  Also: an append and a retract of one session
# serialize on its row.  Builds its own cluster with PostgreSQL's test
# framework.
use strict;
use warnings;
use FindBin;
use lib "$FindBin::RealBin/lib";
use CtxwinTest;
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use Time::HiRes;

my $mock = CtxwinTest::Mock->start;
my $node = ctxwin_node(
	'retract',
	preload => 1,
	mock => $mock,
	conf => {
		'ctxwin.databases' => 'r1',
		'ctxwin.naptime_ms' => '60000',
		'ctxwin.llm_timeout_ms' => '60000',
	});
sql_do($node, 'postgres', 'CREATE DATABASE r1');
sql_do($node, 'r1', 'CREATE EXTENSION ctxwin');
sub sq { return sql($node, 'r1', @_); }

# an LLM summary that takes 4 s: the worker's request stays in flight
sql_do($node, 'r1', <<'SQL');
INSERT INTO ctxwin.profiles (name, model, max_messages_before_summary, max_tokens_before_summary, trigger_ratio,
                             min_recent_messages, summary_strategy, summary_model, window_policy)
VALUES ('slow', 'gpt-4o', 10, NULL, NULL, 2, 'llm', 'slow-4000', 'sliding');
INSERT INTO ctxwin.sessions (id, profile) VALUES ('50000000-0000-4000-8000-000000000001', 'slow');
SQL
sub talk
{
	my ($a, $b) = @_;
	sql_do($node, 'r1',
		    "INSERT INTO ctxwin.messages (session_id, role, content) "
		  . "SELECT '50000000-0000-4000-8000-000000000001', CASE WHEN i % 2 = 1 THEN 'user' ELSE 'assistant' END, "
		  . "format('Order ORD-%s is at /srv/orders/%s.json.', 1000 + i, i) FROM generate_series($a, $b) i ORDER BY i");
}
# the ORD- identifiers of the session's summary, as a sorted list of numbers
sub summary_ids
{
	my $s = sq("SELECT coalesce(conversation_summary, '') FROM ctxwin.sessions "
		  . "WHERE id = '50000000-0000-4000-8000-000000000001'");
	my %seen = map { $_ => 1 } ($s =~ /ORD-(\d+)/g);
	return join(',', sort { $a <=> $b } keys %seen);
}

talk(1, 12);
ok(wait_for($node, 'r1', "SELECT in_flight = 1 FROM ctxwin.worker_status WHERE database = 'r1'", 20),
	'twelve messages: the worker has a summary request in flight');

my $t0 = Time::HiRes::time();
is(sq("SELECT ctxwin.retract('50000000-0000-4000-8000-000000000001', 8)"), '5',
	'retract from 8 while it is in flight: five messages');
cmp_ok(Time::HiRes::time() - $t0, '<', 2, '... without waiting for the request');
is(sq("SELECT in_flight FROM ctxwin.worker_status WHERE database = 'r1'"), '1', '... which is still in flight');

ok(wait_for($node, 'r1', "SELECT in_flight = 0 AND requests >= 1 FROM ctxwin.worker_status WHERE database = 'r1'", 30),
	'the request comes back');
is($mock->requests_naming(0, 'ORD-1009'), 1, 'the request the worker sent carried message 9 (the race happened)');
is(sq("SELECT format('%s %s', summary_through_id, conversation_summary IS NULL) FROM ctxwin.sessions "
		  . "WHERE id = '50000000-0000-4000-8000-000000000001'"),
	'0 t', 'its summary did not land: the session has none');
is(sq("SELECT count(*) FROM ctxwin.summaries WHERE session_id = '50000000-0000-4000-8000-000000000001'"),
	'0', '... and no summaries row was written');
is(sq("SELECT unsummarized_messages FROM ctxwin.sessions WHERE id = '50000000-0000-4000-8000-000000000001'"),
	'7', 'seven messages left unsummarized');

# five more: over the trigger again; the worker plans anew
talk(13, 17);
ok(wait_for($node, 'r1', "SELECT summary_through_id > 0 FROM ctxwin.sessions WHERE id = '50000000-0000-4000-8000-000000000001'", 30),
	'five more messages: the worker summarizes again');
is(sq("SELECT summary_through_id FROM ctxwin.sessions WHERE id = '50000000-0000-4000-8000-000000000001'"),
	'15', '... through 15 (the newest two kept)');
is(summary_ids(), '1001,1002,1003,1004,1005,1006,1007,1013,1014,1015',
	'... a summary of 1 to 7 and 13 to 15: no retracted message in it');
is(sq("SELECT string_agg(m ->> 'content', '|') ~ 'ORD-10(08|09|10|11|12)' FROM jsonb_array_elements("
		  . "ctxwin.build_context('50000000-0000-4000-8000-000000000001')) m"),
	'f', 'the window sends no retracted message');
is(sq("SELECT count(*) FROM ctxwin.messages WHERE session_id = '50000000-0000-4000-8000-000000000001' "
		  . "AND retracted_at IS NOT NULL"), '5', 'the five retracted rows are still stored');

# an append and a retract of one session serialize on the session's row: a
# retract from 17 while an append (message 18) is open waits for it, then
# takes the new message back too
my $bg = bg_sql($node, 'r1', {}, 'BEGIN',
	"INSERT INTO ctxwin.messages (session_id, role, content) VALUES ('50000000-0000-4000-8000-000000000001', 'user', 'Order ORD-1018.')",
	'SELECT pg_sleep(2)', 'COMMIT');
ok(wait_for($node, 'r1', "SELECT count(*) = 1 FROM pg_stat_activity WHERE wait_event = 'PgSleep'", 10),
	'an append is open (it holds the session\'s row)');
$t0 = Time::HiRes::time();
is(sq("SELECT ctxwin.retract('50000000-0000-4000-8000-000000000001', 17)"), '2',
	'a retract from 17 meanwhile takes back 17 and the appended 18');
cmp_ok(Time::HiRes::time() - $t0, '>', 0.5, '... after waiting for the append to commit');
bg_done($bg);
is(sq("INSERT INTO ctxwin.messages (session_id, role, content) VALUES ('50000000-0000-4000-8000-000000000001', 'user', 'next') RETURNING id"),
	'19', 'the next message gets id 19');
is(sq("SELECT format('%s %s', unsummarized_messages, (SELECT count(*) FROM ctxwin.messages m WHERE m.session_id = s.id "
		  . "AND m.id > s.summary_through_id AND m.retracted_at IS NULL)) FROM ctxwin.sessions s "
		  . "WHERE id = '50000000-0000-4000-8000-000000000001'"),
	'2 2', 'the counter matches the messages not retracted after the summary');

$node->stop;
$mock->stop;
done_testing();
