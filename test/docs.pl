# The documentation cannot drift from the code: README.md and docs/*.md are
# checked against a running ctxwin.
#
#  - Every ```sql block runs, as written, in psql (blocks of one file in
#    order, in one session, in a fresh database of a node with ctxwin
#    preloaded and summaries pointed at the mock LLM), without an error; a
#    failure names the file and line.  A block preceded by the comment
#    <!-- expect-error SQLSTATE --> must fail with that SQLSTATE (an error a
#    page documents); one preceded by <!-- not run: REASON --> is reported
#    as skipped, with the reason.
#  - The README's table of settings lists exactly the ctxwin.* settings the
#    library defines, with their defaults and who may set them.
#  - Every ctxwin.* setting a ```conf block names exists, and its value is
#    one the setting takes; every ```json block parses.
#  - Every ctxwin.NAME the pages mention is a setting, a relation or a
#    function of the installed extension.
#  - Every relative link and #anchor resolves; every page of docs/ is
#    linked from the README; the README stays under 15,000 bytes and opens
#    with the two commands.
# CTXWIN_DOCS_SHOW=1 shows what each page's blocks returned (prove -v).
# Builds its own cluster with PostgreSQL's test framework (Unix socket in a
# temporary directory, a port of its own, ctxwin in shared_preload_libraries).
use strict;
use warnings;
use FindBin;
use lib "$FindBin::RealBin/lib";
use CtxwinTest;
use Encode qw(decode encode);
use File::Basename qw(basename dirname);
use IPC::Run;
use JSON::PP;
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;

my $root = dirname($FindBin::RealBin);
my @pages = ('README.md', map { 'docs/' . basename($_) } sort glob("$root/docs/*.md"));
my %page;
$page{$_} = parse_page($_) for @pages;

# ---------------------------------------------------------------- parsing

