# Shared helpers of ctxwin's Perl TAP tests (test/*.pl), on top of
# PostgreSQL's own test framework (PostgreSQL::Test::Cluster and
# PostgreSQL::Test::Utils, as shipped with the server's source).  Only the
# Cluster API present in PostgreSQL 15 is used.
#
#   my $mock = CtxwinTest::Mock->start(extra => ['--seed', 7]);
#   my $node = ctxwin_node('main', mock => $mock, preload => 1,
#       conf => { 'ctxwin.databases' => 'w1' });
#   is(sql($node, 'w1', 'SELECT 1'), '1', '...');
#   ok(wait_for($node, 'w1', 'SELECT ...', 10), '...');
#
# The test's clusters listen on Unix sockets in a temporary directory, on a
# port the framework picks; the mock LLM server binds a free loopback port.
# Nothing here reads the PG* settings of the calling environment: the
# framework unsets them when it loads.
package CtxwinTest;

use strict;
use warnings;

use Exporter 'import';
use File::Basename qw(dirname);
use IPC::Run;
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use Time::HiRes qw(usleep);

our @EXPORT = qw(
  ctxwin_node sql sql_ok sql_do set_conf wait_for wait_until worker_settled
  log_offset log_since bg_psql now_ms elapsed_ms
);

# psql's output in the database's encoding (UTF8), whatever the locale.
$ENV{PGCLIENTENCODING} = 'UTF8';

# PostgreSQL::Test::Utils sends the program's own STDERR to its log file
# only, which the test run removes: show why a program died in its TAP
# output too (not for a die caught by an eval).
$SIG{__DIE__} = sub {
	diag("died: $_[0]") if defined $^S && !$^S;
	die @_;
};

# The directory of the test programs (test/), where mockllm.py lives.
my $testdir = dirname(dirname(__FILE__));

=pod

=head1 FUNCTIONS

=over

=item ctxwin_node(NAME, %opts)

A new cluster for ctxwin: initdb (UTF8, locale C.UTF-8), ctxwin's settings
appended to postgresql.conf, started unless C<< start => 0 >>.  Options:

  allows_streaming => 1   wal_level replica and WAL senders (a primary)
  preload => 1            shared_preload_libraries = 'ctxwin' (the worker)
  mock => $mock           the LLM settings for a CtxwinTest::Mock: the
                          OpenAI wire format at its /v1, its key file,
                          model 'mock'
  conf => { name => value, ... }   more settings (quoted here)
  shared_buffers => '32MB'

restart_after_crash is turned back on (the framework turns it off): a
background worker killed with SIGKILL makes the server reinitialize, as it
would in production.

=cut

