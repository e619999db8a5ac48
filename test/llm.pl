# The LLM client over real loopback HTTP, against test/mockllm.py speaking the
# OpenAI chat-completions and Anthropic Messages wire formats: the llm and
# hybrid strategies (what is sent, what is stored), incremental summaries,
# every failure kind leaving the session as it was, retries and Retry-After,
# time limits, query cancel, compact(), who may see and set what, and the key
# never showing in the server log or an error.
# A cluster of its own (ctxwin not preloaded, no LLM in its configuration:
# each connection brings its LLM settings in PGOPTIONS, as ql() below does).
use strict;
use warnings;
use FindBin;
use lib "$FindBin::RealBin/lib";
use CtxwinTest;
use File::Basename qw(dirname);
use HTTP::Tiny;
use IO::Socket::INET;
use IPC::Run;
use JSON::PP;
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;

plan tests => 339;

my $db = 'ctxwin_llm_t';
my $role = 'ctxwin_llm_user';
my $hostile = 'ctxwin_llm_hostile';

# the mock answers fault-timeout after 30 s; its key file holds the key with
# a final newline, as editors write it
my $mock = CtxwinTest::Mock->start(extra => [ '--slow', '30' ]);
my $port = $mock->port;
my $key = $mock->key;
my $keyfile = $mock->keyfile;
my $tmp = dirname($keyfile);    # where the key files are: no error may name it
append_to_file("$tmp/wrongkey", "sk-ctxwin-wrong-key-0123456789\n");
chmod 0644, "$tmp/wrongkey";
# a port where nothing listens
my $closed = do
{
	my $s = IO::Socket::INET->new(LocalAddr => '127.0.0.1', LocalPort => 0, Proto => 'tcp')
	  or die "no free port: $!";
	my $p = $s->sockport;
	close $s;
	$p;
};

my $node = ctxwin_node('llm');

my @seen;    # every output the tests saw, to look for the key

# sq(SQL, user => ROLE, options => PGOPTIONS): psql on the test database, its
# statements run one by one as psql -c would (no stop at an error), the
# output with errors included, everything kept in @seen
sub sq
{
	my ($sql, %o) = @_;
	local %ENV = %ENV;
	$ENV{PGOPTIONS} = $o{options} if defined $o{options};
	my $out = sql($node, $db, $sql,
		on_error_stop => 0,
		extra_params => [ $o{user} ? ('-U', $o{user}) : () ]);
	$out =~ s/\n+\z//;    # as the shell's $(...) did
	push @seen, $out;
	return $out;
}