# A page's lines, fenced blocks (language, first line of the text, text,
# marker comment before the fence) and heading anchors.
sub parse_page
{
	my ($rel) = @_;
	# bytes (UTF-8) throughout: psql reads them, TAP prints them
	open(my $fh, '<:raw', "$root/$rel") or die "$rel: $!";
	my @lines = <$fh>;
	close $fh;
	chomp @lines;
	my (@blocks, %anchors, %slug_seen, $fence);
	for my $i (0 .. $#lines)
	{
		my $l = $lines[$i];
		if ($fence)
		{
			if ($l =~ /^\s*\Q$fence->{mark}\E\s*$/)
			{
				push @blocks, $fence;
				undef $fence;
				next;
			}
			(my $t = $l) =~ s/^ {0,$fence->{indent}}//;
			$fence->{text} .= "$t\n";
			next;
		}
		if ($l =~ /^(\s*)(`{3,}|~{3,})\s*([\w.+-]*)\s*$/)
		{
			my ($indent, $mark, $lang) = (length $1, $2, lc $3);
			my $marker = '';
			my $j = $i - 1;
			$j-- while $j >= 0 && $lines[$j] =~ /^\s*$/;
			$marker = $1 if $j >= 0 && $lines[$j] =~ /^\s*<!--\s*(.*?)\s*-->\s*$/;
			$fence = {
				lang => $lang, mark => $mark, indent => $indent,
				line => $i + 2, text => '', marker => $marker, page => $rel
			};
			next;
		}
		if ($l =~ /^#{1,6}\s+(.*?)\s*#*\s*$/)
		{
			my $slug = slug($1);
			my $n = $slug_seen{$slug}++;
			$anchors{ $n ? "$slug-$n" : $slug } = 1;
		}
	}
	die "$rel: a fenced block opened at line " . ($fence->{line} - 1) . " is never closed\n"
	  if $fence;
	return { lines => \@lines, blocks => \@blocks, anchors => \%anchors };
}

# GitHub's anchor of a heading: its text as rendered (links and code marks
# gone), lower case, without punctuation, spaces as hyphens.
sub slug
{
	my $h = decode('UTF-8', $_[0]);
	$h =~ s/\[([^\]]*)\]\([^)]*\)/$1/g;
	$h =~ s/<[^>]+>//g;
	$h = lc $h;
	$h =~ s/[^\p{L}\p{M}\p{N}\p{Pc} -]//g;
	$h =~ s/ /-/g;
	return encode('UTF-8', $h);
}

# The page's text outside fenced blocks and inline code, line by line.
sub prose_lines
{
	my ($rel) = @_;
	my @out;
	my $in = 0;
	my $mark;
	my $n = 0;
	for my $l (@{ $page{$rel}{lines} })
	{
		$n++;
		if ($in)
		{
			$in = 0 if $l =~ /^\s*\Q$mark\E\s*$/;
			next;
		}
		if ($l =~ /^\s*(`{3,}|~{3,})/)
		{
			($in, $mark) = (1, $1);
			next;
		}
		(my $t = $l) =~ s/`[^`]*`//g;
		push @out, [ $n, $t ];
	}
	return @out;
}

# ---------------------------------------------------------- static checks

my $readme = $page{'README.md'};
my $size = -s "$root/README.md";
cmp_ok($size, '<', 15_000, "README.md is under 15,000 bytes ($size)");

{
	my ($first_heading) = grep { $readme->{lines}[$_] =~ /^## / } 0 .. $#{ $readme->{lines} };
	my $first = $readme->{blocks}[0];
	ok( $first
		  && $first->{line} < $first_heading + 1
		  && $first->{text} =~ m{^bash scripts/demo\.sh\b}m
		  && $first->{text} =~ m{^bash scripts/test\.sh\b}m,
		'README.md opens with the two commands, before its first section');
}

# Links: [text](target) and [label]: target, relative ones resolved from the
# page's directory; #anchors against the target page's headings.
for my $rel (@pages)
{
	my $dir = dirname($rel);
	my @bad;
	for my $pl (prose_lines($rel))
	{
		my ($n, $t) = @$pl;
		my @targets;
		push @targets, $1 while $t =~ /\]\(\s*<?([^)\s>]+)>?(?:\s+"[^"]*")?\s*\)/g;
		push @targets, $1 if $t =~ /^\s*\[[^\]]+\]:\s*(\S+)/;
		for my $target (@targets)
		{
			next if $target =~ m{^[a-z][a-z0-9+.-]*:}i;    # https:, mailto:
			my ($path, $anchor) = split /#/, $target, 2;
			my $file = $path eq '' ? $rel : ($dir eq '.' ? $path : "$dir/$path");
			1 while $file =~ s{(^|/)(?!\.\./)[^/]+/\.\./}{$1};
			$file =~ s{^\./}{};
			# the release archive leaves out bench/ and fuzz/ (.gitattributes)
			next if $file =~ m{^(bench|fuzz)(/|$)} && !-e "$root/$1";
			if (!-e "$root/$file")
			{
				push @bad, "$rel:$n: $target: no such file";
				next;
			}
			next unless defined $anchor;
			my $target_page = $page{$file} // (-f "$root/$file" && $file =~ /\.md$/ ? parse_page($file) : undef);
			push @bad, "$rel:$n: $target: $file has no heading with that anchor"
			  unless $target_page && $target_page->{anchors}{$anchor};
		}
	}
	is(join("\n", @bad), '', "$rel: every relative link and anchor resolves");
}

{
	my %linked;
	for my $pl (prose_lines('README.md'))
	{
		$linked{$1} = 1 while $pl->[1] =~ /\]\((docs\/[^)#\s]+)/g;
	}
	my @orphans = grep { m{^docs/} && !$linked{$_} } @pages;
	is(join(', ', @orphans), '', 'every page of docs/ is linked from the README');
}

for my $rel (@pages)
{
	for my $b (grep { $_->{marker} ne '' && $_->{lang} eq 'sql' } @{ $page{$rel}{blocks} })
	{
		ok($b->{marker} =~ /^expect-error [0-9A-Z]{5}$/ || $b->{marker} =~ /^not run: \S/,
			"$rel:$b->{line}: the comment before the block is <!-- expect-error SQLSTATE --> or <!-- not run: REASON -->")
		  or diag("found <!-- $b->{marker} -->");
	}
	for my $b (grep { $_->{lang} eq 'json' } @{ $page{$rel}{blocks} })
	{
		ok(eval { JSON::PP->new->utf8->decode($b->{text}); 1 }, "$rel:$b->{line}: the JSON block parses")
		  or diag($@);
	}
}

# ---------------------------------------------------------- against ctxwin

my $mock = CtxwinTest::Mock->start;
my $node = ctxwin_node('docs', preload => 1, mock => $mock);

my %setting;
for my $row (split /\n/,
	sql_do($node, 'postgres',
		"SELECT name, coalesce(boot_val, ''), coalesce(unit, ''), context, vartype "
		  . "FROM pg_settings WHERE name LIKE 'ctxwin.%' ORDER BY name"))
{
	my ($name, $boot, $unit, $context, $type) = split /\|/, $row, -1;
	$setting{$name} = { boot => $boot, unit => $unit, context => $context, type => $type };
}
ok(scalar(keys %setting) > 0, 'the preloaded library defines ctxwin.* settings');

# The README's settings: the rows of its table under "## Configuration".
{
	my (%row, $in);
	for my $l (@{ $readme->{lines} })
	{
		$in = $l =~ /^## Configuration\b/ if $l =~ /^## /;
		next unless $in && $l =~ /^\|\s*`(ctxwin\.[a-z_]+)`\s*\|\s*([^|]*?)\s*\|\s*([^|]*?)\s*\|/;
		$row{$1} = { default => $2, who => $3 };
	}
	is_deeply([ sort keys %row ], [ sort keys %setting ],
		"README.md's table of settings lists exactly the library's ctxwin.* settings");
	my %who = (
		postmaster => 'server start',
		sighup => 'reload',
		superuser => 'superuser',
		user => 'anyone');
	for my $name (sort keys %row)
	{
		my $s = $setting{$name} or next;
		(my $shown = $row{$name}{default}) =~ s/`//g;
		is(normalized($shown, $s), $s->{boot},
			"README.md: the default of $name is $s->{boot}" . ($s->{unit} ? " $s->{unit}" : ''));
		like($row{$name}{who}, qr/^\Q$who{ $s->{context} }\E\b/,
			"README.md: $name is set by: $who{ $s->{context} } ($s->{context})");
	}
}

