# bench/summaries stays honest without being run in full: its corpus is
# what its seed makes, every time, with every probe's fact in the messages
# a summary covers (never in the newest ones it leaves out); its scorer
# gives summaries written here the scores their rules say; and two of its
# conversations go through the run's own SQL (bench/summaries/load.py) into
# a cluster, are summarized by the extractive strategy and read back, whole
# and scored.
use strict;
use warnings;
use FindBin;
use lib "$FindBin::RealBin/lib";
use CtxwinTest;
use JSON::PP;
use PostgreSQL::Test::Utils;
use Test::More;

my $root = ctxwin_root();
my $bench = "$root/bench/summaries";
plan skip_all => 'no bench/summaries here (the release archive, make dist, leaves out bench/)'
  unless -d $bench;
my $tmp = PostgreSQL::Test::Utils::tempdir();
my $json = JSON::PP->new->canonical;

# python3 SCRIPT ARGS...: its output; dies if it fails
sub py
{
	my $out = `python3 @_ 2>&1`;
	die "python3 @_ failed ($?): $out\n" if $?;
	return $out;
}

# --- the corpus ---------------------------------------------------------------
my $text = py("$bench/corpus.py", '--seed', 1);
is(py("$bench/corpus.py", '--seed', 1), $text, 'the corpus of a seed is the same every time');
isnt(py("$bench/corpus.py", '--seed', 2), $text, 'another seed makes another corpus');
my $corpus = decode_json($text);
is(scalar(@$corpus), 20, '20 conversations');
is(scalar(grep { $_->{kind} eq 'chat' } @$corpus), 10, 'half of them plain chats');
is(scalar(grep { $_->{kind} eq 'agent' && grep({ $_->{tool_calls} } @{ $_->{messages} })
			&& grep({ ($_->{role} // '') eq 'tool' && $_->{tool_call_id} } @{ $_->{messages} }) } @$corpus),
	10, 'half of them agent sessions with tool calls and their results');
is(scalar(grep { my $n = @{ $_->{messages} }; $n < 30 || $n > 120 } @$corpus), 0, 'each of 30 to 120 messages');
my @lacking;
for my $c (@$corpus)
{
	my %kinds = map { $_->{kind} => 1 } @{ $c->{probes} };
	$kinds{answered} = grep { $_->{kind} eq 'question' && $_->{answered} } @{ $c->{probes} };
	$kinds{open} = grep { $_->{kind} eq 'question' && !$_->{answered} } @{ $c->{probes} };
	$kinds{identifier} = grep { ($_->{class} // '') eq 'identifier' } @{ $c->{probes} };
	$kinds{number} = grep { ($_->{class} // '') eq 'number' } @{ $c->{probes} };
	push @lacking, map { "$c->{id}: $_" }
	  grep { !$kinds{$_} } qw(recall artifact continuation decision answered open identifier number);
}
is_deeply(\@lacking, [], 'each has probes of every kind, an answered and an open question, identifiers and numbers');
my @no_long;
for my $c (grep { $_->{kind} eq 'agent' } @$corpus)
{
	my @msgs = @{ $c->{messages} };
	# a recall probe's value in one tool result longer than the 4,000 characters
	# the extractive strategy reads of one, and in no other message
	my $only = grep {
		my $v = $_->{value};
		my @in = grep { index($_->{content} // '', $v) >= 0
				  || grep({ index($_->{function}{arguments}, $v) >= 0 } @{ $_->{tool_calls} // [] }) } @msgs;
		@in == 1 && ($in[0]{role} eq 'tool') && length($in[0]{content}) > 4000
	} grep { $_->{kind} eq 'recall' } @{ $c->{probes} };
	push @no_long, $c->{id} unless $only;
}
is_deeply(\@no_long, [], 'each agent session has a fact only in a long tool result');
is(py("$bench/corpus.py", '--check'), '', "every probe's fact is in the messages summarized, none in the tail");

# the check finds a probe that could not be answered
my $bad = decode_json($text);
$bad->[3]{probes}[0]{value} = 'ORD-00000-never-said';
my $last = $bad->[5]{messages}[-1]{content};
push @{ $bad->[5]{probes} }, { kind => 'decision', decision => $last, reason => 'zebra-crossing' };
append_to_file("$tmp/bad.json", encode_json($bad));
my $problems = py('-c', "'import json, sys; sys.path.insert(0, \"$bench\"); from corpus import corpus_check;"
	  . " print(\"\\n\".join(p for c in json.load(open(\"$tmp/bad.json\")) for p in corpus_check(c)))'");
like($problems, qr/\Q$bad->[3]{id}\E: recall probe 'ORD-00000-never-said' not in the messages summarized/,
	'the check finds a fact the conversation does not hold');
like($problems, qr/\Q$bad->[5]{id}\E: decision probe 'zebra-crossing' not in the messages summarized/, '... or a reason');
like($problems, qr/\Q$bad->[5]{id}: decision probe '$last' in the tail\E/, '... and a fact in the messages left out of the summary');

# --- the scorer on summaries written here ----------------------------------------
# score(CONV, SUMMARY): the totals score.py gives
sub score
{
	my ($conv, $summary) = @_;
	my $f = "$tmp/score.json";
	unlink $f;
	append_to_file($f, encode_json({ conv => $conv, summary => $summary }));
	return decode_json(py('-c', "'import json, sys; sys.path.insert(0, \"$bench\"); import score;"
		  . " a = json.load(open(\"$f\")); r, s = score.score(a[\"conv\"], a[\"summary\"]);"
		  . " print(json.dumps(score.totals(r)))'"));
}
my ($c) = grep { $_->{id} eq 'chat-invoices-1' } @$corpus;
my %p;
push @{ $p{ $_->{kind} } }, $_ for @{ $c->{probes} };
my @values = map { $_->{value} } @{ $p{recall} };
my ($goal) = @{ $p{continuation} };
my ($answered) = grep { $_->{answered} } @{ $p{question} };
my ($open) = grep { !$_->{answered} } @{ $p{question} };
my ($decision) = @{ $p{decision} };
my ($artifact) = @{ $p{artifact} };
# a summary that keeps all but one value (the first, only inside a longer
# identifier), names the latest goal before the old one, keeps the decision
# with its reason on one line and the artifact without its change, and lists
# the answered question as open but not the open one
my $summary = join("\n",
	'Goal and state:',
	"- Now: the \U$goal->{latest_goal}\E (before: $goal->{superseded_goal})",
	'Decisions:',
	"- We chose to $decision->{decision} because of $decision->{reason}.",
	"Identifiers: $values[0]7; " . join('; ', @values[ 1 .. $#values ]) . "; $artifact->{target}",
	'Open items:',
	"- $answered->{phrase}?",
	'Lookup hints:',
	"- search $artifact->{change} in the older messages");
my $t = score($c, $summary);
is_deeply(
	[ @$t{qw(ids_kept numbers_kept ids numbers)} ],
	[ (grep { $_->{class} eq 'identifier' } @{ $p{recall} }) - ($p{recall}[0]{class} eq 'identifier'),
	  (grep { $_->{class} eq 'number' } @{ $p{recall} }) - ($p{recall}[0]{class} eq 'number'),
	  scalar(grep { $_->{class} eq 'identifier' } @{ $p{recall} }),
	  scalar(grep { $_->{class} eq 'number' } @{ $p{recall} }) ],
	'a value counts only verbatim, not inside a longer one');
is_deeply([ @$t{qw(goal_named superseded_as_current goal_right next_step_kept)} ], [ 1, 0, 1, 0 ],
	'the latest goal, case aside, before the superseded one: named, the superseded one not current');
is_deeply([ @$t{qw(answered_listed_open open_listed)} ], [ 1, 0 ], 'an answered question listed as open is counted, an open one missing is not listed');
is_deeply([ @$t{qw(decisions_kept decisions_with_reason)} ], [ 1, 1 ], 'a decision with its reason on its line');
is_deeply([ @$t{qw(artifacts_named artifacts_with_change)} ], [ 1, 0 ], 'an artifact named, its change on another line');

# the superseded goal first, the answered question under Decisions, the open one in Open items
$summary = join("\n",
	'Goal and state:', "- $goal->{superseded_goal}", "- then $goal->{latest_goal}",
	'Decisions:', "- $answered->{phrase}", "- $decision->{decision}", "- $decision->{reason}",
	'Open items:', "- $open->{phrase}", "- next: $goal->{next_step}");
$t = score($c, $summary);
is_deeply([ @$t{qw(goal_named superseded_as_current goal_right next_step_kept)} ], [ 1, 1, 0, 1 ],
	'the superseded goal before the latest one is presented as current');
is_deeply([ @$t{qw(answered_listed_open open_listed)} ], [ 0, 1 ], 'only the Open items section lists questions as open');
is_deeply([ @$t{qw(decisions_kept decisions_with_reason)} ], [ 1, 0 ], 'a reason on another line is not kept with its decision');
$t = score($c, "The user now wants the $goal->{latest_goal}. $open->{phrase}?");
is_deeply([ @$t{qw(goal_named goal_anywhere open_listed)} ], [ 1, 1, 0 ],
	'a summary without sections: its goal anywhere, no question listed as open');
$t = score($c, "Goal and state:\n- $goal->{superseded_goal}\nDecisions:\n- $goal->{latest_goal}");
is_deeply([ @$t{qw(goal_named goal_anywhere superseded_as_current)} ], [ 0, 1, 1 ],
	'the latest goal outside Goal and state is not named as the goal');

# --- through the run's SQL, on a cluster -------------------------------------------
my @two = grep { $_->{id} eq 'chat-invoices-1' || $_->{id} eq 'agent-rounding-1' } @$corpus;
append_to_file("$tmp/two.json", encode_json(\@two));
my $load = py("$bench/load.py", "$tmp/two.json", 'extractive');
# The literal model (test/mockllm.py, bench/summaries' llm-literal) does
# what the prompt says and nothing else: a section the prompt does not name
# is not written; "wants" alone takes the newest wish, "latest" the newest
# change of goal.
my $literal = sub {
	my ($system) = @_;
	my $prog = <<'PY';
import json, sys
sys.argv = ["mockllm"]
sys.path.insert(0, sys.stdin.readline().strip())
import mockllm
system = sys.stdin.readline().strip()
prompt = ("Previous summary:\n(none)\n\nNew messages:\n[user #1] I want to plan a holiday in Lisbon.\n"
          "[assistant #2] Lovely.\n[user #3] Change of plans: it is now a work trip to Porto instead.\n"
          "[assistant #4] Next step: book the train.\n[user #5] I need a window seat, please.\n"
          "[user #6] Will the hotel have a fitness room?\n")
print(mockllm.literal_summary(system, prompt, 400))
PY
	my $f = PostgreSQL::Test::Utils::tempdir() . '/literal.py';
	open(my $fh, '>', $f) or die "$f: $!";
	print $fh $prog;
	close $fh;
	my $out = `printf '%s\\n%s\\n' '$root/test' '$system' | python3 $f 2>&1`;
	unlink $f;
	return $out;
};
my $old_prompt = 'In these sections: "Goal and state:" what the user wants and where things stand now; "Decisions:" what was decided, and why; "Identifiers:" ids, numbers, verbatim; "Lookup hints:" message ids. Keep the newer one.';
my $new_prompt = 'In these sections: "Goal and state:" the user current goal (the latest one: when the user changed it, say what it replaced), where things stand now and the next step; "Open items:" questions and tasks not yet done; "Lookup hints:" message ids. Keep the newer one.';
my $o = $literal->($old_prompt);
like($o, qr/^Goal and state:\n- \[user #5\] I need a window seat/m, 'the literal model: "wants" alone takes the newest wish');
unlike($o, qr/Open items:/, '... and writes no section the prompt does not name');
my $n = $literal->($new_prompt);
like($n, qr/^Goal and state:\n- \[user #3\] Change of plans.*\n- replaced: \[user #1\] I want to plan a holiday.*\n- \[assistant #4\] Next step: book the train\./m,
	'... "the latest one ... what it replaced ... the next step": the change of goal, what it replaced, the next step');
like($n, qr/Open items:\n- \[user #6\] Will the hotel have a fitness room\?/, '... and the open questions when the prompt asks for them');

my $node = ctxwin_node('summaries_bench');
sql_do($node, 'postgres', 'CREATE EXTENSION ctxwin');
my ($out, $rc) = sql($node, 'postgres', $load);
is($rc, 0, "load.py's SQL runs") or diag($out);
my @rows = map { decode_json($_) } grep { /^\{/ } split /\n/, $out;
is_deeply([ map { $_->{conv} } @rows ], [ map { $_->{id} } @two ], 'a summary per conversation, read back');
is_deeply([ map { $_->{covered} } @rows ], [ map { @{ $_->{messages} } - 6 } @two ],
	'each covers all but the newest min_recent_messages (6), all before the tail');
is(scalar(grep { ($_->{summary} // '') =~ /^Goal and state:$/m && $_->{summary} =~ /^Identifiers: /m } @rows), 2,
	'in sections');
append_to_file("$tmp/summaries.jsonl", join('', map { $json->encode($_) . "\n" } @rows));
my $md = py("$bench/score.py", "$tmp/two.json", "$tmp/summaries.jsonl", '--json', "$tmp/scores.json");
my $scores = decode_json(slurp_file("$tmp/scores.json"));
is_deeply($scores->{extractive}{unanswerable}, [], 'no probe outside the messages summarized');
my $tot = $scores->{extractive}{totals};
ok($tot->{ids_kept} + $tot->{numbers_kept} > 0 && $tot->{decisions_kept} > 0,
	'the summaries read back keep facts (not the text before the summary was written)');
like($md, qr/^\| identifiers and numbers kept \| .* \| >= 90 %: (met|\*\*not met\*\*) \|$/m, 'the report says it against the target');

$node->stop;
done_testing();