# llm_options(PROVIDER, MORE): the LLM settings of a provider (openai,
# responses, anthropic, gemini) or none (extractive) as "-c name=value"
# options, then MORE
sub llm_options
{
	my ($p, $more) = @_;
	my $o = "-c ctxwin.llm_api_key_file=$keyfile -c ctxwin.llm_max_retries=0 -c ctxwin.llm_timeout_ms=5000";
	$o .= " -c ctxwin.llm_provider=$p -c ctxwin.llm_base_url=" . $mock->base_url($p)
	  if $p ne 'none';
	return $o . ' ' . ($more // '');
}

# ql(PROVIDER, MORE, SQL): sq with those settings
sub ql
{
	my ($p, $more, $sql) = @_;
	return sq($sql, options => llm_options($p, $more));
}

# bg({ options, appname, user }, COMMAND...): bg_sql on this node and
# database; done(BG) waits for it and returns its output, errors included
sub bg { return bg_sql($node, $db, @_); }

sub done
{
	my $text = bg_done(@_);
	push @seen, $text;
	return $text;
}

# The mock's log: nreq, the requests so far; last(PATH), a field of the
# last request; since(N, PATH), that field of each request after the first N.
# PATH is a.b.c; "body.messages[].role" joins the roles with commas; what is
# not a string shows as JSON.
my $json = JSON::PP->new->canonical->allow_nonref;
sub nreq { return $mock->nreq; }

sub out
{
	my ($v) = @_;
	return 'null' unless defined $v;
	return ref $v ? $json->encode($v) : "$v";
}

sub field
{
	my ($v, @parts) = @_;
	for my $i (0 .. $#parts)
	{
		my $k = $parts[$i];
		if ($k =~ /^(.*)\[\]\z/)
		{
			my $list = ref $v eq 'HASH' ? $v->{$1} : undef;
			return join(',', map { out(field($_, @parts[ $i + 1 .. $#parts ])) } @{ $list // [] });
		}
		$v = ref $v eq 'HASH' ? $v->{$k} : undef;
	}
	return $v;
}

sub last_req
{
	my ($path) = @_;
	my @r = $mock->requests;
	my $v = out(@r ? field($r[-1], split /\./, $path) : undef);
	$v =~ s/\n+\z//;
	return $v;
}

sub since
{
	my ($n, $path) = @_;
	return map { out(field($_, split /\./, $path)) } $mock->requests($n);
}

# what a failure must not change
sub sess_state
{
	my ($s) = @_;
	return sq("SELECT s.summary_through_id, s.summary_version, md5(coalesce(s.conversation_summary, '')),
	             (SELECT count(*) FROM ctxwin.summaries x WHERE x.session_id = s.id),
	             (SELECT count(*) FROM ctxwin.flush_events f WHERE f.session_id = s.id)
	      FROM ctxwin.sessions s WHERE s.id = '$s'");
}

# contains_all(TEXT, WORD...): the first word missing, or ''; contains_none:
# the first word present, or ''
sub contains_all
{
	my ($t, @w) = @_;
	for (@w) { return $_ if index($t, $_) < 0; }
	return '';
}


# has(GOT, SUBSTRING, DESCRIPTION): like() for a literal string
sub has
{
	my ($got, $want, $desc) = @_;
	return like($got, qr/\Q$want\E/, $desc);
}

sql_do($node, 'postgres', "CREATE DATABASE $db");
sql_do($node, 'postgres', "CREATE ROLE $role LOGIN");
# every statement and debug message in the server log, to look for the key there
sql_do($node, 'postgres', "ALTER DATABASE $db SET log_statement = 'all'");
sql_do($node, 'postgres', "ALTER DATABASE $db SET log_min_messages = 'debug1'");
sql_do($node, $db, <<'SQL');
CREATE EXTENSION ctxwin;
-- compaction as it runs when no summary waits for a prompt cache: sliding
-- windows (test/stable.sql checks the stable ones and their summary timing)
ALTER TABLE ctxwin.profiles ALTER COLUMN window_policy SET DEFAULT 'sliding';
UPDATE ctxwin.profiles SET window_policy = 'sliding';
INSERT INTO ctxwin.profiles (name, model, max_messages_before_summary, max_tokens_before_summary,
                             trigger_ratio, min_recent_messages, max_summary_tokens, summary_strategy, summary_model)
VALUES ('llm', 'gpt-4o', 8, NULL, NULL, 2, 600, 'llm', NULL),
       ('hybrid', 'gpt-4o', 8, NULL, NULL, 2, 600, 'hybrid', 'mock');
-- a new session of a profile with the first 8 messages (part 1) or the next 6 (part 2)
CREATE FUNCTION conv(p text) RETURNS uuid LANGUAGE sql AS $$
    INSERT INTO ctxwin.sessions (profile, system_prompt) VALUES (p, 'You help the billing team.') RETURNING id $$;
CREATE FUNCTION part(s uuid, n int) RETURNS void LANGUAGE plpgsql AS $$
BEGIN
    IF n = 1 THEN
        INSERT INTO ctxwin.messages (session_id, role, content) VALUES
        (s, 'user', 'Deploys of billing-api fail with E4242 while reading /srv/billing/config.yaml; ticket BILL-412.'),
        (s, 'assistant', 'The deploy job times out after 30 s; the runbook is https://wiki.example.com/runbooks/billing-deploy.'),
        (s, 'user', 'The database host db7 has 512 MB of free disk.'),
        (s, 'assistant', 'Raise payment_retry_limit from 3 to 5 in settings.toml, then redeploy.'),
        (s, 'user', 'Who owns the InvoiceRenderer service?'),
        (s, 'assistant', 'Team Ledger owns InvoiceRenderer; page them through OPS-77.'),
        (s, 'user', 'Should we also raise the worker count? (marker TAIL-7)'),
        (s, 'assistant', 'Not yet: wait for the load test. (marker TAIL-8)');
    ELSE
        INSERT INTO ctxwin.messages (session_id, role, content) VALUES
        (s, 'user', 'New failure: E5003 from the ledger sync after the fix on branch fix/billing-timeout.'),
        (s, 'assistant', 'E5003 means the ledger token expired; rotate it with `ledgerctl rotate --env prod` and track it under BILL-415.'),
        (s, 'user', 'Correction: the deploy timeout is now 90 s, not 30 s.'),
        (s, 'assistant', 'Noted: the timeout is 90 s from release v2.4.1 on.'),
        (s, 'user', 'Can we ship today? (marker TAIL-13)'),
        (s, 'assistant', 'Yes, after the smoke test. (marker TAIL-14)');
    END IF;
END $$;
CREATE FUNCTION contents(s uuid, a bigint, b bigint) RETURNS SETOF text LANGUAGE sql AS $$
    SELECT content FROM ctxwin.messages WHERE session_id = s AND id BETWEEN a AND b ORDER BY id $$;
SQL

sub newsess { my @l = split /\n/, sq("SELECT conv('$_[0]')"); return $l[-1]; }
sub msgs { my ($s, $a, $b) = @_; return split /\n/, sq("SELECT contents('$s', $a, $b)"); }

my @range1_facts = ("/srv/billing/config.yaml", "BILL-412", "E4242", "30 s",
	"https://wiki.example.com/runbooks/billing-deploy", "payment_retry_limit", "OPS-77");
my @range2_facts = ("E5003", "fix/billing-timeout", "BILL-415", "90 s", "v2.4.1");

my ($s, $f, $out, $n0, $before, $start, $took);

# ---------------------------------------------------------------------------
# The llm strategy, each provider: what is sent and what is stored
# ---------------------------------------------------------------------------
my %path = (
	openai => '/v1/chat/completions',
	responses => '/v1/responses',
	anthropic => '/v1/messages',
	gemini => '/v1beta/models/mock:generateContent');
for my $p (qw(openai responses anthropic gemini))
{
	$s = newsess('llm');
	sq("SELECT part('$s', 1)");
	is(sq("SELECT compaction_queued_at IS NOT NULL FROM ctxwin.sessions WHERE id = '$s'"), 't',
		"$p: 8 messages queue the session");
	$n0 = nreq();
	$out = ql($p, '-c ctxwin.llm_model=mock', "LISTEN ctxwin_flush;
		SELECT version, from_id, through_id, strategy FROM ctxwin.summarize_session('$s', false, 'keep the deployment decisions')");
	has($out, '1|1|6|llm', "$p: summarize_session with strategy llm makes version 1 of messages 1-6");
	is(nreq() - $n0, 1, "$p: one request reached the mock");
	my $path = $path{$p};
	is(join('|', map { last_req($_) } qw(path auth model max_tokens)), "$path|ok|mock|600",
		"$p: POST $path with the key in the provider's header, the model and max_tokens = max_summary_tokens");
	if ($p eq 'openai')
	{
		is(last_req('body.messages[].role') . '|' . last_req('body.temperature'), 'system,user|0',
			'openai: a system and a user message, temperature 0');
	}
	elsif ($p eq 'anthropic')
	{
		is( last_req('headers.anthropic-version') . '|' . last_req('body.messages[].role') . '|'
			  . scalar(grep { /verbatim/ } split /\n/, last_req('body.system')),
			'2023-06-01|user|1', 'anthropic: anthropic-version 2023-06-01, the prompt in system, one user message');
	}
	elsif ($p eq 'responses')
	{
		is( last_req('body.store') . '|' . last_req('body.temperature') . '|'
			  . (last_req('body.input') eq last_req('prompt') ? 'input' : 'no input') . '|'
			  . scalar(grep { /verbatim/ } split /\n/, last_req('body.instructions')),
			'false|null|input|1',
			'responses: the prompt in instructions, the transcript as input, not stored, no temperature (reasoning models refuse one)');
	}
	else
	{
		is( last_req('body.model') . '|' . last_req('body.contents[].role') . '|'
			  . last_req('body.generationConfig.temperature') . '|'
			  . scalar(grep { /verbatim/ } split /\n/, last_req('system')),
			'null|user|0|1',
			'gemini: the model in the URL (not in the body), the prompt in systemInstruction, one user turn, temperature 0');
	}
	has(last_req('headers.content-type') . ' ' . last_req('headers.user-agent'), 'application/json ctxwin/',
		"$p: JSON content type and ctxwin's user agent");
	my $sys = last_req('system');
	is( contains_all($sys, 'verbatim', 'newer', 'not continue the conversation', 'Focus: keep the deployment decisions'),
		'',
		"$p: the prompt asks to keep identifiers verbatim, prefer newer facts, not continue the conversation, with the instructions");
	my $prompt = last_req('prompt');
	has($prompt, "Previous summary:\n(none)", "$p: no previous summary yet");
	my @new = msgs($s, 1, 6);
	my @tail = msgs($s, 7, 8);
	is(scalar(@new) . '/' . contains_all($prompt, @new), '6/', "$p: the request holds messages 1-6 as a transcript");
	has($prompt, "[user #1] $new[0]\n[assistant #2] $new[1]", "$p: with role labels and message ids, oldest first");
	is(contains_none($prompt, @tail), '', "$p: and not the newest min_recent_messages");
	my $text = last_req('response_text');
	is(sq("SELECT conversation_summary FROM ctxwin.sessions WHERE id = '$s'"), $text,
		"$p: the session holds the LLM's answer as its summary");
	is(sq("SELECT summary_through_id, summary_version, compaction_queued_at IS NULL FROM ctxwin.sessions WHERE id = '$s'"),
		'6|1|t', "$p: summary_through_id 6, version 1, off the queue");
	is( sq("SELECT model = '" . last_req('response_model') . "' AND usage = \$j\$" . last_req('usage') . "\$j\$::jsonb AND latency_ms >= 0
	            AND content = (SELECT conversation_summary FROM ctxwin.sessions WHERE id = '$s')
	     FROM ctxwin.summaries WHERE session_id = '$s' AND version = 1"),
		't', "$p: the summaries row has the model and usage the provider reported, and a latency");
	is(sq("SELECT array_agg(from_id || '-' || through_id) FROM ctxwin.flush_events WHERE session_id = '$s'"), '{1-6}',
		"$p: a flush event for messages 1-6");
	has($out, 'Asynchronous notification "ctxwin_flush" with payload', "$p: and NOTIFY ctxwin_flush");
	is(contains_all($text, @range1_facts), '', "$p: the summary keeps the identifiers of messages 1-6");

	# incremental: the next range, from the previous summary plus the new messages only
	sq("SELECT part('$s', 2)");
	my $prev = $text;
	$out = ql($p, '-c ctxwin.llm_model=mock', "SELECT version, from_id, through_id FROM ctxwin.summarize_session('$s')");
	is($out, '2|7|12', "$p: the second summary covers 7-12 (from_id = previous through_id + 1)");
	$prompt = last_req('prompt');
	has($prompt, "Previous summary:\n$prev\n", "$p: the request holds the previous summary verbatim");
	@new = msgs($s, 7, 12);
	my @old = msgs($s, 1, 6);
	@tail = msgs($s, 13, 14);
	is(scalar(@new) . '/' . contains_all($prompt, @new), '6/', "$p: and messages 7-12");
	(my $after = $prompt) =~ s/^.*?New messages://s;
	is(contains_none($after, @old, @tail), '', "$p: but none of 1-6 nor 13-14");
	my $text2 = sq("SELECT conversation_summary FROM ctxwin.sessions WHERE id = '$s'");
	is(contains_all($text2, @range1_facts), '', "$p: facts of the first range survive through the previous summary");
	is(contains_all($text2, @range2_facts), '', "$p: and the new facts are in");
	is( sq("SELECT string_agg(version || ':' || from_id || '-' || through_id, ',' ORDER BY version) FROM ctxwin.summaries WHERE session_id = '$s'")
		  . '|'
		  . sq("SELECT string_agg(from_id || '-' || through_id, ',' ORDER BY id) FROM ctxwin.flush_events WHERE session_id = '$s'"),
		'1:1-6,2:7-12|1-6,7-12', "$p: summaries and flush events hold both ranges");
}

# ---------------------------------------------------------------------------
# hybrid: a Facts line found without the LLM, then the LLM's text; the
# profile's summary_model wins over ctxwin.llm_model
# ---------------------------------------------------------------------------
for my $p (qw(openai anthropic))
{
	$s = newsess('hybrid');
	sq("SELECT part('$s', 1)");
	my $base = '';
	$base = "-c ctxwin.llm_base_url=http://127.0.0.1:$port/v1/" if $p eq 'openai';    # a final slash is fine
	$out = ql($p, "-c ctxwin.llm_model=fault-500 $base", "SELECT version, strategy FROM ctxwin.summarize_session('$s')");
	is($out, '1|hybrid', "$p: a hybrid summary");
	is(last_req('model') . '|' . last_req('path'), 'mock|' . ($p eq 'openai' ? '/v1/chat/completions' : '/v1/messages'),
		"$p: with the profile's summary_model, not ctxwin.llm_model");
	my $sum = sq("SELECT conversation_summary FROM ctxwin.sessions WHERE id = '$s'");
	my ($first) = $sum =~ /\A([^\n]*)/;
	has($first, 'Facts: ', "$p: the summary starts with a Facts line");
	is( contains_all($first, '/srv/billing/config.yaml', 'BILL-412', 'E4242',
			'https://wiki.example.com/runbooks/billing-deploy', '30 s', 'payment_retry_limit'),
		'', "$p: holding paths, ids, URLs and numbers of the messages verbatim");
	is($sum, "$first\n\n" . last_req('response_text'), "$p: then the LLM's text");
	my $mt = last_req('max_tokens');
	ok($mt =~ /^[0-9]+\z/ && $mt < 600,
		"$p: the LLM is asked for fewer tokens than max_summary_tokens, the facts taking the rest");
	has(last_req('prompt'), "Previous summary:\n(none)", "$p: no previous summary sent");
}

# ---------------------------------------------------------------------------
# Every failure leaves the session as it was, with a clear error
# ---------------------------------------------------------------------------
my @faults = (
	[ 'fault-500', 'HTTP 500: The server had an error' ],
	[ 'fault-503-then-ok', 'HTTP 503' ],
	[ 'fault-502-html', '502' ],
	[ 'fault-timeout', 'timed out' ],
	[ 'fault-drip', 'timed out' ],
	[ 'fault-malformed', 'malformed JSON' ],
	[ 'fault-truncated-json', 'malformed JSON' ],
	[ 'fault-partial', 'transfer closed' ],
	[ 'fault-empty-choices', '' ],
	[ 'fault-empty-content', 'LLM answer is empty' ],
	[ 'fault-length', 'was cut off' ],
	[ 'fault-html', 'content type "text/html"' ],
	[ 'fault-huge', 'larger than 1048576 bytes' ],
	[ 'fault-close', 'could not reach LLM endpoint' ],
	[ 'fault-400', 'refused the summary request: HTTP 400' ],
	[ 'no-such-model', 'refused the summary request: HTTP 404' ],);
for my $p (qw(openai responses anthropic gemini))
{
	$f = newsess('llm');
	sq("SELECT part('$f', 1)");
	ql($p, '-c ctxwin.llm_model=mock', "SELECT ctxwin.summarize_session('$f')");
	sq("SELECT part('$f', 2)");
	$before = sess_state($f);
	has($before, '6|1|', "$p: a session with a summary and 8 new messages, due again");
	my $reset = HTTP::Tiny->new->post("http://127.0.0.1:$port/_mock/reset", { content => "" });
	diag("the mock's reset failed: $reset->{status} $reset->{reason}") unless $reset->{success};
	for my $fe (@faults)
	{
		my ($m, $want) = @$fe;
		$want =
		    $p eq 'openai' ? 'LLM answer has no choices'
		  : $p eq 'gemini' ? 'LLM answer has no candidates'
		  :                  'LLM answer is empty'
		  if $m eq 'fault-empty-choices';
		my $t = 5000;
		$t = 1000 if $m eq 'fault-timeout';
		$t = 1500 if $m eq 'fault-drip';
		$n0 = nreq();
		$start = now_ms();
		$out = ql($p, "-c ctxwin.llm_model=$m -c ctxwin.llm_timeout_ms=$t",
			"SELECT version FROM ctxwin.summarize_session('$f')");
		$took = elapsed_ms($start);
		my $bad = '';
		$bad .= ' error' unless $out =~ /ERROR:  .*\Q$want\E/s;
		$bad .= ' session-changed' unless sess_state($f) eq $before;
		$bad .= ' requests=' . (nreq() - $n0) unless nreq() - $n0 == 1;
		$bad .= " took-${took}ms" unless $took < 15000;
		is($bad, '', "$p: $m fails with \"$want\" within 15 s, the session unchanged");
		diag($out) if $bad ne '';
	}

	$n0 = nreq();
	$out = ql($p, "-c ctxwin.llm_model=mock -c ctxwin.llm_api_key_file=$tmp/wrongkey",
		"SELECT ctxwin.summarize_session('$f')");
	# (Gemini answers a wrong key with 400 INVALID_ARGUMENT)
	has($out, 'refused the summary request: HTTP ' . ($p eq 'gemini' ? 400 : 401), "$p: a wrong key: refused, not retried");
	is(join("\n", since($n0, 'auth')) . '|' . sess_state($f), "wrong|$before",
		"$p: the mock saw the wrong key; the session is unchanged");
	$out = ql($p, "-c ctxwin.llm_model=mock -c ctxwin.llm_base_url=http://127.0.0.1:$closed",
		"SELECT ctxwin.summarize_session('$f')");
	has($out, 'could not reach LLM endpoint', "$p: nothing listening: could not reach the endpoint");
	$out = ql($p, "-c ctxwin.llm_model=mock -c ctxwin.llm_api_key_file=$tmp/nonexistent",
		"SELECT ctxwin.summarize_session('$f')");
	has($out, 'could not read the LLM API key file', "$p: a missing key file");
	$out = ql($p, '-c ctxwin.llm_model=fault-huge -c ctxwin.llm_max_response_bytes=4194304',
		"SELECT ctxwin.summarize_session('$f')");
	has($out, 'over max_summary_tokens',
		"$p: a 2.6 MB answer under a raised size limit is still refused (over max_summary_tokens)");
	is(sess_state($f), $before, "$p: after all that, the session is unchanged");

	# retries: 429 waits Retry-After, 5xx back off, 4xx are not retried
	$n0 = nreq();
	$out = ql($p, '-c ctxwin.llm_model=fault-500 -c ctxwin.llm_max_retries=2', "SELECT ctxwin.summarize_session('$f')");
	has($out, 'failed after 3 requests: HTTP 500', "$p: 500 is retried ctxwin.llm_max_retries = 2 times");
	my @ts = since($n0, 'time');
	is(scalar(@ts), 3, "$p: the mock saw 3 requests");
	ok(@ts == 3 && $ts[1] - $ts[0] >= 0.2 && $ts[2] - $ts[1] >= 0.45, "$p: backing off 0.25 s, then 0.5 s");
	$n0 = nreq();
	$out = ql($p, '-c ctxwin.llm_model=fault-529 -c ctxwin.llm_max_retries=0', "SELECT ctxwin.summarize_session('$f')");
	has($out, 'failed after 4 requests: HTTP 529',
		"$p: 529 waits Retry-After 3 times without charging an attempt, then fails");
	@ts = since($n0, 'time');
	ok(@ts == 4 && $ts[1] - $ts[0] >= 0.9 && $ts[3] - $ts[2] >= 0.9, "$p: each time after Retry-After: 1");
	is(sess_state($f), $before, "$p: and the session is unchanged");
	$n0 = nreq();
	$out = ql($p, '-c ctxwin.llm_model=fault-502-html -c ctxwin.llm_max_retries=2',
		"SELECT ctxwin.summarize_session('$f')");
	is(nreq() - $n0, 3, "$p: a 502 with an HTML page (a proxy) is retried as any 5xx");
	has($out, '502', "$p: and the error names the status");
	$n0 = nreq();
	$out = ql($p, '-c ctxwin.llm_model=fault-close -c ctxwin.llm_max_retries=1', "SELECT ctxwin.summarize_session('$f')");
	is(nreq() - $n0, 2, "$p: a closed connection is retried");
	$n0 = nreq();
	$out = ql($p, '-c ctxwin.llm_model=fault-400 -c ctxwin.llm_max_retries=2', "SELECT ctxwin.summarize_session('$f')");
	is(nreq() - $n0, 1, "$p: a 400 is not retried");
	is(sess_state($f), $before, "$p: failed retries leave the session unchanged");

	# and a later call with a working model succeeds
	$out = ql($p, '-c ctxwin.llm_model=mock', "SELECT version, from_id, through_id FROM ctxwin.summarize_session('$f')");
	is($out, '2|7|12', "$p: after the failures, model mock summarizes 7-12 as version 2");

	# success after retries
	$s = newsess('llm');
	sq("SELECT part('$s', 1)");
	$n0 = nreq();
	$out = ql($p, '-c ctxwin.llm_model=fault-429 -c ctxwin.llm_max_retries=0', "SELECT version FROM ctxwin.summarize_session('$s')");
	is($out, '1',
		"$p: a 429 then an answer: the summary is made, even with llm_max_retries = 0 (a 429 is no failed attempt)");
	@ts = since($n0, 'time');
	is(join('', map { "$_ " } since($n0, 'status')), '429 200 ', "$p: the mock saw 2 requests, 429 then 200");
	# (Gemini says it in the body: a RetryInfo's "retryDelay": "1.5s", more
	# than the 1 s ctxwin waits for a 429 that says nothing)
	my $wait = $p eq 'gemini' ? 1.4 : 0.9;
	ok(($ts[1] // 0) - $ts[0] >= $wait,
		"$p: the retry came after the wait the 429 asked for ($wait s or more)");
	$s = newsess('llm');
	sq("SELECT part('$s', 1)");
	$n0 = nreq();
	$out = ql($p, '-c ctxwin.llm_model=fault-503-then-ok -c ctxwin.llm_max_retries=2',
		"SELECT version FROM ctxwin.summarize_session('$s')");
	is($out . '|' . join('', map { "$_ " } since($n0, 'status')), '1|503 200 ',
		"$p: a 503 then an answer: retried once, the summary is made");
}

# ---------------------------------------------------------------------------
# Gemini: the model is a path of the URL, so a name that is no model is
# refused before any request; a resource name (models/NAME) is taken as is
# ---------------------------------------------------------------------------
$s = newsess('llm');
sq("SELECT part('$s', 1)");
$out = ql('gemini', '-c ctxwin.llm_model=models/mock', "SELECT version FROM ctxwin.summarize_session('$s')");
is($out . '|' . last_req('path'), '1|/v1beta/models/mock:generateContent',
	'gemini: a model named models/NAME goes into the URL as it is');
sq("SELECT part('$s', 2)");
for my $m ('../mock', 'models/a/b', 'mock?alt=sse', 'models/')
{
	$n0 = nreq();
	$out = ql('gemini', "-c ctxwin.llm_model=$m", "SELECT version FROM ctxwin.summarize_session('$s')");
	is((($out =~ /ERROR:  model name "\Q$m\E" cannot be put in a Gemini URL/) ? 'refused' : $out) . '|' . (nreq() - $n0),
		'refused|0', "gemini: model \"$m\" is refused before any request");
}

# ---------------------------------------------------------------------------
# Time limits and cancel
# ---------------------------------------------------------------------------
$f = newsess('llm');
sq("SELECT part('$f', 1)");
$before = sess_state($f);
$start = now_ms();
$out = ql('openai', '-c ctxwin.llm_model=fault-timeout -c ctxwin.llm_timeout_ms=1000 -c ctxwin.llm_max_retries=1',
	"SELECT ctxwin.summarize_session('$f')");
$took = elapsed_ms($start);
has($out, "failed after 2 requests: LLM request to \"http://127.0.0.1:$port/v1/chat/completions\" timed out after",
	'ctxwin.llm_timeout_ms = 1000: the request times out, and is retried once');
ok($took < 15000, "within 15 s (took $took ms)");
$start = now_ms();
$out = ql('anthropic', '-c ctxwin.llm_model=fault-timeout -c ctxwin.llm_timeout_ms=600000 -c statement_timeout=1500',
	"SELECT ctxwin.summarize_session('$f')");
$took = elapsed_ms($start);
has($out, 'canceling statement due to statement timeout', 'statement_timeout interrupts a request in flight');
ok($took < 15000, "within 15 s (took $took ms)");

# waiting_summarize(APPNAME, PROVIDER): a summarize_session of $f in the
# background, once the mock has its request (the backend waits for the
# answer), and the backend's pid
sub waiting_summarize
{
	my ($appname, $p) = @_;
	my $n = nreq();
	my $b = bg(
		{
			appname => $appname,
			options => llm_options($p, '-c ctxwin.llm_model=fault-timeout -c ctxwin.llm_timeout_ms=600000')
		},
		"SELECT ctxwin.summarize_session('$f')");
	wait_until(10, sub { nreq() > $n })
	  or diag("$appname: no request reached the mock in 10 s");
	my $pid = sq("SELECT pid FROM pg_stat_activity WHERE application_name = '$appname' AND state = 'active'");
	return ($b, $pid =~ /^[0-9]+\z/ ? $pid : 0);
}
my ($bgc, $pid) = waiting_summarize('ctxwin_llm_cancel', 'openai');
is(sq("SELECT pg_cancel_backend($pid)") . '|' . last_req('model'), 't|fault-timeout',
	'a summarize waiting on the LLM is signalled');
$start = now_ms();
$out = done($bgc);
$took = elapsed_ms($start);
has($out, 'canceling statement due to user request', 'pg_cancel_backend interrupts the request');
ok($took < 10000, "at once (took $took ms, the mock would answer after 30 s)");
($bgc, $pid) = waiting_summarize('ctxwin_llm_terminate', 'anthropic');
sq("SELECT pg_terminate_backend($pid)");
$start = now_ms();
$out = done($bgc);
$took = elapsed_ms($start);
has($out, 'terminating connection due to administrator command', 'pg_terminate_backend ends a backend waiting on the LLM');
ok($took < 10000, "at once (took $took ms)");
is(sess_state($f), $before, 'timeouts, cancel and terminate leave the session unchanged');

# ---------------------------------------------------------------------------
# compact()
# ---------------------------------------------------------------------------
my $c1 = newsess('llm');
my $c2 = newsess('llm');
sq("SELECT part('$c1', 1), part('$c2', 1)");
my $queued = sq('SELECT count(*) FROM ctxwin.sessions WHERE compaction_queued_at IS NOT NULL');
ok($queued >= 3, "$queued sessions are queued");
$out = ql('openai', '-c ctxwin.llm_model=fault-500', 'SELECT ctxwin.compact()');
is($out, '0', 'compact() with a failing model summarizes nothing');
is( sq("SELECT count(*) FROM ctxwin.sessions WHERE compaction_queued_at IS NOT NULL AND compaction_failures = 1
             AND last_error LIKE '%HTTP 500%' AND last_error_at IS NOT NULL AND summary_version = 0 AND id IN ('$c1', '$c2')"),
	'2', 'the failure is recorded on each session (compaction_failures, last_error), which stays queued and unsummarized');
is( sq("SELECT count(*) FROM ctxwin.summaries WHERE session_id IN ('$c1', '$c2')") . '|'
	  . sq("SELECT count(*) FROM ctxwin.flush_events WHERE session_id IN ('$c1', '$c2')"),
	'0|0', 'no summaries row nor flush event for them');
has(sq("SELECT compaction_failures || ' ' || last_error FROM ctxwin.context_status('$c1')"),
	'1 LLM request failed after 1 requests: HTTP 500', 'context_status shows the failure');
$out = ql('anthropic', '-c ctxwin.llm_model=mock', 'SELECT ctxwin.compact()');
is($out, $queued, 'compact() with model mock summarizes every queued session');
is( sq("SELECT summary_through_id, summary_version, compaction_queued_at IS NULL, compaction_failures, last_error IS NULL
             FROM ctxwin.sessions WHERE id IN ('$c1', '$c2')"),
	"6|1|t|0|t\n6|1|t|0|t", 'they are summarized, off the queue, their failures cleared');
is(sq('SELECT count(*) FROM ctxwin.sessions WHERE compaction_queued_at IS NOT NULL'), '0', 'the queue is empty');

# Two compact() at once never summarize one session twice: the first hangs on
# its first session (fault-timeout), the second skips that one and does the
# other; the first, when it gets to the other, finds it summarized already.
my $c3 = newsess('llm');
my $c4 = newsess('llm');
sq("SELECT part('$c3', 1), part('$c4', 1)");
# (the name by PGAPPNAME: psql's own application_name outranks one in PGOPTIONS)
$n0 = nreq();
my $bga = bg(
	{
		appname => 'ctxwin_compact_a',
		options => llm_options('openai', '-c ctxwin.llm_model=fault-timeout -c ctxwin.llm_timeout_ms=20000')
	},
	'SELECT ctxwin.compact()');
# until the first compact() waits on the LLM: its request reached the mock
# (up to 15 s, well within its 20 s time limit)
wait_until(
	15,
	sub {
		nreq() > $n0
		  && sql($node, $db,
			"SELECT 1 FROM pg_stat_activity WHERE application_name = 'ctxwin_compact_a' AND state = 'active'") eq '1';
	}) or diag('the first compact() sent no request in 15 s');
$out = ql('openai', '-c ctxwin.llm_model=mock', 'SELECT ctxwin.compact()');
is($out, '1', 'a second compact() skips the session the first holds and summarizes the other');
sq("SELECT pg_cancel_backend(pid) FROM pg_stat_activity WHERE application_name = 'ctxwin_compact_a'");
my $first_out = done($bga);
diag("the first compact(): $first_out; "
	  . sq("SELECT compaction_failures, last_error FROM ctxwin.sessions WHERE id IN ('$c3', '$c4')"))
  unless $out eq '1';
is(sq("SELECT count(*) FROM ctxwin.summaries WHERE session_id IN ('$c3', '$c4')"), '1',
	'one summary in all: no session was summarized by both');
is(sq("SELECT count(*) FROM ctxwin.sessions WHERE id IN ('$c3', '$c4') AND compaction_queued_at IS NOT NULL"), '1',
	'the session the canceled compact() held is still queued');

# compact() goes past rows another transaction holds, without paying for
# them: 12 queued sessions, the 5 oldest held FOR UPDATE by another
# connection.  Then a plain role that holds the advisory locks
# summarize_session used to take, for every queued session, and the rows of
# the 5 oldest: compact(7) still finds 7 free sessions.
# marked: a new session of profile llm, queued by 8 messages naming it
sub marked
{
	my $s = newsess('llm');
	sq("INSERT INTO ctxwin.messages (session_id, role, content)
	      SELECT '$s', CASE WHEN g % 2 = 1 THEN 'user' ELSE 'assistant' END,
	             'Session $s, message ' || g || ': deploy billing-' || g || ' to host h' || g || '.'
	      FROM generate_series(1, 8) g");
	return $s;
}
# $mock->requests_naming(N, ID...): how many requests after the first N name one of the ids
# holds(APPNAME): the background connection of that name sleeps, holding
# its locks (its pg_sleep is under way)
sub holds
{
	my ($appname) = @_;
	return wait_for($node, $db,
		"SELECT count(*) = 1 FROM pg_stat_activity WHERE application_name = '$appname' AND query LIKE '%pg_sleep%'", 10);
}

ql('openai', '-c ctxwin.llm_model=mock', 'SELECT ctxwin.compact()');
my @ids = map { marked() } 1 .. 12;
my $held = sql_list(@ids[ 0 .. 4 ]);
my $holder = bg({}, "SET application_name = 'ctxwin_llm_holder'", 'BEGIN',
	"SELECT count(*) FROM (SELECT FROM ctxwin.sessions WHERE id IN ($held) FOR UPDATE) x",
	'SELECT pg_sleep(60)', 'COMMIT');
ok(holds('ctxwin_llm_holder'), 'another connection holds the rows of the 5 oldest');
$n0 = nreq();
$start = now_ms();
# a wait on a lock of over 100 ms is logged ("still waiting for")
my $off = log_offset($node);
$out = ql('openai', '-c ctxwin.llm_model=mock -c lock_timeout=2s -c log_lock_waits=on -c deadlock_timeout=100ms',
	'SELECT ctxwin.compact(100)');
my $ms = elapsed_ms($start);
is($out, '7', 'compact(100) with the 5 oldest of 12 queued sessions held FOR UPDATE elsewhere summarizes the 7 free ones');
is(scalar(() = log_since($node, $off) =~ /still waiting for/g), 0,
	"at once (${ms} ms): it never waited on a held row's lock (5 x lock_timeout would be 10 s)");
is($mock->requests_naming($n0, @ids[ 0 .. 4 ]) . '|' . $mock->requests_naming($n0, @ids[ 5 .. 11 ]), '0|7',
	'no LLM request for a held session, one for each free one');
is( sq("SELECT count(*) FROM ctxwin.sessions WHERE id IN ($held) AND summary_version = 0 AND compaction_failures = 0
             AND compaction_queued_at IS NOT NULL"),
	'5', 'the held sessions are untouched: unsummarized, no failure charged, still queued');
sq("SELECT pg_cancel_backend(pid) FROM pg_stat_activity WHERE application_name = 'ctxwin_llm_holder'");
done($holder);
is(ql('openai', '-c ctxwin.llm_model=mock', 'SELECT ctxwin.compact()'), '5', 'once free, they are summarized');

sq("CREATE ROLE $hostile LOGIN;
	GRANT USAGE ON SCHEMA ctxwin TO $hostile;
	GRANT SELECT, INSERT, UPDATE, DELETE ON ctxwin.sessions, ctxwin.messages TO $hostile;
	GRANT SELECT ON ctxwin.models, ctxwin.profiles TO $hostile");
@ids = map { marked() } 1 .. 12;
$held = sql_list(@ids[ 0 .. 4 ]);
my $hostile_bg = bg({ user => $hostile }, "SET application_name = 'ctxwin_llm_hostile'",
	"SELECT count(pg_advisory_lock(2026112101, hashtext(id::text))) FROM ctxwin.sessions WHERE id IN (" . sql_list(@ids) . ")",
	'BEGIN', "SELECT count(*) FROM (SELECT FROM ctxwin.sessions WHERE id IN ($held) FOR UPDATE) x",
	'SELECT pg_sleep(60)', 'COMMIT');
ok(holds('ctxwin_llm_hostile'), 'the plain role holds them');
$n0 = nreq();
$out = ql('openai', '-c ctxwin.llm_model=mock -c lock_timeout=2s', 'SELECT ctxwin.compact(7)');
is($out, '7',
	'a plain role holding advisory locks on every queued session and the rows of the 5 oldest: compact(7) still summarizes 7');
is($mock->requests_naming($n0, @ids[ 0 .. 4 ]), 0, 'and sends nothing for the held ones');
sq("SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE application_name = 'ctxwin_llm_hostile'");
done($hostile_bg);
is(ql('openai', '-c ctxwin.llm_model=mock', 'SELECT ctxwin.compact()'), '5', 'once it lets go, the other 5 are summarized');

# compact() by a plain role records a failure on the session (the
# bookkeeping columns are written by ctxwin's own functions)
$s = marked();
$out = sq('SELECT ctxwin.compact()', user => $hostile);
is($out, '0', 'compact() as a plain role that cannot make an LLM summary summarizes nothing');
is( sq("SELECT compaction_failures || ' ' || (compaction_retry_at > now()) || ' ' || (last_error <> '') FROM ctxwin.sessions WHERE id = '$s'"),
	'1 true true', 'and the failure is recorded on the session, with its retry time and error');
is( ql('openai', '-c ctxwin.llm_model=mock', 'SELECT ctxwin.compact()') . '|'
	  . sq("SELECT compaction_failures || ':' || (last_error IS NULL) FROM ctxwin.sessions WHERE id = '$s'"),
	'1|0:true', 'a later compaction clears it');

# ---------------------------------------------------------------------------
# No provider
# ---------------------------------------------------------------------------
$s = newsess('llm');
sq("SELECT part('$s', 1)");
$before = sess_state($s);
$n0 = nreq();
$out = ql('none', '-c ctxwin.llm_model=mock', "SELECT ctxwin.summarize_session('$s')");
has($out, 'summary strategy "llm" needs an LLM, and none is configured',
	'extractive provider with strategy llm: a clear error, no silent fallback');
is(sess_state($s) . '|' . (nreq() - $n0), "$before|0", 'the session is unchanged and no request was sent');
has(ql('none', '', "SELECT ctxwin._llm_post('{}')"), 'no LLM provider is configured', '_llm_post refuses without a provider');

# ---------------------------------------------------------------------------
# Who may see and set what
# ---------------------------------------------------------------------------
# key_file(PATH): ALTER SYSTEM SET ctxwin.llm_api_key_file, reload, and wait
# until a new connection sees it (PostgreSQL 15 knows ctxwin's settings once
# the library is loaded)
sub key_file
{
	my ($path) = @_;
	sql_do($node, $db, "LOAD 'ctxwin';
		ALTER SYSTEM SET ctxwin.llm_api_key_file = '$path';
		SELECT pg_reload_conf()");
	return wait_for($node, $db, "SELECT current_setting('ctxwin.llm_api_key_file', true) = '$path'", 5);
}
sql_do($node, $db, "LOAD 'ctxwin';
	ALTER SYSTEM SET ctxwin.llm_provider = 'openai';
	ALTER SYSTEM SET ctxwin.llm_base_url = 'http://127.0.0.1:$port/v1'");
key_file($keyfile);
is(sq('SHOW ctxwin.llm_api_key_file'), $keyfile, 'a superuser sees the key file setting');
sq("GRANT USAGE ON SCHEMA ctxwin TO $role");
# r: psql as the unprivileged role; ctxwin loaded first, as in any session that used it
my $load = q{DO $$BEGIN PERFORM ctxwin.count_tokens('x'); END$$};
sub r { return sq("$load;\n$_[0]", user => $role); }
# PostgreSQL's refusal to show a GUC_SUPERUSER_ONLY setting: 16 reworded it
# ("must be superuser or have privileges of pg_read_all_settings to examine"
# became "permission denied to examine", with a detail)
my $denied = sq('SHOW server_version_num') >= 160000
  ? 'ERROR:  permission denied to examine "ctxwin.llm_api_key_file"'
  : 'ERROR:  must be superuser';
$out = r('SHOW ctxwin.llm_api_key_file');
has($out, $denied, 'a plain role cannot SHOW ctxwin.llm_api_key_file');
is(contains_none($out, $tmp), '', 'and the error does not show the path');
is(r("SELECT count(*) FROM pg_settings WHERE name = 'ctxwin.llm_api_key_file' OR setting LIKE '%$tmp%'"), '0',
	'pg_settings has no row for it');
has(r("SELECT current_setting('ctxwin.llm_api_key_file')"), $denied, 'nor does current_setting show it');
is(r("SELECT current_setting('ctxwin.llm_base_url')"), "http://127.0.0.1:$port/v1",
	'the base URL is visible (it is no secret)');
diag("note: in a backend where ctxwin is not loaded yet, the setting is a placeholder and SHOW shows the key file's path; preloading ctxwin avoids that")
  if sq('SHOW ctxwin.llm_api_key_file', user => $role) eq $keyfile;
my $bad = '';
for my $g (qw(llm_base_url llm_provider llm_api_key_file llm_max_response_bytes))
{
	my $v = $g eq 'llm_base_url' ? 'http://attacker.example/v1'
	  : $g eq 'llm_provider' ? 'anthropic'
	  : $g eq 'llm_max_response_bytes' ? '65536000'
	  : '/etc/passwd';
	$bad .= " $g" if index(r("SET ctxwin.$g = '$v'"), "permission denied to set parameter \"ctxwin.$g\"") < 0;
}
is($bad, '', 'a plain role cannot SET llm_base_url, llm_provider, llm_api_key_file, llm_max_response_bytes');
# before the library is loaded a SET makes a placeholder; loading ctxwin must drop it
$out = sq("SET ctxwin.llm_base_url = 'http://attacker.example/v1';
	$load;
	SELECT 'url=' || current_setting('ctxwin.llm_base_url')", user => $role);
# (the line of the SELECT: psql's warnings come after its output here)
my ($url) = $out =~ /^(url=.*)$/m;
is($url, "url=http://127.0.0.1:$port/v1",
	'a base URL a plain role set before ctxwin was loaded is dropped when it loads');
$out = sq("$load;\nSELECT 'url=' || current_setting('ctxwin.llm_base_url')",
	user => $role,
	options => '-c ctxwin.llm_base_url=http://attacker.example/v1');
($url) = $out =~ /^(url=.*)$/m;
$url //= '';
is(contains_none($url, 'attacker'), '', 'so is one set in its connection options');
diag("note: the server's base URL is lost too in that backend ($url: the default applies); preloading ctxwin avoids that")
  unless $url eq "url=http://127.0.0.1:$port/v1";
is(r("SET ctxwin.llm_model = 'mock';\nSET ctxwin.llm_timeout_ms = 2000;\nSHOW ctxwin.llm_model"), 'mock',
	'a plain role may choose the model and the time limit');
$n0 = nreq();
has(r(q{SELECT ctxwin._llm_post('{"model": "mock"}')}), 'permission denied for function _llm_post',
	'a plain role cannot EXECUTE ctxwin._llm_post');
has(r(q{SELECT ctxwin._llm_summarize('{}')}), 'permission denied for function _llm_summarize',
	'nor ctxwin._llm_summarize');
is(nreq() - $n0, 0, 'and no request left the server');
# with the settings only in postgresql.auto.conf, a superuser's summary works (the key from the file)
$s = newsess('llm');
sq("SELECT part('$s', 1)");
is(sq("SELECT version FROM ctxwin.summarize_session('$s')", options => '-c ctxwin.llm_model=mock') . '|'
	  . last_req('auth'),
	'1|ok', 'the server-wide settings from ALTER SYSTEM work');

# _llm_summarize for a role granted it: only ctxwin's own summary request, of a
# session the role may read, whatever else the plan it passes says
sq("GRANT SELECT ON ctxwin.sessions, ctxwin.messages, ctxwin.models, ctxwin.profiles TO $role;
	GRANT EXECUTE ON FUNCTION ctxwin._llm_summarize(jsonb) TO $role");
$s = newsess('llm');
sq("SELECT part('$s', 1)");
my $splan = sq("SELECT ctxwin._summary_plan('$s', true, NULL)", options => '-c ctxwin.llm_model=mock');
my $forged = sq("SELECT \$j\$$splan\$j\$::jsonb || "
	  . q{'{"system_prompt": "You are a poet.", "prompt": "Write a poem about the sea.", "model": "gpt-forged", "answer_tokens": 99999}'});
$n0 = nreq();
$out = r("SET ctxwin.llm_model = 'mock';\nSELECT (ctxwin._llm_summarize(\$j\$$forged\$j\$)) ->> 'status'");
is("$out|" . (nreq() - $n0), '200|1', "a grantee's _llm_summarize with a forged plan sends one request");
is(last_req('body.model') . '|' . last_req('body.max_tokens'), 'mock|' . decode_json($splan)->{answer_tokens},
	"... with the profile's model and answer room, not the plan's");
my $sent = last_req('body.messages[].content');
ok($sent !~ /poet|poem about the sea/ && $sent =~ /running summary.*E4242/s, "... and ctxwin's own prompt, not the plan's")
  or diag($sent);
$n0 = nreq();
$out = r("SELECT ctxwin._llm_summarize(\$j\$" . sq("SELECT \$j\$$splan\$j\$::jsonb || '{\"after\": 3}'") . "\$j\$)");
has($out, "summary plan does not match session $s", "a plan whose range is not the session's is refused");
$out = r("SELECT ctxwin._llm_summarize('{\"session\": \"$s\"}')");
has($out, "summary plan does not match session $s", 'so is one without a range');
sq("ALTER TABLE ctxwin.sessions ENABLE ROW LEVEL SECURITY;
	CREATE POLICY llm_t_none ON ctxwin.sessions USING (metadata ? 'llm_t_owner')");
$out = r("SELECT ctxwin._llm_summarize(\$j\$$splan\$j\$)");
sq('DROP POLICY llm_t_none ON ctxwin.sessions; ALTER TABLE ctxwin.sessions DISABLE ROW LEVEL SECURITY');
has($out, "session $s does not exist", 'a session row-level security hides from the grantee: does not exist');
is(nreq() - $n0, 0, '... and none of these sent a request');
# a missing key file: the grantee's error does not show its path (the server log does)
key_file("$tmp/nonexistent-key");
$out = r("SET ctxwin.llm_model = 'mock';\nSELECT ctxwin._llm_summarize(\$j\$$splan\$j\$)");
key_file($keyfile);
has($out, 'could not read the LLM API key file', "a grantee's call with a missing key file fails");
is(contains_none($out, $tmp), '', "... and the error does not show the file's path");

# the thoughts of thinking models (a Responses reasoning item, a Gemini
# part marked thought, which the mock sends before every answer's text):
# in no summary written under any provider
is(sq("SELECT count(*) FROM ctxwin.summaries WHERE content LIKE '%about the transcript.%'"), '0',
   "no summary holds a reasoning item's or a thought part's text");
cmp_ok(sq("SELECT count(*) FROM ctxwin.summaries WHERE strategy <> 'extractive'"), '>', 20,
       '... of the many the LLM wrote');

# the key itself: nowhere in the server log, the errors or the mock's log
my $marker = "ctxwin_llm_log_marker_$$";
sq("SELECT '$marker'");
my $lf = $node->logfile;
diag("server log: $lf");
my $serverlog = -f $lf ? slurp_file($lf) : '';
ok(index($serverlog, $marker) >= 0, "the server log is found and holds this test's statements");
ok(index($serverlog, 'timed out after') >= 0, 'and its errors');
is(scalar(grep { index($_, $key) >= 0 } split /\n/, $serverlog), 0, 'the API key is nowhere in the server log');
my @seen_lines = split /\n/, join("\n", @seen);
ok(@seen_lines > 100, 'the outputs seen so far are kept (' . scalar(@seen_lines) . ' lines)');
is(scalar(grep { index($_, $key) >= 0 } @seen_lines), 0, 'the API key is in no output or error message the tests saw');
is(scalar(grep { index($_, $key) >= 0 } split /\n/, slurp_file($mock->requests_log)), 0,
	"nor in the mock's request log (which logs headers without the key)");
