# ctxwin: PGXS build.  make && make install; make installcheck runs pg_regress.
EXTENSION = ctxwin
EXTVERSION = $(shell sed -n "s/^default_version = '\(.*\)'/\1/p" ctxwin.control)

MODULE_big = ctxwin
OBJS = \
	src/ctxwin.o \
	src/tokenizer.o \
	src/messages.o \
	src/trigger.o \
	src/counters.o \
	src/session_read.o \
	src/session_write.o \
	src/sessions_guard.o \
	src/session.o \
	src/walk.o \
	src/citus.o \
	src/window.o \
	src/history.o \
	src/format.o \
	src/tools.o \
	src/request.o \
	src/status.o \
	src/rules.o \
	src/summary.o \
	src/compact.o \
	src/summary_spi.o \
	src/llm.o \
	src/launcher.o \
	src/worker_loop.o \
	src/worker_claim.o \
	src/worker_transfer.o \
	src/worker_status.o \
	src/symbols_0_1.o \
	src/bpe.o \
	src/vocab_cl100k_base.o \
	src/vocab_o200k_base.o

# The install script of the current version is made from one file per area
# (sql/install/); the released scripts and the update scripts are plain files.
SQL_AREAS = $(sort $(wildcard sql/install/*.sql))
SQL_INSTALL = sql/$(EXTENSION)--$(EXTVERSION).sql
DATA = $(sort $(wildcard sql/ctxwin--*.sql) $(SQL_INSTALL))
# pg_regress's tests are test/sql/NAME.sql with their expected output in
# test/expected/NAME.out; results/ and regression.diffs land at the top.
# (pg_regress looks for both in its output directory first, the top, so no
# file of sql/ or expected/ there may bear a test's name.)
REGRESS = tokenizer window
REGRESS_OPTS = --inputdir=test --load-extension=$(EXTENSION)

VOCABS = cl100k_base o200k_base
EXTRA_CLEAN = src/vocab_*.c tools/gen_vocab tools/rules_check tools/corpus_check tools/corpus_check_heap tools/corpus_check_huge \
	.ctxwin-built-for

PG_CPPFLAGS = -Isrc -DCTXWIN_VERSION=\"$(EXTVERSION)\"
# scripts/test.sh adds -Werror (COPT); a user's newer compiler may warn more
PG_CFLAGS = -Wall -Wextra -Wno-unused-parameter -Wno-missing-field-initializers -Wno-sign-compare

SHLIB_LINK = -lcurl

PG_CONFIG ?= pg_config
PGXS := $(shell $(PG_CONFIG) --pgxs)
include $(PGXS)

# One tree builds for several PostgreSQL major versions (src/compat.h): the
# objects depend on a stamp holding the version of the server they were
# built for, rewritten only when PG_CONFIG names another one, so switching
# servers rebuilds everything and nothing of the other version is linked.
CTXWIN_BUILT_FOR := $(shell $(PG_CONFIG) --version)
.ctxwin-built-for: FORCE
	@if [ "$$(cat $@ 2>/dev/null)" != "$(CTXWIN_BUILT_FOR)" ]; then echo "$(CTXWIN_BUILT_FOR)" > $@; fi
$(OBJS) $(OBJS:.o=.bc): .ctxwin-built-for
.PHONY: FORCE

# Committed, so that a reader (and PGXN) sees the whole script; test/layout.pl
# checks that it is what this rule makes.  (Without sql/install/ there is
# nothing to make it from: the committed script is used as it is.)
ifneq ($(SQL_AREAS),)
all: $(SQL_INSTALL)

$(SQL_INSTALL): $(SQL_AREAS) scripts/build-sql.sh ctxwin.control
	scripts/build-sql.sh $(EXTVERSION) $(SQL_AREAS) > $@.tmp
	mv $@.tmp $@
endif

# Host tools run at build time; plain flags, never the server's.
HOST_CC ?= cc
HOST_CFLAGS ?= -O2 -g -Wall -Wextra

tools/gen_vocab: tools/gen_vocab.c src/bpe_vocab.h
	$(HOST_CC) $(HOST_CFLAGS) -o $@ tools/gen_vocab.c

# The vocabularies are checked against their published sha256 before use.
src/vocab_%.c: vocab/%.tiktoken vocab/SHA256SUMS tools/gen_vocab
	cd vocab && grep ' $*.tiktoken$$' SHA256SUMS | sha256sum --check --strict --quiet
	tools/gen_vocab $* $$(awk '$$2 == "$*.tiktoken" {print $$1}' vocab/SHA256SUMS) $< > $@.tmp
	mv $@.tmp $@

# CTXWIN_VERSION comes from the control file: rebuild what uses it
src/ctxwin.o src/llm.o src/worker_loop.o: ctxwin.control
src/bpe.o: src/bpe.c src/bpe.h src/bpe_vocab.h src/unicode_data.h
src/tokenizer.o: src/tokenizer.c src/bpe.h src/ctxwin.h src/compat.h
src/ctxwin.o: src/ctxwin.c src/ctxwin.h src/compat.h
src/messages.o: src/messages.c src/ctxwin.h src/compat.h
src/trigger.o: src/trigger.c src/ctxwin.h src/compat.h
src/walk.o: src/walk.c src/window.h src/ctxwin.h src/compat.h src/rules.h
src/citus.o: src/citus.c src/ctxwin.h src/compat.h
src/window.o: src/window.c src/window.h src/ctxwin.h src/compat.h src/rules.h
src/session.o: src/session.c src/window.h src/ctxwin.h src/compat.h
src/history.o: src/history.c src/window.h src/ctxwin.h src/compat.h
src/format.o: src/format.c src/window.h src/ctxwin.h src/compat.h
src/tools.o: src/tools.c src/window.h src/ctxwin.h src/compat.h
src/request.o: src/request.c src/window.h src/ctxwin.h src/compat.h
src/status.o: src/status.c src/window.h src/ctxwin.h src/compat.h src/rules.h
src/rules.o: src/rules.c src/rules.h
src/summary.o: src/summary.c src/summary.h src/ctxwin.h src/compat.h
src/compact.o: src/compact.c src/summary.h src/ctxwin.h src/compat.h
src/summary_spi.o: src/summary_spi.c src/summary.h
src/messages.o src/trigger.o: src/rules.h
src/llm.o: src/llm.c src/ctxwin.h src/compat.h
src/launcher.o: src/launcher.c src/worker.h src/ctxwin.h src/compat.h
src/worker_loop.o: src/worker_loop.c src/worker.h src/ctxwin.h src/compat.h
src/worker_claim.o: src/worker_claim.c src/worker.h src/ctxwin.h src/compat.h
src/worker_transfer.o: src/worker_transfer.c src/worker.h src/ctxwin.h src/compat.h
src/worker_status.o: src/worker_status.c src/worker.h src/ctxwin.h src/compat.h

# The corpus checker: the tokenizer core against tiktoken's reference output.
CORE_SRCS = src/bpe.c src/vocab_cl100k_base.c src/vocab_o200k_base.c tools/standalone.c
tools/corpus_check: tools/corpus_check.c $(CORE_SRCS) src/bpe.h tools/standalone.h
	$(HOST_CC) $(HOST_CFLAGS) -Isrc -o $@ tools/corpus_check.c $(CORE_SRCS)

# Every piece through the long-piece merge, to check it on the whole corpus.
tools/corpus_check_heap: tools/corpus_check.c $(CORE_SRCS) src/bpe.h tools/standalone.h
	$(HOST_CC) $(HOST_CFLAGS) -DBPE_SMALL_PIECE=2 -Isrc -o $@ tools/corpus_check.c $(CORE_SRCS)

# Every piece over 64 bytes through the bounded-memory merge of huge pieces.
tools/corpus_check_huge: tools/corpus_check.c $(CORE_SRCS) src/bpe.h tools/standalone.h
	$(HOST_CC) $(HOST_CFLAGS) -DBPE_SMALL_PIECE=2 -DBPE_LARGE_PIECE=64 -Isrc -o $@ tools/corpus_check.c $(CORE_SRCS)

# The policy's pure functions (src/rules.c) on boundary and generated cases.
tools/rules_check: tools/rules_check.c src/rules.c src/rules.h
	$(HOST_CC) $(HOST_CFLAGS) -Isrc -o $@ tools/rules_check.c src/rules.c -lm

check-core: tools/rules_check tools/corpus_check tools/corpus_check_heap tools/corpus_check_huge
	tools/rules_check
	tools/corpus_check test/corpus
	tools/corpus_check_heap test/corpus
	tools/corpus_check_huge test/corpus

.PHONY: check-core

# The PGXN release archive ctxwin-VERSION.zip, from git's HEAD (export-ignore
# in .gitattributes leaves files out), checked by building it in a scratch
# directory against $(PG_CONFIG); scripts/dist.sh --help for the options.
dist:
	PG_CONFIG="$(PG_CONFIG)" scripts/dist.sh

.PHONY: dist
