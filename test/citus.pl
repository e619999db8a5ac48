# ctxwin on Citus: a coordinator and two worker nodes on loopback, each a
# cluster of its own with citus and ctxwin preloaded, and a plain node
# without Citus to compare with.  Runs only where the server has the citus
# extension (pg_available_extensions); skipped, with the reason, otherwise.
#
#   - a database with ctxwin 0.1.0 and a chat, updated to 0.2.0 and then
#     distributed: the chat's rows move into the shards, its window is the same
#   - ctxwin.distribute(): the tables distributed by session and co-located,
#     models, profiles and calibration reference tables, the session
#     functions delegated (one call, one round trip to one node); what it
#     refuses (no citus, a worker node) and what Citus refuses
#   - the same chats on the plain node and through the coordinator give the
#     same build_context, build_request, status, summaries, counters and
#     bill, byte for byte (sliding and stable windows, tool calls, summaries
#     as a system or a user message, extractive compaction with compact()),
#     both where the coordinator runs the function (within a larger query)
#     and where it is delegated to the node that holds the session (a call
#     on its own: that node reads its shard directly)
#   - four connections (two to the coordinator, one to each worker node)
#     inserting into the same sessions: ids gapless, counters exact
#   - the worker compacts on the coordinator with the mock LLM; on a worker
#     node it stands aside (worker_status says why), and so do compact() and
#     summarize_session()
#   - a profile's trigger lowered: its sessions are queued on their nodes
#     (the trigger on each node's copy of profiles) and summarized
#   - a shard moved to the other node while sessions take messages and
#     build_context calls: nothing lost, ids gapless
#   - a worker node stopped and started again: inserts into its sessions
#     fail clearly while it is down (no id spent), the other node's go on,
#     and after its restart everything goes on where it stopped
#   - a node added later: it gets ctxwin, the rebalancer moves shards onto
#     it, every window and count is the same after, and its sessions go on
use strict;
use warnings;
use FindBin;
use lib "$FindBin::RealBin/lib";
use CtxwinTest;
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;

# --- is Citus there? ---------------------------------------------------------
my $plain = ctxwin_node('plain');
my $citus_available = sql($plain, 'postgres',
	"SELECT count(*) FROM pg_available_extensions WHERE name = 'citus'");
if ($citus_available ne '1')
{
	$plain->stop;
	plan skip_all => 'the citus extension is not available to this server '
	  . '(pg_available_extensions has no citus): ctxwin on Citus is not tested here';
}

my $mock = CtxwinTest::Mock->start(extra => [ '--seed', '11' ]);

# citus before ctxwin in shared_preload_libraries, as Citus requires
sub citus_node
{
	my ($name, %conf) = @_;
	my $node = ctxwin_node(
		$name,
		mock => $mock,
		start => 0,
		conf => {
			shared_preload_libraries => 'citus,ctxwin',
			listen_addresses => '127.0.0.1',
			max_worker_processes => '24',
			'ctxwin.naptime_ms' => '500',
			%conf,
		});
	$node->start;
	sql_do($node, 'postgres', 'CREATE EXTENSION citus');
	return $node;
}

# The coordinator's worker is switched on after the byte-for-byte chats
# (which compact with compact() only); the worker nodes' are on from the
# start, to show they stand aside.
my $coord = citus_node('coordinator', 'ctxwin.databases' => '');
my $w1 = citus_node('worker1', 'ctxwin.databases' => 'postgres');
my $w2 = citus_node('worker2', 'ctxwin.databases' => 'postgres');
sql_do($coord, 'postgres',
	"SELECT citus_set_coordinator_host('127.0.0.1', " . $coord->port . ")");
sql_do($coord, 'postgres', "SELECT citus_add_node('127.0.0.1', " . $_->port . ")")
  for ($w1, $w2);

sub c { return sql($coord, 'postgres', @_); }

