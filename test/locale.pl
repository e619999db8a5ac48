# Every cluster the tests, scripts and benchmarks make is UTF8 with a UTF-8
# locale whatever the caller's locale: without LANG, initdb would make a
# SQL_ASCII cluster with the C locale, where chars4 counts bytes instead of
# characters and search finds no word outside ASCII.
#
#  - each place of the tree that creates a cluster (initdb, the Perl test
#    framework's init, pg_virtualenv, pg_createcluster) names UTF8 and a
#    locale beside it;
#  - run here with LANG, LANGUAGE and every LC_* variable unset: the
#    cluster of scripts/cluster.sh (scripts/test.sh's and scripts/demo.sh's)
#    and the one of CtxwinTest's ctxwin_node are UTF8 with the C.UTF-8
#    locale, and count characters and find a word outside ASCII as a UTF-8
#    caller's would.
use strict;
use warnings;
use utf8;
use Encode qw(encode);
use File::Basename qw(dirname);
use File::Find;
use FindBin;
use lib "$FindBin::RealBin/lib";
use CtxwinTest;
use IPC::Run;
use PostgreSQL::Test::Utils;
use Test::More;

delete @ENV{ 'LANG', 'LANGUAGE', grep { /^LC_/ } keys %ENV };

my $root = dirname($FindBin::RealBin);

# --- every place that makes a cluster names UTF8 and a locale ----------------
# a command making a cluster, outside comments; the options may follow on
# the next two lines
my $makes = qr{
	(?:^|[\s"'(/])initdb(?:"|\b)\s*(?:-D|\)|,)    # initdb -D, "initdb"), (bindir, "initdb"),
  | join\(bindir,\s*"initdb"\)
  | bindir\s*/\s*"initdb"
  | ->init\s*(?:\(|;)                             # PostgreSQL::Test::Cluster's init, not init_from_backup
  | \bpg_virtualenv\s+-
  | \bpg_createcluster\s+[^\s#]
}x;
my @files;
for my $dir (qw(test scripts bench tools clients/python/tests clients/python/tools clients/node/test))
{
	next unless -d "$root/$dir";    # the release archive leaves out bench/
	find(
		{
			no_chdir => 1,
			wanted => sub {
				$File::Find::prune = 1 if /node_modules|\/corpus$|\/expected$|\/sql$/;
				push @files, $_ if -f $_ && /(\.(pl|pm|sh|py|ts|mjs)|\/run)$/;
			}
		},
		"$root/$dir");
}
my (@sites, @bad);
for my $f (sort @files)
{
	(my $rel = $f) =~ s{^\Q$root\E/}{};
	next if $rel eq 'test/locale.pl';
	open(my $fh, '<', $f) or die "$f: $!";
	my @lines = <$fh>;
	close $fh;
	for my $i (0 .. $#lines)
	{
		my $l = $lines[$i];
		next if $l =~ m{^\s*(#|//|\*|/\*|"""|--)};
		next unless $l =~ $makes;
		my $text = join('', @lines[ $i .. ($i + 2 > $#lines ? $#lines : $i + 2) ]);
		push @sites, "$rel:" . ($i + 1);
		push @bad, "$rel:" . ($i + 1) unless $text =~ /UTF8/ && $text =~ /locale/i;
	}
}
# (the release archive leaves out bench/, and the two places in it)
cmp_ok(scalar(@sites), '>=', -d "$root/bench" ? 8 : 6, 'the places that make a cluster are found (' . scalar(@sites) . ')')
  or diag(join("\n", @sites));
is(join(', ', @bad), '', 'each of them names UTF8 and a locale');

# --- run without LANG -------------------------------------------------------
my $jp = '日本語のテキストも数えます';    # 13 characters, 39 bytes
my $check = "SELECT pg_encoding_to_char(encoding), datctype, "
  . "char_length('$jp'), ctxwin.count_tokens('$jp', 'chars4') "
  . "FROM pg_database WHERE datname = current_database()";
my $expected = 'UTF8|C.UTF-8|13|3';

# scripts/cluster.sh, as scripts/test.sh and scripts/demo.sh start it
{
	my ($out, $err) = ('', '');
	my $script = <<'SH';
set -e
. scripts/cluster.sh
trap ctxwin_cluster_stop EXIT
ctxwin_cluster_start >&2
echo "$CTXWIN_CLUSTER_DIR"
psql -X -q -At -v ON_ERROR_STOP=1 -c 'CREATE EXTENSION ctxwin' -c "$1"
SH
	my $ok = IPC::Run::run([ 'bash', '-c', $script, 'cluster', encode('UTF-8', $check) ],
		'<', \undef, '>', \$out, '2>', \$err, init => sub { chdir $root or die "$root: $!" });
	ok($ok, 'scripts/cluster.sh starts a cluster without LANG') or diag($err);
	my ($dir, $row) = split /\n/, $out;
	is($row, $expected, '... a UTF8 cluster with the C.UTF-8 locale, where chars4 counts characters');
	ok(defined $dir && $dir ne '' && !-e $dir, '... and removes its directory when stopped');
}

# CtxwinTest's ctxwin_node, every TAP test's cluster
{
	my $node = ctxwin_node('locale');
	sql_do($node, 'postgres', 'CREATE EXTENSION ctxwin');
	is(sql($node, 'postgres', encode('UTF-8', $check)), $expected,
		"ctxwin_node without LANG: a UTF8 cluster with the C.UTF-8 locale, where chars4 counts characters");
	sql_do($node, 'postgres', encode('UTF-8', qq{
		INSERT INTO ctxwin.sessions (id) VALUES ('00000000-0000-4000-8000-000000000001');
		INSERT INTO ctxwin.messages (session_id, role, content) VALUES
		  ('00000000-0000-4000-8000-000000000001', 'user', 'Die Grüße aus München kamen an.'),
		  ('00000000-0000-4000-8000-000000000001', 'assistant', 'Schön, danke.')}));
	is( sql($node, 'postgres', encode('UTF-8',
		"SELECT string_agg(id::text, ',') FROM ctxwin.search('00000000-0000-4000-8000-000000000001', 'Grüße')")),
		'1', '... and search finds a word outside ASCII');
	$node->stop;
}

done_testing();
