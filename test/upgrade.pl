# Upgrades in place, on a server that preloads ctxwin and runs its worker:
#
#  - a database at 0.1.0 (the released install script) under the current
#    library: the worker waits for ALTER EXTENSION ctxwin UPDATE and says so
#    once in the log; the application's functions keep working;
#  - sessions, messages, summaries, custom models and profiles filled in
#    0.1.0, then ALTER EXTENSION ctxwin UPDATE: the schema is exactly what a
#    fresh install creates (pg_dump --schema-only --binary-upgrade, which
#    lists every member object, compared with a fresh database's), the data
#    and counters are as they were, build_context answers as before, and the
#    worker goes on by itself and compacts what was queued meanwhile;
#  - the library file replaced on disk while the server runs (a new ctxwin
#    installed): new connections keep working on the library the server
#    started with, and the worker keeps running;
#  - an update script newer than the running library: refused with a clear
#    error before it changes anything; a database whose ctxwin is newer than
#    the worker's library: the worker leaves it alone and says why.
#
# Runs on a private copy of the server's installation (binaries, libraries,
# share directory), so that it can add update scripts and replace the
# library file without touching the installation the other tests use.
use strict;
use warnings;
use File::Basename qw(dirname);
use File::Copy qw(copy);
use File::Path qw(make_path);
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;

my $pg_config = $ENV{PG_CONFIG} || 'pg_config';
sub pg_config_value
{
	my $v = `$pg_config --$_[0]`;
	die "pg_config --$_[0] failed" if $? != 0;
	chomp $v;
	return $v;
}
my %dir = map { $_ => pg_config_value($_) } qw(bindir pkglibdir sharedir);

# The version the tree builds (ctxwin.control) and the released ones.
my $root_dir = dirname(dirname(__FILE__));
my ($current) = slurp_file("$root_dir/ctxwin.control") =~ /^default_version = '([^']+)'/m;
my $first = '0.1.0';

# The private installation: the same layout under a new root, so the server
# finds its share directory and libraries relative to its own binaries.
my $root = PostgreSQL::Test::Utils::tempdir();
for my $d (values %dir)
{
	make_path("$root$d");
	system('cp', '-a', "$d/.", "$root$d/") == 0 or BAIL_OUT("could not copy $d");
}
my $install = dirname("$root$dir{bindir}");
my $ext = "$root$dir{sharedir}/extension";
my $lib = "$root$dir{pkglibdir}/ctxwin.so";
-f "$ext/ctxwin--$first.sql" && -f $lib
  or BAIL_OUT("ctxwin is not installed in $dir{sharedir} and $dir{pkglibdir}");

my $node = PostgreSQL::Test::Cluster->new('upgrade', install_path => $install);
# UTF8 and a UTF-8 locale whatever the caller's LANG (without one, initdb
# would make a SQL_ASCII cluster, where search finds no non-ASCII word)
$node->init(extra => [ '-E', 'UTF8', '--locale=C.UTF-8' ]);
$node->append_conf(
	'postgresql.conf', qq{
shared_preload_libraries = 'ctxwin'
ctxwin.databases = 'up'
ctxwin.naptime_ms = 200
ctxwin.llm_provider = 'extractive'
});
$node->start;
is( $node->safe_psql('postgres', 'SHOW data_directory'),
	$node->data_dir, 'the server of the private installation runs');
is( $node->safe_psql(
		'postgres', "SELECT pg_encoding_to_char(encoding) || ' ' || datctype FROM pg_database WHERE datname = 'template1'"),
	'UTF8 C.UTF-8', 'its cluster is UTF8 with the C.UTF-8 locale, whatever the locale of the caller');

sub q_up { return $node->safe_psql('up', $_[0]); }
# add_turns(SESSION-NUMBER, N, FORMAT): N messages, user and assistant by
# turns, FORMAT's %s the turn's number
sub add_turns
{
	my ($n, $count, $format) = @_;
	q_up(   "INSERT INTO ctxwin.messages (session_id, role, content) "
		  . "SELECT '00000000-0000-4000-8000-00000000000$n', CASE WHEN i % 2 = 1 THEN 'user' ELSE 'assistant' END, "
		  . "format('$format', i) FROM generate_series(1, $count) i");
}
# worker_looked(): two rounds of the worker begun since now are over (a
# round is a transaction of the worker: query_start in pg_stat_activity is
# its start, state idle its end); a worker that does not serve the database
# looks at it every naptime (200 ms) and leaves it alone
sub worker_looked
{
	my $t = q_up('SELECT now()');
	my $worker = "FROM pg_stat_activity WHERE backend_type = 'ctxwin worker' AND datname = 'up'";
	for (1 .. 2)
	{
		$node->poll_query_until('up', "SELECT query_start > '$t' AND state = 'idle' $worker")
		  or die "the worker of up did not look at it\n";
		$t = q_up("SELECT query_start $worker");
	}
	return;
}
sub worker_state
{
	return $node->safe_psql('up', "SELECT state FROM ctxwin.worker_status WHERE database = 'up'");
}

