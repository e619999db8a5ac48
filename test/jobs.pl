# Summary jobs with real connections and the real worker against the mock
# LLM over loopback HTTP: a job's messages are byte for byte the prompt the
# worker sends for the same session; application claims (two loops of
# claim_next_summary, each in its own connection, committing between claim
# and completion as an application does) race the worker on 20 sessions
# over several rounds and never produce two summaries of one range, never
# see a job superseded, and never make the worker pay for a request it
# cannot write; a claim that expires is taken again (by the application,
# and by the worker) and completing it afterwards is CW001; sessions of
# summary_strategy 'app' are left queued by the worker; and a model that
# answers longer than a segment's target never stalls a session.
use strict;
use warnings;
use FindBin;
use lib "$FindBin::RealBin/lib";
use CtxwinTest;
use JSON::PP;
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use Time::HiRes qw(usleep);

my $mock = CtxwinTest::Mock->start();
my $node = ctxwin_node(
	'jobs',
	preload => 1,
	mock => $mock,
	conf => {
		'ctxwin.databases' => 'j1',
		'ctxwin.naptime_ms' => '1000',
		'ctxwin.llm_model' => 'slow-150',
		'max_connections' => '40',
		# a few requests at once, so that the application's claims get their share of the race
		'ctxwin.max_concurrent_requests' => '4',
	});
sql_do($node, 'postgres', 'CREATE DATABASE j1');
sql_do($node, 'j1', 'CREATE EXTENSION ctxwin');
sql_do($node, 'j1', "ALTER TABLE ctxwin.profiles ALTER COLUMN window_policy SET DEFAULT 'sliding'; UPDATE ctxwin.profiles SET window_policy = 'sliding'");
sql_do($node, 'j1', "INSERT INTO ctxwin.profiles (name, summary_strategy, window_policy) VALUES ('byapp', 'app', 'sliding')");