# A default as the README shows it, in the setting's own unit and form.
sub normalized
{
	my ($v, $s) = @_;
	return '' if $v eq 'none';
	if ($s->{unit} eq 'ms' && $v =~ /^(\d+)\s*(ms|s|min|h)?$/)
	{
		my %f = (ms => 1, s => 1000, min => 60_000, h => 3_600_000);
		return $1 * $f{ $2 // 'ms' };
	}
	if ($s->{unit} eq 'B' && $v =~ /^(\d+)\s*(B|kB|MB|GB)?$/)
	{
		my %f = (B => 1, kB => 1024, MB => 1024**2, GB => 1024**3);
		return $1 * $f{ $2 // 'B' };
	}
	return $v;
}

# conf blocks: every ctxwin.* setting they set exists, and takes the value
# (tried with SET in a rolled-back transaction where a superuser may SET it).
for my $rel (@pages)
{
	for my $b (grep { $_->{lang} eq 'conf' } @{ $page{$rel}{blocks} })
	{
		my @lines = split /\n/, $b->{text};
		for my $i (0 .. $#lines)
		{
			next unless $lines[$i] =~ /^\s*([a-z_]+\.[a-z_]+)\s*=\s*('(?:[^']|'')*'|[^\s#]+)/;
			my ($name, $value) = ($1, $2);
			my $where = "$rel:" . ($b->{line} + $i);
			next unless $name =~ /^ctxwin\./;
			if (!ok($setting{$name}, "$where: $name is a setting of ctxwin"))
			{
				next;
			}
			next unless $setting{$name}{context} =~ /^(user|superuser)$/;
			$value = "'$value'" unless $value =~ /^'/;
			my ($out, $rc) = sql($node, 'postgres', "BEGIN; SET LOCAL $name = $value; ROLLBACK;");
			is($rc, 0, "$where: $name takes $value") or diag($out);
		}
	}
}

# Every ctxwin.NAME mentioned is a setting, a relation or a function.
{
	sql_do($node, 'postgres', 'CREATE DATABASE docs_catalog');
	sql_do($node, 'docs_catalog', 'CREATE EXTENSION ctxwin');
	my %known = map { $_ => 1 } split /\n/, sql_do($node, 'docs_catalog', q{
		SELECT c.relname FROM pg_class c WHERE c.relnamespace = 'ctxwin'::regnamespace
		UNION SELECT p.proname FROM pg_proc p WHERE p.pronamespace = 'ctxwin'::regnamespace});
	$known{ substr($_, length 'ctxwin.') } = 1 for keys %setting;
	my %unknown;
	for my $rel (@pages)
	{
		my $n = 0;
		for my $l (@{ $page{$rel}{lines} })
		{
			$n++;
			while ($l =~ /(?<![\w\/.-])ctxwin\.([a-z_][a-z0-9_]*)(\*?)/g)
			{
				my ($name, $glob) = ($1, $2);
				next if $glob || $name =~ /^(control|so|conf|messages_p\d+)$/;
				next if $known{$name};
				$unknown{"ctxwin.$name"} //= "$rel:$n";
			}
		}
	}
	is(join(', ', map { "$_ ($unknown{$_})" } sort keys %unknown), '',
		'every ctxwin.NAME the pages mention is a setting, relation or function of ctxwin');
}

# The SQL blocks, one psql session per page, in order.
my $dbn = 0;
for my $rel (@pages)
{
	my @blocks = grep { $_->{lang} eq 'sql' } @{ $page{$rel}{blocks} };
	next unless @blocks;
	my @run;
	for my $b (@blocks)
	{
		if ($b->{marker} =~ /^not run: (.*)/)
		{
		  SKIP: { skip("$rel:$b->{line}: $1", 1); }
			next;
		}
		push @run, $b;
	}
	next unless @run;
	my $db = 'docs_' . ++$dbn;
	sql_do($node, 'postgres', "CREATE DATABASE $db");
	sql_do($node, $db, 'CREATE EXTENSION ctxwin')
	  unless grep { $_->{text} =~ /\bCREATE\s+EXTENSION\s+(IF\s+NOT\s+EXISTS\s+)?ctxwin\b/i } @run;

	my $script = '';
	my $at = 1;    # the script's next line
	for my $k (0 .. $#run)
	{
		my $b = $run[$k];
		$script .= "\\set LAST_ERROR_SQLSTATE 00000\n\\warn '\@\@\@ block $k'\n";
		$at += 2;
		$b->{script_line} = $at;
		$script .= $b->{text};
		$at += ($b->{text} =~ tr/\n//);
		$script .= "\\warn '\@\@\@ end $k' :LAST_ERROR_SQLSTATE\n";
		$at += 1;
	}
	my $file = PostgreSQL::Test::Utils::tempdir('docs') . '/' . ($rel =~ tr{/}{_}r) . '.sql';
	open(my $fh, '>:raw', $file) or die "$file: $!";
	print $fh $script;
	close $fh;
	my ($out, $err) = ('', '');
	IPC::Run::run(
		[ 'psql', '-X', '-v', 'ON_ERROR_STOP=0', '-d', $node->connstr($db), '-f', $file ],
		'<', \undef, '>', \$out, '2>', \$err, IPC::Run::timeout(600));

	# CTXWIN_DOCS_SHOW=1: what the blocks returned, to check a page's comments
	note("$rel, what psql printed:\n$out") if $ENV{CTXWIN_DOCS_SHOW};

	# psql:FILE:LINE: as PAGE:LINE
	my $map = sub {
		my ($line) = @_;
		for my $b (reverse @run)
		{
			return "$rel:" . ($b->{line} + $line - $b->{script_line}) if $line >= $b->{script_line};
		}
		return "$rel:?";
	};
	my (%said, %state, $cur);
	for my $l (split /\n/, $err)
	{
		if ($l =~ /^\@\@\@ block (\d+)$/) { $cur = $1; next; }
		if ($l =~ /^\@\@\@ end (\d+) (\S+)$/) { $state{$1} = $2; undef $cur; next; }
		$l =~ s/^psql:\Q$file\E:(\d+):/$map->($1) . ':'/e;
		push @{ $said{$cur} }, $l if defined $cur;
	}
	for my $k (0 .. $#run)
	{
		my $b = $run[$k];
		my $said = join("\n", @{ $said{$k} // [] });
		my $errors = grep { /^\Q$rel\E:\d+: (?!NOTICE|WARNING|INFO|DEBUG|LOG)/ } @{ $said{$k} // [] };
		my $ok;
		if ($b->{marker} =~ /^expect-error (\S+)/)
		{
			$ok = is($state{$k} // 'psql ended', $1, "$rel:$b->{line}: the block fails with SQLSTATE $1");
		}
		else
		{
			$ok = ok(defined $state{$k} && $state{$k} eq '00000' && !$errors,
				"$rel:$b->{line}: the SQL block runs");
			$said ||= 'psql ended before it' unless defined $state{$k};
		}
		# what psql said (errors, notices): in the failure, or shown by prove -v
		$ok ? note($said) : diag($said) if $said ne '';
	}
}

done_testing();
