# The same corpus check with every piece over 64 bytes merged by the
# bounded-memory merge that normally serves only pieces over 1 MiB
# (merge_huge in src/bpe.c), so it is proven equal to tiktoken's on the
# whole corpus, counts and ids.
use strict;
use warnings;
use FindBin;
use lib "$FindBin::RealBin/lib";
use CtxwinTapProgram;

tap_program('tools/corpus_check_huge', 'test/corpus');
