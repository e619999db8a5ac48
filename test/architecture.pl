# docs/architecture.md describes the tree as it is: every file or folder it
# names in `code` exists, and its Layout table has a row for every folder of
# src/.  A name with a slash is a path from the top of the tree (VERSION and
# * stand for any version or name); a bare name is a file of the folder whose
# row of the Layout table names it, or of one of its folders, or, outside the
# table, of the tree.  No cluster: it reads files only.
use strict;
use warnings;
use File::Basename qw(basename dirname);
use File::Find;
use FindBin;
use Test::More;

my $root = dirname($FindBin::RealBin);
my $page = 'docs/architecture.md';
open(my $fh, '<', "$root/$page") or die "$page: $!";
my @lines = <$fh>;
close $fh;

# every file of the tree by its base name (build outputs and dependencies left out)
my %by_name;
find(
	{
		no_chdir => 1,
		wanted => sub {
			$File::Find::prune = 1
			  if -d && m{/(\.git|node_modules|out|results|tmp_check|log)$};
			push @{ $by_name{ basename($_) } }, $_ if -f;
		}
	},
	$root);

sub exists_as
{
	my ($name, $row_dir) = @_;
	(my $pattern = $name) =~ s/VERSION/*/g;
	return scalar(grep { -e } glob("$root/$pattern")) if $pattern =~ m{/};
	if ($row_dir ne '' && $row_dir !~ /\*/)
	{
		return 1 if -e "$root/$row_dir$pattern";
		return 1 if grep { -e } glob("$root/$row_dir*/$pattern");
	}
	return 1 if $pattern !~ /\*/ && $by_name{$pattern};
	return scalar(grep { -e } glob("$root/*/$pattern"));
}

# the release archive (make dist) leaves out bench/ and fuzz/: what the page
# names there is not looked for where they are absent
my @absent = grep { !-d "$root/$_" } qw(bench fuzz);
my ($named, @missing) = (0);
for my $i (0 .. $#lines)
{
	my $l = $lines[$i];
	my $row_dir = $l =~ /^\| `([^`]+\/)` \|/ ? $1 : '';
	while ($l =~ /`([A-Za-z0-9_.\/*-]+)`/g)
	{
		my $name = $1;
		next unless $name =~ /\.(?:c|h|sql|sh|pl|py|md|mjs|ts|json|control|tiktoken)$/ || $name =~ m{/$};
		next if grep { $name =~ m{^\Q$_\E/} || $row_dir =~ m{^\Q$_\E/} } @absent;
		$named++;
		push @missing, "$page:" . ($i + 1) . ": $name" unless exists_as($name, $row_dir);
	}
}
cmp_ok($named, '>', 50, "$page names the tree's files ($named names)");
is(join("\n", @missing), '', "every file and folder $page names exists");

# the Layout table's rows of src/ against src/'s folders
my %rows = map { /^\| `(src\/[^`\/]+\/)` \|/ ? ($1 => 1) : () } @lines;
my @folders = sort map { s{^\Q$root\E/}{}r . '/' } grep { -d } glob("$root/src/*");
my @without = grep { !$rows{$_} } @folders;
is("@without", '', "$page has a row for each folder of src/ (@folders)");

done_testing();
