#!/usr/bin/env bash
# The same corpus check with every piece merged by the O(n log n) merge that
# normally serves only pieces longer than 256 bytes, so both merges are
# proven equal to tiktoken's on the whole corpus.
cd "$(dirname "$0")/.." || exit 1
make -s tools/corpus_check_heap >/dev/null || { echo "Bail out! could not build tools/corpus_check_heap"; exit 1; }
exec tools/corpus_check_heap test/corpus
