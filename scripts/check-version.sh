#!/usr/bin/env bash
# The version is set once, as default_version in ctxwin.control.  This checks
# that the rest of the tree agrees with it:
#
#   - default_version is a semantic version (SemVer 2.0.0), as PGXN requires;
#   - META.json is valid JSON and valid PGXN metadata (Meta Spec 1.0.0,
#     https://pgxn.org/spec/): every required key, every key's type and form,
#     no key the spec does not define (but the custom x_ ones);
#   - META.json's version, and the version of the extension it provides, are
#     default_version; its name is the extension's;
#   - CREATE EXTENSION can reach default_version from the scripts in sql/:
#     an install script sql/ctxwin--V.sql and a chain of update scripts
#     sql/ctxwin--V--W.sql from V to default_version (none for V itself);
#   - the extension's "file" in META.json is the install script that
#     CREATE EXTENSION starts from, and its "docfile" exists.
#
# Usage: scripts/check-version.sh [DIR]   (DIR: a source tree, default the
# one this script is in).  Prints each finding; exits 1 if any check fails.
# Needs perl with JSON::PP (a core module).
set -euo pipefail
cd "${1:-$(dirname "$0")/..}"
exec perl -COE -Mstrict -Mwarnings - <<'PERL'
use JSON::PP ();

my @errors;
sub fail { push @errors, join('', @_) }

# SemVer 2.0.0, the expression semver.org suggests; PGXN's version format.
my $semver = qr/^(0|[1-9]\d*)\.(0|[1-9]\d*)\.(0|[1-9]\d*)
	(?:-((?:0|[1-9]\d*|\d*[a-zA-Z-][0-9a-zA-Z-]*)(?:\.(?:0|[1-9]\d*|\d*[a-zA-Z-][0-9a-zA-Z-]*))*))?
	(?:\+([0-9a-zA-Z-]+(?:\.[0-9a-zA-Z-]+)*))?$/x;

# --- ctxwin.control ---------------------------------------------------------
my @controls = glob('*.control');
@controls == 1 or die "expected one .control file, found: @controls\n";
my ($ext) = $controls[0] =~ /^(.*)\.control$/;
open my $cf, '<', $controls[0] or die "$controls[0]: $!\n";
my $default;
while (<$cf>) {
	$default = $1 if /^\s*default_version\s*=\s*'([^']*)'\s*(?:#.*)?$/;
}
close $cf;
defined $default or die "$controls[0]: no default_version = '...' line\n";
$default =~ $semver
	or fail("$controls[0]: default_version '$default' is not a semantic version (major.minor.patch)");

# --- META.json: JSON, then PGXN Meta Spec 1.0.0 ---------------------------------
my $meta = eval {
	open my $mf, '<:raw', 'META.json' or die "$!\n";
	local $/;
	JSON::PP->new->utf8->relaxed(0)->decode(scalar <$mf>);
};
if (!defined $meta) {
	print "META.json: not valid JSON: $@";
	print "FAIL\n";
	exit 1;
}

sub is_str { my $v = shift; defined $v && !ref $v }
sub is_obj { ref $_[0] eq 'HASH' }
sub is_arr { ref $_[0] eq 'ARRAY' }
sub custom { $_[0] =~ /^[xX]_./ }

