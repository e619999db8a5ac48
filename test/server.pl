# Token counting inside a running server: huge texts are exact, cancellable
# by statement_timeout and by pg_cancel_backend from another connection,
# counted in bounded memory; non-UTF8 databases count as UTF-8 ones do.
# A cluster of its own (shared_buffers as a default server has them, 128MB):
# a second connection cancels the first, and databases in SQL_ASCII and
# LATIN1 count beside a UTF8 one.
use strict;
use warnings;
use FindBin;
use lib "$FindBin::RealBin/lib";
use CtxwinTest;
use IPC::Run;
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;

plan tests => 16;

my $node = ctxwin_node('server', shared_buffers => '128MB');
my $db = 'ctxwin_server_t';
my $reps = 2300000;    # 45 bytes each: a 103.5 MB text

sub sq { return sql($node, @_); }

# the peak RSS (VmHWM, kB) in a copy of /proc/self/status
sub hwm
{
	my ($status) = @_;
	return $status =~ /^VmHWM:\s*([0-9]+) kB/m ? $1 : 0;
}

# the peak RSS before and after: in what psql printed, around its '---'
sub growth
{
	my ($res) = @_;
	my ($before, $after) = (hwm($res =~ /\A(.*?)---/s ? $1 : ''), hwm($res =~ /.*---(.*)\z/s ? $1 : ''));
	return ($before, $after, $after - $before);
}