# --- distribute ----------------------------------------------------------------
# The plain node gets 0.2.0 at once.  The coordinator is a database that
# had ctxwin 0.1.0 and a chat (summarized), updated to 0.2.0 (Citus sends
# both to the worker nodes), then distributed with its rows in place.
sql_do($plain, 'postgres', 'CREATE EXTENSION ctxwin');
my $old = 'a0000000-0000-4000-8000-000000000001';
sql_do($coord, 'postgres', <<"SQL");
CREATE EXTENSION ctxwin VERSION '0.1.0';
INSERT INTO ctxwin.profiles (name, model, max_messages_before_summary, summary_strategy, min_recent_messages)
VALUES ('old', 'gpt-4o', 6, 'extractive', 2);
INSERT INTO ctxwin.sessions (id, profile, system_prompt) VALUES ('$old', 'old', 'Be brief.');
INSERT INTO ctxwin.messages (session_id, role, content)
SELECT '$old', CASE WHEN g % 2 = 1 THEN 'user' ELSE 'assistant' END, 'turn ' || g || ' of the old chat'
FROM generate_series(1, 10) g;
SELECT ctxwin.compact();
ALTER EXTENSION ctxwin UPDATE;
SQL
is(sql($w2, 'postgres', "SELECT extversion FROM pg_extension WHERE extname = 'ctxwin'"), '0.2.0',
	'ctxwin 0.1.0 created and updated to 0.2.0 on the coordinator: the worker nodes have 0.2.0 too');
my $old_window = c("SELECT ctxwin.build_context('$old')::text");
like(sql($plain, 'postgres', 'SELECT ctxwin.distribute()'),
	qr/ERROR:  ctxwin\.distribute\(\) needs the citus extension\nDETAIL:  The extension citus is not installed in this database\./,
	'distribute() without Citus: a clear error');
like(sql($w1, 'postgres', 'SELECT ctxwin.distribute()'),
	qr/ERROR:  ctxwin\.distribute\(\) must run on the Citus coordinator/,
	'CREATE EXTENSION on the coordinator reached the worker nodes; distribute() there is refused');
like(c('SELECT ctxwin.distribute(shard_count => 0)'), qr/ERROR:  shard_count must be at least 1/,
	'distribute() with no shard: refused');
$w2->stop('fast');
like(c('SELECT ctxwin.distribute()'),
	qr/ERROR:  could not prepare the worker nodes' copies of ctxwin's tables\nDETAIL:  Dropping their foreign keys failed: 127\.0\.0\.1:@{[ $w2->port ]}: /,
	'distribute() with a worker node down: refused, naming the node');
is(c("SELECT count(*) FROM pg_dist_partition WHERE logicalrelid::text LIKE 'ctxwin.%'"), '0',
	'... and nothing was distributed');
$w2->start;
is(c('SELECT ctxwin.distribute()'), '', 'distribute() on the coordinator');
is( c(  "SELECT string_agg(logicalrelid::text || ':' || partmethod::text, ' ' ORDER BY logicalrelid::text) "
	  . "FROM pg_dist_partition WHERE logicalrelid::text LIKE 'ctxwin.%'"),
	'ctxwin.calibration:n ctxwin.flush_events:h ctxwin.messages:h ctxwin.models:n ctxwin.profiles:n '
	  . 'ctxwin.sessions:h ctxwin.summaries:h ctxwin.usage_log:h',
	'sessions and the tables of its rows hash-distributed; models, profiles and calibration reference tables');
is( c(  "SELECT count(DISTINCT colocationid) FROM pg_dist_partition WHERE logicalrelid IN "
	  . "('ctxwin.sessions'::regclass, 'ctxwin.messages', 'ctxwin.summaries', 'ctxwin.flush_events', 'ctxwin.usage_log')"),
	'1', 'all five co-located: a session and its rows live on one node');
is( c(  "SELECT string_agg(objid::regprocedure::text, ' ' ORDER BY objid::regprocedure::text) FROM pg_dist_object "
	  . "WHERE classid = 'pg_proc'::regclass AND distribution_argument_index = 0 "
	  . "AND colocationid = (SELECT colocationid FROM pg_dist_partition WHERE logicalrelid = 'ctxwin.sessions'::regclass)"),
	'ctxwin.answer_tool_call(uuid,jsonb) ctxwin.build_context(uuid,integer,text,jsonb,boolean) '
	  . 'ctxwin.build_request(uuid,integer,text,jsonb,boolean,boolean) '
	  . 'ctxwin.context_report(uuid) ctxwin.context_status(uuid) ctxwin.messages_after(uuid,bigint) '
	  . 'ctxwin.search(uuid,text,text[],timestamp with time zone,timestamp with time zone,integer)',
	'the functions that take a session are delegated by it');
is(c("SELECT ctxwin.build_context('$old')::text"), $old_window,
	'the chat of before: the same window after distribute(), read from its shard');
is(c("SELECT count(*) FROM ctxwin.messages") . ' ' . c("SELECT count(*) FROM ctxwin.summaries"), '10 1',
	'... its messages and summary moved into the shards');
