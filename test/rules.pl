# The policy's pure functions (src/policy/rules.c: the summary triggers, the
# packing of a window, the water-filling cut) outside the server, on
# boundary cases and on generated cases against brute-force references.
use strict;
use warnings;
use FindBin;
use lib "$FindBin::RealBin/lib";
use CtxwinTapProgram;

tap_program('tools/rules_check');