sql_do($node, 'postgres', "CREATE DATABASE $db");
sql_do($node, $db, "CREATE EXTENSION ctxwin;
	CREATE TABLE big AS SELECT repeat('The quick brown fox jumps over the lazy dog. ', $reps) AS t;");

is(sq($db, 'SELECT octet_length(t) FROM big'), 45 * $reps, 'the big text is ' . (45 * $reps) . ' bytes');
# each repetition is 10 tokens; the final space is one more
is(sq($db, 'SELECT ctxwin.count_tokens(t) FROM big'), 10 * $reps + 1, 'a 100 MB text counts exactly');

like(sq($db, "SET statement_timeout = '150ms'; SELECT ctxwin.count_tokens(t) FROM big, generate_series(1, 20);"),
	qr/canceling statement due to statement timeout/, 'statement_timeout interrupts counting');

# pg_cancel_backend from a second connection
my ($cout, $cerr) = ('', '');
my $h = IPC::Run::start(
	[
		'psql', '-X', '-q', '-A', '-t', '-v', 'ON_ERROR_STOP=1',
		'-d', $node->connstr($db) . ' application_name=ctxwin_cancel_me',
		'-c', 'SELECT ctxwin.count_tokens(t) FROM big, generate_series(1, 50)'
	],
	'<', \undef, '>', \$cout, '2>', \$cerr);
my $pid = '';
wait_until(10,
	sub {
		($pid = sq($db, "SELECT pid FROM pg_stat_activity WHERE application_name = 'ctxwin_cancel_me' AND state = 'active'"))
		  =~ /^[0-9]+$/;
	});
is(sq($db, 'SELECT pg_cancel_backend(' . ($pid =~ /^[0-9]+$/ ? $pid : 'NULL') . ')'), 't', 'the counting backend was signalled');
$h->finish;
like("$cout$cerr", qr/canceling statement due to user request/, 'pg_cancel_backend interrupts counting');
unlike("$cout\n$cerr", qr/^[0-9]/m, 'the cancel took effect before the query could finish (no count came back)');

# Peak RSS of a backend counting the text grows by the detoasted text, not
# by anything proportional to its tokens (ids, pieces).
my ($before, $after, $grow) = growth(sq($db, "SELECT pg_read_file('/proc/self/status');
	SELECT ctxwin.count_tokens(t) FROM big;
	SELECT '---';
	SELECT pg_read_file('/proc/self/status');"));
diag("peak RSS before $before kB, after $after kB: +$grow kB for a " . int(45 * $reps / 1024) . ' kB text');
ok($grow < int(45 * $reps / 1024) + 32768, 'counting a 100 MB text needs no memory beyond the text itself (+32 MB)');

# One piece of 64 MiB (a single letter repeated: no space, so the
# pre-tokenizer cannot split it).  Counting and tokenizing it take memory
# that does not grow with the piece (the merge used to take 20 bytes per
# byte of it: 1.3 GB here); it counts as every run of 8 letters is one token.
my $piece = 64 * 1024 * 1024;
sql_do($node, $db, "CREATE TABLE huge AS SELECT repeat('a', $piece) AS t");
# one call per statement: each detoasts its own copy of the text
my $res = sq($db, "SELECT pg_read_file('/proc/self/status');
	SELECT 'n ' || ctxwin.count_tokens(t) FROM huge;
	SELECT 'n ' || ctxwin.count_tokens(t, 'o200k_base') FROM huge;
	SELECT 'n ' || cardinality(ctxwin.tokenize(t)) FROM huge;
	SELECT '---';
	SELECT pg_read_file('/proc/self/status');");
my $counts = join(' ', $res =~ /^n (.*)$/mg);
($before, $after, $grow) = growth($res);
is($counts, join(' ', ($piece / 8) x 3), 'a 64 MiB single piece counts and tokenizes exactly');
diag("peak RSS before $before kB, after $after kB: +$grow kB for a " . ($piece / 1024) . ' kB piece and '
	  . ($piece / 8 * 4 / 1024) . ' kB of ids');
ok($grow < $piece / 1024 + $piece / 8 * 4 / 1024 * 2 + 65536,
	'merging a 64 MiB piece takes no memory in proportion to it (text + ids and their array + 64 MB)');

# More tokens than an int[] holds: tokenize fails cleanly, having counted
# them first, instead of growing its array to gigabytes.
$reps = 270000000;    # " a" is one token: 270 million of them, 540 MB
sql_do($node, $db, "DROP TABLE huge; CREATE TABLE huge AS SELECT repeat(' a', $reps) AS t;");
$res = sq($db, "SELECT pg_read_file('/proc/self/status');
	SELECT cardinality(ctxwin.tokenize(t)) FROM huge;
	SELECT '---';
	SELECT pg_read_file('/proc/self/status');", on_error_stop => 0);
like($res, qr/text has too many tokens for an array: $reps/, 'tokenize refuses a result over the int[] limit');
($before, $after, $grow) = growth($res);
diag("peak RSS before $before kB, after $after kB: +$grow kB for a " . int(2 * $reps / 1024) . ' kB text');
ok($grow < int(2 * $reps / 1024) + 65536, 'and needs no memory beyond the text itself (+64 MB)');
is(sq($db, "SELECT 'alive'"), 'alive', 'the server is still up');

# A SQL_ASCII database holds any bytes; every byte string gets a count.
sql_do($node, 'postgres',
	"CREATE DATABASE ${db}_ascii ENCODING 'SQL_ASCII' LC_COLLATE 'C' LC_CTYPE 'C' TEMPLATE template0");
sql_do($node, "${db}_ascii", 'CREATE EXTENSION ctxwin');
my $bad = q{E'ab\xff\xfe\x80 \xc3 caf\xc3\xa9 \xed\xa0\x80 \xf4\x90\x80\x80 z\xe9ro'};
is(sq("${db}_ascii", "SELECT bool_and(ctxwin.count_tokens($bad, e) = cardinality(ctxwin.tokenize($bad, e))
	AND ctxwin.detokenize(ctxwin.tokenize($bad, e), e) = $bad) FROM (VALUES ('cl100k_base'), ('o200k_base')) v(e)"),
	't', 'invalid UTF-8 in SQL_ASCII is counted and round-trips');
is(sq("${db}_ascii", "SELECT ctxwin.tokenize('café über', 'o200k_base')"),
	sq($db, "SELECT ctxwin.tokenize('café über', 'o200k_base')"),
	'valid UTF-8 in SQL_ASCII tokenizes as in a UTF8 database');

# LATIN1: text is converted to UTF-8 first, so counts equal the UTF8 database's
sql_do($node, 'postgres',
	"CREATE DATABASE ${db}_latin1 ENCODING 'LATIN1' LC_COLLATE 'C' LC_CTYPE 'C' TEMPLATE template0");
sql_do($node, "${db}_latin1", 'CREATE EXTENSION ctxwin');
my $sample = 'Grüße aus Köln, naïve café: ½ × ¼ ÿ';
is(sq("${db}_latin1", "SELECT ctxwin.tokenize('$sample', 'o200k_base')"),
	sq($db, "SELECT ctxwin.tokenize('$sample', 'o200k_base')"),
	'a LATIN1 database tokenizes as a UTF8 one does');
is(sq("${db}_latin1", "SELECT ctxwin.detokenize(ctxwin.tokenize('$sample', 'cl100k_base'), 'cl100k_base') = '$sample'"),
	't', 'detokenize converts back to LATIN1');