is(c("INSERT INTO ctxwin.messages (session_id, role, content) VALUES ('$old', 'user', 'And now?') RETURNING id"),
	'11', '... and its next message takes the next id');
is(c("SELECT string_agg(id::text, ',' ORDER BY id) FROM ctxwin.search('$old', 'turn 3')"), '3',
	'... and search finds a message of before distribute() in its shard (the search index moved with it)');
like(c('SELECT ctxwin.distribute()'), qr/NOTICE:  ctxwin is distributed already/,
	'distribute() again: a notice, nothing changed');
is( c(  "SELECT count(*) FROM pg_constraint WHERE contype = 'f' AND connamespace = 'ctxwin'::regnamespace "
	  . "AND conrelid::regclass::text NOT LIKE '%\\_1%'"),
	'7', 'the seven foreign keys are back');

# --- the same chats, on one node and on Citus ----------------------------------

# A deterministic chat text (an LCG over a word list), with some non-ASCII.
my @words = qw(the a of to and in is it that for on with we you this be can not
  request response server client database table index query column migration
  schema service endpoint handler function cache queue worker job log user
  order invoice payment token session config value field record file path
  change update check run read write return call send fetch parse validate
  because before after while again still already maybe exactly good better
  simple clear safe idea plan step problem question answer reason example
  PostgreSQL Redis Python TypeScript API JSON HTTP SQL orders_v2 user_id
  /api/orders 404 500 30 2 10 café naïve 東京 Zürich 🙂 ✓);