sub ctxwin_node
{
	my ($name, %opts) = @_;
	my $node = PostgreSQL::Test::Cluster->new($name);
	$node->init(
		allows_streaming => $opts{allows_streaming} // 0,
		extra => [ '-E', 'UTF8', '--locale=C.UTF-8' ]);
	my %conf = (
		shared_buffers => $opts{shared_buffers} // '32MB',
		restart_after_crash => 'on');
	$conf{shared_preload_libraries} = 'ctxwin' if $opts{preload};
	if (my $mock = $opts{mock})
	{
		$conf{'ctxwin.llm_provider'} = 'openai';
		$conf{'ctxwin.llm_base_url'} = $mock->base_url('openai');
		$conf{'ctxwin.llm_api_key_file'} = $mock->keyfile;
		$conf{'ctxwin.llm_model'} = 'mock';
	}
	%conf = (%conf, %{ $opts{conf} // {} });
	$node->append_conf('postgresql.conf',
		join("\n", map { "$_ = " . _quote($conf{$_}) } sort keys %conf));
	$node->start unless defined $opts{start} && !$opts{start};
	return $node;
}

sub _quote
{
	my ($v) = @_;
	$v =~ s/'/''/g;
	return "'$v'";
}

=pod

=item sql(NODE, DB, SQL, %psql_opts)

Runs SQL with psql (unaligned, tuples only) and returns what it printed,
its errors included (after the output, as a shell's 2>&1 would show them).
Never dies on an SQL error: a test compares the text.  In list context
also psql's exit code: (TEXT, RC).

=item sql_ok(NODE, DB, SQL)

True if SQL ran without error.

=item sql_do(NODE, DB, SQL)

Runs SQL for its effect; dies (ending the test program) if it fails, with
psql's error.  NOTICEs are not printed.

=cut

sub sql
{
	my ($node, $db, $sql, %opts) = @_;
	my ($rc, $out, $err) = $node->psql($db, $sql, %opts);
	my $text = join("\n", grep { defined && $_ ne '' } $out, $err);
	return wantarray ? ($text, $rc) : $text;
}

sub sql_ok
{
	my ($node, $db, $sql) = @_;
	my ($rc, $out, $err) = $node->psql($db, $sql);
	return $rc == 0;
}

sub sql_do
{
	my ($node, $db, $sql) = @_;
	my ($rc, $out, $err) = $node->psql($db, $sql);
	die "SQL failed on " . $node->name . "/$db: $err\n$sql\n" if $rc != 0;
	return $out;
}

=pod

=item set_conf(NODE, NAME => VALUE, ...)

ALTER SYSTEM SET each, reload the configuration, and wait until a new
connection says the server has read it (pg_conf_load_time() after the
reload): the postmaster signals its processes when it has, and the worker
and the launcher read it before their next round.

=cut

sub set_conf
{
	my ($node, @pairs) = @_;
	my $stmts = '';
	while (my ($k, $v) = splice(@pairs, 0, 2))
	{
		$stmts .= "ALTER SYSTEM SET $k = " . _quote($v) . ";\n";
	}
	my $t = sql_do($node, 'postgres', $stmts . 'SELECT now() FROM (SELECT pg_reload_conf()) r;');
	$t =~ s/\s+\z//;
	wait_for($node, 'postgres', "SELECT pg_conf_load_time() > '$t'", 30)
	  or die "the server did not read its configuration again\n";
	return;
}

=pod

=item wait_for(NODE, DB, SQL, SECONDS)

Polls SQL every 0.1 s until it returns 't', for at most SECONDS; true if it
did.  (The framework's poll_query_until waits a fixed 180 s; the tests
here bound each wait themselves, as some assert that a thing happens soon.)

=item wait_until(SECONDS, CODE)

The same for a Perl condition.

=cut

sub wait_until
{
	my ($seconds, $cond) = @_;
	my $deadline = Time::HiRes::time() + $seconds;
	while (1)
	{
		return 1 if $cond->();
		return 0 if Time::HiRes::time() >= $deadline;
		usleep(100_000);
	}
}

sub wait_for
{
	my ($node, $db, $query, $seconds) = @_;
	my $last = '';
	# a psql that exits before it reads its query (the server restarting
	# after a crash refuses it at once) makes IPC::Run die with a broken
	# pipe: that is an answer that is not yet 't', not the test's end
	my $ok = wait_until($seconds,
		sub { ($last = eval { sql($node, $db, $query) } // "psql: $@") eq 't' });
	note("wait_for gave up after $seconds s: $query\nlast answer: $last") unless $ok;
	return $ok;
}

=pod

=item worker_settled(NODE, DB)

The background worker of DB has looked at its compaction queue since now,
and that look is over: woken three times (ctxwin._wake_worker() at commit),
each time it counts the queue after the wake (last_sweep_at in
ctxwin.worker_status).  A look sends what it claims before the next one
begins, so what the worker claimed after the first wake is in its counters
(requests, in_flight) by the third.  The positive event that a check of
"nothing was sent" waits for.  False if it did not come in time.

=cut

sub worker_settled
{
	my ($node, $db) = @_;
	for (1 .. 3)
	{
		my $t = sql_do($node, $db, 'SELECT now() FROM (SELECT ctxwin._wake_worker()) w');
		$t =~ s/\s+\z//;
		return 0
		  unless wait_for($node, $db,
			"SELECT last_sweep_at > '$t' FROM ctxwin.worker_status WHERE database = '$db'", 10);
	}
	return 1;
}

=pod

=item log_offset(NODE)

The server log's current size: where the lines to come start.

=item log_since(NODE, OFFSET)

The server log from OFFSET on.

=cut

sub log_offset
{
	my ($node) = @_;
	return -s $node->logfile // 0;
}

sub log_since
{
	my ($node, $offset) = @_;
	return slurp_file($node->logfile, $offset);
}

=pod

=item bg_psql(NODE, DB, @psql_args)

Starts psql (-X -q -A -t, given arguments such as -c SQL) in the background
and returns its IPC::Run harness; C<< $h->finish >> waits for it.

=cut

sub bg_psql
{
	my ($node, $db, @args) = @_;
	my ($out, $err) = ('', '');
	return IPC::Run::start(
		[ 'psql', '-X', '-q', '-A', '-t', '-d', $node->connstr($db), @args ],
		'<', \undef, '>', \$out, '2>', \$err);
}

=pod

=item now_ms(), elapsed_ms(START)

Wall-clock milliseconds, and those since START (a now_ms value).

=back

=cut

sub now_ms { return int(Time::HiRes::time() * 1000); }
sub elapsed_ms { my ($start) = @_; return now_ms() - $start; }

# --- the tree the tests run from ----------------------------------------------

=pod

=head1 THE TREE

=over

=item ctxwin_root()

The top directory of the tree (where ctxwin.control is): the tests read
its files and run its scripts from there.

=item ctxwin_version()

The version the tree builds: default_version in its ctxwin.control.

=back

=cut

push @EXPORT, qw(ctxwin_root ctxwin_version);

sub ctxwin_root { return dirname($testdir); }

sub ctxwin_version
{
	my ($v) = slurp_file(ctxwin_root() . '/ctxwin.control') =~ /^default_version = '([^']+)'/m;
	die "no default_version in ctxwin.control\n" unless defined $v;
	return $v;
}

=pod

=head2 Background connections

=over

=item bg_sql(NODE, DB, { options, appname, user }, COMMAND...)

psql -c COMMAND ... in the background (PGOPTIONS, the application name and
the role as given; the hash may be empty).  Returns a handle for bg_done;
C<< $bg->[0] >> is its IPC::Run harness (pump_nb, for instance).

=item bg_done(BG)

Waits for it to end and returns what it printed, its errors after its
output, without the last newline.

=item sql_list(VALUE...)

The values quoted for an SQL list: C<'a', 'b'>.

=item contains_none(TEXT, WORD...)

The first WORD found in TEXT, or '' if none is (a secret that must not
show, for instance).

=back

=cut

push @EXPORT, qw(bg_sql bg_done sql_list contains_none);

sub bg_sql
{
	my ($node, $db, $o, @cmds) = @_;
	my ($out, $err) = ('', '');
	local %ENV = %ENV;
	$ENV{PGOPTIONS} = $o->{options} if defined $o->{options};
	$ENV{PGAPPNAME} = $o->{appname} if defined $o->{appname};
	my $h = IPC::Run::start(
		[
			'psql', '-X', '-q', '-A', '-t', '-d', $node->connstr($db),
			($o->{user} ? ('-U', $o->{user}) : ()), map { ('-c', $_) } @cmds
		],
		'<', \undef, '>', \$out, '2>', \$err);
	return [ $h, \$out, \$err ];
}

sub bg_done
{
	my ($bg) = @_;
	$bg->[0]->finish;
	my $text = join("\n", grep { $_ ne '' } ${ $bg->[1] }, ${ $bg->[2] });
	$text =~ s/\n+\z//;
	return $text;
}

sub sql_list { return join(', ', map { "'$_'" } @_); }

sub contains_none
{
	my ($t, @w) = @_;
	for (@w) { return $_ if index($t, $_) >= 0; }
	return '';
}

package CtxwinTest::Mock;

# test/mockllm.py on a free loopback port, with a random API key in a file
# the server can read and a JSON-lines log of the requests.

use strict;
use warnings;
use File::Spec;
use IPC::Run;
use JSON::PP;
use PostgreSQL::Test::Utils;
use Time::HiRes qw(usleep);

my @running;

=pod

=head1 CtxwinTest::Mock

=over

=item CtxwinTest::Mock->start(extra => [ARGS])

Starts the mock (--port 0: it binds a free port and reports it) and waits
for its port; dies if it does not come up.  ARGS go to mockllm.py, such as
--slow 60 or --seed 7.

=item $mock->port, key, keyfile, requests_log, base_url('openai' | 'anthropic')

=item $mock->nreq

The number of requests it has logged so far.

=item $mock->requests([FROM])

The logged requests (decoded JSON), from the FROM-th on (0: all).

=item $mock->requests_naming(FROM, ID...)

How many of those have a prompt that names one of the IDs.

=item $mock->stop

Stops it (also done at exit).

=back

=cut

sub start
{
	my ($class, %opts) = @_;
	# absolute: the server reads the key file from its data directory, and
	# the framework's temporary directories are relative where TESTDIR is
	# not set (as when scripts/valgrind.sh runs llm.pl)
	my $dir = File::Spec->rel2abs(PostgreSQL::Test::Utils::tempdir('mockllm'));
	chmod 0755, $dir;
	open(my $r, '<', '/dev/urandom') or die "/dev/urandom: $!";
	read($r, my $bytes, 16) == 16 or die "/dev/urandom: short read";
	close $r;
	my $self = bless {
		dir => $dir,
		key => 'sk-ctxwin-' . unpack('H*', $bytes),
		keyfile => "$dir/key",
		log => "$dir/requests.jsonl",
	}, $class;
	append_to_file($self->{keyfile}, "$self->{key}\n");
	chmod 0644, $self->{keyfile};
	append_to_file($self->{log}, '');
	chmod 0666, $self->{log};
	my $portfile = "$dir/port";
	$self->{h} = IPC::Run::start(
		[
			'python3', "$testdir/mockllm.py", '--port', '0',
			'--key', $self->{key}, '--log', $self->{log},
			'--port-file', $portfile, @{ $opts{extra} // [] }
		],
		'<', \undef, '>', '/dev/null', '2>', "$dir/mock.err");
	push @running, $self;
	CtxwinTest::wait_until(10, sub { -s $portfile })
	  or die "the mock LLM server did not start: "
	  . (-s "$dir/mock.err" ? slurp_file("$dir/mock.err") : 'no output');
	chomp($self->{port} = slurp_file($portfile));
	return $self;
}

sub port    { return $_[0]{port}; }
sub key     { return $_[0]{key}; }
sub keyfile { return $_[0]{keyfile}; }
sub requests_log { return $_[0]{log}; }

sub base_url
{
	my ($self, $provider) = @_;
	my $url = "http://127.0.0.1:$self->{port}";
	return $provider eq 'openai' || $provider eq 'responses' ? "$url/v1" : $url;
}

sub _lines
{
	my ($self) = @_;
	open(my $fh, '<', $self->{log}) or die "$self->{log}: $!";
	my @l = <$fh>;
	close $fh;
	# a line still being written has no newline yet
	pop @l if @l && $l[-1] !~ /\n\z/;
	return @l;
}

sub nreq
{
	my ($self) = @_;
	return scalar $self->_lines;
}

sub requests
{
	my ($self, $from) = @_;
	my @l = $self->_lines;
	return map { decode_json($_) } @l[ ($from // 0) .. $#l ];
}

sub requests_naming
{
	my ($self, $from, @ids) = @_;
	return scalar grep
	{
		my $p = $_->{prompt} // '';
		grep { index($p, $_) >= 0 } @ids
	} $self->requests($from);
}

sub stop
{
	my ($self) = @_;
	my $h = delete $self->{h} or return;
	eval { $h->signal('TERM'); $h->finish; };
	return;
}

END
{
	my $rc = $?;
	$_->stop for @running;
	$? = $rc;
}

1;
