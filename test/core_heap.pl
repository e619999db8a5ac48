# The same corpus check with every piece merged by the O(n log n) merge that
# normally serves only pieces longer than 256 bytes, so both merges are
# proven equal to tiktoken's on the whole corpus.
use strict;
use warnings;
use FindBin;
use lib "$FindBin::RealBin/lib";
use CtxwinTapProgram;

tap_program('tools/corpus_check_heap', 'test/corpus');