my $seed = 12345;
sub rnd { $seed = ($seed * 1103515245 + 12345) % 2147483648; return $seed; }
sub prose
{
	my ($n) = @_;
	my @w = map { $words[ rnd() % @words ] } 1 .. $n;
	$w[0] = ucfirst $w[0];
	return join(' ', @w) . '.';
}
sub lit { my ($s) = @_; $s =~ s/'/''/g; return "'$s'"; }

my @sid = map { sprintf('c%07x-0000-4000-8000-%012x', $_ * 7919, $_ * 104729) } 1 .. 12;
my @profile = map { (qw(cit_sliding cit_stable cit_message))[ $_ % 3 ] } 0 .. 11;
my $tools = '[{"type":"function","function":{"name":"lookup","description":"Looks up an order",'
  . '"parameters":{"type":"object","properties":{"order_id":{"type":"string"}},"required":["order_id"]}}}]';

my $setup = <<'SQL';
INSERT INTO ctxwin.profiles (name, model, context_window, response_reserve, max_messages_before_summary,
    max_tokens_before_summary, trigger_ratio, summary_strategy, min_recent_messages, max_summary_tokens,
    summary_placement, window_policy, cache_ttl) VALUES
  ('cit_sliding', 'gpt-4o', 1500, 200, 10, NULL, NULL, 'extractive', 4, 200, 'system', 'sliding', '5 min'),
  ('cit_stable', 'gpt-4', 1200, 200, NULL, NULL, NULL, 'extractive', 4, 200, 'system', 'stable', '5 min'),
  ('cit_message', 'claude-sonnet-4-5', 2000, 300, 12, NULL, 0.8, 'extractive', 4, 250, 'message', 'stable', '0');
SQL
$setup .= "INSERT INTO ctxwin.sessions (id, profile, system_prompt) VALUES\n"
  . join(",\n",
	map { "  ('$sid[$_]', '$profile[$_]', " . lit("You are assistant $_. " . prose(12)) . ")" } 0 .. 11)
  . ";\n";

# 36 rounds, one message per session per round, each its own statement;
# every 7th assistant turn calls a tool, answered in the next message.
my $chat = '';
my %pending;
for my $round (1 .. 36)
{
	for my $i (0 .. 11)
	{
		my $s = $sid[$i];
		if (my $call = delete $pending{$s})
		{
			$chat .= "INSERT INTO ctxwin.messages (session_id, role, content, tool_call_id) VALUES "
			  . "('$s', 'tool', " . lit('{"status":"shipped","note":' . '"' . prose(5) . '"}') . ", '$call');\n";
			next;
		}
		if ($round % 2 == 1)
		{
			$chat .= "INSERT INTO ctxwin.messages (session_id, role, content) VALUES ('$s', 'user', "
			  . lit(prose(8 + rnd() % 40)) . ");\n";
		}
		elsif (($round + $i) % 7 == 0)
		{
			my $call = "call_${round}_$i";
			$pending{$s} = $call;
			$chat .= "INSERT INTO ctxwin.messages (session_id, role, content, tool_calls) VALUES ('$s', 'assistant', NULL, "
			  . lit(qq([{"id":"$call","type":"function","function":{"name":"lookup","arguments":"{\\"order_id\\":\\"$round$i\\"}"}}]))
			  . ");\n";
		}
		else
		{
			$chat .= "INSERT INTO ctxwin.messages (session_id, role, content) VALUES ('$s', 'assistant', "
			  . lit(prose(10 + rnd() % 60)) . ");\n";
		}
	}
	if ($round % 6 == 0)
	{
		$chat .= "SELECT 'round $round', '$_', md5(ctxwin.build_context('$_')::text), "
		  . "md5(ctxwin.build_context('$_', 600)::text);\n"
		  for @sid;
	}
	$chat .= "SELECT 'compact', ctxwin.compact();\n" if $round % 12 == 0;
}

# the bill: each session's requests recorded, with the windows they sent
for my $k (0 .. $#sid)
{
	my $s = $sid[$k];
	my $usage = $profile[$k] eq 'cit_message'
	  ? '{"input_tokens": ' . (300 + $k) . ', "cache_read_input_tokens": 200, "cache_creation_input_tokens": 50, "output_tokens": 40}'
	  : '{"prompt_tokens": ' . (400 + $k) . ', "completion_tokens": 30, "prompt_tokens_details": {"cached_tokens": 128}}';
	$chat .= "SELECT 'usage', ctxwin.record_usage('$s', '$usage', 20, " . (350 + $k) . ");\n";
}
my $outputs = <<'SQL';
SELECT model, encoding, requests, provider_tokens, counted_tokens, margin FROM ctxwin.calibration ORDER BY model;
SELECT profile, sessions, requests, input_tokens, cached_tokens, cache_write_tokens, output_tokens, cache_hit_ratio,
       request_cost, summary_cost, cost
FROM ctxwin.profile_usage WHERE profile LIKE 'cit\_%' ORDER BY profile;
SQL
for my $s (@sid)
{
	$outputs .= <<"SQL";
SELECT '$s', ctxwin.build_context('$s')::text;
SELECT '$s', ctxwin.build_context('$s', 500)::text;
SELECT '$s', ctxwin.build_context('$s', NULL, 'anthropic')::text;
SELECT '$s', ctxwin.build_request('$s', NULL, 'openai', '$tools')::text;
SELECT '$s', ctxwin.build_request('$s', 900, 'anthropic', '$tools')::text;
SELECT ctxwin.build_context('$s');
SELECT ctxwin.build_context('$s', 700);
SELECT ctxwin.build_context('$s', NULL, 'anthropic');
SELECT ctxwin.build_request('$s', 900, 'anthropic', '$tools');
SELECT ctxwin.context_report('$s') ~ 'Session $s';
SELECT ctxwin.messages_after('$s', 30);
SELECT '$s', budget, message_count, summary_through_id, messages_since_summary, tokens_since_summary,
       context_tokens, window_messages, window_tokens, dropped_messages, summary_version, summary_tokens,
       will_trigger, triggers_firing, note
FROM ctxwin.context_status('$s');
SELECT '$s', id, role, content, tool_calls, tool_call_id, token_count, token_encoding
FROM ctxwin.messages_after('$s', 28);
SELECT '$s', version, from_id, through_id, content, token_count, strategy
FROM ctxwin.summaries WHERE session_id = '$s' ORDER BY version;
SELECT '$s', message_count, token_count, unsummarized_messages, unsummarized_tokens, prompt_tokens,
       count_encoding, pending_tool_calls, summary_through_id, summary_tokens, summary_version,
       conversation_summary
FROM ctxwin.sessions WHERE id = '$s';
SELECT '$s', kind, id, provider, model, input_tokens, cached_tokens, cache_write_tokens, output_tokens, cost,
       window_first_id, window_tokens
FROM ctxwin.usage_ledger WHERE session_id = '$s' ORDER BY kind, id;
SELECT '$s', requests, input_tokens, cached_tokens, cache_write_tokens, output_tokens, cache_hit_ratio, cost
FROM ctxwin.usage WHERE session_id = '$s';
SQL
}

my $script = "$setup$chat$outputs";
my $scriptfile = PostgreSQL::Test::Utils::tempdir() . '/chats.sql';
append_to_file($scriptfile, $script);

sub run_script
{
	my ($node) = @_;
	my ($rc, $out, $err) = $node->psql('postgres', undef,
		extra_params => [ '-v', 'ON_ERROR_STOP=1', '-f', $scriptfile ]);
	return ($rc, $out, $err);
}
my ($prc, $pout, $perr) = run_script($plain);
my ($crc, $cout, $cerr) = run_script($coord);
is($prc, 0, 'the chats ran on the plain node') or diag($perr);
is($crc, 0, 'the chats ran through the coordinator') or diag($cerr);
# (messages_after's rows carry their created_at, which differs between the two)
s/\d{4}-\d\d-\d\d \d\d:\d\d:\d\d(?:\.\d+)?\+00/<created_at>/g for ($pout, $cout);
my @p = split /\n/, $pout;
my @cl = split /\n/, $cout;
cmp_ok(scalar(@p), '>', 500, 'the chats printed their windows (' . scalar(@p) . ' lines)');
my $first_diff;
for my $k (0 .. ($#p > $#cl ? $#p : $#cl))
{
	if (($p[$k] // '<none>') ne ($cl[$k] // '<none>'))
	{
		$first_diff = $k;
		last;
	}
}
ok(!defined $first_diff, 'build_context, build_request, status, messages, summaries, counters and the bill: '
	  . 'byte for byte the same on Citus as on one node')
  or diag("first difference at line $first_diff:\n  one node: "
	  . ($p[$first_diff] // '<none>') . "\n  Citus:    " . ($cl[$first_diff] // '<none>'));
like($pout, qr/\|extractive\n/, 'the chats made extractive summaries');
like($pout, qr/"role": "tool"/, 'the chats hold tool messages');
like($cout, qr/^cit_message\|4\|4\|/m, 'the bill through the coordinator: sessions and requests per profile');

# the sessions are spread over both worker nodes
is( c(  "SELECT count(DISTINCT nodeport) FROM (VALUES "
	  . join(',', map {"('$_'::uuid)"} @sid)
	  . ") v(id), LATERAL (SELECT nodeport FROM pg_dist_shard_placement WHERE shardid = "
	  . "get_shard_id_for_distribution_column('ctxwin.sessions', v.id)) n"),
	'2', 'the chats\' sessions are on both worker nodes');

# one call, one round trip: the coordinator sends the call itself to the node
# (Citus delegates a call that is the whole query, outside a transaction block)
my $trace = sql($coord, 'postgres', "SET citus.log_remote_commands = on;\nSELECT ctxwin.build_context('$sid[0]');");
my @issued = $trace =~ /NOTICE:  issuing (.*)/g;
is(scalar(@issued), 1, 'build_context through the coordinator: one command to one node');
like($issued[0] // '', qr/^SELECT ctxwin\.build_context\('$sid[0]'::uuid/, '... the call itself, delegated');

# what Citus refuses, and says so
like(c('SELECT ctxwin.build_context(id) FROM ctxwin.sessions LIMIT 1'),
	qr/ERROR:  cannot execute a distributed query from a query on a shard/,
	'build_context inside a query of the distributed sessions: refused by Citus, with its reason');
like(sql($w1, 'postgres', 'SELECT ctxwin.compact()'),
	qr/ERROR:  compact\(\) must run on the Citus coordinator/, 'compact() on a worker node: refused');
like(sql($w1, 'postgres', "SELECT ctxwin.summarize_session('$sid[0]')"),
	qr/ERROR:  summarize_session\(\) must run on the Citus coordinator/,
	'summarize_session() on a worker node: refused');
ok(wait_for($w1, 'postgres', "SELECT state = 'citus worker node' FROM ctxwin.worker_status", 20),
	'the worker on a worker node stands aside, and worker_status says why');

# --- concurrent inserts from several connections, several nodes --------------
my @cs = map { sprintf('d%07x-0000-4000-8000-%012x', $_ * 31337, $_ * 2749) } 1 .. 6;
sql_do($coord, 'postgres',
	"INSERT INTO ctxwin.sessions (id) VALUES " . join(',', map {"('$_')"} @cs));
my $per = 60;
my @h;
for my $conn (0 .. 3)
{
	my $node = ($coord, $coord, $w1, $w2)[$conn];
	my $sql = '';
	for my $k (1 .. $per)
	{
		for my $s (@cs)
		{
			$sql .= "INSERT INTO ctxwin.messages (session_id, role, content) VALUES ('$s', 'user', "
			  . lit("connection $conn message $k " . prose(6)) . ");\n";
		}
	}
	my $f = PostgreSQL::Test::Utils::tempdir() . "/ins$conn.sql";
	append_to_file($f, $sql);
	push @h, bg_psql($node, 'postgres', '-v', 'ON_ERROR_STOP=1', '-f', $f);
}
my $failed = 0;
for my $h (@h) { $h->finish or $failed++; }
is($failed, 0, 'four connections (two to the coordinator, one to each worker node) inserted 1,440 messages');
my $n = 4 * $per;
is( c(  "SELECT count(*) FROM (SELECT m.session_id, count(*) AS n, count(DISTINCT m.id) AS d, min(m.id) AS lo, "
	  . "max(m.id) AS hi, sum(m.token_count) AS t FROM ctxwin.messages m WHERE m.session_id IN ("
	  . join(',', map {"'$_'"} @cs)
	  . ") GROUP BY m.session_id) x JOIN ctxwin.sessions s ON s.id = x.session_id "
	  . "WHERE x.n = $n AND x.d = $n AND x.lo = 1 AND x.hi = $n AND s.message_count = $n AND s.token_count = x.t"),
	'6', "each session: ids 1 to $n without a gap, message_count and token_count exact");
is( c(  "SELECT count(*) FROM ctxwin.sessions s WHERE s.id IN ("
	  . join(',', map {"'$_'"} @cs)
	  . ") AND s.unsummarized_tokens = (SELECT sum(token_count) FROM ctxwin.messages m WHERE m.session_id = s.id)"),
	'6', '... and unsummarized_tokens');

# --- the worker, on the coordinator, with the mock LLM ------------------------
my @ws = map { sprintf('e%07x-0000-4000-8000-%012x', $_ * 7727, $_ * 6151) } 1 .. 6;
sql_do($coord, 'postgres', <<"SQL");
INSERT INTO ctxwin.profiles (name, model, max_messages_before_summary, summary_strategy, min_recent_messages,
                             window_policy)
VALUES ('cit_llm', 'gpt-4o', 6, 'llm', 2, 'sliding');
INSERT INTO ctxwin.sessions (id, profile) VALUES @{[ join(',', map {"('$_', 'cit_llm')"} @ws) ]};
SQL
for my $k (1 .. 8)
{
	sql_do($coord, 'postgres',
		    "INSERT INTO ctxwin.messages (session_id, role, content) VALUES "
		  . join(',', map { "('$_', '" . ($k % 2 ? 'user' : 'assistant') . "', " . lit(prose(20)) . ")" } @ws));
}
my $wsin = join(',', map {"'$_'"} @ws);
is(c("SELECT count(*) FROM ctxwin.sessions WHERE id IN ($wsin) AND compaction_queued_at IS NOT NULL"),
	'6', 'six sessions on both nodes queued for an LLM summary');
my $nreq0 = $mock->nreq;
set_conf($coord, 'ctxwin.databases' => 'postgres');
ok( wait_for(
		$coord, 'postgres',
		"SELECT count(*) = 6 FROM ctxwin.sessions WHERE id IN ($wsin) AND summary_version = 1 "
		  . "AND compaction_queued_at IS NULL", 60),
	'the coordinator\'s worker summarized all six with the LLM');
is(c("SELECT count(*) FROM ctxwin.summaries WHERE session_id IN ($wsin) AND strategy = 'llm' AND model LIKE 'mock%'"),
	'6', '... one LLM summary each, in the shards')
  or diag(c("SELECT session_id, version, strategy, model, left(content, 40) FROM ctxwin.summaries WHERE session_id IN ($wsin)"));
is(c("SELECT count(*) FROM ctxwin.flush_events WHERE session_id IN ($wsin)"),
	'6', '... and one outbox row each');
# (the sessions of the concurrent inserts were queued too: 240 messages)
ok( wait_for($coord, 'postgres', "SELECT count(*) = 0 FROM ctxwin.sessions WHERE compaction_queued_at IS NOT NULL", 60),
	'the queue is empty');
is($mock->nreq - $nreq0, c("SELECT count(*) FROM ctxwin.summaries WHERE strategy = 'llm'"),
	'one request per LLM summary: no session summarized twice')
  or diag(join("\n", log_since($coord, 0) =~ /^.*(?:ERROR|WARNING|LOG:  ctxwin).*$/mg));
is(sql($coord, 'postgres', "SELECT state FROM ctxwin.worker_status"), 'idle',
	'the coordinator\'s worker is idle after');

# --- a changed profile queues its sessions on their nodes ---------------------
my @rq = map { sprintf('f%07x-0000-4000-8000-%012x', $_ * 4421, $_ * 877) } 1 .. 6;
my $rqin = join(',', map {"'$_'"} @rq);
sql_do($coord, 'postgres', <<"SQL");
INSERT INTO ctxwin.profiles (name, model, max_messages_before_summary, summary_strategy, min_recent_messages,
                             window_policy)
VALUES ('cit_requeue', 'gpt-4o', 50, 'llm', 2, 'sliding');
INSERT INTO ctxwin.sessions (id, profile) VALUES @{[ join(',', map {"('$_', 'cit_requeue')"} @rq) ]};
INSERT INTO ctxwin.messages (session_id, role, content)
SELECT s, CASE WHEN g % 2 = 1 THEN 'user' ELSE 'assistant' END, 'turn ' || g
FROM unnest(ARRAY[$rqin]::uuid[]) s, generate_series(1, 10) g ORDER BY g, s;
SQL
is(c("SELECT count(*) FROM ctxwin.sessions WHERE id IN ($rqin) AND compaction_queued_at IS NULL AND summary_version = 0"),
	'6', 'six sessions on both nodes under their trigger');
sql_do($coord, 'postgres', "UPDATE ctxwin.profiles SET max_messages_before_summary = 8 WHERE name = 'cit_requeue'");
ok( wait_for(
		$coord, 'postgres',
		"SELECT count(*) = 6 FROM ctxwin.sessions WHERE id IN ($rqin) AND summary_version = 1", 60),
	'lowering the profile\'s trigger queued them on their nodes, and the worker summarized them');

# --- a shard moved while its sessions are in use -------------------------------
my $ms = $cs[0];
my ($shard, $from) = split /\|/,
  c("SELECT shardid, nodeport FROM pg_dist_shard_placement WHERE shardid = get_shard_id_for_distribution_column('ctxwin.sessions', '$ms')");
my $to = $from == $w1->port ? $w2->port : $w1->port;
my $before = c("SELECT message_count FROM ctxwin.sessions WHERE id = '$ms'");
my $moves = '';
for my $k (1 .. 150)
{
	$moves .= "INSERT INTO ctxwin.messages (session_id, role, content) VALUES ('$ms', 'user', "
	  . lit("during the move $k " . prose(6)) . ");\n";
	$moves .= "SELECT length(ctxwin.build_context('$ms')::text) > 0;\n" if $k % 10 == 0;
}
my $mf = PostgreSQL::Test::Utils::tempdir() . '/move.sql';
append_to_file($mf, $moves);
my $mh = bg_psql($coord, 'postgres', '-v', 'ON_ERROR_STOP=1', '-f', $mf);
my $moved = sql($coord, 'postgres',
	"SELECT citus_move_shard_placement($shard, '127.0.0.1', $from, '127.0.0.1', $to, "
	  . "shard_transfer_mode => 'block_writes')");
is($moved, '', 'the session\'s shard moved to the other worker node while messages came in');
ok($mh->finish, 'every insert and build_context during the move succeeded');
is(c("SELECT nodeport FROM pg_dist_shard_placement WHERE shardid = $shard"), $to, 'the shard is on the other node now');
my $after = $before + 150;
is( c(  "SELECT s.message_count || ' ' || count(m.*) || ' ' || count(DISTINCT m.id) || ' ' || max(m.id) "
	  . "|| ' ' || (s.token_count = sum(m.token_count)) FROM ctxwin.sessions s JOIN ctxwin.messages m "
	  . "ON m.session_id = s.id WHERE s.id = '$ms' GROUP BY s.id"),
	"$after $after $after $after true", 'nothing lost: ids gapless, counters exact after the move');
sql_do($coord, 'postgres',
	"INSERT INTO ctxwin.messages (session_id, role, content) VALUES ('$ms', 'assistant', 'After the move.')");
is(c("SELECT max(id) FROM ctxwin.messages WHERE session_id = '$ms'"), $after + 1,
	'the next message after the move takes the next id');

# --- a worker node stopped and started ------------------------------------------
# a session on worker1 and one on worker2
my ($on1, $on2);
for my $s (@cs)
{
	my $port = c("SELECT nodeport FROM pg_dist_shard_placement WHERE shardid = get_shard_id_for_distribution_column('ctxwin.sessions', '$s')");
	$on1 //= $s if $port == $w1->port;
	$on2 //= $s if $port == $w2->port;
}
ok(defined $on1 && defined $on2, 'sessions on both worker nodes to try');
my $n1 = c("SELECT message_count FROM ctxwin.sessions WHERE id = '$on1'");
$w1->stop('immediate');
like(c("INSERT INTO ctxwin.messages (session_id, role, content) VALUES ('$on1', 'user', 'While down.')"),
	qr/ERROR:  connection to the remote node .* failed/,
	'an insert into a session of a stopped node fails, saying which node');
is(c("INSERT INTO ctxwin.messages (session_id, role, content) VALUES ('$on2', 'user', 'Still up.') RETURNING id > 0"),
	't', 'the other node\'s sessions take messages meanwhile');
$w1->start;
ok(wait_until(30, sub { sql_ok($coord, 'postgres', "SELECT ctxwin.build_context('$on1')") }),
	'after the node is back, its sessions answer through the coordinator');
is(c("INSERT INTO ctxwin.messages (session_id, role, content) VALUES ('$on1', 'user', 'Back.') RETURNING id"),
	$n1 + 1, 'the failed insert spent no id: the next one is the next number');
is(c("SELECT message_count = $n1 + 1 AND token_count = (SELECT sum(token_count) FROM ctxwin.messages WHERE session_id = '$on1') "
	  . "FROM ctxwin.sessions WHERE id = '$on1'"), 't', '... and the counters are exact');

# --- a node added, the shards rebalanced onto it ----------------------------------
# (the worker paused: a summary it writes meanwhile would change a window)
set_conf($coord, 'ctxwin.databases' => '');
ok(wait_for($coord, 'postgres', "SELECT count(*) = 0 FROM pg_stat_activity WHERE backend_type = 'ctxwin worker'", 20),
	'the coordinator\'s worker paused');
my $per_session_sql = "SELECT string_agg(s || ' ' || md5(ctxwin.build_context(s::uuid)::text), E'\\n' ORDER BY s) "
  . "FROM unnest(ARRAY[" . join(',', map {"'$_'"} @sid, @cs) . "]) s";
my $per_session_before = c($per_session_sql);
my $sum_sql = "SELECT md5(string_agg(h, '' ORDER BY i)) FROM (SELECT i, md5(ctxwin.build_context(s::uuid)::text) AS h "
  . "FROM unnest(ARRAY[" . join(',', map {"'$_'"} @sid, @cs) . "]) WITH ORDINALITY AS u(s, i)) x";
my $sum_before = c($sum_sql);
my $counts_sql = "SELECT sum(message_count) || ' ' || sum(token_count) || ' ' || "
  . "(SELECT count(*) FROM ctxwin.messages) || ' ' || (SELECT count(*) FROM ctxwin.summaries) FROM ctxwin.sessions";
my $counts_before = c($counts_sql);
my $w3 = citus_node('worker3', 'ctxwin.databases' => 'postgres');
sql_do($coord, 'postgres', "SELECT citus_add_node('127.0.0.1', " . $w3->port . ")");
is(sql($w3, 'postgres', "SELECT extversion FROM pg_extension WHERE extname = 'ctxwin'"), '0.2.0',
	'a node added later gets ctxwin from Citus');
my ($rb, $rbrc) = sql($coord, 'postgres',
	"SELECT rebalance_table_shards('ctxwin.sessions', shard_transfer_mode => 'block_writes')");
is($rbrc, 0, 'the rebalancer ran') or diag($rb);
cmp_ok(c("SELECT count(*) FROM pg_dist_shard_placement WHERE nodeport = " . $w3->port), '>', 0,
	'... and moved shards onto the new node');
is(c($sum_sql), $sum_before, 'every session\'s window is the same after the rebalance')
  or diag("before:\n$per_session_before\nafter:\n" . c($per_session_sql));
is(c($counts_sql), $counts_before, 'no message, summary or count lost');
my $on3 = c("SELECT s.id FROM ctxwin.sessions s WHERE s.id IN (" . join(',', map {"'$_'"} @sid, @cs)
	  . ") AND (SELECT nodeport FROM pg_dist_shard_placement WHERE shardid = "
	  . "get_shard_id_for_distribution_column('ctxwin.sessions', s.id)) = " . $w3->port . " LIMIT 1");
my $n3 = c("SELECT message_count FROM ctxwin.sessions WHERE id = '$on3'");
is(sql($w3, 'postgres',
	"INSERT INTO ctxwin.messages (session_id, role, content) VALUES ('$on3', 'user', 'On the new node.') RETURNING id"),
	$n3 + 1, 'a session moved to the new node takes its next message there, with the next id');

$mock->stop;
done_testing();
