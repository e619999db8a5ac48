# The layout stays true: the committed install script of the current
# version is what the build makes from sql/install/ (scripts/build-sql.sh),
# and src/MAP.md, the map of every SQL function and trigger to the C symbol
# and file behind it, is what scripts/sql-map.sh reads from an installed
# ctxwin.  Every C symbol the map names is defined in src/.
# On a cluster of its own, with the ctxwin installed for this server.
use strict;
use warnings;
use FindBin;
use lib "$FindBin::RealBin/lib";
use CtxwinTest;
use PostgreSQL::Test::Utils;
use Test::More;

my $root = ctxwin_root();
my $version = ctxwin_version();
chdir $root or die "$root: $!\n";

# differs(FILE, TEXT): diff -u of the file and the text, '' if they are equal
sub differs
{
	my ($file, $text) = @_;
	my $tmp = PostgreSQL::Test::Utils::tempdir() . '/made';
	append_to_file($tmp, $text);
	my $diff = `diff -u '$file' '$tmp'`;
	return $? == 0 ? '' : $diff || "diff failed ($?)";
}
# the first lines of a diff, to show
sub show { my @l = split /\n/, $_[0]; diag(join("\n", @l[ 0 .. ($#l < 39 ? $#l : 39) ])) if @l; }

my @areas = sort glob('sql/install/*.sql');
my $made = `scripts/build-sql.sh '$version' @areas`;
my $diff = $? == 0 ? differs("sql/ctxwin--$version.sql", $made) : "scripts/build-sql.sh failed ($?)";
ok($diff eq '', "sql/ctxwin--$version.sql is what scripts/build-sql.sh makes of sql/install/") or show($diff);

my $node = ctxwin_node('layout');
sql_do($node, 'postgres', 'CREATE DATABASE layout');
sql_do($node, 'layout', 'CREATE EXTENSION ctxwin');
my $map;
{
	local $ENV{PGHOST} = $node->host;
	local $ENV{PGPORT} = $node->port;
	$map = `scripts/sql-map.sh layout`;
	die "scripts/sql-map.sh failed ($?)\n" if $?;
}
$map =~ s/\n*\z/\n/;    # as the shell's $(...) and echo give it
$diff = differs('src/MAP.md', $map);
ok($diff eq '', 'src/MAP.md is the map of the installed extension (scripts/sql-map.sh)') or show($diff);

is(scalar(() = $map =~ /\(not found\)/g), 0,
	'every C symbol of the map is defined in src/, every SQL function in an area file of sql/install/');
my @unplaced = $map =~ /^\| `([^`]*)` \| (?:sql|plpgsql) \| \| (?!`sql\/install\/\w+\.sql`)/mg;
is("@unplaced", '', 'every SQL or PL/pgSQL function of the map names its file');
# and every symbol the library exports to SQL carries the ctxwin_ prefix
my @unprefixed = grep { !/^ctxwin_/ } $map =~ /^\| `[^`]*` \| c \| `([^`]*)`/mg;
is("@unprefixed", '', 'every C symbol called from SQL carries the ctxwin_ prefix');

done_testing();
