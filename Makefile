# ctxwin: PGXS build.  make && make install; make installcheck runs pg_regress and the pgTAP suites.
EXTENSION = ctxwin
EXTVERSION = $(shell sed -n "s/^default_version = '\(.*\)'/\1/p" ctxwin.control)

MODULE_big = ctxwin
OBJS = \
	src/ctxwin.o \
	src/base/guc.o \
	src/base/spi.o \
	src/base/heap.o \
	src/base/util.o \
	src/policy/rules.o \
	src/tokenizer/bpe.o \
	src/tokenizer/vocab_cl100k_base.o \
	src/tokenizer/vocab_o200k_base.o \
	src/tokenizer/tokenizer.o \
	src/tokenizer/messages.o \
	src/tokenizer/image.o \
	src/tokenizer/parts.o \
	src/citus/citus.o \
	src/session/settings.o \
	src/session/session.o \
	src/recall/search.o \
	src/recall/tool.o \
	src/window/walk.o \
	src/window/clear.o \
	src/window/window.o \
	src/window/history.o \
	src/window/format.o \
	src/window/tools.o \
	src/window/request.o \
	src/window/status.o \
	$(patsubst %.c,%.o,$(sort $(wildcard src/llm/*.c))) \
	src/summary/summary.o \
	src/summary/request.o \
	src/summary/range.o \
	src/summary/compact.o \
	src/summary/jobs.o \
	src/summary/job_finish.o \
	src/summary/segments.o \
	src/summary/summary_spi.o \
	src/summary/claim.o \
	src/summary/retract.o \
	src/summary/words.o \
	src/summary/facts.o \
	src/summary/extractive.o \
	src/worker/shmem.o \
	src/worker/launcher.o \
	src/worker/xact.o \
	src/worker/status.o \
	src/worker/transfer.o \
	src/worker/jobs.o \
	src/worker/queue.o \
	src/worker/outcome.o \
	src/worker/indexes.o \
	src/worker/loop.o \
	src/ingest/trigger.o \
	src/ingest/counters.o \
	src/ingest/session_read.o \
	src/ingest/session_write.o \
	src/ingest/sessions_guard.o \
	src/ingest/sessions_maintain.o \
	src/compat/symbols_0_1.o

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
# make installcheck runs them, then every pgTAP suite (test/*.sql) with
# pg_prove, each in one transaction it rolls back, in a database of their
# own (PGTAP_DB, made afresh, UTF-8), against the installed ctxwin on the
# server libpq's environment names (PGHOST, PGPORT, PGUSER: a superuser).
# The suites need pgTAP in that server and pg_prove (Debian:
# postgresql-NN-pgtap and libtap-parser-sourcehandler-pgtap-perl), nothing
# else: no preloading, no setting.  PGTAP=no runs pg_regress's tests only.
NO_INSTALLCHECK = 1
PGTAP_SUITES = $(sort $(wildcard test/*.sql))
PGTAP_DB = ctxwin_installcheck
PGTAP ?= yes

VOCABS = cl100k_base o200k_base
EXTRA_CLEAN = src/tokenizer/vocab_*.c tools/gen_vocab tools/rules_check tools/image_check tools/corpus_check tools/corpus_check_heap tools/corpus_check_huge \
	.ctxwin-built-for

PG_CPPFLAGS = -Isrc -DCTXWIN_VERSION=\"$(EXTVERSION)\"
# scripts/test.sh adds -Werror (COPT); a user's newer compiler may warn more
PG_CFLAGS = -Wall -Wextra -Wno-unused-parameter -Wno-missing-field-initializers -Wno-sign-compare

SHLIB_LINK = -lcurl

PG_CONFIG ?= pg_config
PGXS := $(shell $(PG_CONFIG) --pgxs)
include $(PGXS)

# One tree builds for several PostgreSQL major versions (src/compat/compat.h): the
# objects depend on a stamp holding the version of the server they were
# built for, rewritten only when PG_CONFIG names another one, so switching
# servers rebuilds everything and nothing of the other version is linked.
CTXWIN_BUILT_FOR := $(shell $(PG_CONFIG) --version)
# (rewritten while the Makefile is read, not by a rule that always runs, so
# that make -n and -W tell the truth about what a change rebuilds)
CTXWIN_STAMP := $(shell if [ "$$(cat .ctxwin-built-for 2>/dev/null)" != "$(CTXWIN_BUILT_FOR)" ]; then \
	echo "$(CTXWIN_BUILT_FOR)" > .ctxwin-built-for; fi)
$(OBJS) $(OBJS:.o=.bc): .ctxwin-built-for

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

tools/gen_vocab: tools/gen_vocab.c src/tokenizer/bpe_vocab.h
	$(HOST_CC) $(HOST_CFLAGS) -o $@ tools/gen_vocab.c

# The vocabularies are checked against their published sha256 before use.
src/tokenizer/vocab_%.c: vocab/%.tiktoken vocab/SHA256SUMS tools/gen_vocab
	cd vocab && grep ' $*.tiktoken$$' SHA256SUMS | sha256sum --check --strict --quiet
	tools/gen_vocab $* $$(awk '$$2 == "$*.tiktoken" {print $$1}' vocab/SHA256SUMS) $< > $@.tmp
	mv $@.tmp $@

# CTXWIN_VERSION comes from the control file: rebuild what uses it
src/base/util.o src/llm/llm.o src/worker/loop.o: ctxwin.control

# Header dependencies: the compiler writes them (-MMD -MP) next to each
# object it builds (src/*/x.o.d, and x.bc.d for the JIT's bitcode), and
# make reads them back, so touching a header rebuilds exactly the objects
# that include it (test/layout.pl checks it).  The first build needs none:
# every object is built anyway.  These rules take the place of PGXS's for
# src/ (a pattern with the shorter stem wins).
src/%.o: src/%.c
	$(COMPILE.c) -MMD -MP -MF $@.d -o $@ $<
ifeq ($(with_llvm), yes)
src/%.bc: src/%.c
	$(COMPILE.c.bc) -MMD -MP -MF $@.d -o $@ $<
endif
DEPS = $(wildcard $(OBJS:.o=.o.d) $(OBJS:.o=.bc.d))
-include $(DEPS)
EXTRA_CLEAN += $(OBJS:.o=.o.d) $(OBJS:.o=.bc.d)

# The corpus checker: the tokenizer core against tiktoken's reference output.
CORE_SRCS = src/tokenizer/bpe.c src/tokenizer/vocab_cl100k_base.c src/tokenizer/vocab_o200k_base.c tools/standalone.c
tools/corpus_check: tools/corpus_check.c $(CORE_SRCS) src/tokenizer/bpe.h tools/standalone.h
	$(HOST_CC) $(HOST_CFLAGS) -Isrc -o $@ tools/corpus_check.c $(CORE_SRCS)

# Every piece through the long-piece merge, to check it on the whole corpus.
tools/corpus_check_heap: tools/corpus_check.c $(CORE_SRCS) src/tokenizer/bpe.h tools/standalone.h
	$(HOST_CC) $(HOST_CFLAGS) -DBPE_SMALL_PIECE=2 -Isrc -o $@ tools/corpus_check.c $(CORE_SRCS)

# Every piece over 64 bytes through the bounded-memory merge of huge pieces.
tools/corpus_check_huge: tools/corpus_check.c $(CORE_SRCS) src/tokenizer/bpe.h tools/standalone.h
	$(HOST_CC) $(HOST_CFLAGS) -DBPE_SMALL_PIECE=2 -DBPE_LARGE_PIECE=64 -Isrc -o $@ tools/corpus_check.c $(CORE_SRCS)

# The policy's pure functions (src/policy/rules.c) on boundary and generated cases.
tools/rules_check: tools/rules_check.c tools/check.h src/policy/rules.c src/policy/rules.h
	$(HOST_CC) $(HOST_CFLAGS) -Isrc -o $@ tools/rules_check.c src/policy/rules.c -lm

# Images in messages (src/tokenizer/image.c): sizes from file headers, and the
# providers' published token rules against their examples and brute force.
tools/image_check: tools/image_check.c tools/check.h src/tokenizer/image.c src/tokenizer/image.h
	$(HOST_CC) $(HOST_CFLAGS) -Isrc -o $@ tools/image_check.c src/tokenizer/image.c -lm

check-core: tools/rules_check tools/image_check tools/corpus_check tools/corpus_check_heap tools/corpus_check_huge
	tools/rules_check
	tools/image_check
	tools/corpus_check test/corpus
	tools/corpus_check_heap test/corpus
	tools/corpus_check_huge test/corpus

.PHONY: check-core

# (PGXS's own installcheck is off: NO_INSTALLCHECK, above)
installcheck:
	$(pg_regress_installcheck) $(REGRESS_OPTS) $(REGRESS)
ifneq ($(PGTAP),no)
	@command -v pg_prove >/dev/null || { echo "pg_prove not found: install pgTAP's pg_prove (Debian: libtap-parser-sourcehandler-pgtap-perl), or run make installcheck PGTAP=no for pg_regress's tests only" >&2; exit 1; }
	'$(bindir)/psql' -X -q -d postgres -v ON_ERROR_STOP=1 \
		-c 'DROP DATABASE IF EXISTS $(PGTAP_DB)' \
		-c "CREATE DATABASE $(PGTAP_DB) TEMPLATE template0 ENCODING 'UTF8' LC_COLLATE 'C.UTF-8' LC_CTYPE 'C.UTF-8'"
	pg_prove --psql-bin '$(bindir)/psql' --dbname $(PGTAP_DB) $(PGTAP_SUITES)
endif

.PHONY: installcheck

# The PGXN release archive ctxwin-VERSION.zip, from git's HEAD (export-ignore
# in .gitattributes leaves files out), checked by building it in a scratch
# directory against $(PG_CONFIG); scripts/dist.sh --help for the options.
dist:
	PG_CONFIG="$(PG_CONFIG)" scripts/dist.sh

.PHONY: dist

# The graph of src/'s folders from the objects' symbols, lowest layer first;
# fails on a cycle (scripts/layers.sh).
layers: $(OBJS)
	scripts/layers.sh $(OBJS)

.PHONY: layers
