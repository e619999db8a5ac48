# A stable window is a function of the rows, not of the connection that
# asks: two app servers (here two connections, one with other session
# settings) that insert a chat's turns in turn and each call build_context
# after every insert get the same bytes, also across the window's jumps.
# On a cluster of its own, with the ctxwin installed for this server.
use strict;
use warnings;
use FindBin;
use lib "$FindBin::RealBin/lib";
use CtxwinTest;
use Test::More;

my $s = '00000000-0000-4000-8000-0000000000c1';
my $node = ctxwin_node('stable_servers');
sql_do($node, 'postgres', <<SQL);
CREATE EXTENSION ctxwin;
INSERT INTO ctxwin.profiles (name, model, context_window, response_reserve, max_messages_before_summary,
                             max_tokens_before_summary, trigger_ratio)
VALUES ('two', 'gpt-4o', 900, 100, NULL, NULL, NULL);
INSERT INTO ctxwin.sessions (id, profile, system_prompt) VALUES ('$s', 'two', 'You help two servers.');
SQL

# qo(OPTIONS, SQL): SQL's output on a new connection with PGOPTIONS set so
sub qo
{
	my ($opts, $query) = @_;
	local $ENV{PGOPTIONS} = $opts;
	return sql($node, 'postgres', $query);
}
# one turn: a message from server A or B
sub turn
{
	my ($who, $i, $opts) = @_;
	qo($opts, "INSERT INTO ctxwin.messages (session_id, role, content)
		VALUES ('$s', CASE WHEN $i % 2 = 1 THEN 'user' ELSE 'assistant' END,
		        'Turn $i from server $who: ' || repeat('the order ships on Tuesday ', 1 + $i % 7))");
}
my $other = '-c search_path=ctxwin,public -c extra_float_digits=3 -c DateStyle=SQL,DMY -c TimeZone=Asia/Tokyo -c lc_numeric=C';
my $both = "SELECT ctxwin.build_context('$s')::text || ctxwin.build_context('$s', format => 'anthropic')::text";
my ($differ, @starts) = (0);
# then each asks for the window
for my $i (1 .. 80)
{
	if ($i % 2 == 1) { turn('A', $i, ''); } else { turn('B', $i, $other); }
	my $ra = qo('', $both);
	my $rb = qo($other, $both);
	$differ++ if $ra ne $rb;
	push @starts, scalar qo('', "SELECT ctxwin._window('$s', NULL) ->> 'first_id'");
}
is($differ, 0, 'after each of 80 inserts, from two connections in turn, both get the same bytes in both formats');
# the starts, each run of one start once (uniq)
@starts = grep { $_ ne '' } @starts;
my $jumps = grep { $_ == 0 || $starts[$_] ne $starts[ $_ - 1 ] } 0 .. $#starts;
ok($jumps >= 4, 'the window jumped meanwhile (' . ($jumps - 1) . ' times)');
ok($jumps <= 30, 'and kept its start in between (not every turn)');
is(qo('', "SELECT (ctxwin._window('$s', NULL) ->> 'tokens')::int <= 800"), 't', 'within the budget');

done_testing();