sub sq { return sql($node, 'j1', @_); }
sub sessions
{
	my ($n, $profile) = @_;
	return split /\n/,
	  sql_do($node, 'j1', "INSERT INTO ctxwin.sessions (profile) SELECT '$profile' FROM generate_series(1, $n) RETURNING id");
}
# fill(WHERE, FROM, TO): messages FROM .. TO to each session matching WHERE,
# the same words in every session (so two sessions' prompts are equal)
sub fill
{
	my ($where, $from, $to) = @_;
	sql_do($node, 'j1', "INSERT INTO ctxwin.messages (session_id, role, content)
	        SELECT s.id, CASE WHEN g % 2 = 1 THEN 'user' ELSE 'assistant' END,
	               'turn ' || g || ': deploy service billing-' || g || ' to /srv/app/v' || g || ' and check E' || (4000 + g)
	        FROM ctxwin.sessions s, generate_series($from, $to) g WHERE $where ORDER BY g, s.id");
}

# --- the job's messages are the worker's request ------------------------------
my ($w) = sessions(1, 'default');
my ($a) = sessions(1, 'byapp');
my $n0 = $mock->nreq;
fill("s.id IN ('$w', '$a')", 1, 31);
ok(wait_for($node, 'j1', "SELECT summary_version = 1 FROM ctxwin.sessions WHERE id = '$w'", 30),
	'the worker summarizes the llm session');
my @req = grep { ($_->{prompt} // '') =~ /billing-1 / } $mock->requests($n0);
is(scalar @req, 1, 'one request for it');
ok(worker_settled($node, 'j1'), 'the worker has looked at its queue since');
is(sq("SELECT compaction_queued_at IS NOT NULL AND summary_version = 0 FROM ctxwin.sessions WHERE id = '$a'"), 't',
	"the worker leaves the session of summary_strategy 'app' queued");
is($mock->nreq, $n0 + 1, '... and sends nothing for it');
like(sq("SELECT (ctxwin.context_status('$a')).note"), qr/waiting for the application's claim_summary/,
	'context_status says it waits for the application');
my $job = decode_json(sq("SELECT ctxwin.claim_summary('$a')"));
is(JSON::PP->new->canonical->encode($job->{messages}),
	JSON::PP->new->canonical->encode($req[0]{body}{messages}),
	"the app job's messages are byte for byte the messages of the worker's request for the same messages");
is($job->{through_id} . ' ' . $job->{max_tokens}, '25 ' . $req[0]{body}{max_tokens},
	'... the same range (the newest 6 kept) and max_tokens');
is(sq("SELECT (ctxwin.complete_summary('$job->{token}', 'the app''s summary', '{\"prompt_tokens\": 10, \"completion_tokens\": 3}')).through_id"),
	'25', 'complete_summary writes it');

# --- the worker's request in flight excludes a claim --------------------------------
sql_do($node, 'j1', "INSERT INTO ctxwin.profiles (name, summary_model, window_policy) VALUES ('slowllm', 'slow-3000', 'sliding')");
my ($sl) = sessions(1, 'slowllm');
my $s0 = $mock->nreq;
fill("s.id = '$sl'", 1, 31);
ok(wait_until(10, sub { scalar grep { ($_->{model} // '') eq 'slow-3000' } $mock->requests($s0) }),
	"the worker's request for a session is in flight");
is(sq("SELECT ctxwin.claim_summary('$sl', true) IS NULL"), 't', '... and claim_summary, even with force, does not take the session');
ok(wait_for($node, 'j1', "SELECT summary_version = 1 FROM ctxwin.sessions WHERE id = '$sl'", 20), '... whose summary the worker writes');
is(sq("SELECT ctxwin.claim_summary('$sl') IS NULL"), 't', '... after which nothing is due');

# --- app claims race the worker on 20 sessions ----------------------------------
my @race = sessions(20, 'default');
my $in = sql_list(@race);
# an application's loop: claim, commit, "call its model", complete, commit
my $loop = q{
DO $$
DECLARE
    j jsonb;
    idle int := 0;
BEGIN
    WHILE idle < 60 LOOP
        j := ctxwin.claim_next_summary();
        COMMIT;
        IF j IS NULL THEN
            idle := idle + 1;
            PERFORM pg_sleep(0.05);
        ELSE
            idle := 0;
            PERFORM pg_sleep(0.1);
            PERFORM ctxwin.complete_summary(j ->> 'token', format('app summary of %s to %s', j ->> 'from_id', j ->> 'through_id'),
                                            '{"prompt_tokens": 100, "completion_tokens": 10}');
            COMMIT;
        END IF;
    END LOOP;
END $$;
};
my $r0 = $mock->nreq;
my (@loop_err, @loop_out);
my @loops = map
{
	IPC::Run::start([ 'psql', '-X', '-q', '-A', '-t', '-v', 'ON_ERROR_STOP=1', '-d', $node->connstr('j1'), '-c', $loop ],
		'<', \undef, '>', \$loop_out[$_], '2>', \$loop_err[$_])
} 0 .. 1;
for my $round (0 .. 3)
{
	fill("s.id IN ($in)", 31 * $round + 1, 31 * $round + 31);
	wait_for($node, 'j1', "SELECT count(*) = 0 FROM ctxwin.sessions WHERE id IN ($in) AND compaction_queued_at IS NOT NULL", 60);
}
my $loops_ok = 1;
for my $h (@loops)
{
	$loops_ok &&= eval { $h->finish; 1 } && $h->result == 0;
}
unless (ok($loops_ok, 'both application loops ended without an error (no job of theirs was ever stale)'))
{
	diag("loop $_: " . ($loop_err[$_] // '')) for 0 .. 1;
}
is(sq("SELECT count(*) FROM ctxwin.sessions WHERE id IN ($in) AND (compaction_queued_at IS NOT NULL OR compaction_failures > 0)"),
	'0', 'every session summarized, none failed')
  or diag(sq("SELECT id, summary_version, compaction_failures, last_error FROM ctxwin.sessions WHERE id IN ($in) AND compaction_failures > 0"));
is( sq(
		"SELECT count(*) FROM ctxwin.summaries a JOIN ctxwin.summaries b ON a.session_id = b.session_id
	     AND a.version < b.version AND b.from_id <= a.through_id WHERE a.session_id IN ($in)"),
	'0', 'no two summaries of a session cover one message');
is( sq(
		"SELECT bool_and(s.from_id = coalesce(p.through_id, 0) + 1) FROM ctxwin.summaries s
	     LEFT JOIN ctxwin.summaries p ON p.session_id = s.session_id AND p.version = s.version - 1
	     WHERE s.session_id IN ($in)"),
	't', 'each summary starts right after the one before it');
my ($app, $llm) = split /\|/,
  sq("SELECT count(*) FILTER (WHERE strategy = 'app'), count(*) FILTER (WHERE strategy = 'llm') FROM ctxwin.summaries WHERE session_id IN ($in)");
ok($app > 0 && $llm > 0, "both wrote summaries in the race (application $app, worker $llm)");
my $sent = grep { ($_->{prompt} // '') =~ /billing-/ } $mock->requests($r0);
is($sent, $llm, 'every request the worker paid for became a summary (it never asked for a session a job held)');
is(sq("SELECT count(*) FROM ctxwin.usage_ledger WHERE kind = 'summary' AND session_id IN ($in) AND input_tokens = 100"),
	$app, "the application's usage is in the ledger, one summary call per job");

# --- a claim that expires is taken again ----------------------------------------
my ($e) = sessions(1, 'byapp');
fill("s.id = '$e'", 1, 31);
my $old = decode_json(sql_do($node, 'j1', "SET ctxwin.summary_job_lease_ms = 300; SELECT ctxwin.claim_summary('$e')"));
is(sq("SELECT ctxwin.claim_summary('$e') IS NULL"), 't', 'while the lease lasts the session is not claimed again');
usleep(400_000);
my $new = decode_json(sq("SELECT ctxwin.claim_summary('$e')"));
ok($new->{token} ne $old->{token} && $new->{from_id} == $old->{from_id}, 'after it, another claim takes the same range');
my $out = sq("SELECT ctxwin.complete_summary('$old->{token}', 'late')");
like($out, qr/ERROR:  summary job is stale: a newer claim of session $e superseded it/, 'completing the expired job: CW001');
is(sq("SELECT summary_version FROM ctxwin.sessions WHERE id = '$e'"), '0', '... nothing written');
is(sq("SELECT (ctxwin.complete_summary('$new->{token}', 'on time')).version"), '1', 'the new job completes');

# an llm session's expired claim is taken by the worker
my ($x) = sessions(1, 'default');
# its messages and the claim in one transaction: the worker never sees it unclaimed
sql_do($node, 'j1', "SET ctxwin.summary_job_lease_ms = 2000; BEGIN; "
	  . "INSERT INTO ctxwin.messages (session_id, role, content) SELECT '$x', CASE WHEN g % 2 = 1 THEN 'user' ELSE 'assistant' END, 'turn ' || g FROM generate_series(1, 31) g; "
	  . "SELECT ctxwin.claim_summary('$x'); COMMIT;");
my $xjob = sq("SELECT token FROM ctxwin.summary_jobs WHERE session_id = '$x'");
ok($xjob =~ /^\Q$x\E\./, 'an llm session claimed by the application in the statement after its messages');
is(sq("SELECT summary_version FROM ctxwin.sessions WHERE id = '$x'"), '0', '... which the worker leaves alone while the lease lasts');
ok(wait_for($node, 'j1', "SELECT summary_version = 1 FROM ctxwin.sessions WHERE id = '$x'", 30),
	'when it expires, the worker summarizes the session');
like(sq("SELECT ctxwin.complete_summary('$xjob', 'late')"), qr/ERROR:  summary job is stale: it expired at/,
	'completing the expired job after that: CW001 (expired)');
is(sq("SELECT count(*) FROM ctxwin.summaries WHERE session_id = '$x'"), '1', '... one summary, the worker\'s');

# --- a model that answers longer than a segment's target --------------------------
sql_do($node, 'j1', "INSERT INTO ctxwin.profiles (name, window_policy, max_messages_before_summary, max_tokens_before_summary,
                             trigger_ratio, min_recent_messages, max_summary_tokens, summary_model, cache_ttl)
                     VALUES ('verbose', 'stable', 10, NULL, NULL, 2, 400, 'verbose-150', '0 s')");
my ($v) = sessions(1, 'verbose');
my $v0 = $mock->nreq;
for my $k (0 .. 4)
{
	fill("s.id = '$v'", 10 * $k + 1, 10 * $k + 10);
	wait_for($node, 'j1', "SELECT summary_version = " . ($k + 1) . " OR compaction_failures > 0 FROM ctxwin.sessions WHERE id = '$v'", 30);
}
is(sq("SELECT summary_version || ' ' || compaction_failures FROM ctxwin.sessions WHERE id = '$v'"), '5 0',
	"a model writing 150 tokens where a segment's target is 100: five compactions, no failure");
my @vreq = grep { ($_->{model} // '') eq 'verbose-150' } $mock->requests($v0);
is(join(',', map { $_->{finish} // '' } @vreq), join(',', ('stop') x 5), '... each answer complete (none cut off at max_tokens)');
is(join(',', map { $_->{body}{max_tokens} } @vreq), join(',', (400) x 5), '... each request allowing max_summary_tokens');
is(sq("SELECT bool_and(token_count <= 400) FROM ctxwin.summaries WHERE session_id = '$v'"), 't',
	'... no summary over max_summary_tokens');
like( sq(
		"SELECT string_agg(CASE WHEN segments IS NULL THEN 'whole' ELSE cardinality(segments)::text END
	     || CASE WHEN content LIKE '%tokens omitted%' THEN ' cut' ELSE '' END, ', ' ORDER BY version)
	     FROM ctxwin.summaries WHERE session_id = '$v'"),
	qr/^whole, 2.* cut.*, whole/, '... segments appended, one without room cut to fit, then consolidated');

$mock->stop;
$node->stop;
done_testing();
