# The build's own promises, checked on the objects scripts/test.sh just
# built (no server needed):
#  - src/'s folders form an acyclic graph (make layers), and a cycle
#    between two folders is caught; so do the files of src/worker/, and a
#    cycle between two of them is caught too;
#  - touching a header rebuilds exactly the objects whose sources include
#    it, directly or through another of ctxwin's headers (the truth taken
#    from the #include lines of the sources, the answer from make -n -W).
use strict;
use warnings;

use File::Basename qw(basename dirname);
use File::Path qw(make_path);
use File::Temp qw(tempdir);
use FindBin;
use IPC::Run qw(run);
use Test::More;

my $top = dirname($FindBin::RealBin);
chdir $top or die "cd $top: $!";
my $pg_config = $ENV{PG_CONFIG} // 'pg_config';
my @make = ('make', '--no-print-directory', "PG_CONFIG=$pg_config");

# the objects of the library, from the Makefile
my ($out, $err);
run([@make, '-s', '--eval=print-objs: ; @echo $(OBJS)', 'print-objs'], '>', \$out, '2>', \$err)
  or BAIL_OUT("make print-objs: $err");
my @objs = split ' ', $out;
ok(@objs > 20, 'the Makefile lists the objects of the library (' . scalar(@objs) . ')');
my @missing = grep { !-e $_ } @objs;
is("@missing", '', 'every object is built (scripts/test.sh builds before it runs the tests)')
  or BAIL_OUT('build first');

# --- the folder graph -----------------------------------------------------
ok(run([@make, 'layers'], '>', \$out, '2>', \$err), 'make layers: the graph of the folders, and that of the files of src/worker/, has no cycle')
  or diag("$out$err");
my @folders = map { m{^src/([^/]+)/} ? $1 : () } @objs;
my %seen;
@folders = grep { !$seen{$_}++ } @folders;
for my $f (@folders)
{
	like($out, qr/^\s+\Q$f\E\s+->/m, "make layers shows the folder $f");
}
my ($files_graph) = $out =~ m{^src/worker/ files[^\n]*\n((?:  [^\n]*\n)+)}m;
ok(defined $files_graph, 'make layers shows the graph of the files of src/worker/');
for my $o (grep { m{^src/worker/} } @objs)
{
	(my $c = $o) =~ s{^src/worker/(.*)\.o$}{$1.c};
	like($files_graph // '', qr/^\s+\Q$c\E\s+->/m, "make layers shows the file $c of src/worker/");
}

# cycle_pair(A, B): the objects of two C files under a scratch src/ (A and
# B: paths such as "a/x") whose functions x and y call each other
my $tmp = tempdir(CLEANUP => 1);
sub cycle_pair
{
	my @objs;
	my @names = map { basename($_) } @_;
	for my $i (0, 1)
	{
		my ($path, $me, $other) = ($_[$i], $names[$i], $names[1 - $i]);
		make_path(dirname("$tmp/src/$path"));
		open my $fh, '>', "$tmp/src/$path.c" or die;
		print $fh "int $other(void);\nint $me(void) { return $other() + $i; }\n";
		close $fh;
		run([ 'cc', '-c', '-o', "$tmp/src/$path.o", "$tmp/src/$path.c" ]) or BAIL_OUT("cc $path.c");
		push @objs, "$tmp/src/$path.o";
	}
	return @objs;
}

# a cycle: a/x.o uses b/y.o's symbol and b/y.o uses a/x.o's
my $rc = run(["$top/scripts/layers.sh", cycle_pair('a/x', 'b/y')], '>', \$out, '2>', \$err);
ok(!$rc, 'scripts/layers.sh fails on two folders that use each other');
like($err, qr/cycle between the folders: .*\ba\b.*\bb\b|cycle between the folders: .*\bb\b.*\ba\b/,
	'and names them');

# a cycle inside a folder: src/worker/p.o uses q.o's symbol and q.o uses p.o's
cycle_pair('worker/p', 'worker/q');
$rc = run(["$top/scripts/layers.sh", "$tmp/src/worker/p.o", "$tmp/src/worker/q.o"], '>', \$out, '2>', \$err);
ok(!$rc, 'scripts/layers.sh fails on two files of src/worker/ that use each other');
like($err, qr{cycle between the files of src/worker/: .*\bp\.c\b.*\bq\.c\b|cycle between the files of src/worker/: .*\bq\.c\b.*\bp\.c\b},
	'and names them');
# one of them alone is no cycle
ok(run(["$top/scripts/layers.sh", "$tmp/src/worker/p.o"], '>', \$out, '2>', \$err),
	'scripts/layers.sh passes src/worker/ files that use no file in a circle');

# --- header dependencies --------------------------------------------------
# ctxwin's own headers each source includes, closed over the headers'
# own #include lines (quoted includes: the file's folder first, then src/)
my %inc_cache;
sub includes
{
	my ($file) = @_;
	return @{ $inc_cache{$file} } if $inc_cache{$file};
	my @found;
	open my $fh, '<', $file or die "$file: $!";
	while (<$fh>)
	{
		next unless /^\s*#\s*include\s+"([^"]+)"/;
		my $name = $1;
		for my $cand (dirname($file) . "/$name", "src/$name")
		{
			if (-e $cand)
			{
				(my $norm = $cand) =~ s{/\./}{/}g;
				$norm =~ s{^\./}{};
				push @found, $norm;
				last;
			}
		}
	}
	close $fh;
	$inc_cache{$file} = \@found;
	return @found;
}

sub closure
{
	my ($file) = @_;
	my %all;
	my @todo = includes($file);
	while (my $h = shift @todo)
	{
		next if $all{$h}++;
		push @todo, includes($h);
	}
	return keys %all;
}

my %includers;    # header => { object => 1 }
for my $o (@objs)
{
	(my $c = $o) =~ s/\.o$/.c/;
	$includers{$_}{$o} = 1 for closure($c);
}

my @headers = sort grep { !m{/vocab_} } split /\n/, `find src -name '*.h'`;
ok(@headers >= 10, 'the headers of src/ (' . scalar(@headers) . ')');
for my $h (@headers)
{
	run([@make, '-n', '-W', $h, 'all'], '>', \$out, '2>', \$err) or BAIL_OUT("make -n -W $h: $err");
	my %rebuilt = map { $_ => 1 } ($out =~ /-o (src\/\S+\.o)\b/g);
	my $want = join ' ', sort keys %{ $includers{$h} // {} };
	my $got = join ' ', sort keys %rebuilt;
	is($got, $want, "touching $h rebuilds exactly the objects that include it");
}

done_testing();
