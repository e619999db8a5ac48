# The demo (demo/demo.sql, as scripts/demo.sh runs it: psql from the top of
# the tree, client encoding UTF8, ctxwin preloaded with its worker serving
# ctxwin_demo_worker) runs to its end without LANG or any LC_* variable,
# and shows what it says it shows:
#  - the exact counts and chars4, characters / 4 (13 characters of Japanese
#    are 3, not the 9 of their 39 bytes);
#  - every text of the corpus counted as tiktoken counts it;
#  - the window within its budget of 400 tokens;
#  - the closing proof: the rows of both sessions before and after their
#    summaries, the same ids; and the database, read here after the demo,
#    agrees (both sessions summarized, no message row gone).
use strict;
use warnings;
use utf8;
use Encode qw(encode);
use File::Basename qw(dirname);
use FindBin;
use lib "$FindBin::RealBin/lib";
use CtxwinTest;
use IPC::Run;
use PostgreSQL::Test::Utils;
use Test::More;

delete @ENV{ 'LANG', 'LANGUAGE', grep { /^LC_/ } keys %ENV };
$ENV{PGCLIENTENCODING} = 'UTF8';    # as scripts/demo.sh sets it

my $root = dirname($FindBin::RealBin);
my $node = ctxwin_node('demo', preload => 1, conf => { 'ctxwin.databases' => 'ctxwin_demo_worker' });
sql_do($node, 'postgres', 'CREATE DATABASE demo');

my ($out, $err) = ('', '');
my $ok = IPC::Run::run(
	[ 'psql', '-X', '-v', 'ON_ERROR_STOP=1', '-d', $node->connstr('demo'), '-f', 'demo/demo.sql' ],
	'<', \undef, '>', \$out, '2>', \$err,
	init => sub { chdir $root or die "$root: $!" },
	IPC::Run::timeout(300));
ok($ok, 'the demo runs to its end without LANG') or diag("$err\n$out");
is($err, '', '... and says nothing on stderr');
note($out) if $ENV{CTXWIN_DEMO_SHOW};

# step by step, in order
my @steps = $out =~ /^== (\d)\. /mg;
is(join(',', @steps), '1,2,3,4,5', 'the demo has its five steps, in order');

my $jp = encode('UTF-8', '日本語のテキストも数えます');
like($out, qr/^ \Q$jp\E\s*\|\s*13 \|\s*12 \|\s*10 \|\s*3$/m,
	'13 characters of Japanese: 12 tokens (cl100k_base), 10 (o200k_base), chars4 3 (characters / 4)');
like($out, qr/chars4 is no tokenizer/, '... and the demo says what chars4 is');
like($out, qr/^ hello world\s*\|\s*11 \|\s*2 \|\s*2 \|\s*2$/m, 'hello world: 2 tokens, 11 characters');

my ($texts, $exact_cl, $exact_o) = $out =~ /^ texts \|.*\n-[-+]+\n\s*(\d+) \|[^|]+\|\s*(\d+) \|\s*(\d+)$/m;
ok(defined $texts && $texts > 3000 && $exact_cl == $texts && $exact_o == $texts,
	'every text of the corpus counted as tiktoken counts it, with both encodings')
  or diag("texts $texts, exact $exact_cl and $exact_o");

my ($sent, $budget) = $out =~ /^ tokens_sent \| budget\s*\n-[-+]+\n\s*(\d+) \|\s*(\d+)$/m;
ok(defined $sent && $budget == 400 && $sent > 0 && $sent <= 400, "the window fits its budget of 400 tokens ($sent)");

like($out, qr/^ version \| from_id \| through_id .*\n-.*\n\s*1 \|\s*1 \|\s*\d+ \|\s*\d+ \| extractive$/m,
	'summarize_session writes the first summary, extractive');

my @last = grep { $_ ne '' } split /\n/, $out;
is_deeply(
	[ @last[ -3 .. -1 ] ],
	[
		'summarized by summarize_session: 68 message rows before, 68 after, the same ids (1 to 68)',
		'summarized by the worker: 30 message rows before, 30 after, the same ids (1 to 30)',
		'Every message row is still there: a summary only changes which messages the window sends.'
	],
	'the demo ends with its proof: the rows of both sessions before and after their summaries, the same ids');

# the database after the demo agrees with what it showed
is( sql($node, 'demo', q{
	SELECT s.summary_through_id > 0, count(m.id), min(m.id), max(m.id), count(DISTINCT m.id)
	FROM ctxwin.sessions s JOIN ctxwin.messages m ON m.session_id = s.id
	WHERE s.id = 'd0000000-0000-0000-0000-000000000001' GROUP BY s.summary_through_id}),
	't|68|1|68|68', "the first session is summarized and has its 68 message rows, ids 1 to 68");
is( sql($node, 'ctxwin_demo_worker', q{
	SELECT s.summary_through_id > 0, count(m.id), min(m.id), max(m.id), count(DISTINCT m.id)
	FROM ctxwin.sessions s JOIN ctxwin.messages m ON m.session_id = s.id
	WHERE s.id = 'd0000000-0000-0000-0000-000000000002' GROUP BY s.summary_through_id}),
	't|30|1|30|30', "the worker's session is summarized and has its 30 message rows, ids 1 to 30");

$node->stop;
done_testing();
