# The background worker, on a cluster of its own with ctxwin in
# shared_preload_libraries, over real loopback HTTP to test/mockllm.py:
# automatic compaction woken at commit (not by polling), two databases at
# once, a database that does not exist or lacks the extension, faults at a
# 20 % rate, Retry-After, the circuit breaker, SIGHUP, SIGTERM with a hanging
# LLM, kill -9 of the worker and a server restart mid-run (nothing lost,
# nothing summarized twice), DROP DATABASE and DROP EXTENSION not blocked,
# no two summarizers of one session, and the status view.
# Builds its own cluster with PostgreSQL's test framework (Unix socket in a
# temporary directory, a port of its own).
use strict;
use warnings;
use FindBin;
use lib "$FindBin::RealBin/lib";
use CtxwinTest;
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;

# --- the mock LLM and the cluster --------------------------------------------
my $mock = CtxwinTest::Mock->start(extra => [ '--slow', '60', '--seed', '7' ]);
my $mport = $mock->port;
my $node = ctxwin_node(
	'worker',
	preload => 1,
	mock => $mock,
	conf => {
		'ctxwin.databases' => 'w1, w2, nodb, template0',
		'ctxwin.naptime_ms' => '60000',
		'ctxwin.llm_timeout_ms' => '60000',
		# a wait on a lock over 200 ms is logged ("still waiting for"): the
		# worker must never wait on a row another transaction holds
		'log_lock_waits' => 'on',
		'deadlock_timeout' => '200ms',
	});
sql_do($node, 'postgres', "CREATE DATABASE $_") for qw(w1 w2);
sql_do($node, 'w1', 'CREATE EXTENSION ctxwin');
# compaction as it runs when no summary waits for a prompt cache (sliding windows)
sql_do($node, 'w1', "ALTER TABLE ctxwin.profiles ALTER COLUMN window_policy SET DEFAULT 'sliding'; UPDATE ctxwin.profiles SET window_policy = 'sliding'");

# sq(DB, SQL): one statement's output, errors included
sub sq { return sql($node, @_); }
sub worker_pid
{
	return sq('postgres', "SELECT pid FROM pg_stat_activity WHERE backend_type = 'ctxwin worker' AND datname = '$_[0]'");
}
sub nreq { return $mock->nreq; }
# sessions(DB, N [, PROFILE]): N new sessions, their ids
sub sessions
{
	my ($db, $n, $profile) = @_;
	$profile //= 'default';
	return split /\n/,
	  sql_do($node, $db,
		"INSERT INTO ctxwin.sessions (profile) SELECT '$profile' FROM generate_series(1, $n) RETURNING id");
}
# fill(DB, WHERE): 31 messages to each session matching WHERE (30 fires), in
# one statement
sub fill_sql
{
	my ($where) = @_;
	return "INSERT INTO ctxwin.messages (session_id, role, content)
	        SELECT s.id, CASE WHEN g % 2 = 1 THEN 'user' ELSE 'assistant' END,
	               'turn ' || g || ': deploy service billing-' || g || ' to /srv/app/v' || g || ' and check E' || (4000 + g)
	        FROM ctxwin.sessions s, generate_series(1, 31) g WHERE $where ORDER BY g, s.id";
}
sub fill { my ($db, $where) = @_; sql_do($node, $db, fill_sql($where)); }
# fillm(DB, ID): 31 messages to one session, each naming it (so the mock's
# log tells whose request a prompt is)
sub fillm
{
	my ($db, $id) = @_;
	sql_do($node, $db, "INSERT INTO ctxwin.messages (session_id, role, content)
	        SELECT '$id', CASE WHEN g % 2 = 1 THEN 'user' ELSE 'assistant' END,
	               'session $id, turn ' || g || ': deploy billing-' || g || ' and check E' || (4000 + g)
	        FROM generate_series(1, 31) g");
}
# pause_worker / resume_worker: take w1 out of ctxwin.databases (the launcher
# stops its worker) and put it back (a new worker sweeps the queue at start)
sub pause_worker
{
	set_conf($node, 'ctxwin.databases' => 'nodb');
	wait_for($node, 'postgres',
		"SELECT count(*) = 0 FROM pg_stat_activity WHERE backend_type = 'ctxwin worker' AND datname = 'w1'", 10);
}
sub resume_worker { set_conf($node, 'ctxwin.databases' => 'w1, nodb'); }
# queue12: with the worker paused, 12 new sessions queued one after the
# other (distinct compaction_queued_at), ids oldest first
sub queue12
{
	my @ids;
	for (1 .. 12)
	{
		my ($s) = sessions('w1', 1);
		fillm('w1', $s);
		push @ids, $s;
	}
	return @ids;
}
# ticks(PID): user + system CPU time of a process, in clock ticks
sub ticks
{
	my $stat = slurp_file("/proc/$_[0]/stat");
	$stat =~ s/^.*\)\s+//s;    # after the command name: fields 3 on
	my @f = split /\s+/, $stat;
	return $f[11] + $f[12];    # fields 14 and 15
}
# jobmem(PID): the bytes of the worker's "ctxwin job" memory contexts (the
# job and its attempt), as pg_log_backend_memory_contexts logs them now
sub jobmem
{
	my ($pid) = @_;
	my $from = log_offset($node);
	sq('postgres', "SELECT pg_log_backend_memory_contexts($pid)");
	# the worker logs them at its next look at interrupts, "Grand total" last
	wait_until(10, sub { log_since($node, $from) =~ /\[$pid\].*Grand total/ });
	my $sum = 0;
	for (split /\n/, log_since($node, $from))
	{
		next unless /\[$pid\]/;
		$sum += $1 if /level: \d+; ctxwin job[^:]*: (\d+) total/;
	}
	return $sum;
}
# signal(SIG, PID): kill, refusing anything but a process id (an empty one
# would be 0: this program's own process group)
sub signal
{
	my ($sig, $pid) = @_;
	die "not a process id: '$pid'\n" unless defined $pid && $pid =~ /^[0-9]+$/ && $pid > 1;
	return kill $sig, $pid;
}
# live_worker_pid(DB): its worker's process id, waiting up to 10 s for one
# (the launcher may be restarting it); '' if none came
sub live_worker_pid
{
	my ($db) = @_;
	my $pid = '';
	wait_until(10, sub { ($pid = worker_pid($db)) =~ /^[0-9]+$/ });
	note("no worker for $db: '$pid'") unless $pid =~ /^[0-9]+$/;
	return $pid =~ /^[0-9]+$/ ? $pid : '';
}
sub alive { my ($pid) = @_; return $pid =~ /^[0-9]+$/ && $pid > 1 && kill(0, $pid); }
sub commits_w1 { return sq('postgres', "SELECT xact_commit FROM pg_stat_database WHERE datname = 'w1'"); }
sub requests_w1 { return sq('w1', "SELECT requests FROM ctxwin.worker_status WHERE database = 'w1'"); }
# lock_waits(OFFSET): the lock waits of over deadlock_timeout logged since OFFSET
sub lock_waits { return scalar(() = log_since($node, $_[0]) =~ /still waiting for/g); }