# Term: at least two characters, no slash, backslash, space or control character.
sub check_term {
	my ($where, $v) = @_;
	is_str($v) && $v =~ /^[^\/\\\s\p{Cc}]{2,}$/
		or fail("META.json: $where must be a term (2+ characters, no /, \\, space or control character)");
}
sub check_version {
	my ($where, $v) = @_;
	is_str($v) && $v =~ $semver or fail("META.json: $where must be a semantic version string");
}
sub check_text {
	my ($where, $v) = @_;
	is_str($v) && length $v or fail("META.json: $where must be a non-empty string");
}
# Path: relative, Unix conventions, no . or .. component.
sub check_path {
	my ($where, $v) = @_;
	is_str($v) && length($v) >= 2 && $v !~ m{^/} && $v !~ m{\\}
		&& !grep({ $_ eq '.' || $_ eq '..' } split m{/}, $v =~ s{^\./}{}r)
		or fail("META.json: $where must be a relative Unix path inside the distribution");
}
# URI: a scheme and an authority (PGXN::Meta::Validator's url: "scheme://host...").
sub check_uri {
	my ($where, $v) = @_;
	is_str($v) && $v =~ m{^[A-Za-z][A-Za-z0-9+.-]*://[^/?#\s]+[^\s]*$}
		or fail("META.json: $where must be a URL with a scheme and a host (scheme://host/...)");
}
sub check_keys {
	my ($where, $obj, @allowed) = @_;
	my %ok = map { $_ => 1 } @allowed;
	for (sort keys %$obj) {
		$ok{$_} || custom($_) or fail("META.json: $where has a key the spec does not define: \"$_\"");
	}
}
sub check_unique {
	my ($where, $list) = @_;
	my %seen;
	$seen{ is_str($_) ? $_ : '' }++ && fail("META.json: $where has a duplicate item \"$_\"") for @$list;
}
# Version range: a version, 0, or comma-separated versions with operators.
sub check_range {
	my ($where, $v) = @_;
	return if defined $v && !ref $v && $v =~ /^0$/;
	my $ok = is_str($v);
	if ($ok) {
		for my $part (split /\s*,\s*/, $v, -1) {
			my ($op, $ver) = $part =~ /^((?:[=!]=|[<>]=?)\s*)?(.*)$/;
			$ok = 0 unless $ver =~ $semver || (!defined $op && $ver eq '0');
		}
	}
	$ok or fail("META.json: $where must be a version range (e.g. \"15.0.0\", \">= 1.2.0, < 2.0.0\" or 0)");
}

my %licenses = map { $_ => 1 } qw(agpl_3 apache_1_1 apache_2_0 artistic_1 artistic_2
	bsd freebsd gfdl_1_2 gfdl_1_3 gpl_1 gpl_2 gpl_3 lgpl_2_1 lgpl_3_0 mit
	mozilla_1_0 mozilla_1_1 openssl perl_5 postgresql qpl_1_0 ssleay sun zlib
	open_source restricted unrestricted unknown);

if (!is_obj($meta)) {
	fail('META.json: the top level must be an object');
	$meta = {};
}
for (qw(name version abstract maintainer license provides meta-spec)) {
	exists $meta->{$_} or fail("META.json: required key \"$_\" is missing");
}
check_keys('the top level', $meta, qw(name version abstract maintainer license
	provides meta-spec description generated_by tags no_index prereqs
	release_status resources));

my $spec = $meta->{'meta-spec'};
if (is_obj($spec)) {
	check_keys('"meta-spec"', $spec, qw(version url));
	is_str($spec->{version}) && $spec->{version} eq '1.0.0'
		or fail('META.json: "meta-spec" "version" must be "1.0.0" (the spec this checks)');
	check_uri('"meta-spec" "url"', $spec->{url}) if exists $spec->{url};
} elsif (defined $spec) {
	fail('META.json: "meta-spec" must be an object with a "version"');
}

check_term('"name"', $meta->{name}) if exists $meta->{name};
check_version('"version"', $meta->{version}) if exists $meta->{version};
check_text('"abstract"', $meta->{abstract}) if exists $meta->{abstract};
check_text('"description"', $meta->{description}) if exists $meta->{description};
check_text('"generated_by"', $meta->{generated_by}) if exists $meta->{generated_by};

if (exists $meta->{maintainer}) {
	my $m = $meta->{maintainer};
	if (is_arr($m)) {
		@$m or fail('META.json: "maintainer" must not be an empty list');
		check_text('each "maintainer"', $_) for @$m;
		check_unique('"maintainer"', $m);
	} else {
		check_text('"maintainer"', $m);
	}
}

if (exists $meta->{license}) {
	my $l = $meta->{license};
	if (is_str($l)) {
		$licenses{$l} or fail("META.json: \"license\" \"$l\" is not a license name of the spec (e.g. \"postgresql\")");
	} elsif (is_arr($l)) {
		@$l or fail('META.json: "license" must not be an empty list');
		is_str($_) && $licenses{$_} or fail('META.json: each "license" must be a license name of the spec') for @$l;
		check_unique('"license"', $l);
	} elsif (is_obj($l)) {
		%$l or fail('META.json: "license" must not be an empty object');
		check_uri("\"license\" \"$_\"", $l->{$_}) for sort keys %$l;
	} else {
		fail('META.json: "license" must be a license name, a list of them, or an object of names and URIs');
	}
}

my $provides = $meta->{provides};
if (is_obj($provides)) {
	%$provides or fail('META.json: "provides" must name at least one extension');
	for my $name (sort keys %$provides) {
		check_term("the extension name \"$name\" in \"provides\"", $name);
		my $e = $provides->{$name};
		if (!is_obj($e)) {
			fail("META.json: \"provides\" \"$name\" must be an object");
			next;
		}
		check_keys("\"provides\" \"$name\"", $e, qw(file version abstract docfile));
		exists $e->{$_} or fail("META.json: \"provides\" \"$name\" lacks the required \"$_\"") for qw(file version);
		check_path("\"provides\" \"$name\" \"file\"", $e->{file}) if exists $e->{file};
		check_version("\"provides\" \"$name\" \"version\"", $e->{version}) if exists $e->{version};
		check_text("\"provides\" \"$name\" \"abstract\"", $e->{abstract}) if exists $e->{abstract};
		check_path("\"provides\" \"$name\" \"docfile\"", $e->{docfile}) if exists $e->{docfile};
	}
} elsif (defined $provides) {
	fail('META.json: "provides" must be an object');
}

if (exists $meta->{tags}) {
	my $t = $meta->{tags};
	if (is_arr($t) && @$t) {
		for (@$t) {
			is_str($_) && /^[^\/\\\p{Cc}]{2,255}$/
				or fail('META.json: each tag must be a string of 2 to 255 characters with no /, \\ or control character');
		}
		check_unique('"tags"', $t);
	} else {
		fail('META.json: "tags" must be a non-empty list');
	}
}

if (exists $meta->{no_index}) {
	my $n = $meta->{no_index};
	if (is_obj($n) && (exists $n->{file} || exists $n->{directory})) {
		check_keys('"no_index"', $n, qw(file directory));
		for my $k (grep { exists $n->{$_} } qw(file directory)) {
			my $v = $n->{$k};
			if (is_arr($v)) {
				@$v or fail("META.json: \"no_index\" \"$k\" must not be an empty list");
				check_path("each \"no_index\" \"$k\"", $_) for @$v;
				check_unique("\"no_index\" \"$k\"", $v);
			} else {
				check_path("\"no_index\" \"$k\"", $v);
			}
		}
	} else {
		fail('META.json: "no_index" must be an object with "file" or "directory"');
	}
}

if (exists $meta->{prereqs}) {
	my $p = $meta->{prereqs};
	my @phases = qw(configure build test runtime develop);
	if (is_obj($p) && grep { exists $p->{$_} } @phases) {
		check_keys('"prereqs"', $p, @phases);
		for my $phase (grep { exists $p->{$_} } @phases) {
			my $ph = $p->{$phase};
			my @rels = qw(requires recommends suggests conflicts);
			if (!is_obj($ph) || !grep { exists $ph->{$_} } @rels) {
				fail("META.json: \"prereqs\" \"$phase\" must be an object with requires, recommends, suggests or conflicts");
				next;
			}
			check_keys("\"prereqs\" \"$phase\"", $ph, @rels);
			for my $rel (grep { exists $ph->{$_} } @rels) {
				my $r = $ph->{$rel};
				if (!is_obj($r) || !%$r) {
					fail("META.json: \"prereqs\" \"$phase\" \"$rel\" must be a non-empty object");
					next;
				}
				for (sort keys %$r) {
					check_term("the prerequisite \"$_\" of \"prereqs\" \"$phase\" \"$rel\"", $_);
					check_range("\"prereqs\" \"$phase\" \"$rel\" \"$_\"", $r->{$_});
				}
			}
		}
	} else {
		fail('META.json: "prereqs" must be an object with at least one phase (configure, build, test, runtime, develop)');
	}
}

if (exists $meta->{release_status}) {
	my $s = $meta->{release_status};
	is_str($s) && $s =~ /^(stable|testing|unstable)$/
		or fail('META.json: "release_status" must be "stable", "testing" or "unstable"');
}

if (exists $meta->{resources}) {
	my $r = $meta->{resources};
	if (is_obj($r) && grep { exists $r->{$_} } qw(homepage bugtracker repository)) {
		check_keys('"resources"', $r, qw(homepage bugtracker repository));
		check_uri('"resources" "homepage"', $r->{homepage}) if exists $r->{homepage};
		if (exists $r->{bugtracker}) {
			my $b = $r->{bugtracker};
			if (is_obj($b) && (exists $b->{web} || exists $b->{mailto})) {
				check_keys('"resources" "bugtracker"', $b, qw(web mailto));
				check_uri('"resources" "bugtracker" "web"', $b->{web}) if exists $b->{web};
				!exists $b->{mailto} || (is_str($b->{mailto}) && $b->{mailto} =~ /^[^@\s]+@[^@\s]+$/)
					or fail('META.json: "resources" "bugtracker" "mailto" must be an email address');
			} else {
				fail('META.json: "resources" "bugtracker" must be an object with "web" or "mailto"');
			}
		}
		if (exists $r->{repository}) {
			my $g = $r->{repository};
			if (is_obj($g) && (exists $g->{web} || (exists $g->{url} && exists $g->{type}))) {
				check_keys('"resources" "repository"', $g, qw(url web type));
				check_uri('"resources" "repository" "url"', $g->{url}) if exists $g->{url};
				check_uri('"resources" "repository" "web"', $g->{web}) if exists $g->{web};
				!exists $g->{type} || (is_str($g->{type}) && $g->{type} =~ /^\p{Ll}+$/)
					or fail('META.json: "resources" "repository" "type" must be a lower-case word (git)');
			} else {
				fail('META.json: "resources" "repository" must be an object with "web", or "url" and "type"');
			}
		}
	} else {
		fail('META.json: "resources" must be an object with "homepage", "bugtracker" or "repository"');
	}
}

# --- META.json against ctxwin.control -----------------------------------------
is_str($meta->{version}) && $meta->{version} eq $default
	or fail("META.json: \"version\" is \"", $meta->{version} // '', "\", ctxwin.control's default_version is '$default'");
is_str($meta->{name}) && $meta->{name} eq $ext
	or fail("META.json: \"name\" is \"", $meta->{name} // '', "\", the extension is $ext ($controls[0])");
my $mine = is_obj($provides) ? $provides->{$ext} : undef;
if (!is_obj($mine)) {
	fail("META.json: \"provides\" does not describe the extension $ext");
	$mine = {};
}
is_str($mine->{version}) && $mine->{version} eq $default
	or fail("META.json: \"provides\" \"$ext\" \"version\" is \"", $mine->{version} // '',
		"\", ctxwin.control's default_version is '$default'");
if (is_str($mine->{docfile})) {
	-f $mine->{docfile} or fail("META.json: \"provides\" \"$ext\" \"docfile\" $mine->{docfile} does not exist");
}

# --- sql/: an install script and a chain of update scripts to default_version ---
# PostgreSQL's rules for script names: ext--V.sql installs V, ext--V--W.sql
# updates V to W; a version contains no "--" and neither starts nor ends with "-".
my (%install, %edges);
for my $f (sort glob("sql/$ext--*.sql")) {
	my ($rest) = $f =~ m{^sql/\Q$ext\E--(.*)\.sql$};
	my @v = split /--/, $rest, -1;
	if (@v < 1 || @v > 2 || grep { $_ eq '' || /^-|-$/ } @v) {
		fail("$f: not an install (${ext}--V.sql) or update (${ext}--V--W.sql) script name");
		next;
	}
	$_ =~ $semver or fail("$f: version '$_' is not a semantic version") for @v;
	if (@v == 1) {
		$install{ $v[0] } = $f;
	} else {
		$v[0] ne $v[1] or fail("$f: updates a version to itself");
		push @{ $edges{ $v[0] } }, [ $v[1], $f ];
	}
}
%install or fail("sql/: no install script sql/$ext--V.sql");

# The scripts CREATE EXTENSION runs for default_version, chosen as PostgreSQL
# chooses them (find_install_path in src/backend/commands/extension.c): the
# install script of default_version itself if there is one; else the shortest
# chain of update scripts from an install script, not passing through another
# installable version, ties going to the greater starting version (strcmp).
my ($start, @path);
if ($install{$default}) {
	$start = $default;
} else {
	for my $base (sort keys %install) {
		my %prev = ($base => undef);
		my @queue = ($base);
		while (@queue) {
			my $v = shift @queue;
			last if $v eq $default;
			for my $e (@{ $edges{$v} || [] }) {
				next if exists $prev{ $e->[0] } || $install{ $e->[0] };
				$prev{ $e->[0] } = [ $v, $e->[1] ];
				push @queue, $e->[0];
			}
		}
		next unless exists $prev{$default};
		my @scripts;
		for (my $v = $default; defined $prev{$v}; $v = $prev{$v}[0]) {
			unshift @scripts, $prev{$v}[1];
		}
		if (!defined $start || @scripts < @path || (@scripts == @path && $start lt $base)) {
			($start, @path) = ($base, @scripts);
		}
	}
}
if (defined $start) {
	print "CREATE EXTENSION $ext (version $default) runs: ", join(', then ', $install{$start}, @path), "\n";
} else {
	fail("sql/: no install script, and no chain of update scripts from one, reaches default_version '$default' (",
		join(' ', sort glob("sql/$ext--*.sql")), ')');
}

# META.json's "file": the install script that CREATE EXTENSION starts from
# (PGXN clients only load a "file" that ends in .sql).
if (is_str($mine->{file})) {
	if (!-f $mine->{file}) {
		fail("META.json: \"provides\" \"$ext\" \"file\" $mine->{file} does not exist");
	} elsif (defined $start && $mine->{file} ne $install{$start}) {
		fail("META.json: \"provides\" \"$ext\" \"file\" is $mine->{file}; CREATE EXTENSION $ext starts from $install{$start}");
	}
}

if (@errors) {
	print "$_\n" for @errors;
	print "FAIL: ", scalar(@errors), " problem", (@errors == 1 ? '' : 's'), "\n";
	exit 1;
}
print "META.json and sql/ agree with ctxwin.control: version $default\n";
PERL