# --- 0.1.0 under the current library -----------------------------------------
$node->safe_psql('postgres', 'CREATE DATABASE up');
$node->safe_psql('postgres', 'CREATE DATABASE fresh');
q_up("CREATE EXTENSION ctxwin VERSION '$first'");
is(q_up("SELECT extversion FROM pg_extension WHERE extname = 'ctxwin'"),
	$first, "CREATE EXTENSION ctxwin VERSION '$first' installs the released script");

ok( $node->poll_query_until(
		'up', "SELECT state = 'version mismatch' FROM ctxwin.worker_status WHERE database = 'up'"),
	'the worker sees the older version and does not serve it');
my $log_offset = 0;
ok( $node->log_contains(
		qr/ctxwin worker is waiting for ALTER EXTENSION ctxwin UPDATE in database "up"\n.*DETAIL:  The database has ctxwin \Q$first\E; the server runs ctxwin's library \Q$current\E\.\n.*HINT:  Run ALTER EXTENSION ctxwin UPDATE in that database; the worker goes on by itself\./
	),
	'... and says why in the log, with the versions and what to do');

# Data in 0.1.0: a custom model and profiles, sessions with tool calls, a
# summary written by summarize_session, one session left queued.
q_up(<<'SQL');
INSERT INTO ctxwin.models (name, encoding, context_window, provider) VALUES ('acme-8k', 'o200k_base', 8000, 'acme');
UPDATE ctxwin.models SET context_window = 100000 WHERE name = 'gpt-4-turbo';
INSERT INTO ctxwin.profiles (name, model, max_messages_before_summary, min_recent_messages, response_reserve,
                             max_summary_tokens, summary_strategy, summary_placement)
VALUES ('small', 'acme-8k', 6, 2, 500, 200, 'extractive', 'message'),
       ('plain', 'gpt-4o', NULL, 6, 1000, 300, 'extractive', 'system');
INSERT INTO ctxwin.sessions (id, profile, system_prompt, metadata) VALUES
  ('00000000-0000-4000-8000-000000000001', 'small', 'You track orders. Be brief.', '{"tenant": "a"}'),
  ('00000000-0000-4000-8000-000000000002', 'plain', 'You answer questions about invoices.', '{}'),
  ('00000000-0000-4000-8000-000000000003', 'small', NULL, '{"tenant": "b"}');
INSERT INTO ctxwin.messages (session_id, role, content)
SELECT s, CASE WHEN i % 2 = 1 THEN 'user' ELSE 'assistant' END,
       format('Turn %s of %s: order #%s, Grüße, 日本語, %s', i, s, 4000 + i, repeat('details ', i % 7))
FROM (VALUES ('00000000-0000-4000-8000-000000000001'::uuid), ('00000000-0000-4000-8000-000000000002')) v(s),
     generate_series(1, 5) i;
INSERT INTO ctxwin.messages (session_id, role, tool_calls) VALUES
  ('00000000-0000-4000-8000-000000000002', 'assistant',
   '[{"id": "call_1", "type": "function", "function": {"name": "invoice", "arguments": "{\"id\": 7}"}}]');
INSERT INTO ctxwin.messages (session_id, role, content, tool_call_id) VALUES
  ('00000000-0000-4000-8000-000000000002', 'tool', '{"invoice": 7, "paid": true}', 'call_1');
SQL
q_up("SELECT ctxwin.summarize_session('00000000-0000-4000-8000-000000000002', force => true)");
# six messages in a 'small' session: over its trigger, so it is queued
add_turns(3, 8, 'Question %s about shipping to Zürich');
my $queued_sql = "SELECT compaction_queued_at IS NOT NULL FROM ctxwin.sessions "
  . "WHERE id = '00000000-0000-4000-8000-000000000003'";
is(q_up($queued_sql), 't', 'a session over its trigger is queued in 0.1.0');
worker_looked();
is(q_up($queued_sql), 't', '... and the waiting worker leaves it queued');
is(q_up("SELECT count(*) FROM ctxwin.summaries WHERE session_id = '00000000-0000-4000-8000-000000000002'"),
	'1', 'summarize_session of 0.1.0 works under the current library');

# What the application sees, and every counter, before the update.
my $contexts_sql = "SELECT id, ctxwin.build_context(id), ctxwin.build_context(id, 300, 'anthropic'), "
  . "to_jsonb(ctxwin.context_status(id)) - 'summary_age' - 'budget_margin' FROM ctxwin.sessions "
  . "WHERE id <> '00000000-0000-4000-8000-000000000003' ORDER BY id";    # the worker compacts it
