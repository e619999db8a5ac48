# A C test program of tools/ (it prints TAP) run as a Perl TAP test: its
# checks become this program's, one for one, with their descriptions.
#
#   use FindBin;
#   use lib "$FindBin::RealBin/lib";
#   use CtxwinTapProgram;
#   tap_program('tools/corpus_check', 'test/corpus');
#
# Needs no server and none of PostgreSQL's test framework.
package CtxwinTapProgram;

use strict;
use warnings;

use Exporter 'import';
use File::Basename qw(dirname);
use Test::More;

our @EXPORT = qw(tap_program);

=pod

=head1 FUNCTIONS

=over

=item tap_program(PROGRAM, ARGS...)

From the top of the tree: builds PROGRAM (a target of the Makefile, such
as tools/corpus_check; BAIL_OUT if it cannot be built), runs it with ARGS
and passes on each of its checks with Test::More (ok, or a skip for
C<# SKIP>) under its description, and its comment lines as notes.  The
count is the program's own: the plan it prints (first or last) is the
number of checks expected.  One failed check more if the program exits
non-zero with no failed check, or dies, prints no plan, or runs another number of checks than
it planned (or numbers them out of order); C<Bail out!> bails out.

=back

=cut

sub tap_program
{
	my ($program, @args) = @_;
	my $root = dirname(dirname(dirname(__FILE__)));
	chdir $root or BAIL_OUT("cannot enter $root: $!");
	system("make -s $program >/dev/null") == 0
	  or BAIL_OUT("could not build $program");

	open(my $out, '-|', "./$program", @args)
	  or BAIL_OUT("could not run $program: $!");
	my ($plan, $n, $failures, @wrong) = (undef, 0, 0);
	while (my $line = <$out>)
	{
		chomp $line;
		if ($line =~ /^1\.\.(\d+)\s*$/)
		{
			push @wrong, 'a second plan' if defined $plan;
			$plan = $1;
		}
		elsif ($line =~ /^(not )?ok\b\s*(\d*)\s*(?:- )?(.*)$/)
		{
			my ($failed, $num, $desc) = (defined $1, $2, $3);
			$n++;
			push @wrong, "check $n numbered $num" if $num ne '' && $num != $n;
			if ($desc =~ s/\s*#\s*SKIP\b\s*(.*)$//i)
			{
				my $why = $1;
			  SKIP: { skip($why, 1); }
			}
			else
			{
				ok(!$failed, $desc);
				$failures++ if $failed;
			}
		}
		elsif ($line =~ /^Bail out!\s*(.*)$/)
		{
			BAIL_OUT("$program: $1");
		}
		else
		{
			$line =~ s/^#\s?//;
			note($line);
		}
	}
	close $out;
	my $status = $?;
	push @wrong, 'no plan' unless defined $plan;
	push @wrong, "$n checks where it planned $plan" if defined $plan && $plan != $n;
	# a non-zero exit code with failed checks: those say why
	push @wrong, sprintf('exit code %d', $status >> 8) if $status >> 8 && !$failures;
	push @wrong, sprintf('signal %d', $status & 127) if $status & 127;
	if (@wrong)
	{
		fail("$program ran as it should");
		diag("$program: " . join(', ', @wrong));
		done_testing();
	}
	else
	{
		done_testing($plan);
	}
	return;
}

1;
