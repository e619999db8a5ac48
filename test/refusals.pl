# Refused and unfinished LLM answers never become a summary.  Against
# test/mockllm.py over loopback, the four wire formats (OpenAI Chat
# Completions and Responses, Anthropic Messages, Gemini generateContent): an answer stopped by a
# content filter, a refusal (OpenAI's message field, Anthropic's stop_reason),
# a paused turn, the model's context window reached, tool calls instead of a
# text, no stop reason at all, several choices, an unknown stop reason.
# Through summarize_session (an error, one request, the session unchanged),
# compact() (a recorded failure whose last_error says why) and the background
# worker (retried with the compaction backoff up to the circuit breaker, the
# old summary kept).  A complete stop ("stop", "end_turn", "stop_sequence")
# is accepted.
# Builds its own cluster with PostgreSQL's test framework (Unix socket in a
# temporary directory, a port of its own, ctxwin in shared_preload_libraries).
use strict;
use warnings;
use FindBin;
use lib "$FindBin::RealBin/lib";
use CtxwinTest;
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;

# The answers: model, then the error wanted with OpenAI Chat Completions,
# Anthropic, OpenAI Responses and Gemini (undef: not that provider).  The
# errors say why in a sentence and quote no model text.  Each provider reads
# its own stop reasons (src/llm/): a word another provider uses is no
# complete stop for Responses or Gemini.
my $cw = q{cut off at the model's context window};
my $nc = 'LLM answer did not end with a complete stop';
my @faults = (
	[
		'fault-stop-content_filter',
		q{stopped by the provider's content filter (finish_reason "content_filter")},
		q{stopped by the provider's content filter (stop_reason "content_filter")},
		q{stopped by the provider's content filter (incomplete_details.reason "content_filter")},
		qq{$nc (finishReason "content_filter")}
	],
	[
		'fault-content-filter',
		q{stopped by the provider's content filter (finish_reason "content_filter")},
		q{LLM refused to summarize the conversation (stop_reason "refusal")},
		q{stopped by the provider's content filter (incomplete_details.reason "content_filter")},
		q{stopped by the provider's content filter (finishReason "SAFETY")}
	],
	[
		'fault-refusal',
		q{LLM refused to summarize the conversation (its answer holds a refusal)},
		q{LLM refused to summarize the conversation (stop_reason "refusal")},
		q{LLM refused to summarize the conversation (its answer holds a refusal)},
		q{stopped by the provider's content filter (promptFeedback.blockReason "SAFETY")}
	],
	[
		'fault-stop-refusal',
		q{LLM refused to summarize the conversation (finish_reason "refusal")},
		q{LLM refused to summarize the conversation (stop_reason "refusal")},
		qq{$nc (incomplete_details.reason "refusal")},
		qq{$nc (finishReason "refusal")}
	],
	[
		'fault-stop-pause_turn',
		q{LLM paused before finishing its answer (finish_reason "pause_turn")},
		q{LLM paused before finishing its answer (stop_reason "pause_turn")},
		qq{$nc (incomplete_details.reason "pause_turn")},
		qq{$nc (finishReason "pause_turn")}
	],
	[
		'fault-stop-model_context_window_exceeded',
		qq{$cw (finish_reason},
		qq{$cw (stop_reason "model_context_window_exceeded")},
		qq{$nc (incomplete_details.reason "model_context_window_exceeded")},
		qq{$nc (finishReason "model_context_window_exceeded")}
	],
	[ 'fault-length', 'LLM summary was cut off at', 'LLM summary was cut off at', 'LLM summary was cut off at', 'LLM summary was cut off at' ],
	map({ [ $_, ('LLM answered with a tool call instead of a summary') x 4 ] } 'fault-tool-calls', 'fault-tool-calls-stop'),
	[
		'fault-no-finish', q{LLM answer has no finish_reason},
		q{LLM answer has no stop_reason}, q{LLM answer has no status},
		q{LLM answer has no finishReason}
	],
	[
		'fault-stop-null', q{LLM answer has no finish_reason},
		q{LLM answer has no stop_reason}, q{LLM answer has no incomplete_details.reason},
		q{LLM answer has no finishReason}
	],
	[ 'fault-choices-2', q{LLM answer has 2 choices where one was asked for}, undef, undef, q{LLM answer has 2 candidates where one was asked for} ],
	[
		'fault-stop-eos_token',
		qq{$nc (finish_reason "eos_token")},
		qq{$nc (stop_reason "eos_token")},
		qq{$nc (incomplete_details.reason "eos_token")},
		qq{$nc (finishReason "eos_token")}
	],
);
my @providers = qw(openai anthropic responses gemini);
my %column = (openai => 1, anthropic => 2, responses => 3, gemini => 4);
# the error wanted of a fault entry with a provider
sub want_of
{
	my ($p, $fe) = @_;
	return $fe->[ $column{$p} ];
}
sub faults_of { my ($p) = @_; return grep { defined want_of($p, $_) } @faults; }
# text of the mock's refusals and tool-calling answers, never to be quoted
my @mocktexts = ("I'm sorry", 'Let me look that up');

# --- the mock LLM and the cluster ---------------------------------------------
my $mock = CtxwinTest::Mock->start;
my $node = ctxwin_node(
	'refusals',
	preload => 1,
	mock => $mock,
	conf => {
		'ctxwin.databases' => 'r1',
		'ctxwin.naptime_ms' => '60000',
		'ctxwin.llm_timeout_ms' => '10000',
	});
for my $d (qw(r0 r1))
{
	sql_do($node, 'postgres', "CREATE DATABASE $d");
	sql_do($node, $d, <<'SQL');
CREATE EXTENSION ctxwin;
-- compaction as it runs when no summary waits for a prompt cache: sliding
-- windows (test/stable.sql checks the stable ones and their summary timing)
ALTER TABLE ctxwin.profiles ALTER COLUMN window_policy SET DEFAULT 'sliding';
UPDATE ctxwin.profiles SET window_policy = 'sliding';
INSERT INTO ctxwin.profiles (name, max_messages_before_summary, max_tokens_before_summary, trigger_ratio,
                             min_recent_messages, summary_strategy)
VALUES ('r', 8, NULL, NULL, 2, 'llm');
SQL
}
if (!wait_for($node, 'r1', "SELECT state = 'idle' FROM ctxwin.worker_status WHERE database = 'r1'", 10))
{
	diag('worker_status: ' . sq('r1', 'SELECT to_jsonb(w) FROM ctxwin.worker_status w'));
	my @log = grep { !/ statement: / } split /\n/, slurp_file($node->logfile);
	diag("server log, statements left out:\n" . join("\n", @log[ ($#log > 40 ? $#log - 40 : 0) .. $#log ]));
	BAIL_OUT('the worker of r1 did not start');
}

sub sq { return sql($node, @_); }
# ql(PROVIDER, MODEL, SQL): in r0 (no worker there) with that provider and model
sub ql
{
	my ($p, $model, $query) = @_;
	local $ENV{PGOPTIONS} =
	    "-c ctxwin.llm_provider=$p -c ctxwin.llm_base_url=" . $mock->base_url($p)
	  . " -c ctxwin.llm_model=$model -c ctxwin.llm_max_retries=2";
	return sq('r0', $query);
}
sub nreq { return $mock->nreq; }
# what a failure must not change
sub session_state
{
	my ($db, $id) = @_;
	return sq($db, "SELECT s.summary_through_id, s.summary_version, md5(coalesce(s.conversation_summary, '')),
	                  (SELECT count(*) FROM ctxwin.summaries x WHERE x.session_id = s.id),
	                  (SELECT count(*) FROM ctxwin.flush_events f WHERE f.session_id = s.id)
	           FROM ctxwin.sessions s WHERE s.id = '$id'");
}
# add(DB, WHERE, N): N messages to each session matching WHERE, in one statement
sub add
{
	my ($db, $where, $n) = @_;
	sql_do($node, $db, "INSERT INTO ctxwin.messages (session_id, role, content)
	           SELECT s.id, CASE WHEN g % 2 = 1 THEN 'user' ELSE 'assistant' END,
	                  'turn ' || g || ': deploy billing-api ' || g || ' to /srv/app/v' || g || ' and check E' || (4000 + g)
	           FROM ctxwin.sessions s, generate_series(1, $n) g WHERE $where ORDER BY g, s.id");
}

# ---------------------------------------------------------------------------
# summarize_session: an error saying why, one request (not sent again at
# once, though llm_max_retries is 2), the session unchanged
# ---------------------------------------------------------------------------
for my $p (@providers)
{
	my $f = sql_do($node, 'r0', "INSERT INTO ctxwin.sessions (profile) VALUES ('r') RETURNING id");
	add('r0', "id = '$f'", 8);
	ql($p, 'mock', "SELECT ctxwin.summarize_session('$f')");
	add('r0', "id = '$f'", 8);
	my $before = session_state('r0', $f);
	like($before, qr/^6\|1\|/, "$p: a session with a summary of messages 1-6 and 10 new messages");
	for my $fe (faults_of($p))
	{
		my ($m, $want) = ($fe->[0], want_of($p, $fe));
		my $n0 = nreq();
		my $out = ql($p, $m, "SELECT version FROM ctxwin.summarize_session('$f')");
		my $bad = '';
		$bad .= ' error' unless $out =~ /ERROR:  .*\Q$want\E/s;
		$bad .= ' session-changed' unless session_state('r0', $f) eq $before;
		$bad .= ' requests=' . (nreq() - $n0) unless nreq() - $n0 == 1;
		$bad .= ' quotes-the-answer' if contains_none($out, @mocktexts) ne '';
		is($bad, '', "$p: $m fails with \"$want\" after one request, the session unchanged");
		diag($out) if $bad ne '';
	}

	# compact(): the same answers end as a recorded failure that says why
	for my $fe (faults_of($p))
	{
		my ($m, $want) = ($fe->[0], want_of($p, $fe));
		add('r0', "id = '$f'", 1);    # a new message: the circuit breaker starts again
		my $n0 = nreq();
		my $out = ql($p, $m, 'SELECT ctxwin.compact()');
		my $err = sq('r0', "SELECT compaction_failures || '|' || last_error FROM ctxwin.sessions WHERE id = '$f'");
		my $bad = '';
		$bad .= " compact=$out" unless $out eq '0';
		$bad .= ' last_error' unless $err eq "1|$want" || $err =~ /^1\|.*\Q$want\E/s;
		$bad .= ' session-changed' unless session_state('r0', $f) eq $before;
		$bad .= ' requests=' . (nreq() - $n0) unless nreq() - $n0 == 1;
		$bad .= ' quotes-the-answer' if contains_none($err, @mocktexts, $mock->key) ne '';
		is($bad, '', "$p: compact() with $m: one failure recorded, last_error says why, the session's summary unchanged");
		diag("$out\n$err") if $bad ne '';
	}
	is(sq('r0', "SELECT compaction_queued_at IS NOT NULL FROM ctxwin.sessions WHERE id = '$f'"),
		't', "$p: the session stays queued for a later attempt");

	# a complete stop is accepted: stop_sequence (Anthropic's, which the
	# Chat Completions format takes too), and the provider's usual stop
	my $good = $p eq 'openai' || $p eq 'anthropic' ? 'fault-stop-stop_sequence' : 'mock';
	my $out = ql($p, $good, "SELECT version FROM ctxwin.summarize_session('$f')");
	is( "$out|"
		  . sq('r0', "SELECT conversation_summary = (SELECT content FROM ctxwin.summaries WHERE session_id = '$f' AND version = 2)
	                          AND last_error IS NULL AND compaction_failures = 0 FROM ctxwin.sessions WHERE id = '$f'"),
		'2|t',
		"$p: an answer ended by a complete stop ($good) becomes version 2 and clears last_error");
}

# ---------------------------------------------------------------------------
# The worker: a session per answer, each with a summary made by the mock;
# then its profile's summary_model answers so and 9 more messages queue it.
# Each attempt is one request, recorded as a failed compaction and tried
# again after the compaction backoff (1 s, 4 s) up to the circuit breaker
# (ctxwin.max_failures, 3); the summary made before stays.
# ---------------------------------------------------------------------------
for my $p (@providers)
{
	set_conf($node, 'ctxwin.llm_provider' => $p, 'ctxwin.llm_base_url' => $mock->base_url($p));
	my @models = map { $_->[0] } faults_of($p);
	my $n = @models;
	for my $m (@models)
	{
		sql_do($node, 'r1', <<"SQL");
INSERT INTO ctxwin.profiles (name, max_messages_before_summary, max_tokens_before_summary, trigger_ratio,
                             min_recent_messages, summary_strategy, summary_model)
VALUES ('$p-$m', 8, NULL, NULL, 2, 'llm', 'mock');
INSERT INTO ctxwin.sessions (profile, metadata) VALUES ('$p-$m', '{"fault": "$m"}');
SQL
	}
	my $where = "profile LIKE '$p-%'";
	add('r1', $where, 9);
	ok( wait_for($node, 'r1',
			"SELECT count(*) = $n FROM ctxwin.sessions WHERE $where AND summary_version = 1 AND compaction_queued_at IS NULL", 20),
		"$p: the worker summarizes the $n sessions with the mock first");
	my $sums_sql = "SELECT string_agg(id || ':' || md5(conversation_summary), ',' ORDER BY id) FROM ctxwin.sessions WHERE $where";
	my $sums = sq('r1', $sums_sql);
	my $failed0 = sq('r1', "SELECT failed FROM ctxwin.worker_status WHERE database = 'r1'");
	sql_do($node, 'r1', "UPDATE ctxwin.profiles SET summary_model = substr(name, length('$p-') + 1) WHERE name LIKE '$p-%'");
	my $n0 = nreq();
	my $start = time;
	add('r1', $where, 9);
	ok(wait_for($node, 'r1', "SELECT count(*) = $n FROM ctxwin.sessions WHERE $where AND compaction_failures = 3", 40),
		"$p: every one of the $n answers is a failed compaction, three times (the circuit breaker), in "
		  . (time - $start) . ' s');
	# the worker looks at its queue again, and sends nothing more
	my $rq_sql = "SELECT requests FROM ctxwin.worker_status WHERE database = 'r1'";
	my $rq = sq('r1', $rq_sql);
	my $looked = worker_settled($node, 'r1');
	is($looked . '|' . sq('r1', $sums_sql) . '|' . (sq('r1', $rq_sql) - $rq), "1|$sums|0",
		"$p: each session still holds the summary made before (the worker looked again and sent nothing)");
	is( sq('r1', "SELECT count(*) FILTER (WHERE summary_version = 1 AND summary_through_id = 7 AND compaction_queued_at IS NOT NULL)
	                      || ':' || (SELECT count(*) FROM ctxwin.summaries x JOIN ctxwin.sessions s ON s.id = x.session_id WHERE s.$where)
	                      || ':' || (SELECT count(*) FROM ctxwin.flush_events x JOIN ctxwin.sessions s ON s.id = x.session_id WHERE s.$where)
	               FROM ctxwin.sessions WHERE $where"),
		"$n:$n:$n",
		"$p: still version 1 through message 7, one summaries row and one flush event each, still queued");
	for my $fe (faults_of($p))
	{
		my ($m, $want) = ($fe->[0], want_of($p, $fe));
		my $err = sq('r1', "SELECT last_error FROM ctxwin.sessions WHERE profile = '$p-$m'");
		my $bad = '';
		$bad .= ' last_error' unless index($err, $want) >= 0;
		$bad .= ' quotes-the-answer' if contains_none($err, @mocktexts, $mock->key) ne '';
		is($bad, '', "$p: worker, $m: last_error says \"$want\"");
		diag($err) if $bad ne '';
	}
	# the requests: three per session, 1 s then 4 s apart at least
	my %t;
	push @{ $t{ $_->{model} } }, $_->{time} for $mock->requests($n0);
	my @wrong = grep {
		my $v = $t{$_};
		@$v != 3 || $v->[1] - $v->[0] < 0.9 || $v->[2] - $v->[1] < 3.9
	} sort keys %t;
	is( scalar(keys %t) . ' models, '
		  . (@wrong
			? 'wrong: ' . join(', ',
				map { my $v = $t{$_}; "$_ [" . join(', ', map { sprintf('%.1f', $_ - $v->[0]) } @$v) . ']' } @wrong)
			: 'ok'),
		"$n models, ok",
		"$p: one request per attempt, three attempts each, after the backoff of 1 s and 4 s; none since (the breaker holds)");
	is(sq('r1', "SELECT failed - $failed0 FROM ctxwin.worker_status WHERE database = 'r1'"),
		3 * $n, "$p: worker_status counts the " . (3 * $n) . ' failed compactions');
	is( sq('r1', "SELECT count(*) FROM ctxwin.summaries x JOIN ctxwin.sessions s ON s.id = x.session_id
	                  WHERE s.$where AND (x.content LIKE '%sorry%' OR x.content LIKE '%look that up%' OR x.content NOT LIKE 'Summary (mock)%')"),
		'0', "$p: no summary holds a refusal, a tool-calling text or anything but a complete mock summary");

	# the same sessions, once the model answers well again
	sql_do($node, 'r1', "UPDATE ctxwin.profiles SET summary_model = 'mock' WHERE name LIKE '$p-%'");
	add('r1', $where, 1);
	ok( wait_for($node, 'r1', "SELECT count(*) = $n FROM ctxwin.sessions WHERE $where AND summary_version = 2 AND compaction_failures = 0
	             AND last_error IS NULL AND compaction_queued_at IS NULL", 20),
		"$p: with a model that answers, a new message resets the breaker and every session gets version 2");
}

is(index(slurp_file($node->logfile), $mock->key), -1, 'the API key is nowhere in the server log');

done_testing();