my ($s, $start, $ms, $before, $n);

# --- start-up -----------------------------------------------------------------
ok(wait_for($node, 'postgres', "SELECT count(*) = 2 FROM pg_stat_activity WHERE backend_type = 'ctxwin worker'", 10),
	'the launcher starts a worker for each existing database of ctxwin.databases');
is( sq('postgres', "SELECT string_agg(coalesce(datname, '-') || ':' || application_name, ',' ORDER BY backend_type, datname)
                 FROM pg_stat_activity WHERE backend_type LIKE 'ctxwin%'"),
	'-:ctxwin launcher,w1:ctxwin worker,w2:ctxwin worker',
	'launcher and workers show in pg_stat_activity with clear names');
my $st = "SELECT string_agg(database || ':' || state, ',' ORDER BY database) FROM ctxwin.worker_status";
my $want = 'nodb:no such database,template0:not accepting connections,w1:idle,w2:no extension';
wait_for($node, 'w1', "SELECT ($st) = '$want'", 10);
is(sq('w1', $st), $want,
	'worker_status: w1 idle, w2 without the extension, nodb does not exist, template0 takes no connections');

# --- woken at commit, not by polling -----------------------------------------
# An idle worker measured over 3 s (a rate: no event marks the end of being
# idle), which is also time for a crash loop to show: a worker that
# stopped is counted in restarts at once and started again after 1 s.  The
# window ends on a condition of the server's, not a sleep: 3 s of its clock
# have passed and the worker began no round meanwhile (each round is a
# transaction, which pg_stat_activity shows in query_start), which a polling
# worker never lets come true; then worker_settled wakes it, and its rounds
# show there, so one in the window would have been seen.  The polls run in
# the database postgres: w1 counts only the worker's transactions.
my $w1pid = worker_pid('w1');
my $round = "SELECT query_start FROM pg_stat_activity WHERE pid = $w1pid";
my $r0 = sq('postgres', $round);
my $c0 = sq('postgres', 'SELECT now()');
my $x0 = commits_w1();
my $t0 = ticks($w1pid);
my $idle = wait_for($node, 'postgres', "SELECT now() >= '$c0'::timestamptz + interval '3 s' AND ($round) = '$r0'", 15);
my $x1 = commits_w1();
my $t1 = ticks($w1pid);
my $seen = worker_settled($node, 'w1') && sq('postgres', "SELECT ($round) > '$r0'") eq 't';
ok($idle && $seen && $x1 - $x0 <= 2,
	'an idle worker runs no transactions (no round in 3 s, one seen when woken after; commits in w1 over 3 s: '
	  . ($x1 - $x0) . ", the check's own included)");
ok($t1 - $t0 <= 1, 'and uses no CPU (clock ticks over 3 s: ' . ($t1 - $t0) . ')');
is(sq('w1', "SELECT string_agg(restarts::text, ',' ORDER BY database) FROM ctxwin.worker_status"), '0,0,0,0',
	'no crash loop: neither the missing database, the closed one nor the missing extension restarts anything');
is(scalar(() = slurp_file($node->logfile) =~ /FATAL/g), 0, 'and the server log holds no FATAL');

my ($s1) = sessions('w1', 1);
sq('w1', "BEGIN; INSERT INTO ctxwin.messages (session_id, role, content) SELECT '$s1', 'user', 'hello ' || g FROM generate_series(1, 31) g; ROLLBACK");
$start = now_ms();
fill('w1', "id = '$s1'");
ok(wait_for($node, 'w1', "SELECT summary_through_id > 0 FROM ctxwin.sessions WHERE id = '$s1'", 10),
	'a session over its trigger is summarized without any call (naptime is 60 s: the commit woke the worker)');
$ms = elapsed_ms($start);
# the worker sweeps at its start, then every naptime (60 s)
is( sq('w1', "SELECT x.created_at < w.started_at + interval '60 s' FROM ctxwin.summaries x, ctxwin.worker_status w
              WHERE x.session_id = '$s1' AND w.database = 'w1'"),
	't', "within $ms ms of the commit, before the worker's first sweep after its start could have found it");
is(nreq(), 1,
	'a rolled-back transaction that queued the session before woke nothing and sent nothing: one request in all, for the commit');
is( sq('w1', "SELECT version || ':' || from_id || '-' || through_id || ':' || strategy || ':' || (model IS NOT NULL) || ':' || (usage IS NOT NULL)
            FROM ctxwin.summaries WHERE session_id = '$s1'"),
	'1:1-25:llm:true:true',
	'one summaries row: version 1 of messages 1-25 by the LLM, with model and usage');
is( sq('w1', "SELECT compaction_queued_at IS NULL AND compaction_failures = 0 AND last_error IS NULL FROM ctxwin.sessions WHERE id = '$s1'"),
	't', 'the session left the queue');
is(sq('w1', "SELECT count(*) FROM ctxwin.flush_events WHERE session_id = '$s1' AND from_id = 1 AND through_id = 25"),
	'1', 'and its flush event is written');
is( sq('w1', "SELECT format('%s %s %s %s', l.provider, l.input_tokens = (x.usage ->> 'prompt_tokens')::bigint,
                   l.output_tokens = (x.usage ->> 'completion_tokens')::bigint, l.input_tokens > 0)
            FROM ctxwin.usage_ledger l JOIN ctxwin.summaries x ON x.session_id = l.session_id AND x.version = l.id
            WHERE l.session_id = '$s1' AND l.kind = 'summary'"),
	'openai t t t', 'the usage ledger holds the summary with the tokens the provider reported');

# --- a summary's write leaves no multixact ------------------------------------
# The worker locks a session's row and writes its summary in one
# subtransaction.  A lock and an update of two would leave a multixact on
# the row's old version, which every scan of the queue that still sees it
# (under a long transaction elsewhere) looks up: a quarter of the worker's
# time in a drain of 10,000 sessions (bench/worker/RESULTS.md).  Inserting
# the messages (the foreign key's share lock and the trigger's update in
# one statement) makes none either.  pg_control_checkpoint() shows the
# counter as of the last checkpoint.
{
	my $next_mxid = sub
	{
		sql_do($node, 'w1', 'CHECKPOINT');
		return sq('w1', 'SELECT next_multixact_id FROM pg_control_checkpoint()');
	};
	my $m0 = $next_mxid->();
	my @mx = sessions('w1', 5);
	fill('w1', 'id IN (' . sql_list(@mx) . ')');
	ok( wait_for($node, 'w1', 'SELECT count(*) = 5 FROM ctxwin.sessions WHERE summary_through_id > 0 AND id IN (' . sql_list(@mx) . ')', 20),
		'five more sessions summarized');
	is($next_mxid->(), $m0, 'and no multixact was made for them (the next multixact id did not move)');
}

# --- two databases at once, and CREATE EXTENSION noticed -----------------------
sql_do($node, 'w2', 'CREATE EXTENSION ctxwin');
# compaction as it runs when no summary waits for a prompt cache (sliding windows)
sql_do($node, 'w2', "ALTER TABLE ctxwin.profiles ALTER COLUMN window_policy SET DEFAULT 'sliding'; UPDATE ctxwin.profiles SET window_policy = 'sliding'");
ok(wait_for($node, 'w2', "SELECT state = 'idle' FROM ctxwin.worker_status WHERE database = 'w2'", 5),
	'after CREATE EXTENSION in w2 its worker serves it at once');
sessions('w1', 20);
sessions('w2', 20);
set_conf($node, 'ctxwin.llm_model' => 'slow-300');
my $bg = bg_psql($node, 'w1', '-v', 'ON_ERROR_STOP=1', '-c', fill_sql('summary_through_id = 0 AND message_count = 0'));
fill('w2', 'message_count = 0');
$bg->finish;
ok( wait_for($node, 'w1', 'SELECT count(*) = 0 FROM ctxwin.sessions WHERE compaction_queued_at IS NOT NULL', 20)
	  && wait_for($node, 'w2', 'SELECT count(*) = 0 FROM ctxwin.sessions WHERE compaction_queued_at IS NOT NULL', 20),
	"both databases' sessions are compacted at once (LLM answering in 300 ms)");
is(sq('w1', 'SELECT count(*) FROM ctxwin.summaries') . '|' . sq('w2', 'SELECT count(*) FROM ctxwin.summaries'),
	'26|20', 'one summary per session in each database');
{
	my %models = map { $_->{model} => 1 } $mock->requests;
	is(join(',', sort keys %models), 'mock,slow-300', 'SIGHUP: the worker sends the model set by ALTER SYSTEM and reload');
}
is(
	sq('w1', "SELECT done >= 21 AND failed = 0 AND requests >= 21 AND latency_p50_ms >= 250 AND lag_p50_ms IS NOT NULL
              FROM ctxwin.worker_status WHERE database = 'w1'"),
	't',
	'worker_status counts requests and summaries and reports latency percentiles');

# --- a changed profile queues what it puts over a trigger -----------------------
sql_do($node, 'w1', "INSERT INTO ctxwin.profiles (name, max_messages_before_summary) VALUES ('lazy', 200)");
($s) = sessions('w1', 1, 'lazy');
fill('w1', "id = '$s'");
# (the insert's own trigger queues a session, at once)
is(sq('w1', "SELECT compaction_queued_at IS NULL AND summary_through_id = 0 FROM ctxwin.sessions WHERE id = '$s'"),
	't', '31 messages under a profile that fires at 200: not queued');
sql_do($node, 'w1', "UPDATE ctxwin.profiles SET max_messages_before_summary = 20 WHERE name = 'lazy'");
ok(wait_for($node, 'w1', "SELECT summary_through_id > 0 FROM ctxwin.sessions WHERE id = '$s'", 10),
	"lowering the profile's trigger queues the session and wakes the worker, which compacts it");

# --- a stable window's summary waits, and the message that ends the wait wakes the worker ----
# budget 1,000: the low-water mark is 600 tokens, halfway from it to the budget 800
sql_do($node, 'w1', "INSERT INTO ctxwin.profiles (name, context_window, response_reserve, max_messages_before_summary,
                                                  min_recent_messages, max_summary_tokens, window_policy)
                     VALUES ('warm', 1100, 100, 4, 2, 100, 'stable')");
($s) = sessions('w1', 1, 'warm');
$n = requests_w1();
sql_do($node, 'w1', "INSERT INTO ctxwin.messages (session_id, role, content)
                     SELECT '$s', CASE WHEN i % 2 = 1 THEN 'user' ELSE 'assistant' END, repeat('word ', 40)
                     FROM generate_series(1, 15) i");
my $looked = worker_settled($node, 'w1');
is($looked . sq('w1', "SELECT (SELECT context_tokens BETWEEN 600 AND 799 FROM ctxwin.context_status(id))
                    AND compaction_queued_at IS NOT NULL AND summary_through_id = 0 AND compaction_failures = 0
                    AND (SELECT requests = $n FROM ctxwin.worker_status WHERE database = 'w1')
             FROM ctxwin.sessions WHERE id = '$s'"),
	'1t', 'a stable session queued with its context between the low-water mark and halfway to the budget is not summarized: it waits (the worker looked, and sent nothing)');
sql_do($node, 'w1', "INSERT INTO ctxwin.messages (session_id, role, content) VALUES ('$s', 'user', repeat('word ', 200))");
ok(wait_for($node, 'w1', "SELECT summary_through_id > 0 FROM ctxwin.sessions WHERE id = '$s'", 10),
	'the message that brings it past halfway wakes the worker, which summarizes it (naptime is 60 s)');

# --- the Anthropic wire format, and the hybrid strategy --------------------------
set_conf($node, 'ctxwin.llm_provider' => 'anthropic', 'ctxwin.llm_base_url' => $mock->base_url('anthropic'));
$before = nreq();
($s) = sessions('w1', 1);
fill('w1', "id = '$s'");
ok(wait_for($node, 'w1', "SELECT summary_through_id > 0 FROM ctxwin.sessions WHERE id = '$s'", 10),
	'with llm_provider = anthropic the worker compacts through the Messages API');
{
	my %seen = map { $_->{path} . ':' . ($_->{headers}{'anthropic-version'} // '-') . ':' . $_->{auth} => 1 }
	  $mock->requests($before);
	is(join(',', sort keys %seen), '/v1/messages:2023-06-01:ok',
		'its requests went to /v1/messages with anthropic-version and the key');
}
is( sq('w1', "SELECT format('%s %s %s', u.summary_requests,
                   u.summary_input_tokens = (x.usage ->> 'input_tokens')::bigint + (x.usage ->> 'cache_read_input_tokens')::bigint
                                            + (x.usage ->> 'cache_creation_input_tokens')::bigint,
                   u.summary_output_tokens = (x.usage ->> 'output_tokens')::bigint)
            FROM ctxwin.usage u JOIN ctxwin.summaries x ON x.session_id = u.session_id WHERE u.session_id = '$s'"),
	'1 t t', '... and ctxwin.usage counts its summary, normalized from the Anthropic usage');
sql_do($node, 'w1', "INSERT INTO ctxwin.profiles (name, summary_strategy) VALUES ('hy', 'hybrid')");
($s) = sessions('w1', 1, 'hy');
fill('w1', "id = '$s'");
wait_for($node, 'w1', "SELECT summary_through_id > 0 FROM ctxwin.sessions WHERE id = '$s'", 10);
like(sq('w1', "SELECT strategy || ' ' || left(content, 40) FROM ctxwin.summaries WHERE session_id = '$s'"),
	qr/hybrid Facts: /,
	"a hybrid profile's summary made by the worker starts with the facts found without the LLM");
set_conf($node, 'ctxwin.llm_provider' => 'openai', 'ctxwin.llm_base_url' => $mock->base_url('openai'));

# --- a stable window's summary in segments -------------------------------------------
# The worker's second compaction of a stable session asks the LLM for a
# segment: the request gives the summary so far as context and only the
# messages since it to summarize, and the answer is appended after it.
sql_do($node, 'w1', "INSERT INTO ctxwin.profiles (name, max_messages_before_summary, min_recent_messages,
                                                  max_summary_tokens, summary_strategy, window_policy)
                     VALUES ('segs', 10, 2, 400, 'llm', 'stable')");
($s) = sessions('w1', 1, 'segs');
# turns lo .. hi of the session, each naming it (so the mock's log tells its requests)
my $segturns = sub {
	my ($lo, $hi) = @_;
	sql_do($node, 'w1', "INSERT INTO ctxwin.messages (session_id, role, content)
	        SELECT '$s', CASE WHEN g % 2 = 1 THEN 'user' ELSE 'assistant' END,
	               'session $s, turn ' || g || ': deploy billing-' || g || ' and check E' || (4000 + g)
	        FROM generate_series($lo, $hi) g");
};
$before = nreq();
$segturns->(1, 10);
ok(wait_for($node, 'w1', "SELECT summary_through_id = 8 FROM ctxwin.sessions WHERE id = '$s'", 10),
	'stable: the worker makes the first summary of a session (messages 1 to 8)');
my $first = sq('w1', "SELECT conversation_summary FROM ctxwin.sessions WHERE id = '$s'");
my ($req1) = grep { index($_->{prompt} // '', $s) >= 0 } $mock->requests($before);
unlike($req1->{system} // '', qr/appended after it as its next segment/, '... asked whole: no segment instruction');
$before = nreq();
$segturns->(11, 20);
ok(wait_for($node, 'w1', "SELECT summary_through_id = 18 FROM ctxwin.sessions WHERE id = '$s'", 10),
	'... and the second (messages 9 to 18)');
my @req2 = grep { index($_->{prompt} // '', $s) >= 0 } $mock->requests($before);
is(scalar(@req2), 1, '... in one request');
my $req2 = $req2[0] // {};
is($req2->{system},
	sq('w1', "SELECT ctxwin.default_summary_prompt() || ' ' || ctxwin.segment_summary_prompt()
              || format(' Write at most %s tokens.', s.budget)
              FROM ctxwin._summary_segment('stable', ctxwin.count_tokens(\$q\$$first\$q\$, 'o200k_base'), 400) s
              WHERE s.segment"),
	'the request of the second segment asks for a segment, in what _summary_segment gives it');
is($req2->{prompt},
	"Previous summary:\n$first\n\nNew messages:\n"
	  . sq('w1', "SELECT ctxwin.transcript(ctxwin._summary_messages('$s', 8, 18), 'o200k_base')"),
	'... gives the earlier segment as context, and the new messages alone to summarize');
my ($asked) = ($req2->{prompt} // '') =~ /\nNew messages:\n(.*)\z/s;
is(join(',', map { ($asked // '') =~ /turn $_:/ ? $_ : () } 1 .. 20), join(',', 9 .. 18),
	'... which are messages 9 to 18, none summarized before');
is( sq('w1', "SELECT conversation_summary FROM ctxwin.sessions WHERE id = '$s'"),
	"$first\n\n" . ($req2->{response_text} // ''),
	'the answer is appended after the first segment, which stays byte for byte');
is( sq('w1', "SELECT summary_segments = ARRAY[length(\$q\$$first\$q\$), length(\$q\$" . ($req2->{response_text} // '') . "\$q\$)]
              FROM ctxwin.sessions WHERE id = '$s'"),
	't', '... and summary_segments holds both lengths');
# (the checks below count one summary per session of w1)
sql_do($node, 'w1', "DELETE FROM ctxwin.sessions WHERE id = '$s'");

# --- who sees what ----------------------------------------------------------------
sql_do($node, 'postgres', 'CREATE ROLE ctxwin_worker_t_user LOGIN');
sql_do($node, 'w1', 'GRANT USAGE ON SCHEMA ctxwin TO ctxwin_worker_t_user');
is( sql($node, 'w1', "SELECT string_agg(database, ',') FROM ctxwin.worker_status",
		connstr => $node->connstr('w1') . ' user=ctxwin_worker_t_user'),
	'w1', "a plain role sees its own database's row of worker_status only");
is(sq('w1', 'SELECT count(*) FROM ctxwin.worker_status'), '4', "a superuser sees every database's");

# --- faults at a 20 % rate ----------------------------------------------------
set_conf($node, 'ctxwin.llm_model' => 'flaky-20', 'ctxwin.llm_max_retries' => '4');
$before = nreq();
sessions('w1', 100);
fill('w1', 'message_count = 0');
ok(wait_for($node, 'w1', 'SELECT count(*) = 0 FROM ctxwin.sessions WHERE compaction_queued_at IS NOT NULL', 60),
	'with 20 % of the requests failing (500, 503, 429, 502 HTML, closed, malformed, half a body) every session is compacted');
{
	my $faults = grep { $_->{fault} } $mock->requests($before);
	ok($faults >= 5, "the mock injected $faults faults in " . (nreq() - $before) . ' requests');
}
$n = sq('w1', 'SELECT count(*) FROM ctxwin.sessions');
is(sq('w1', "SELECT count(*) || ':' || count(DISTINCT session_id) || ':' || max(version) FROM ctxwin.summaries"),
	"$n:$n:1", "each of the $n sessions has exactly one summary (version 1): none lost, none twice");
is(sq('w1', 'SELECT count(*) FROM ctxwin.flush_events'), $n, 'and one flush event each');
is(sq('w1', "SELECT retries > 0 FROM ctxwin.worker_status WHERE database = 'w1'"), 't', 'worker_status counts the retries');

# --- Retry-After --------------------------------------------------------------
set_conf($node, 'ctxwin.llm_model' => 'fault-429', 'ctxwin.llm_max_retries' => '0');
($s) = sessions('w1', 1);
$start = now_ms();
fill('w1', "id = '$s'");
ok(wait_for($node, 'w1', "SELECT summary_through_id > 0 FROM ctxwin.sessions WHERE id = '$s'", 10),
	'a 429 with Retry-After is waited out, not failed (even with llm_max_retries = 0)');
$ms = elapsed_ms($start);
ok($ms >= 900, "after the 1 s it asked for ($ms ms)");
is( sq('w1', "SELECT compaction_failures FROM ctxwin.sessions WHERE id = '$s'") . '|'
	  . sq('w1', "SELECT rate_limited > 0 FROM ctxwin.worker_status WHERE database = 'w1'"),
	'0|t', 'no failure charged; worker_status counts the rate-limited answer');

# --- the circuit breaker ------------------------------------------------------
set_conf($node, 'ctxwin.llm_model' => 'fault-400');
($s) = sessions('w1', 1);
$before = nreq();
$n = requests_w1();
fill('w1', "id = '$s'");
ok(wait_for($node, 'w1', "SELECT compaction_failures = 3 FROM ctxwin.sessions WHERE id = '$s'", 15),
	'a refused request is a failed compaction, retried after 1 s and 4 s, three in all');
like(sq('w1', "SELECT last_error FROM ctxwin.sessions WHERE id = '$s'"),
	qr/\QLLM endpoint refused the summary request: HTTP 400\E/, "the session's last_error says why");
$looked = worker_settled($node, 'w1');
is($looked . '|' . (nreq() - $before) . '|' . (requests_w1() - $n), '1|3|3',
	'then the breaker holds: no more requests for it (the worker looked at its queue since, three times)');
is( sq('w1', "SELECT held_back FROM ctxwin.worker_status WHERE database = 'w1'") . '|'
	  . sq('w1', "SELECT compaction_queued_at IS NOT NULL FROM ctxwin.sessions WHERE id = '$s'"),
	'1|t', 'it stays queued, counted as held back');
like(sq('w1', "SELECT last_error_session || ' ' || last_error FROM ctxwin.worker_status WHERE database = 'w1'"),
	qr/\Q$s LLM endpoint refused\E/, 'worker_status shows the last error and its session');
set_conf($node, 'ctxwin.llm_model' => 'mock');
sql_do($node, 'w1', "INSERT INTO ctxwin.messages (session_id, role, content) VALUES ('$s', 'user', 'one more')");
ok( wait_for($node, 'w1',
		"SELECT summary_through_id > 0 AND compaction_failures = 0 AND last_error IS NULL FROM ctxwin.sessions WHERE id = '$s'", 10),
	'a new message resets the breaker and the session is compacted');

# --- no two summarizers of one session ----------------------------------------
set_conf($node, 'ctxwin.llm_model' => 'slow-3000');
($s) = sessions('w1', 1);
fill('w1', "id = '$s'");
wait_for($node, 'w1', "SELECT in_flight = 1 FROM ctxwin.worker_status WHERE database = 'w1'", 5);
is(sq('w1', 'SELECT ctxwin.compact()'), '0', 'compact() skips a session the worker is summarizing');
is(sq('w1', "SELECT version || '|' || strategy FROM ctxwin.summarize_session('$s', true)"), '1|llm',
	"summarize_session waits for the worker's summary of the session and returns it");
ok(wait_for($node, 'w1', "SELECT summary_through_id > 0 FROM ctxwin.sessions WHERE id = '$s'", 10),
	"and the worker's summary lands");
is(sq('w1', "SELECT count(*) FROM ctxwin.summaries WHERE session_id = '$s'"), '1', 'once');

# --- an application transaction holding a session's row ----------------------
set_conf($node, 'ctxwin.llm_model' => 'slow-1000');
my ($sa) = sessions('w1', 1);
my ($sb) = sessions('w1', 1);
$before = nreq();
fillm('w1', $sa);
wait_for($node, 'w1', "SELECT in_flight = 1 FROM ctxwin.worker_status WHERE database = 'w1'", 5);
# while the request for a is in flight, the app holds a's row until the
# test lets it commit (a row in public.app_go)
sql_do($node, 'w1', 'CREATE TABLE public.app_go ()');
$bg = bg_psql($node, 'w1', '-c', "SET application_name = 'ctxwin_t_app'", '-c',
	"BEGIN; INSERT INTO ctxwin.messages (session_id, role, content) VALUES ('$sa', 'user', 'slow app');
	 DO \$\$ BEGIN WHILE NOT EXISTS (SELECT FROM public.app_go) LOOP PERFORM pg_sleep(0.05); END LOOP; END \$\$; COMMIT");
wait_for($node, 'w1', "SELECT backend_xid IS NOT NULL FROM pg_stat_activity WHERE application_name = 'ctxwin_t_app'", 10);
$start = now_ms();
fillm('w1', $sb);
ok( wait_for($node, 'w1', "SELECT summary_through_id > 0 FROM ctxwin.sessions WHERE id = '$sb'", 10)
	  && sq('w1', "SELECT count(*) FROM pg_stat_activity WHERE application_name = 'ctxwin_t_app' AND backend_xid IS NOT NULL") eq '1',
	'another session is compacted meanwhile (in ' . elapsed_ms($start) . " ms), the app's transaction still open: the worker does not wait it out");
sql_do($node, 'w1', 'INSERT INTO public.app_go DEFAULT VALUES');
$bg->finish;
ok(wait_for($node, 'w1', "SELECT summary_through_id > 0 FROM ctxwin.sessions WHERE id = '$sa'", 15),
	'the held session is compacted once the app commits');
is( sq('w1', "SELECT compaction_failures || ':' || (SELECT count(*) FROM ctxwin.summaries x WHERE x.session_id = s.id) FROM ctxwin.sessions s WHERE id = '$sa'"),
	'0:1', 'with no failure charged, and one summary');
is($mock->requests_naming($before, $sa), 1,
	'and one LLM request: its answer waited for the row (backing off), no new request was paid for');

# --- SIGTERM with a hanging LLM -----------------------------------------------
set_conf($node, 'ctxwin.llm_model' => 'fault-timeout');
sessions('w1', 5);
fill('w1', 'message_count = 0');
ok(wait_for($node, 'w1', "SELECT in_flight = 5 FROM ctxwin.worker_status WHERE database = 'w1'", 5),
	'five requests hang in flight');
my $pid = live_worker_pid('w1');
$start = now_ms();
signal('TERM', $pid);
# the requests hang until their 60 s timeout (llm_timeout_ms): gone in half that
wait_until(30, sub { !alive($pid) });
$ms = elapsed_ms($start);
ok(!alive($pid), "SIGTERM stops the worker with requests in flight in $ms ms, without waiting for their timeout");
ok( wait_for($node, 'postgres',
		"SELECT count(*) = 1 FROM pg_stat_activity WHERE backend_type = 'ctxwin worker' AND datname = 'w1' AND pid <> $pid", 10),
	'the launcher starts it again');
is(sq('w1', 'SELECT count(*) FROM ctxwin.sessions WHERE compaction_queued_at IS NOT NULL AND summary_through_id = 0'),
	'5', 'the five sessions are still queued, unsummarized');
$pid = live_worker_pid('w1');
$start = now_ms();
signal('TERM', $pid);
wait_for($node, 'postgres',
	"SELECT count(*) = 1 FROM pg_stat_activity WHERE backend_type = 'ctxwin worker' AND datname = 'w1' AND pid <> $pid", 10);
$ms = elapsed_ms($start);
ok($ms >= 1800, "stopped again soon after its start, it is restarted after a longer backoff ($ms ms)");
is(sq('w1', "SELECT restarts FROM ctxwin.worker_status WHERE database = 'w1'"), '2', 'worker_status counts the restarts');

# --- kill -9 and a server restart mid-run lose nothing --------------------------
set_conf($node, 'ctxwin.llm_model' => 'slow-1500');
wait_for($node, 'w1', "SELECT in_flight = 5 FROM ctxwin.worker_status WHERE database = 'w1'", 10);
sessions('w1', 30);
fill('w1', 'message_count = 0');
wait_for($node, 'w1', "SELECT in_flight >= 20 FROM ctxwin.worker_status WHERE database = 'w1'", 10);
$pid = live_worker_pid('w1');
signal('KILL', $pid);
ok(wait_until(10, sub { !alive($pid) }) && wait_for($node, 'postgres', "SELECT count(*) = 2 FROM pg_stat_activity WHERE backend_type = 'ctxwin worker'", 30),
	'after kill -9 of the worker the server recovers and the workers are back');
sessions('w1', 30);
fill('w1', 'message_count = 0');
wait_for($node, 'w1', "SELECT in_flight > 0 FROM ctxwin.worker_status WHERE database = 'w1'", 10);
$node->restart;
ok(sql_ok($node, 'w1', 'SELECT 1'), 'a server restart in the middle of the run');
ok(wait_for($node, 'w1', 'SELECT count(*) = 0 FROM ctxwin.sessions WHERE compaction_queued_at IS NOT NULL', 60),
	'afterwards every queued session is compacted');
$n = sq('w1', 'SELECT count(*) FROM ctxwin.sessions');
is( sq('w1', "SELECT count(*) || ':' || count(DISTINCT session_id) || ':' || max(version) FROM ctxwin.summaries") . '|'
	  . sq('w1', 'SELECT count(*) FROM ctxwin.sessions WHERE summary_through_id = 0'),
	"$n:$n:1|0", "no summary lost, none made twice (one version-1 summary for each of the $n sessions)");
is( sq('w1', 'SELECT count(*) FROM ctxwin.sessions s WHERE summary_version <> (SELECT count(*) FROM ctxwin.summaries x WHERE x.session_id = s.id)'),
	'0', "every session's summary_version matches its summaries rows");

# --- DROP EXTENSION and DROP DATABASE are not blocked ---------------------------
set_conf($node, 'ctxwin.llm_model' => 'slow-30000');
sessions('w1', 5);
fill('w1', 'message_count = 0');
wait_for($node, 'w2', "SELECT in_flight = 5 FROM ctxwin.worker_status WHERE database = 'w1'", 5);
$start = now_ms();
ok(sql_ok($node, 'w1', 'DROP EXTENSION ctxwin CASCADE'), 'DROP EXTENSION with the worker running and 5 requests in flight');
$ms = elapsed_ms($start);
ok($ms < 15000, "not blocked by it ($ms ms; the answers take 30 s)");
ok(wait_for($node, 'w2', "SELECT state = 'no extension' AND in_flight = 0 FROM ctxwin.worker_status WHERE database = 'w1'", 5),
	'the worker drops what it had in flight and waits for the extension');
set_conf($node, 'ctxwin.llm_model' => 'mock');
sql_do($node, 'w1', 'CREATE EXTENSION ctxwin');
# compaction as it runs when no summary waits for a prompt cache (sliding windows)
sql_do($node, 'w1', "ALTER TABLE ctxwin.profiles ALTER COLUMN window_policy SET DEFAULT 'sliding'; UPDATE ctxwin.profiles SET window_policy = 'sliding'");
($s) = sessions('w1', 1);
fill('w1', "id = '$s'");
ok(wait_for($node, 'w1', "SELECT summary_through_id > 0 FROM ctxwin.sessions WHERE id = '$s'", 10),
	'after CREATE EXTENSION again the worker compacts sessions again');
my $w2pid = worker_pid('w2');
my $from = log_offset($node);
$start = now_ms();
my $out = sq('postgres', 'DROP DATABASE w2');
$ms = elapsed_ms($start);
is($out, '', "DROP DATABASE of a served database succeeds ($ms ms)");
like(log_since($node, $from), qr/\[$w2pid\].*terminating background worker "ctxwin worker" due to administrator command/,
	'without waiting for a timeout: its worker left at the SIGTERM the command sent it');
ok(wait_for($node, 'w1', "SELECT state IN ('paused', 'no such database') FROM ctxwin.worker_status WHERE database = 'w2'", 5),
	'its worker is gone and not restarted into the dropped database');

# --- another transaction holds the oldest queued rows ---------------------------
# 12 queued, the 5 oldest held FOR UPDATE by another connection: the worker
# sends no request for them, summarizes the 7 free ones at once, and the 5
# once they are free.
set_conf($node, 'ctxwin.llm_model' => 'slow-200', 'ctxwin.naptime_ms' => '60000');
pause_worker();
my @ids = queue12();
my $held = sql_list(@ids[0 .. 4]);
my $all = sql_list(@ids);
my $holder = bg_psql($node, 'w1', '-v', 'ON_ERROR_STOP=1', '-c', "SET application_name = 'ctxwin_t_holder'", '-c', 'BEGIN',
	'-c', "SELECT count(*) FROM (SELECT FROM ctxwin.sessions WHERE id IN ($held) FOR UPDATE) x",
	'-c', 'SELECT pg_sleep(60)', '-c', 'COMMIT');
ok( wait_for($node, 'w1',
		"SELECT count(*) = 1 FROM pg_stat_activity WHERE application_name = 'ctxwin_t_holder' AND query LIKE '%pg_sleep%'", 10),
	'another connection holds the rows of the 5 oldest');
$before = nreq();
$start = now_ms();
$from = log_offset($node);
resume_worker();
ok(wait_for($node, 'w1', "SELECT count(*) = 7 FROM ctxwin.sessions WHERE id IN ($all) AND summary_through_id > 0", 20),
	'with the 5 oldest of 12 queued sessions held FOR UPDATE, the worker summarizes the 7 free ones');
$ms = elapsed_ms($start);
$n = requests_w1();
$looked = worker_settled($node, 'w1');
is(lock_waits($from), 0, "at once ($ms ms from its start): it never waited on a held row's lock");
is( $looked . '|' . $mock->requests_naming($before, @ids[0 .. 4]) . '|' . $mock->requests_naming($before, @ids[5 .. 11]) . '|' . (requests_w1() - $n) . '|'
	  . sq('w1', "SELECT count(*) FROM ctxwin.sessions WHERE id IN ($held) AND summary_through_id > 0"),
	'1|0|7|0|0', 'no LLM request for a held session (one each for the 7 free, none since), and the held ones untouched');
sq('postgres', "SELECT pg_cancel_backend(pid) FROM pg_stat_activity WHERE application_name = 'ctxwin_t_holder'");
$holder->finish;
ok(wait_for($node, 'w1', "SELECT count(*) = 12 FROM ctxwin.sessions WHERE id IN ($all) AND summary_through_id > 0", 20),
	'once the other transaction ends, the 5 are summarized too (the sweep finds them)');
is($mock->requests_naming($before, @ids) . '|' . sq('w1', "SELECT count(*) FROM ctxwin.summaries WHERE session_id IN ($all)"),
	'12|12', 'one request and one summary per session in all');

# --- a role that holds advisory locks and rows cannot stop the worker ----------
# An application role (granted as the README says) holds the advisory locks
# that summarize_session used to take for every queued session, and the rows
# of the 5 oldest; the worker, with room for 3 requests, still finds the 7
# others (it fetches past the rows it skips).
sql_do($node, 'postgres', 'CREATE ROLE ctxwin_t_hostile LOGIN');
sql_do($node, 'w1', 'GRANT USAGE ON SCHEMA ctxwin TO ctxwin_t_hostile;
      GRANT SELECT, INSERT, UPDATE, DELETE ON ctxwin.sessions, ctxwin.messages TO ctxwin_t_hostile;
      GRANT SELECT ON ctxwin.models, ctxwin.profiles TO ctxwin_t_hostile');
set_conf($node, 'ctxwin.max_concurrent_requests' => '3');
pause_worker();
@ids = queue12();
$held = sql_list(@ids[0 .. 4]);
$all = sql_list(@ids);
my $hostile = bg_psql($node, 'w1', '-U', 'ctxwin_t_hostile', '-v', 'ON_ERROR_STOP=1',
	'-c', "SET application_name = 'ctxwin_t_hostile'",
	'-c', "SELECT count(pg_advisory_lock(2026112101, hashtext(id::text))) FROM ctxwin.sessions WHERE id IN ($all)",
	'-c', 'BEGIN', '-c', "SELECT count(*) FROM (SELECT FROM ctxwin.sessions WHERE id IN ($held) FOR UPDATE) x",
	'-c', 'SELECT pg_sleep(60)', '-c', 'COMMIT');
ok( wait_for($node, 'w1',
		"SELECT count(*) = 1 FROM pg_stat_activity WHERE application_name = 'ctxwin_t_hostile' AND query LIKE '%pg_sleep%'", 10),
	'the plain role holds them');
$before = nreq();
$start = now_ms();
$from = log_offset($node);
resume_worker();
ok(wait_for($node, 'w1', "SELECT count(*) = 7 FROM ctxwin.sessions WHERE id IN ($all) AND summary_through_id > 0", 20),
	'a plain role holding advisory locks on every queued session and the rows of the 5 oldest does not stop the worker');
$ms = elapsed_ms($start);
is(lock_waits($from), 0, "the 7 others are summarized in $ms ms, 3 requests at a time, without waiting on a lock");
is($mock->requests_naming($before, @ids[0 .. 4]), 0, 'and no request went out for the held ones');
sq('postgres', "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE application_name = 'ctxwin_t_hostile'");
$hostile->finish;
ok(wait_for($node, 'w1', "SELECT count(*) = 12 FROM ctxwin.sessions WHERE id IN ($all) AND summary_through_id > 0", 20),
	'once it lets go, the held sessions are summarized too');

# --- a full job table waiting on Retry-After: no busy loop ---------------------
# Room for 2 requests, every answer 529 with Retry-After: 1, a sweep due
# every 200 ms: the worker sleeps until a job's time comes.
set_conf($node, 'ctxwin.llm_model' => 'fault-529', 'ctxwin.llm_max_retries' => '0',
	'ctxwin.max_concurrent_requests' => '2', 'ctxwin.naptime_ms' => '200');
pause_worker();
resume_worker();
wait_for($node, 'w1',
	"SELECT w.state = 'idle' AND w.pid = a.pid FROM ctxwin.worker_status w JOIN pg_stat_activity a ON a.backend_type = 'ctxwin worker' AND a.datname = w.database
	 WHERE w.database = 'w1'", 10);
my $wpid = worker_pid('w1');
$before = nreq();
$n = sq('w1', "SELECT rate_limited FROM ctxwin.worker_status WHERE database = 'w1'");
sessions('w1', 4);
fill('w1', 'message_count = 0');
# both answers are in, both jobs wait on their Retry-After
wait_for($node, 'w1', "SELECT rate_limited >= $n + 2 AND in_flight = 0 FROM ctxwin.worker_status WHERE database = 'w1'", 10);
# the window: two more Retry-After waits of both jobs, each ended by their
# next answers (529 again, counted in rate_limited), so it spans two full
# waits of 1 s, in which a busy loop would show
$t0 = ticks($wpid);
$start = now_ms();
my $waited = wait_for($node, 'w1',
	"SELECT rate_limited >= $n + 6 AND in_flight = 0 FROM ctxwin.worker_status WHERE database = 'w1'", 15);
$t1 = ticks($wpid);
$ms = elapsed_ms($start);
ok($waited && $t1 - $t0 <= 20,
	'with every job waiting on Retry-After the worker uses next to no CPU (' . ($t1 - $t0)
	  . " clock ticks over two waits of 1 s, $ms ms)");
set_conf($node, 'ctxwin.llm_model' => 'mock', 'ctxwin.llm_max_retries' => '3',
	'ctxwin.max_concurrent_requests' => '100', 'ctxwin.naptime_ms' => '60000');
ok(wait_for($node, 'w1', 'SELECT count(*) = 0 FROM ctxwin.sessions WHERE compaction_queued_at IS NOT NULL', 30),
	'and afterwards those sessions are compacted');

# --- retries do not pile up memory -------------------------------------------------
# A request of about 400 kB answered 529 again and again: each attempt's
# transfer and answer are freed when the next attempt starts.
set_conf($node, 'ctxwin.llm_model' => 'fault-529', 'ctxwin.llm_max_retries' => '3');
$wpid = worker_pid('w1');
($s) = sessions('w1', 1);
$before = nreq();
$n = sq('w1', "SELECT retries FROM ctxwin.worker_status WHERE database = 'w1'");
sql_do($node, 'w1', "INSERT INTO ctxwin.messages (session_id, role, content)
      SELECT '$s', 'user', string_agg('word' || g || ' ', '') FROM generate_series(1, 50000) g");
fill('w1', "id = '$s'");
# after each answer, its job waits for the next attempt (counted in retries)
wait_for($node, 'w1', "SELECT retries >= $n + 1 AND in_flight = 0 FROM ctxwin.worker_status WHERE database = 'w1'", 10);
my $m1 = jobmem($wpid);
wait_for($node, 'w1', "SELECT retries >= $n + 4 AND in_flight = 0 FROM ctxwin.worker_status WHERE database = 'w1'", 15);
my $m4 = jobmem($wpid);
ok($m1 > 0 && $m4 - $m1 < 300000, "the job's memory after 4 attempts is what it was after 1 ($m1 -> $m4 bytes)");
set_conf($node, 'ctxwin.llm_model' => 'mock');
wait_for($node, 'w1', 'SELECT count(*) = 0 FROM ctxwin.sessions WHERE compaction_queued_at IS NOT NULL', 30);

# --- a slow statement does not wedge the worker ----------------------------------
# A trigger makes the summary write of one session take 30 s: the worker's
# statement_timeout (ctxwin.worker_statement_timeout) cancels it, records
# the error and goes on with the others.
sql_do($node, 'w1', <<'SQL');
CREATE TABLE public.slow_sessions (id uuid);
CREATE FUNCTION public.slow_summary() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF EXISTS (SELECT FROM public.slow_sessions x WHERE x.id = NEW.session_id) THEN
        PERFORM pg_catalog.pg_sleep(30);
    END IF;
    RETURN NEW;
END $$;
CREATE TRIGGER slow BEFORE INSERT ON ctxwin.summaries FOR EACH ROW EXECUTE FUNCTION public.slow_summary();
SQL
set_conf($node, 'ctxwin.worker_statement_timeout' => '1000');
$wpid = worker_pid('w1');
my ($slow) = sessions('w1', 1);
my ($fast) = sessions('w1', 1);
sql_do($node, 'w1', "INSERT INTO public.slow_sessions VALUES ('$slow')");
$start = now_ms();
fill('w1', "id IN ('$slow', '$fast')");
ok(wait_for($node, 'w1', "SELECT last_error LIKE '%statement timeout%' FROM ctxwin.sessions WHERE id = '$slow'", 10),
	"a summary write that takes too long is canceled by the worker's statement timeout and recorded");
ok(wait_for($node, 'w1', "SELECT summary_through_id > 0 FROM ctxwin.sessions WHERE id = '$fast'", 10),
	'the other session is compacted meanwhile');
$ms = elapsed_ms($start);
ok($ms < 20000, "both within $ms ms, before the 30 s write would have ended");
is(worker_pid('w1'), $wpid, 'by the same worker: the timeout did not stop it');
sql_do($node, 'w1', 'DROP TRIGGER slow ON ctxwin.summaries');
ok(wait_for($node, 'w1', "SELECT summary_through_id > 0 FROM ctxwin.sessions WHERE id = '$slow'", 15),
	'once the write is fast again, the session is compacted at its retry');

is(index(slurp_file($node->logfile), $mock->key), -1, 'the API key is nowhere in the server log');

done_testing();
