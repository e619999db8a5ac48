# The tokenizer core against tiktoken's reference corpus (every record,
# including those holding NUL, which SQL cannot carry).
use strict;
use warnings;
use FindBin;
use lib "$FindBin::RealBin/lib";
use CtxwinTapProgram;

tap_program('tools/corpus_check', 'test/corpus');
