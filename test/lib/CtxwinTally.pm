# prove's console output, and the run's counts in a file for
# scripts/test.sh (prove --formatter CtxwinTally, with CTXWIN_TALLY naming
# the file).  The file holds one line:
#
#   PASSED FAILED SKIPPED FILES SKIPPED-FILES FAILED-FILE ...
#
# PASSED counts the tests that passed (not those skipped); SKIPPED the tests
# skipped, SKIPPED-FILES the files that skipped everything; FAILED the tests
# that failed, plus those a file planned but never ran (it died), and at
# least one for a file that went wrong with no failed test to show for it
# (a non-zero exit, a parse error such as a missing plan).
package CtxwinTally;

use strict;
use warnings;
use parent 'TAP::Formatter::Console';

sub summary
{
	my ($self, $aggregate, $interrupted) = @_;
	$self->SUPER::summary($aggregate, $interrupted);
	my $path = $ENV{CTXWIN_TALLY} or return;
	my ($passed, $failed, $skipped, $files, $skipped_files, @bad) = (0, 0, 0, 0, 0);
	for my $file ($aggregate->descriptions)
	{
		my ($p) = $aggregate->parsers($file);
		$files++;
		$skipped_files++ if $p->skip_all;
		my $skips = scalar(my @s = $p->skipped);
		my $fails = scalar(my @f = $p->failed);
		my $planned = $p->tests_planned;
		my $run = $p->tests_run;
		$fails += $planned - $run if defined $planned && $planned > $run;
		$fails = 1 if $fails == 0 && $p->has_problems;
		$passed += scalar(my @ok = $p->passed) - $skips;
		$skipped += $skips;
		$failed += $fails;
		push @bad, $file if $fails;
	}
	# interrupted: the files it never started are not counted anywhere
	$failed++ if $interrupted && !$failed;
	open(my $fh, '>', $path) or die "$path: $!";
	print $fh join(' ', $passed, $failed, $skipped, $files, $skipped_files, @bad), "\n";
	close $fh;
	return;
}

1;