my $state_sql = <<'SQL';
SELECT (SELECT string_agg(format('%s', to_jsonb(s) - 'summary_segments'), E'\n' ORDER BY s.id) FROM ctxwin.sessions s WHERE s.id <> '00000000-0000-4000-8000-000000000003'),
       (SELECT string_agg(format('%s', to_jsonb(m) - 'client_key' - 'content_parts' - 'retracted_at' - 'searchable'), E'\n' ORDER BY m.session_id, m.id) FROM ctxwin.messages m),
       (SELECT string_agg(format('%s', to_jsonb(x) - 'segments' - 'retracted_at'), E'\n' ORDER BY x.session_id, x.version) FROM ctxwin.summaries x WHERE x.session_id <> '00000000-0000-4000-8000-000000000003'),
       (SELECT string_agg(format('%s', to_jsonb(p) - ARRAY['builtin', 'window_policy', 'window_low_water', 'cache_ttl',
                                                             'keep_tool_results', 'tool_result_max_tokens', 'clear_tool_inputs',
                                                             'exclude_tools', 'clear_at_least', 'search']), E'\n' ORDER BY p.name)
        FROM ctxwin.profiles p),
       (SELECT string_agg(format('%s', (o.name, o.encoding, o.context_window, o.provider, o.builtin)), E'\n' ORDER BY o.name)
        FROM ctxwin.models o)
SQL
my $contexts_before = q_up($contexts_sql);
my $state_before = q_up($state_sql);

# --- ALTER EXTENSION ctxwin UPDATE --------------------------------------------
# (the files of the messages and summaries tables: the update adds columns
# to both without rewriting either)
my $filenodes_sql = "SELECT pg_relation_filenode('ctxwin.messages') || ' ' || pg_relation_filenode('ctxwin.summaries')";
my $filenodes_before = q_up($filenodes_sql);
q_up('ALTER EXTENSION ctxwin UPDATE');
is(q_up("SELECT extversion FROM pg_extension WHERE extname = 'ctxwin'"),
	$current, "ALTER EXTENSION ctxwin UPDATE reaches $current");
# (0.2.0 marks prompt-cache breakpoints in the anthropic format; without
# them, cache => false, its body is 0.1.0's)
(my $contexts_sql_nocache = $contexts_sql) =~ s/300, 'anthropic'\)/300, 'anthropic', cache => false)/;
isnt($contexts_sql_nocache, $contexts_sql, '(the query after the update asks for no breakpoints)');
is(q_up($contexts_sql_nocache), $contexts_before, 'build_context and context_status answer as before the update');
is(q_up($filenodes_sql), $filenodes_before,
	'the update rewrote neither ctxwin.messages nor ctxwin.summaries (retracted_at added without a default)');
is(q_up($state_sql), $state_before,
	'sessions, counters, messages, summaries, profiles and models are as before the update');
# The built-in profile keeps its sliding window, which makes it the
# database's own row (builtin false), so that pg_dump keeps it: restored,
# every profile's window is as it was, not a fresh install's stable one.
is(q_up("SELECT format('%s %s', builtin, window_policy) FROM ctxwin.profiles WHERE name = 'default'"),
	'f sliding', 'the built-in profile keeps its sliding window, as the database\'s own row');
$node->command_ok([ 'pg_dump', '-Fc', '-d', $node->connstr('up'), '-f', "$root/up.dump" ],
	'pg_dump -Fc of the updated database');
$node->safe_psql('postgres', 'CREATE DATABASE restored');
$node->command_ok([ 'pg_restore', '--exit-on-error', '-d', $node->connstr('restored'), "$root/up.dump" ],
	'... restored into a new database');
my $windows_sql = "SELECT string_agg(format('%s %s %s', name, window_policy, search), ', ' ORDER BY name) FROM ctxwin.profiles";
is($node->safe_psql('restored', $windows_sql), q_up($windows_sql),
	'... every profile\'s window as it was in the updated database');
$node->safe_psql('postgres', 'DROP DATABASE restored');
is(q_up("SELECT count(*) FILTER (WHERE content_parts IS NULL) || '/' || count(*) FROM ctxwin.messages"),
	q_up("SELECT count(*) || '/' || count(*) FROM ctxwin.messages"), 'the messages of before have no content parts');
is(q_up("SELECT bool_and(searchable) FROM ctxwin.messages") . ' ' . q_up("SELECT bool_and(search) FROM ctxwin.profiles"),
	't t', '... every one is searchable, and every profile has search on');
# A message with content parts in the updated database: its text in
# content, its image counted by OpenAI's rule (the model's provider, acme,
# is neither openai nor anthropic: GPT-4o's prices), sent as parts.
my $parts_id = q_up(
	    "SELECT (ctxwin.append_messages('00000000-0000-4000-8000-000000000001', "
	  . "'[{\"role\": \"user\", \"content\": [{\"type\": \"text\", \"text\": \"This one?\"}, "
	  . "{\"type\": \"image_url\", \"image_url\": {\"url\": \"https://img.example/a.png\", \"detail\": \"high\"}, "
	  . "\"width\": 1024, \"height\": 1024}]}]'))[1]");
is( q_up(
		"SELECT format('%s|%s', content, token_count - ctxwin.message_tokens('user', content, NULL, NULL, NULL, 'o200k_base')) "
		  . "FROM ctxwin.messages WHERE session_id = '00000000-0000-4000-8000-000000000001' AND id = $parts_id"),
	'This one?|765', 'after the update a message takes content parts, its image counted (765)');
is( q_up(
		"SELECT jsonb_path_query_array(ctxwin.build_context('00000000-0000-4000-8000-000000000001', NULL, 'anthropic'), "
		  . "'\$.messages[last].content[last - 1 to last].type')"),
	'["text", "image"]', '... and the window sends them');
