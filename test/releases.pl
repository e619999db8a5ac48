# Every released version stays installable and updatable: its scripts are
# byte for byte what was released (sql/released.sha256 lists each release's
# install or update scripts and their sha256; a released script is never
# edited, changes go into new update scripts), PostgreSQL finds a chain of
# update scripts from it to the control file's default version, and
# installing it then running ALTER EXTENSION ctxwin UPDATE ends at that
# version.  Adding a version without its update script fails here.
# An update script defines each function once, with its final text: a
# CREATE [OR REPLACE] FUNCTION of the same name and argument types twice in
# one script fails here (a later block redefining what an earlier one wrote).
# On a cluster of its own, with the ctxwin installed for this server.
use strict;
use warnings;
use Digest::SHA;
use FindBin;
use lib "$FindBin::RealBin/lib";
use CtxwinTest;
use PostgreSQL::Test::Utils;
use Test::More;

my $root = ctxwin_root();
my $current = ctxwin_version();
# released.sha256: "SHA256  ctxwin--V.sql" or "SHA256  ctxwin--U--V.sql";
# a released version is the target of a script
my (@scripts, %sha, %released);
for (split /\n/, slurp_file("$root/sql/released.sha256"))
{
	my ($sum, $file) = /^([0-9a-f]{64})  (ctxwin--.*\.sql)$/ or next;
	push @scripts, $file;
	$sha{$file} = $sum;
	$released{$1} = 1 if $file =~ /^ctxwin--(?:.*--)?([^-]*)\.sql$/;
}
# oldest first
my @released = sort { pack('U*', split /\./, $a) cmp pack('U*', split /\./, $b) } keys %released;

my $node = ctxwin_node('releases');
ok(@released > 0, "sql/released.sha256 lists the released versions (@released)");
is(sql($node, 'postgres', "SELECT default_version FROM pg_available_extensions WHERE name = 'ctxwin'"),
	$current, "the installed control file's default version is the tree's ($current)");

for my $f (@scripts)
{
	my $got = -f "$root/sql/$f" ? Digest::SHA->new(256)->addfile("$root/sql/$f")->hexdigest : '(no such file)';
	ok($got eq $sha{$f}, "sql/$f is the released script (sha256)");
}
# A released version has a dated section in each changelog: the
# extension's and its client packages' (whose version is the extension's).
for my $log ('CHANGELOG.md', 'clients/python/CHANGELOG.md', 'clients/node/CHANGELOG.md')
{
	my $text = slurp_file("$root/$log");
	for my $v (@released)
	{
		ok($text =~ /^## \[?\Q$v\E\]? (?:- |\()\d{4}-\d\d-\d\d\)?$/m
			  || ($log ne 'CHANGELOG.md' && $v eq '0.1.0'),
			"$log dates the release of $v");
	}
}
for my $v (@released)
{
	my $path = sql($node, 'postgres',
		"SELECT coalesce(path, '(none)') FROM pg_extension_update_paths('ctxwin')
		 WHERE source = '$v' AND target = '$current'");
	ok($v eq $current || ($path ne '' && $path ne '(none)'),
		"an update path leads from $v to $current" . ($path ne '' ? " ($path)" : ''));
	sql_do($node, 'postgres', 'DROP DATABASE IF EXISTS releases WITH (FORCE); CREATE DATABASE releases');
	is( sql($node, 'releases', "CREATE EXTENSION ctxwin VERSION '$v';
	                            SELECT extversion FROM pg_extension WHERE extname = 'ctxwin'"),
		$v, "CREATE EXTENSION ctxwin VERSION '$v'");
	# (client_min_messages: the current version's update is a no-op, with a NOTICE)
	is( sql($node, 'releases', "SET client_min_messages = warning; ALTER EXTENSION ctxwin UPDATE;
	                            SELECT extversion FROM pg_extension WHERE extname = 'ctxwin'"),
		$current, "ALTER EXTENSION ctxwin UPDATE from $v ends at $current");
}

# The argument types of a function's parameter list: OUT parameters, names
# and defaults left out, blanks made one.
sub arg_types
{
	my ($list) = @_;
	my (@types, $depth, $cur);
	$depth = 0;
	$cur = '';
	for my $c (split //, $list . ',')
	{
		$depth++ if $c eq '(';
		$depth-- if $c eq ')';
		if ($c eq ',' && $depth == 0)
		{
			my $p = lc($cur) =~ s/\s+/ /gr =~ s/^ | $//gr;
			$cur = '';
			next if $p eq '';
			$p =~ s/ (default\b|=).*//s;
			my @w = split / /, $p;
			my $mode = $w[0] =~ /^(in|out|inout|variadic)$/ ? shift @w : 'in';
			next if $mode eq 'out';
			shift @w if @w > 1;
			push @types, join(' ', @w);
			next;
		}
		$cur .= $c;
	}
	return join(',', @types);
}
for my $f (sort glob("$root/sql/ctxwin--*--*.sql"))
{
	my $text = slurp_file($f) =~ s/--[^\n]*//gr;
	my %seen;
	while ($text =~ /\bCREATE\s+(?:OR\s+REPLACE\s+)?FUNCTION\s+([\w.]+)\s*(\((?:[^()]++|(?2))*\))/gi)
	{
		my $sig = lc($1) . '(' . arg_types(substr($2, 1, -1)) . ')';
		$seen{$sig}++;
	}
	my $name = $f =~ s{.*/}{}r;
	cmp_ok(scalar(keys %seen), '>', 0, "sql/$name defines functions");
	is_deeply([ sort grep { $seen{$_} > 1 } keys %seen ], [],
		"sql/$name defines each function once");
}

done_testing();
