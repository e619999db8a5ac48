# A database owner who is not a superuser prepares the database before a
# superuser installs ctxwin: a schema "ctxwin" of their own, and operators
# and functions for every operator name, built-in function name and type
# pair the install script uses, in that schema and in public.  CREATE
# EXTENSION must refuse the schema, and once it is gone nothing planted may
# ever run: not at install, not for the superuser or an application role
# whose search_path puts public first.  A second database plants, in
# pg_catalog itself, the operators and functions pg_catalog lacks for the
# numeric type pairs: a call in ctxwin that relies on an implicit cast
# would pick one of them, so this checks that every call has exact types.
# A cluster of its own: two databases, the owner's and the application
# role's logins.
use strict;
use warnings;
use FindBin;
use lib "$FindBin::RealBin/lib";
use CtxwinTest;
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;

plan tests => 13;

my $node = ctxwin_node('hostile');
my $db = 'ctxwin_hostile_t';
my $db2 = 'ctxwin_exact_t';
my $owner = 'ctxwin_hostile_owner';
my $app = 'ctxwin_hostile_app';
my $s1 = '00000000-0000-4000-8000-0000000000b1';
my $s2 = '00000000-0000-4000-8000-0000000000b2';
my $s3 = '00000000-0000-4000-8000-0000000000b3';
my $plant = "$FindBin::RealBin/hostile/plant.sql";
my $workflow = "$FindBin::RealBin/hostile/workflow.sql";

# the test's own queries run with a clean search_path; the workflow sets a hostile one
$ENV{PGOPTIONS} = '-c search_path=pg_catalog';

# q_as(DB, SQL, [USER], [PSQL ARGS]): psql as USER (the superuser if undef) runs
# SQL, then the psql arguments (such as -v name=value -f FILE), stopping at
# the first error; (what it printed, errors included; psql's exit code)
sub q_as
{
	my ($d, $sql, $user, @args) = @_;
	my $connstr = $node->connstr($d) . (defined $user ? " user=$user" : '');
	return sql($node, $d, $sql, connstr => $connstr, extra_params => \@args);
}
# plant(DB, USER, SQL, SCHEMA, FULL): plant.sql run after SQL as USER; the
# number of objects it planted, the last line it printed
sub plant
{
	my ($d, $user, $sql, $schema, $full) = @_;
	my $connstr = $node->connstr($d) . (defined $user ? " user=$user" : '');
	my ($rc, $out, $err) = $node->psql($d, $sql, connstr => $connstr,
		extra_params => [ '-v', "schema=$schema", '-v', "full=$full", '-f', $plant ]);
	diag("plant.sql failed in $d: $err") if $rc;
	my @l = split /\n/, $out;
	return @l ? $l[-1] : '';
}
sub pwned
{
	my ($d) = @_;
	return sql($node, $d, "SELECT count(*) || coalesce(': ' || string_agg(DISTINCT what, ', '), '') FROM public.pwned");
}

