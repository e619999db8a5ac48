# META.json against PGXN's own validator rules (PGXN::Meta::Validator 0.14,
# Meta Spec 1.0.0), as scripts/check-version.sh applies them: the tree's
# META.json passes, and each change below, which PGXN's validator refuses
# (or accepts), is refused (or accepted) by the check.  The validator itself
# is Perl on CPAN and in no Debian package; its rules are these.
use strict;
use warnings;
use File::Temp qw(tempdir);
use File::Copy qw(copy);
use File::Path qw(make_path);
use FindBin;
use JSON::PP;
use Test::More;

my $root = "$FindBin::RealBin/..";
my $check = "$root/scripts/check-version.sh";
my $json = JSON::PP->new->utf8->canonical->pretty;
my $meta = do {
	open my $f, '<:raw', "$root/META.json" or die "META.json: $!";
	local $/;
	$json->decode(<$f>);
};

# check(META) -> (exit code, output) of check-version.sh on a tree holding
# that META.json and the tree's control file, scripts and README
sub check {
	my ($m) = @_;
	my $dir = tempdir(CLEANUP => 1);
	make_path("$dir/sql");
	copy("$root/$_", "$dir/$_") or die "$_: $!" for 'ctxwin.control', 'README.md';
	copy($_, "$dir/sql/") or die "$_: $!" for glob("$root/sql/ctxwin--*.sql");
	open my $f, '>:raw', "$dir/META.json" or die $!;
	print $f (ref $m ? $json->encode($m) : $m);
	close $f;
	my $out = `bash '$check' '$dir' 2>&1`;
	return ($? >> 8, $out);
}

my ($rc, $out) = check($meta);
is($rc, 0, "the tree's META.json passes") or diag($out);

# a deep copy of META.json with one change
sub changed {
	my ($f) = @_;
	my $m = $json->decode($json->encode($meta));
	$f->($m);
	return $m;
}

# [what, change, expected message part]: PGXN's validator refuses each
my @refused = (
	['no abstract', sub { delete $_[0]{abstract} }, 'required key "abstract"'],
	['no maintainer', sub { delete $_[0]{maintainer} }, 'required key "maintainer"'],
	['no provides', sub { delete $_[0]{provides} }, 'required key "provides"'],
	['no meta-spec', sub { delete $_[0]{'meta-spec'} }, 'required key "meta-spec"'],
	['an empty abstract', sub { $_[0]{abstract} = '' }, '"abstract" must be a non-empty string'],
	['a name with a space (a term)', sub { $_[0]{name} = 'ctx win' }, '"name" must be a term'],
	['a one-character name (a term: two or more)', sub { $_[0]{name} = 'c' }, '"name" must be a term'],
	['a version that is not SemVer', sub { $_[0]{version} = '0.2' }, '"version" must be a semantic version'],
	['a license PGXN does not know', sub { $_[0]{license} = 'gpl' }, 'is not a license name of the spec'],
	['an unknown top-level key', sub { $_[0]{homepage} = 'https://example.org/' }, 'a key the spec does not define: "homepage"'],
	['a key unknown to "provides"', sub { $_[0]{provides}{ctxwin}{docpath} = 'doc' }, 'a key the spec does not define: "docpath"'],
	['"provides" without "file"', sub { delete $_[0]{provides}{ctxwin}{file} }, 'lacks the required "file"'],
	['"provides" without "version"', sub { delete $_[0]{provides}{ctxwin}{version} }, 'lacks the required "version"'],
	['a tag with a slash', sub { $_[0]{tags} = ['llm/ai'] }, 'each tag must be'],
	['a tag of 300 characters', sub { $_[0]{tags} = ['x' x 300] }, 'each tag must be'],
	['a release status PGXN does not know', sub { $_[0]{release_status} = 'beta' }, '"release_status" must be'],
	['a prerequisite phase PGXN does not know', sub { $_[0]{prereqs}{install} = { requires => { PostgreSQL => '15.0.0' } } },
		'a key the spec does not define: "install"'],
	['a prerequisite relation PGXN does not know', sub { $_[0]{prereqs}{runtime}{needs} = { PostgreSQL => '15.0.0' } },
		'a key the spec does not define: "needs"'],
	['a prerequisite version that is not SemVer', sub { $_[0]{prereqs}{runtime}{requires}{PostgreSQL} = '15' },
		'must be a version range'],
	['a prerequisite range with an unknown operator', sub { $_[0]{prereqs}{runtime}{requires}{PostgreSQL} = '~> 15.0.0' },
		'must be a version range'],
	['a URL without a scheme', sub { $_[0]{resources}{bugtracker}{web} = 'github.com/ctxwin/ctxwin/issues' },
		'"resources" "bugtracker" "web" must be a URL'],
	['a URL without a host', sub { $_[0]{resources}{repository}{url} = 'https:ctxwin.git' },
		'"resources" "repository" "url" must be a URL'],
	['a repository type in capitals', sub { $_[0]{resources}{repository}{type} = 'Git' }, '"type" must be a lower-case word'],
	['a bugtracker mailto that is no address', sub { $_[0]{resources}{bugtracker}{mailto} = 'ctxwin' }, '"mailto" must be an email address'],
	['a meta-spec version PGXN does not know', sub { $_[0]{'meta-spec'}{version} = '2.0.0' }, '"meta-spec" "version" must be "1.0.0"'],
	['META.json that is no JSON', sub { }, 'not valid JSON'],
);
for my $r (@refused) {
	my ($what, $f, $expect) = @$r;
	my $m = $what =~ /no JSON/ ? substr($json->encode($meta), 0, 40) : changed($f);
	my ($rc, $out) = check($m);
	ok($rc != 0 && index($out, $expect) >= 0, "refused: $what") or diag("exit $rc:\n$out");
}

# what PGXN's validator accepts, accepted
my @accepted = (
	['a tag with spaces', sub { $_[0]{tags} = ['context window'] }],
	['a custom key at the top', sub { $_[0]{x_ctxwin} = { anything => [1] } }],
	['a custom key in "provides"', sub { $_[0]{provides}{ctxwin}{X_note} = 'x' }],
	['a license as a list', sub { $_[0]{license} = ['postgresql', 'mit'] }],
	['a license as a map of URLs', sub { $_[0]{license} = { PostgreSQL => 'https://opensource.org/licenses/PostgreSQL' } }],
	['a maintainer as one string', sub { $_[0]{maintainer} = 'ctxwin developers' }],
	['a version range', sub { $_[0]{prereqs}{runtime}{requires}{PostgreSQL} = '>= 15.0.0, < 19.0.0' }],
	['a prerequisite of any version (0)', sub { $_[0]{prereqs}{test}{recommends}{pgTAP} = 0 }],
);
for my $r (@accepted) {
	my ($what, $f) = @$r;
	my ($rc, $out) = check(changed($f));
	is($rc, 0, "accepted: $what") or diag($out);
}

done_testing();
