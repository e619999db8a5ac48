# ensure_session with two real connections: the first writes of one new
# session id made at the same time, each by a transaction of its own, in the
# one statement a client sends,
#   SELECT ctxwin.append_messages((ctxwin.ensure_session(id, ...)).id, ...)
#  - step by step: while the first transaction has created the session and
#    not committed, the second one's statement waits for it; once the first
#    commits, both have succeeded, there is one session row and both
#    messages are stored (ids 1 and 2); when the first rolls back instead,
#    the second creates the session itself;
#  - racing: two connections write the first message of the same 40 new
#    sessions at once, each in a transaction of its own: every statement
#    succeeds, one row per session, two messages each;
#  - in an open transaction the statement works and the transaction goes on;
#  - and through all of it the server logs no ERROR.
# A cluster of its own; the waits are on conditions (a backend waiting on a
# lock), never on time.
use strict;
use warnings;
use FindBin;
use lib "$FindBin::RealBin/lib";
use CtxwinTest;
use IPC::Run;
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;

plan tests => 13;

my $node = ctxwin_node('sessions_ensure');
my $db = 'ctxwin_ensure';
sql_do($node, 'postgres', "CREATE DATABASE $db");
sql_do($node, $db, <<'SQL');
CREATE EXTENSION ctxwin;
CREATE FUNCTION sess(i int) RETURNS uuid LANGUAGE sql IMMUTABLE
RETURN ('e0000000-0000-4000-8000-' || lpad(i::text, 12, '0'))::uuid;
SQL

# sq(SQL): its output in $db, errors included
sub sq { return scalar sql($node, $db, @_); }

# [harness, \stdin, \stdout+stderr]; psql stops at the first error
sub psql_bg
{
	my ($name, @args) = @_;
	my ($in, $out) = ('', '');
	my $h = IPC::Run::start(
		[
			'psql', '-X', '-q', '-A', '-t', '-v', 'ON_ERROR_STOP=1',
			'-d', $node->connstr($db) . " application_name=$name", @args
		],
		'<', \$in, '>&', \$out);
	return [ $h, \$in, \$out ];
}

# hold(NAME, SQL): a transaction that ran SQL and stays open until
# release() ends it: returns once SQL has run (dies if it did not in 20 s)
sub hold
{
	my ($name, $stmt) = @_;
	my $p = psql_bg($name);
	${ $p->[1] } .= "BEGIN;\n$stmt;\nSELECT 'held';\n";
	wait_until(20, sub { eval { $p->[0]->pump_nb }; ${ $p->[2] } =~ /^held$/m })
	  or die "$name did not run its statement: ${ $p->[2] }\n";
	return $p;
}

# finish(P): waits for a background psql; what it printed, one line per row
sub finish
{
	my ($p) = @_;
	$p->[0]->finish;
	my $out = ${ $p->[2] };
	$out =~ s/^held\n//m;
	chomp $out;
	return $out;
}

# release(P, COMMIT | ROLLBACK): ends a held transaction; what it printed
sub release
{
	my ($p, $how) = @_;
	${ $p->[1] } .= "$how;\n";
	return finish($p);
}

# the backend of application NAME, fed by the background psql P, waits on
# a lock (true), for at most 20 s
sub waits_on_lock
{
	my ($name, $p) = @_;
	return wait_until(20,
		sub {
			eval { $p->[0]->pump_nb };
			sq("SELECT wait_event_type = 'Lock' FROM pg_stat_activity WHERE application_name = '$name' AND state = 'active'")
			  eq 't';
		});
}

# the client's first write of session i: one message, with a key
sub first_write
{
	my ($i, $text, $key) = @_;
	return "SELECT ctxwin.append_messages((ctxwin.ensure_session(sess($i), NULL, 'You help.', '{\"app\": \"t\"}')).id, "
	  . "'[{\"role\": \"user\", \"content\": \"$text\"}]', ARRAY['$key'])";
}

my $log = log_offset($node);