is(q_up("SELECT string_agg(DISTINCT window_policy, ' ') FROM ctxwin.profiles") . '|'
	  . q_up("INSERT INTO ctxwin.profiles (name) VALUES ('after the update') RETURNING window_policy"),
	'sliding|stable', 'the profiles of before keep their sliding window; a new profile gets the stable one');
is( q_up("SELECT count(*) FROM ctxwin.profiles WHERE num_nonnulls(keep_tool_results, tool_result_max_tokens, "
		  . "clear_tool_inputs, exclude_tools, clear_at_least) > 0"),
	'0', '... and clear no tool results (the five settings NULL)');
# tool results cleared in the window, on the data of before
q_up(<<'SQL');
INSERT INTO ctxwin.profiles (name, model, window_policy, keep_tool_results, clear_tool_inputs)
VALUES ('clears', 'gpt-4o', 'sliding', 0, true);
INSERT INTO ctxwin.messages (session_id, role, tool_calls) VALUES
  ('00000000-0000-4000-8000-000000000002', 'assistant',
   '[{"id": "call_2", "type": "function", "function": {"name": "invoice", "arguments": "{\"id\": 8}"}}]');
INSERT INTO ctxwin.messages (session_id, role, content, tool_call_id) VALUES
  ('00000000-0000-4000-8000-000000000002', 'tool', repeat('{"invoice": 8, "lines": ["a widget", "a gadget"]} ', 20), 'call_2');
UPDATE ctxwin.sessions SET profile = 'clears' WHERE id = '00000000-0000-4000-8000-000000000002';
SQL
my $cleared = q_up("SELECT string_agg(m ->> 'content', ' ') FROM jsonb_array_elements(ctxwin.build_context("
	  . "'00000000-0000-4000-8000-000000000002')) m WHERE m ->> 'tool_call_id' = 'call_2'");
like($cleared, qr/^\[tool result cleared: invoice, call call_2, message (\d+); ctxwin\.message\(session, \1\) returns it\]$/,
	'after the update a profile clears tool results: the placeholder names the tool, the call and the message');
