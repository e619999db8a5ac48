#!/usr/bin/env bash
# The tokenizer core against tiktoken's reference corpus (every record,
# including those holding NUL, which SQL cannot carry).
cd "$(dirname "$0")/.." || exit 1
make -s tools/corpus_check >/dev/null || { echo "Bail out! could not build tools/corpus_check"; exit 1; }
exec tools/corpus_check test/corpus
