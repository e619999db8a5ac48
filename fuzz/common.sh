# fuzz/common.sh: sourced by fuzz/run and fuzz/diff.  Sets the compiler and
# flags, and builds the vocabulary objects (ASan + UBSan) into fuzz/build/obj
# when they are missing or older than src/tokenizer/vocab_*.c or src/tokenizer/bpe_vocab.h.

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
root=$(cd "$here/.." && pwd)
build=$here/build

CC=${CC:-$(command -v clang-14 || command -v clang)}
SAN="-fsanitize=fuzzer,address,undefined -fno-sanitize-recover=all"
SAN_ONLY="-fsanitize=address,undefined -fno-sanitize-recover=all"
CFLAGS="-g -O1 -fno-omit-frame-pointer -Wall -Wextra -Wno-unused-parameter"
mkdir -p "$build/obj"

# The tokenizer core under test: src/tokenizer/bpe.c, or a modified copy (BPE_SRC=path,
# e.g. to try a fix without touching src/; its headers still come from src/).
BPE_SRC=${BPE_SRC:-$root/src/tokenizer/bpe.c}
# Extra -D flags for that core, e.g. BPE_DEFS=-DBPE_LARGE_PIECE=64 to send
# every piece over 64 bytes through merge_huge.
BPE_DEFS=${BPE_DEFS:-}

newer() { [ ! -f "$2" ] || [ "$1" -nt "$2" ]; }

build_vocab_objs() {
	local v o
	# the tables are generated (and regenerated when stale) by the Makefile
	make -s -C "$root" src/tokenizer/vocab_cl100k_base.c src/tokenizer/vocab_o200k_base.c
	for v in cl100k_base o200k_base; do
		o=$build/obj/vocab_$v.o
		if newer "$root/src/vocab_$v.c" "$o" || newer "$root/src/tokenizer/bpe_vocab.h" "$o"; then
			echo "compiling src/vocab_$v.c"
			$CC $CFLAGS $SAN_ONLY -I"$root/src" -c "$root/src/vocab_$v.c" -o "$o"
		fi
	done
}
VOCAB_OBJS="$build/obj/vocab_cl100k_base.o $build/obj/vocab_o200k_base.o"