my ($cleared_id) = $cleared =~ /message (\d+);/;
is( q_up("SELECT ctxwin.message('00000000-0000-4000-8000-000000000002', " . ($cleared_id // 0) . ") ->> 'content' = "
		  . "repeat('{\"invoice\": 8, \"lines\": [\"a widget\", \"a gadget\"]} ', 20)"),
	't', '... and ctxwin.message() gives the result back whole');
q_up("UPDATE ctxwin.sessions SET profile = 'plain' WHERE id = '00000000-0000-4000-8000-000000000002'");
ok( $node->poll_query_until(
		'up', "SELECT compaction_queued_at IS NULL AND summary_through_id > 0 FROM ctxwin.sessions "
		  . "WHERE id = '00000000-0000-4000-8000-000000000003'"),
	'the worker goes on by itself after the update and compacts the queued session');
like(worker_state(), qr/^(idle|working)$/, '... and its state says it serves the database');

# Recall over the rows of before: the update builds the search index on
# them, summarized ones included.
is( q_up("SELECT (SELECT summary_through_id >= 1 FROM ctxwin.sessions WHERE id = '00000000-0000-4000-8000-000000000002') || ' '"
		  . " || (SELECT string_agg(id::text, ',') FROM ctxwin.search('00000000-0000-4000-8000-000000000002', '4001'))"
		  . " || ' ' || (SELECT string_agg(id::text, ',' ORDER BY id) FROM ctxwin.search('00000000-0000-4000-8000-000000000002', 'Grüße'))"),
	'true 1 1,2,3,4,5',
	'after the update, search finds the messages of 0.1.0 that its summary covers, by a number and a word');
my $new_id = q_up("INSERT INTO ctxwin.messages (session_id, role, content) VALUES ('00000000-0000-4000-8000-000000000002', 'user', 'New order ORD-48213 after the update') RETURNING id");
is( q_up("SELECT string_agg(id::text, ',') FROM ctxwin.search('00000000-0000-4000-8000-000000000002', '48213')"),
	$new_id, '... and a message inserted after it');
is( q_up("SELECT ctxwin.build_request('00000000-0000-4000-8000-000000000002', recall => true) -> 'tools' -> 0 -> 'function' ->> 'name'"),
	'conversation_search', '... and build_request takes recall');

# The schema: the updated database against a fresh install, every member
# object included (binary-upgrade mode dumps them; the OIDs it pins differ).
$node->safe_psql('fresh', 'CREATE EXTENSION ctxwin');

# The built-in models get the prices a fresh install has, and stay built-in;
# a built-in row the user changed in 0.1.0 is theirs, and keeps no price.
my $builtin_sql = "SELECT count(*) || ': ' || string_agg(format('%s', m), E'\n' ORDER BY m.name) FROM ctxwin.models m "
  . "WHERE m.builtin AND m.name <> 'gpt-4-turbo'";
is(q_up($builtin_sql), $node->safe_psql('fresh', $builtin_sql),
	'the updated built-in models, prices included, are a fresh install\'s');
is(q_up("SELECT format('%s %s %s', builtin, input_price IS NULL, output_price IS NULL) FROM ctxwin.models WHERE name = 'gpt-4-turbo'"),
	'f t t', '... and a built-in row changed in 0.1.0 is left as the user made it');
sub schema_of
{
	my ($db) = @_;
	$node->command_ok(
		[ 'pg_dump', '--schema-only', '--binary-upgrade', '-d', $node->connstr($db), '-f', "$root/$db.sql" ],
		"pg_dump --schema-only --binary-upgrade of $db");
	my %lines;
	# OIDs and transaction ids differ (storage, not schema): left out, and
	# the configuration tables' OIDs kept as their number only
	$lines{ s/'\{[0-9,]+\}'/'{oids}'/r }++ for grep { !/^\\(un)?restrict |binary_upgrade_set_|relfrozenxid|relminmxid|^WHERE oid = '\d+';$|^-- |^\s*$|^SET |^SELECT pg_catalog\.set_config/ }
	  split /\n/, slurp_file("$root/$db.sql");
	return \%lines;
}
sub only_in
{
	my ($a, $b) = @_;
	return [ sort grep { ($a->{$_} // 0) != ($b->{$_} // 0) } keys %$a ];
}
my $schema_up = schema_of('up');
my $schema_fresh = schema_of('fresh');
cmp_ok(scalar(keys %$schema_fresh), '>', 1000, 'the dump lists the extension\'s objects');
is_deeply(only_in($schema_up, $schema_fresh), [], "the updated schema has nothing a fresh $current install lacks");
is_deeply(only_in($schema_fresh, $schema_up), [], '... and lacks nothing it has');
# The dump's lines are compared as a set: the order of the columns, which
# ALTER TABLE ... ADD COLUMN in the update script decides, is compared here.
my $columns_sql = "SELECT string_agg(format('%s.%s', c.relname, a.attname), ' ' ORDER BY c.relname, a.attnum) "
  . "FROM pg_attribute a JOIN pg_class c ON c.oid = a.attrelid "
  . "WHERE c.relnamespace = 'ctxwin'::regnamespace AND c.relkind IN ('r', 'p', 'v') "
  . "AND a.attnum > 0 AND NOT a.attisdropped";
is(q_up($columns_sql), $node->safe_psql('fresh', $columns_sql),
	'... and its tables and views have their columns in a fresh install\'s order');

# --- from the released version before this one, with data ---------------------
# A database made at the newest released version (0.2.0 for 0.3.0) with
# messages and a summary, updated to this tree's: the same schema as a fresh
# install, its messages and summary as they were, and it summarizes again.
my @released = map { /ctxwin--([0-9.]+)\.sql$/ ? $1 : () } glob("$ext/ctxwin--*.sql");
my ($previous) = grep { $_ ne $current } sort { pack('U*', split /\./, $b) cmp pack('U*', split /\./, $a) } @released;
SKIP:
{
	skip "no released version before $current", 5 unless $previous;
	$node->safe_psql('postgres', 'CREATE DATABASE prev');
	my $q_prev = sub { $node->safe_psql('prev', $_[0]) };
	$q_prev->("CREATE EXTENSION ctxwin VERSION '$previous'");
	$q_prev->("INSERT INTO ctxwin.sessions (id) VALUES ('00000000-0000-4000-8000-0000000000a1')");
	$q_prev->("INSERT INTO ctxwin.messages (session_id, role, content) "
		  . "SELECT '00000000-0000-4000-8000-0000000000a1', CASE WHEN i % 2 = 1 THEN 'user' ELSE 'assistant' END, "
		  . "format('Turn %s: order ORD-%s, we decided to use Decimal.', i, 20000 + i) FROM generate_series(1, 40) i");
	$q_prev->("SELECT ctxwin.summarize_session('00000000-0000-4000-8000-0000000000a1', true)");
	my $before_sql = "SELECT format('%s %s %s', (SELECT count(*) FROM ctxwin.messages), "
	  . "(SELECT string_agg(id::text || md5(content), ',' ORDER BY id) FROM ctxwin.messages), "
	  . "(SELECT md5(conversation_summary) || summary_version FROM ctxwin.sessions))";
	my $before = $q_prev->($before_sql);
	$q_prev->('ALTER EXTENSION ctxwin UPDATE');
	is($q_prev->("SELECT extversion FROM pg_extension WHERE extname = 'ctxwin'"), $current,
		"a database of $previous with data is updated to $current");
	is($q_prev->($before_sql), $before, '... its messages and its summary as they were');
	my $schema_prev = schema_of('prev');
	is_deeply(only_in($schema_prev, $schema_fresh), [], "... its schema has nothing a fresh $current install lacks");
	is_deeply(only_in($schema_fresh, $schema_prev), [], '... and lacks nothing it has');
	$q_prev->("INSERT INTO ctxwin.messages (session_id, role, content) "
		  . "SELECT '00000000-0000-4000-8000-0000000000a1', 'user', 'Instead, I want to fix ticket BILL-412 first.' "
		  . "FROM generate_series(1, 12)");
	$q_prev->("SELECT ctxwin.summarize_session('00000000-0000-4000-8000-0000000000a1', true)");
	like($q_prev->("SELECT conversation_summary FROM ctxwin.sessions WHERE id = '00000000-0000-4000-8000-0000000000a1'"),
		qr/BILL-412/, "... and summarizes again, with ${current}'s summarizer");
}

# --- a summary of 0.1.0 becomes the first segment ------------------------------
# The sessions and summaries of before have one segment each (NULL); under a
# stable window the next compaction appends a segment after the summary
# 0.1.0 wrote, which stays byte for byte.
my $sid2 = '00000000-0000-4000-8000-000000000002';
is( q_up("SELECT format('%s %s', count(*) FILTER (WHERE summary_segments IS NOT NULL),
                        (SELECT count(*) FILTER (WHERE segments IS NOT NULL) FROM ctxwin.summaries))
          FROM ctxwin.sessions"),
	'0 0', 'after the update every summary of before is one segment (summary_segments and segments NULL)');
my $summary_010 = q_up("SELECT conversation_summary FROM ctxwin.sessions WHERE id = '$sid2'");
isnt($summary_010, '', '(the session summarized in 0.1.0 has a summary)');
q_up("UPDATE ctxwin.profiles SET window_policy = 'stable' WHERE name = 'plain'");
# (the session also holds the tool call and result the clearing's checks
# added, and the message the search's check added)
add_turns(2, 8, 'After the update, turn %s: which invoice is due?');
is( q_up("SELECT format('%s %s-%s %s', version, from_id, through_id, segments IS NOT NULL)
          FROM ctxwin.summarize_session('$sid2', force => true)"),
	'2 2-12 t', 'under a stable window the first compaction after the update appends a segment');
is( q_up("SELECT left(conversation_summary, length(\$q\$$summary_010\$q\$) + 2) FROM ctxwin.sessions WHERE id = '$sid2'"),
	"$summary_010\n\n", '... after the summary 0.1.0 wrote, byte for byte');
is( q_up("SELECT summary_segments[1] = length(\$q\$$summary_010\$q\$) AND cardinality(summary_segments) = 2
          FROM ctxwin.sessions WHERE id = '$sid2'"),
	't', '... which is its first segment');

# --- retract, on the rows and summaries of 0.1.0 ---------------------------------
# From the message the session's summary ends at (0.1.0's summary covers it,
# and the segment appended after the update): the session falls back to the
# newest summary that ends before it (or none); those rows are kept, marked;
# the window, search and counters leave the messages out.
my $from = q_up("SELECT summary_through_id FROM ctxwin.sessions WHERE id = '$sid2'");
cmp_ok($from, '>', 0, '(the session has a summary to retract into)');
my $fallback = q_up("SELECT format('%s %s', coalesce(max(through_id), 0), count(*)) FROM ctxwin.summaries "
	  . "WHERE session_id = '$sid2' AND through_id < $from");
is( q_up("SELECT ctxwin.retract('$sid2', $from) = "
		  . "(SELECT count(*) FROM ctxwin.messages WHERE session_id = '$sid2' AND id >= $from)"),
	't', 'after the update, retract takes back the messages from the summary\'s end on');
is( q_up("SELECT format('%s %s', summary_through_id, (SELECT count(*) FROM ctxwin.summaries x "
		  . "WHERE x.session_id = s.id AND x.retracted_at IS NULL)) FROM ctxwin.sessions s WHERE id = '$sid2'"),
	$fallback, '... the session falls back to the summary that ends before, the others marked');
is( q_up("SELECT count(*) FROM ctxwin.summaries WHERE session_id = '$sid2' AND through_id >= $from "
		  . "AND retracted_at IS NULL"),
	'0', '... every summary that reaches it marked');
is( q_up("SELECT count(*) FROM jsonb_array_elements(ctxwin.build_context('$sid2')) m WHERE m ->> 'role' <> 'system'"),
	q_up("SELECT count(*) FROM ctxwin.messages m, ctxwin.sessions s WHERE s.id = '$sid2' AND m.session_id = s.id "
		  . "AND m.id > s.summary_through_id AND m.id < $from"),
	'... the window has the messages after it and before the retracted ones');
is( q_up("SELECT (ctxwin.message('$sid2', $from) ? 'retracted_at') || ' ' "
		  . "|| (SELECT count(*) FROM ctxwin.search('$sid2', 'invoice') x WHERE x.id >= $from)"),
	'true 0', '... message() shows one marked, and search finds none of them');

# --- token counts in indexes and generated columns, from 0.1.0 ----------------
# 0.1.0 declared count_tokens STABLE, so an index or a stored generated
# column on a token count went through an IMMUTABLE SQL function of the
# user's own around it (by encoding, or by a built-in model).  After the
# update the indexes built on them are still right, the functions keep
# working, and the count itself can define an index.
$node->safe_psql('postgres', 'CREATE DATABASE idx');
my ($ret, $out, $err);
sub q_idx { return $node->safe_psql('idx', $_[0]); }
q_idx("CREATE EXTENSION ctxwin VERSION '$first'");
q_idx(<<'SQL');
INSERT INTO ctxwin.models (name, encoding, context_window) VALUES ('house-model', 'chars4', 8000);
CREATE FUNCTION public.tokens_cl100k(t text) RETURNS int LANGUAGE sql IMMUTABLE PARALLEL SAFE
    AS $$ SELECT ctxwin.count_tokens(t, 'cl100k_base') $$;
CREATE FUNCTION public.tokens_gpt4o(t text) RETURNS int LANGUAGE sql IMMUTABLE PARALLEL SAFE
    RETURN ctxwin.count_tokens(t, 'gpt-4o');
CREATE TABLE docs (id int PRIMARY KEY, body text NOT NULL,
                   o200k int GENERATED ALWAYS AS (public.tokens_gpt4o(body)) STORED);
INSERT INTO docs (id, body)
SELECT g, CASE WHEN g % 97 = 0 THEN repeat(chr(52793), 86)
               ELSE repeat('word ', g % 50) || 'Grüße 日本語 ' || g END
FROM generate_series(1, 3000) g;
CREATE INDEX docs_cl100k ON docs (public.tokens_cl100k(body));
CREATE INDEX docs_gpt4o ON docs (public.tokens_gpt4o(body));
ANALYZE docs;
SQL
($ret, $out, $err) = $node->psql('idx', "CREATE INDEX ON docs ((ctxwin.count_tokens(body, 'cl100k_base')))");
like($err, qr/functions in index expression must be marked IMMUTABLE/,
	'0.1.0: count_tokens itself cannot define an index (it is STABLE there)');
is(q_idx("SELECT ctxwin.count_tokens('abcdefgh', 'house-model')"), '2',
	'0.1.0 under the current library: a model added to ctxwin.models still counts, through its row');
# what the rows hold, by a scan of the table: the generated column, and
# the counts the indexes were built with
my $counts_sql = "SELECT string_agg(format('%s:%s:%s:%s', id, o200k, public.tokens_cl100k(body), public.tokens_gpt4o(body)), ' ' ORDER BY id) FROM docs";
my $counts_before = q_idx($counts_sql);
like($counts_before, qr/^1:\d+:\d+:\d+ .* 97:172:258:172 /, '(the rows and their counts in 0.1.0)');

q_idx('ALTER EXTENSION ctxwin UPDATE');
is(q_idx("SELECT extversion FROM pg_extension WHERE extname = 'ctxwin'"), $current, "the database with the indexes is at $current");
is(q_idx($counts_sql), $counts_before, 'after the update: the same generated values and the same counts');
# by each index alone against the table alone, on equality and on ranges
sub by_scan
{
	my ($kind, $query) = @_;
	my $set = $kind eq 'index'
	  ? 'SET enable_seqscan = off; SET enable_bitmapscan = off;'
	  : 'SET enable_indexscan = off; SET enable_bitmapscan = off; SET enable_indexonlyscan = off;';
	return $node->safe_psql('idx', "$set EXPLAIN (COSTS OFF) $query") . "\n" . $node->safe_psql('idx', "$set $query");
}
# (the rows by their number and sums of ids: an aggregate ORDER BY id
# would take the rows in the primary key's order instead)
my $rows = "SELECT format('%s rows, ids %s %s', count(*), sum(id), sum(id::bigint * id)) FROM docs WHERE";
for my $q ("$rows public.tokens_cl100k(body) = 258", "$rows public.tokens_cl100k(body) BETWEEN 20 AND 23",
	"$rows public.tokens_gpt4o(body) = 172", "$rows public.tokens_gpt4o(body) BETWEEN 20 AND 23")
{
	my ($iplan, $irows) = split /\n(?=[^\n]*$)/, by_scan('index', $q);
	my ($splan, $srows) = split /\n(?=[^\n]*$)/, by_scan('table', $q);
	like($iplan, qr/Index Scan using docs_(cl100k|gpt4o)/, "an index scan ... $q");
	unlike($splan, qr/Index/, '... and a scan of the table');
	is($irows, $srows, '... find the same rows');
	unlike($irows, qr/^0 rows/, '... and find some');
}
my $have_amcheck = q_idx("SELECT count(*) FROM pg_available_extensions WHERE name = 'amcheck'");
SKIP:
{
	skip 'contrib amcheck is not installed', 1 unless $have_amcheck;
	q_idx('CREATE EXTENSION amcheck');
	# (an index entry that the function no longer computes is an error)
	($ret, $out, $err) = $node->psql('idx',
		"SELECT bt_index_check('docs_cl100k', heapallindexed => true), bt_index_check('docs_gpt4o', heapallindexed => true)");
	is("$ret $err", '0 ',
		'amcheck: every row of the table has its index entry, counted by the updated functions (bt_index_check, heapallindexed)');
}
is( q_idx("INSERT INTO docs (id, body) VALUES (3001, repeat(chr(52793), 86)) RETURNING o200k"),
	'172', 'a row inserted after the update gets its generated count');
is( q_idx("SELECT string_agg(id::text, ',' ORDER BY id) FROM docs WHERE public.tokens_cl100k(body) = 258 AND id > 2900"),
	'2910,3001', '... and is found through the index');
q_idx(<<'SQL');
CREATE INDEX docs_direct ON docs ((ctxwin.count_tokens(body, 'cl100k_base')));
ALTER TABLE docs ADD COLUMN claude int GENERATED ALWAYS AS (ctxwin.count_tokens(body, 'claude-sonnet-4')) STORED;
SQL
is(q_idx("SELECT count(*) FROM docs WHERE claude IS DISTINCT FROM public.tokens_cl100k(body)"), '0',
	"after the update count_tokens itself defines a generated column ('claude-sonnet-4': cl100k_base)");
my ($dplan, $drows) = split /\n(?=[^\n]*$)/,
  by_scan('index', "SELECT string_agg(id::text, ',' ORDER BY id) FROM docs WHERE ctxwin.count_tokens(body, 'cl100k_base') = 258");
# (the planner inlines the updated SQL function of 0.1.0 into the same
# expression: either index serves the query)
like($dplan, qr/Index Scan using docs_(direct|cl100k)/, '... and an index, which a query on the count uses');
is($drows, q_idx("SELECT string_agg(id::text, ',' ORDER BY id) FROM docs WHERE public.tokens_cl100k(body) = 258"),
	'... finding the rows the index of 0.1.0 finds');
($ret, $out, $err) = $node->psql('idx', "SELECT ctxwin.count_tokens('abcdefgh', 'house-model')");
like($err, qr/ERROR:  model "house-model" is not built in\n.*\nHINT:  Pass its encoding instead: ctxwin\.count_tokens\(t, ctxwin\.model_encoding\('house-model'\)\)\./s,
	'after the update a model added to ctxwin.models is refused by count_tokens, with a hint');
is(q_idx("SELECT ctxwin.count_tokens('abcdefgh', ctxwin.model_encoding('house-model'))"), '2', '... that works');

# --- the library file replaced while the server runs ---------------------------
my $worker_pid = q_up("SELECT pid FROM ctxwin.worker_status WHERE database = 'up'");
copy($lib, "$lib.new") or die "copy: $!";
rename("$lib.new", $lib) or die "rename: $!";    # a new file, as an install makes
is( $node->safe_psql('up', "SELECT ctxwin.count_tokens('hello world'), ctxwin._library_version()"),
	"2|$current",
	'a new connection after the library file was replaced works, on the library the server started with');
add_turns(1, 8, 'Later turn %s: where is that order?');
ok( $node->poll_query_until(
		'up', "SELECT compaction_queued_at IS NULL AND summary_through_id > 5 FROM ctxwin.sessions "
		  . "WHERE id = '00000000-0000-4000-8000-000000000001'"),
	'the worker keeps compacting after the library file was replaced');
is(q_up("SELECT pid FROM ctxwin.worker_status WHERE database = 'up'"), $worker_pid, '... in the same process');

# --- an update script newer than the running library ---------------------------
my $newer = '0.99.0';
open(my $fh, '>', "$ext/ctxwin--$current--$newer.sql") or die $!;
print $fh "SELECT ctxwin._require_library('$newer');\nCREATE TABLE ctxwin.must_not_exist ();\n";
close $fh;
($ret, $out, $err) = $node->psql('up', "ALTER EXTENSION ctxwin UPDATE TO '$newer'");
isnt($ret, 0, 'an update to a version newer than the running library fails');
like($err,
	qr/ERROR:  ctxwin \Q$newer\E needs ctxwin's library \Q$newer\E or later, but this server runs library \Q$current\E\n(.*\n)?DETAIL:  A process keeps the library it loaded first.*\nHINT:  Install ctxwin \Q$newer\E, restart the server, then run ALTER EXTENSION ctxwin UPDATE again\./,
	'... with the versions and what to do');
is( q_up("SELECT extversion || ' ' || (to_regclass('ctxwin.must_not_exist') IS NULL) FROM pg_extension WHERE extname = 'ctxwin'"),
	"$current true", '... before it changed anything');

# A database whose ctxwin is newer than the worker's library (an update
# script that did not check): the worker leaves it alone.
my $unchecked = '0.98.0';
open($fh, '>', "$ext/ctxwin--$current--$unchecked.sql") or die $!;
print $fh "CREATE TABLE ctxwin.newer_schema ();\n";
close $fh;
q_up("ALTER EXTENSION ctxwin UPDATE TO '$unchecked'");
ok( $node->poll_query_until(
		'up', "SELECT state = 'version mismatch' FROM ctxwin.worker_status WHERE database = 'up'"),
	'the worker does not serve a database whose ctxwin is newer than its library');
ok( $node->log_contains(
		qr/ctxwin worker cannot serve database "up", which has a newer ctxwin than the server's library\n.*DETAIL:  The database has ctxwin \Q$unchecked\E; the server runs ctxwin's library \Q$current\E\.\n.*HINT:  Restart the server to load the library installed with ctxwin \Q$unchecked\E\./
	),
	'... and says why in the log');
add_turns(3, 8, 'More about Zürich %s');
worker_looked();
is(q_up($queued_sql), 't', '... and leaves its queued sessions queued');
ok(!$node->log_contains(qr/TRAP:|server process .* was terminated|PANIC/), 'no crash and no failed assertion in the server log');

$node->stop;
done_testing();
