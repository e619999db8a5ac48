# The library as the server sees it: built for this server's major version,
# installed with the version ctxwin.control gives, and on PostgreSQL 18 and
# later its magic block (PG_MODULE_MAGIC_EXT) names it and gives that
# version, which pg_get_loaded_modules() reports.
# On a cluster of its own, with the ctxwin installed for this server.
use strict;
use warnings;
use FindBin;
use lib "$FindBin::RealBin/lib";
use CtxwinTest;
use Test::More;

my $want = ctxwin_version();
my $node = ctxwin_node('version');
sql_do($node, 'postgres', 'CREATE EXTENSION ctxwin');
my $num = sql($node, 'postgres', 'SHOW server_version_num');

# scripts/test.sh names the major version it set up; a run on another
# server than the one asked for would prove nothing about that one
SKIP:
{
	skip('CTXWIN_PG_MAJOR is not set: no major version was asked for', 1)
	  unless $ENV{CTXWIN_PG_MAJOR};
	is(int($num / 10000), $ENV{CTXWIN_PG_MAJOR}, "the server is PostgreSQL $ENV{CTXWIN_PG_MAJOR}, as asked");
}
is(sql($node, 'postgres', "SELECT extversion FROM pg_extension WHERE extname = 'ctxwin'"),
	$want, "the extension is version $want, as ctxwin.control says");
is(sql($node, 'postgres', "SELECT ctxwin.count_tokens('hello world')"), '2', 'the library loads and counts');

SKIP:
{
	# pg_get_loaded_modules() and PG_MODULE_MAGIC_EXT are new in 18
	skip("pg_get_loaded_modules() needs PostgreSQL 18 (this server is $num)", 1) if $num < 180000;
	# the module's own name and version, from its magic block (NULL
	# without PG_MODULE_MAGIC_EXT)
	is( sql($node, 'postgres', "LOAD 'ctxwin';
	        SELECT coalesce(module_name, '(none)') || ' ' || coalesce(version, '(none)')
	        FROM pg_get_loaded_modules() WHERE file_name LIKE 'ctxwin%'"),
		"ctxwin $want", "pg_get_loaded_modules() reports ctxwin $want");
}

done_testing();