# step by step: the second first write waits for the first, then both succeed
for my $how (qw(COMMIT ROLLBACK))
{
	my $i = $how eq 'COMMIT' ? 1 : 2;
	my $first = hold("ctxwin_e_first_$i", first_write($i, 'from one', 'one'));
	my $second = psql_bg("ctxwin_e_second_$i");
	${ $second->[1] } .= "BEGIN;\n" . first_write($i, 'from two', 'two') . ";\nSELECT 'usable';\nCOMMIT;\n";
	ok(waits_on_lock("ctxwin_e_second_$i", $second),
		"the second first write of a new session waits for the first's uncommitted one ($how)");
	my $r1 = release($first, $how);
	my $r2 = finish($second);
	if ($how eq 'COMMIT')
	{
		is("$r1|$r2", "{1}|{2}\nusable", 'both statements succeed, the second takes the next id');
		is(sq("SELECT (SELECT count(*) FROM ctxwin.sessions WHERE id = sess(1)) || ' '
			|| (SELECT string_agg(content || '=' || id, ',' ORDER BY id) FROM ctxwin.messages WHERE session_id = sess(1))
			|| ' ' || (SELECT message_count FROM ctxwin.sessions WHERE id = sess(1))"),
			'1 from one=1,from two=2 2', 'one session row, both messages stored, and counted');
	}
	else
	{
		is("$r1|$r2", "{1}|{1}\nusable",
			'when the first rolls back, the second creates the session itself');
		is(sq("SELECT (SELECT count(*) FROM ctxwin.sessions WHERE id = sess(2)) || ' '
			|| (SELECT string_agg(content || '=' || id, ',' ORDER BY id) FROM ctxwin.messages WHERE session_id = sess(2))
			|| ' ' || (SELECT system_prompt FROM ctxwin.sessions WHERE id = sess(2))"),
			'1 from two=1 You help.', 'with its settings and only its message');
	}
}

# racing: two connections, the same 40 new sessions, each write a
# transaction of its own, in the same order
my @racers;
for my $r (0, 1)
{
	my @ids = (101 .. 140);
	my $p = psql_bg("ctxwin_e_race_$r");
	${ $p->[1] } .= join('', map { "BEGIN;\n" . first_write($_, "racer $r", "r$r") . ";\nCOMMIT;\n" } @ids);
	push @racers, $p;
}
my @out = map { finish($_) } @racers;
my $errors = join('', map { /ERROR/ ? 1 : 0 } @out);
is($errors, '00', 'two connections racing to write first to the same 40 new sessions: every statement succeeds')
  or diag(join("\n", @out));
is(sq("SELECT count(*) || ' ' || count(*) FILTER (WHERE message_count = 2 AND
		(SELECT array_agg(m.content ORDER BY m.content) FROM ctxwin.messages m WHERE m.session_id = s.id)
		  = ARRAY['racer 0', 'racer 1'])
	FROM ctxwin.sessions s WHERE s.id BETWEEN sess(101) AND sess(140)"),
	'40 40', 'one row per session, with both racers\' messages');
is( sq("SELECT count(*) FROM ctxwin.messages WHERE session_id BETWEEN sess(101) AND sess(140)"),
	'80', 'and nothing else');

# in an open transaction: the statement, then more work, then COMMIT
my $tx = psql_bg('ctxwin_e_tx');
${ $tx->[1] } .= "BEGIN;\n"
  . first_write(200, 'inside', 'in') . ";\n"
  . first_write(200, 'inside again', 'in2') . ";\n"
  . "SELECT message_count FROM ctxwin.sessions WHERE id = sess(200);\nCOMMIT;\n";
is(finish($tx), "{1}\n{2}\n2", 'inside an open transaction the first write works and the transaction goes on');
is(sq("SELECT message_count FROM ctxwin.sessions WHERE id = sess(200)"), '2', 'and commits');

# existing sessions, many times over: never an error
is( sq("SELECT count(*) FROM generate_series(1, 50) g,
	  LATERAL ctxwin.ensure_session(sess(1), 'default', 'Other prompt.') s WHERE s.system_prompt = 'You help.'"),
	'50', 'an existing session is returned as stored, every time');

my $logged = log_since($node, $log);
my @errs = grep { /\b(ERROR|FATAL|PANIC)\b/ } split /\n/, $logged;
is(scalar(@errs), 0, 'the server logged no ERROR through all of it') or diag(join("\n", @errs));

$node->stop;
