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
$node->init;
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
SELECT (SELECT string_agg(format('%s', s), E'\n' ORDER BY s.id) FROM ctxwin.sessions s WHERE s.id <> '00000000-0000-4000-8000-000000000003'),
       (SELECT string_agg(format('%s', m), E'\n' ORDER BY m.session_id, m.id) FROM ctxwin.messages m),
       (SELECT string_agg(format('%s', x), E'\n' ORDER BY x.session_id, x.version) FROM ctxwin.summaries x WHERE x.session_id <> '00000000-0000-4000-8000-000000000003'),
       (SELECT string_agg(format('%s', to_jsonb(p) - ARRAY['window_policy', 'window_low_water', 'cache_ttl']), E'\n' ORDER BY p.name)
        FROM ctxwin.profiles p),
       (SELECT string_agg(format('%s', (o.name, o.encoding, o.context_window, o.provider, o.builtin)), E'\n' ORDER BY o.name)
        FROM ctxwin.models o)
SQL
my $contexts_before = q_up($contexts_sql);
my $state_before = q_up($state_sql);

# --- ALTER EXTENSION ctxwin UPDATE --------------------------------------------
q_up('ALTER EXTENSION ctxwin UPDATE');
is(q_up("SELECT extversion FROM pg_extension WHERE extname = 'ctxwin'"),
	$current, "ALTER EXTENSION ctxwin UPDATE reaches $current");
# (0.2.0 marks prompt-cache breakpoints in the anthropic format; without
# them, cache => false, its body is 0.1.0's)
(my $contexts_sql_nocache = $contexts_sql) =~ s/300, 'anthropic'\)/300, 'anthropic', cache => false)/;
isnt($contexts_sql_nocache, $contexts_sql, '(the query after the update asks for no breakpoints)');
is(q_up($contexts_sql_nocache), $contexts_before, 'build_context and context_status answer as before the update');
is(q_up($state_sql), $state_before,
	'sessions, counters, messages, summaries, profiles and models are as before the update');
is(q_up("SELECT string_agg(DISTINCT window_policy, ' ') FROM ctxwin.profiles") . '|'
	  . q_up("INSERT INTO ctxwin.profiles (name) VALUES ('after the update') RETURNING window_policy"),
	'sliding|stable', 'the profiles of before keep their sliding window; a new profile gets the stable one');
ok( $node->poll_query_until(
		'up', "SELECT compaction_queued_at IS NULL AND summary_through_id > 0 FROM ctxwin.sessions "
		  . "WHERE id = '00000000-0000-4000-8000-000000000003'"),
	'the worker goes on by itself after the update and compacts the queued session');
like(worker_state(), qr/^(idle|working)$/, '... and its state says it serves the database');

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
my ($ret, $out, $err) = $node->psql('up', "ALTER EXTENSION ctxwin UPDATE TO '$newer'");
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
