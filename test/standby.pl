# ctxwin's read functions on a hot standby: build_context, context_status,
# context_report, messages_after and the token counters run on a streaming
# replica (where no function may write, take a row lock or need a new xid)
# and answer exactly as on the primary, for data that arrived both by the
# base backup and by streaming; writes are refused there as on any standby.
# Builds its own primary and standby with PostgreSQL's test framework (Unix
# sockets in a temporary directory, ports of their own).
use strict;
use warnings;
use FindBin;
use lib "$FindBin::RealBin/lib";
use CtxwinTest;
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;

my $db = 'ctxwin_standby_t';

# the primary
my $primary = ctxwin_node('primary', allows_streaming => 1, shared_buffers => '16MB');
sql_do($primary, 'postgres', "CREATE DATABASE $db");
sql_do($primary, $db, <<'SQL');
CREATE EXTENSION ctxwin;
INSERT INTO ctxwin.profiles (name, model, summary_placement) VALUES ('replica', 'gpt-4o', 'message');
INSERT INTO ctxwin.sessions (id, profile, system_prompt) VALUES
  ('00000000-0000-4000-8000-000000000001', 'replica', 'You answer questions about orders.'),
  ('00000000-0000-4000-8000-000000000002', 'default', NULL);
INSERT INTO ctxwin.messages (session_id, role, content)
SELECT '00000000-0000-4000-8000-000000000001', CASE WHEN i % 2 = 1 THEN 'user' ELSE 'assistant' END,
       format('Turn %s about order #%s: Grüße, 日本語, %s', i, 4000 + i, repeat('details ', i))
FROM generate_series(1, 10) i;
INSERT INTO ctxwin.messages (session_id, role, tool_calls) VALUES
  ('00000000-0000-4000-8000-000000000001', 'assistant',
   '[{"id": "call_1", "type": "function", "function": {"name": "order_status", "arguments": "{\"order\": 4011}"}}]');
INSERT INTO ctxwin.messages (session_id, role, content, tool_call_id) VALUES
  ('00000000-0000-4000-8000-000000000001', 'tool', '{"order": 4011, "status": "shipped"}', 'call_1');
UPDATE ctxwin.sessions SET conversation_summary = 'The user asked about orders #4001 to #4004.', summary_through_id = 4
WHERE id = '00000000-0000-4000-8000-000000000001';
SQL

# the standby, from a base backup, streaming from the primary
$primary->backup('base');
my $standby = PostgreSQL::Test::Cluster->new('standby');
$standby->init_from_backup($primary, 'base', has_streaming => 1);
$standby->start;

# more on the primary, which reaches the standby by streaming replication
sql_do($primary, $db, <<'SQL');
INSERT INTO ctxwin.messages (session_id, role, content) VALUES
  ('00000000-0000-4000-8000-000000000001', 'assistant', 'Order #4011 has shipped.'),
  ('00000000-0000-4000-8000-000000000001', 'user', 'Thanks! Now read this log: ' || repeat('ERROR at line 42: null pointer; ', 400)),
  ('00000000-0000-4000-8000-000000000002', 'user', 'Hello from the second session.');
UPDATE ctxwin.sessions SET conversation_summary = 'The user asked about orders #4001 to #4008.', summary_through_id = 8
WHERE id = '00000000-0000-4000-8000-000000000001';
SQL
my $lsn = sql_do($primary, $db, 'SELECT pg_current_wal_lsn()');
eval { $primary->wait_for_catchup($standby, 'replay', $lsn); };
note("wait_for_catchup: $@") if $@;

is(sql($standby, $db, 'SELECT pg_is_in_recovery()'), 't', 'the standby is in recovery (a hot standby)');
is(sql($standby, $db, 'SELECT status FROM pg_stat_wal_receiver'), 'streaming', 'the standby streams from the primary');
is(sql($standby, $db, "SELECT pg_last_wal_replay_lsn() >= '$lsn'::pg_lsn"), 't', "the standby replayed the primary's WAL");
is( sql($standby, $db,
		"SELECT string_agg(message_count || '/' || summary_through_id, ' ' ORDER BY id) FROM ctxwin.sessions"),
	'14/8 1/0',
	'the standby has the streamed messages and summary');

# Every read function answers on the standby exactly as on the primary.
my $s1 = "'00000000-0000-4000-8000-000000000001'";
my $s2 = "'00000000-0000-4000-8000-000000000002'";

# same(SQL, DESCRIPTION): the query runs without error on the standby and
# gives the primary's answer (a non-empty one)
sub same
{
	my ($query, $desc) = @_;
	my ($rc, $want) = $primary->psql($db, $query);
	my $got = sql($standby, $db, $query);
	if ($rc == 0 && $want ne '' && $got eq $want)
	{
		pass($desc);
	}
	else
	{
		fail($desc);
		diag("  primary: '" . substr($want, 0, 300) . "'");
		diag("  standby: '" . substr($got,  0, 300) . "'");
	}
}

same("SELECT ctxwin.build_context($s1)", 'build_context on the standby = on the primary');
same("SELECT ctxwin.build_context($s1, NULL, 'anthropic'), ctxwin.build_context($s2, 500, 'anthropic')",
	'build_context in anthropic format on the standby = on the primary');
# a budget smaller than the newest message: it is cut in the middle
like(sql($standby, $db, "SELECT ctxwin.build_context($s1, 600)"),
	qr/\Qtokens omitted ...]\E/, 'on the standby a small budget cuts the newest message');
same("SELECT ctxwin.build_context($s1, 600)", 'the cut window on the standby = on the primary');
is(sql($standby, $db, "SELECT ctxwin.messages_tokens(ctxwin.build_context($s1, 600), 'o200k_base') + 3 <= 600"),
	't', 'the cut window fits its budget');
same("SELECT to_jsonb(c) - 'summary_age' FROM ctxwin.context_status($s1) c",
	'context_status on the standby = on the primary');
same("SELECT regexp_replace(ctxwin.context_report($s1), 'updated .* ago', 'updated ... ago')",
	'context_report on the standby = on the primary');
same("SELECT jsonb_agg(to_jsonb(m) ORDER BY m.id) FROM ctxwin.messages_after($s1, 6) m",
	'messages_after on the standby = on the primary');
same(<<'SQL', 'the token counters on the standby = on the primary');
SELECT ctxwin.count_tokens('Grüße aus Köln, 日本語', 'o200k_base'), ctxwin.count_tokens('hello world'),
       ctxwin.tokenize('hello world'), ctxwin.detokenize(ctxwin.tokenize('Grüße', 'o200k_base'), 'o200k_base'),
       ctxwin.count_message_tokens('{"role": "user", "content": "hi"}', 'o200k_base')
SQL
is(sql($standby, $db, "SELECT ctxwin.count_tokens('hello world')"), '2', "count_tokens('hello world') is 2 on the standby");

# Writes are refused on the standby.
like(sql($standby, $db, "INSERT INTO ctxwin.messages (session_id, role, content) VALUES ($s1, 'user', 'on the standby')"),
	qr/cannot execute INSERT in a read-only transaction/, 'an INSERT into ctxwin.messages fails on the standby');
is(sql($primary, $db, "SELECT message_count FROM ctxwin.sessions WHERE id = $s1"), '14', 'and the primary is unchanged');

done_testing();
