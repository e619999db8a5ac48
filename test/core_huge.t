#!/usr/bin/env bash
# The same corpus check with every piece over 64 bytes merged by the
# bounded-memory merge that normally serves only pieces over 1 MiB
# (merge_huge in src/bpe.c), so it is proven equal to tiktoken's on the
# whole corpus, counts and ids.
cd "$(dirname "$0")/.." || exit 1
make -s tools/corpus_check_huge >/dev/null || { echo "Bail out! could not build tools/corpus_check_huge"; exit 1; }
exec tools/corpus_check_huge test/corpus