my $want_msg = 7;
my $want_msg2 = 6;
sql_do($node, 'postgres', "CREATE ROLE $owner LOGIN; CREATE ROLE $app LOGIN;
	CREATE DATABASE $db OWNER $owner; CREATE DATABASE $db2;");

# The database owner's preparations.
my ($out, $rc) = q_as($db, 'CREATE SCHEMA ctxwin', $owner);
die "the owner could not create a schema: $out\n" if $rc;
my $n1 = plant($db, $owner, '', 'ctxwin', 'false');
my $n2 = plant($db, $owner, '', 'public', 'true');
diag("planted $n1 objects in ctxwin and $n2 in public");
ok(($n1 =~ /^\d+$/ && $n1 > 1000) && ($n2 =~ /^\d+$/ && $n2 > 20000),
	'the owner planted thousands of hostile operators and functions in ctxwin and public');

{
	local $ENV{PGOPTIONS} = '-c search_path=public,ctxwin,pg_catalog';
	like(scalar q_as($db, 'CREATE EXTENSION ctxwin'), qr/schema "ctxwin" already exists/,
		'CREATE EXTENSION refuses a schema ctxwin it did not create');
}
is(sql($node, $db, "SELECT count(*) FROM pg_extension WHERE extname = 'ctxwin'"), '0', '... and installs nothing');
is(pwned($db), '0', '... and nothing planted ran');

($out, $rc) = q_as($db, 'SET client_min_messages = warning; DROP SCHEMA ctxwin CASCADE;', $owner);
die "the owner could not drop the schema: $out\n" if $rc;
{
	local $ENV{PGOPTIONS} = '-c search_path=public,pg_catalog';
	is(scalar q_as($db, 'CREATE EXTENSION ctxwin'), '',
		'once the schema is gone, CREATE EXTENSION with public first on search_path succeeds');
}
is(sql($node, $db, "SELECT nspowner::regrole FROM pg_namespace WHERE nspname = 'ctxwin'"),
	sql($node, $db, 'SELECT current_user'), 'the schema ctxwin belongs to the role that created the extension');

# The README's grants for an application role, and a profile that
# summarizes early, of a model record_usage calibrates.
sql_do($node, $db, <<"SQL");
GRANT USAGE ON SCHEMA ctxwin TO $app;
GRANT SELECT, INSERT, UPDATE, DELETE ON ctxwin.sessions, ctxwin.messages TO $app;
GRANT SELECT ON ctxwin.models, ctxwin.profiles, ctxwin.summaries, ctxwin.flush_events TO $app;
GRANT INSERT ON ctxwin.summaries, ctxwin.flush_events TO $app;
GRANT SELECT, INSERT ON ctxwin.usage_log TO $app;
INSERT INTO ctxwin.profiles (name, model, max_messages_before_summary, min_recent_messages, summary_strategy)
VALUES ('hostile', 'claude-haiku-4-5', 6, 2, 'extractive');
SQL

{
	local $ENV{PGOPTIONS} = '-c search_path=public,pg_catalog';
	($out, $rc) = q_as($db, '', undef, '-v', "sid=$s1", '-v', 'profile=hostile', '-f', $workflow);
}
ok($rc == 0, 'every function runs for the superuser with public first on search_path');
diag($out) if $rc;
is((split /\n/, $out)[0] // '', "2|2|2|4|hello world|$want_msg|$want_msg2|t", '... and the token counts are right');
is(pwned($db), '0', '... and nothing planted ran');

{
	local $ENV{PGOPTIONS} = '-c search_path=public,pg_catalog';
	($out, $rc) = q_as($db, '', $app, '-v', "sid=$s2", '-v', 'profile=hostile', '-f', $workflow);
}
ok($rc == 0, 'every function runs for an application role with public first on search_path');
diag($out) if $rc;
is(pwned($db), '0', '... and nothing planted ran');

# Exact types: pg_catalog gets the operators and functions it lacks for
# mixed numeric types (a throwaway database; only a superuser can do this).
my $n3 = plant($db2, undef, 'SET allow_system_table_mods = on;', 'pg_catalog', 'false');
diag("planted $n3 objects in pg_catalog");
($out, $rc) = q_as($db2, "CREATE EXTENSION ctxwin;
	INSERT INTO ctxwin.profiles (name, model, max_messages_before_summary, min_recent_messages, summary_strategy)
	VALUES ('hostile', 'claude-haiku-4-5', 6, 2, 'extractive');");
if ($rc == 0)
{
	my $first = $out;
	($out, $rc) = q_as($db2, '', undef, '-v', "sid=$s3", '-v', 'profile=hostile', '-f', $workflow);
	$out = join("\n", grep { $_ ne '' } $first, $out);
}
ok($rc == 0, "with pg_catalog's missing numeric type pairs planted, every function still runs");
diag($out) if $out =~ /WARNING|ERROR/;
is(pwned($db2), '0', '... and no call in ctxwin resolved to one of them (every call has exact types)');
