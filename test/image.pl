# Images in chat messages outside the server (src/tokenizer/image.c): their
# size read from PNG, JPEG, GIF and WebP headers, raw or base64, malformed
# and truncated ones refused, and the providers' published token rules on
# their worked examples and on generated sizes against brute-force
# references (tools/image_check).
use strict;
use warnings;
use FindBin;
use lib "$FindBin::RealBin/lib";
use CtxwinTapProgram;

tap_program('tools/image_check');
