-- ctxwin 0.1.0 to 0.2.0.
\echo Use "ALTER EXTENSION ctxwin UPDATE TO '0.2.0'" to load this file. \quit

-- Runs with search_path = pg_catalog, pg_temp (the control file's schema).
-- Every update script starts by asking the library this backend runs for
-- its version: a server that preloads ctxwin keeps the library it started
-- with, and a schema newer than that library would meet code that does not
-- know it.  ctxwin's 0.1.0 library has neither function: with it loaded,
-- the first CREATE FUNCTION below fails and nothing changes.

CREATE FUNCTION ctxwin._library_version()
RETURNS text
AS 'MODULE_PATHNAME', 'ctxwin_library_version'
LANGUAGE C STABLE STRICT PARALLEL SAFE;

COMMENT ON FUNCTION ctxwin._library_version() IS
'Version of the ctxwin library this backend runs; it can differ from the extension''s version (pg_extension.extversion) until ALTER EXTENSION ctxwin UPDATE, or until a server that preloads ctxwin restarts';

CREATE FUNCTION ctxwin._require_library(version text)
RETURNS void
AS 'MODULE_PATHNAME', 'ctxwin_require_library'
LANGUAGE C STABLE STRICT PARALLEL SAFE;

COMMENT ON FUNCTION ctxwin._require_library(text) IS
'Raises an error unless the ctxwin library this backend runs is the given version or newer; each update script calls it first';

SELECT ctxwin._require_library('0.2.0');

-- The C functions carry the ctxwin_ prefix (the library's symbols are
-- global in the server); the old names stay in the library for databases
-- still at 0.1.0 (src/symbols_0_1.c).
CREATE OR REPLACE FUNCTION ctxwin.count_tokens(t text, encoding text DEFAULT 'cl100k_base')
RETURNS int
AS 'MODULE_PATHNAME', 'ctxwin_count_tokens'
LANGUAGE C STABLE STRICT PARALLEL SAFE;

CREATE OR REPLACE FUNCTION ctxwin.tokenize(t text, encoding text DEFAULT 'cl100k_base')
RETURNS int[]
AS 'MODULE_PATHNAME', 'ctxwin_tokenize'
LANGUAGE C STABLE STRICT PARALLEL SAFE;

CREATE OR REPLACE FUNCTION ctxwin.detokenize(ids int[], encoding text DEFAULT 'cl100k_base')
RETURNS text
AS 'MODULE_PATHNAME', 'ctxwin_detokenize'
LANGUAGE C STABLE STRICT PARALLEL SAFE;

CREATE OR REPLACE FUNCTION ctxwin.count_message_tokens(message jsonb, encoding text DEFAULT 'cl100k_base')
RETURNS int
AS 'MODULE_PATHNAME', 'ctxwin_count_message_tokens'
LANGUAGE C STABLE STRICT PARALLEL SAFE;

CREATE OR REPLACE FUNCTION ctxwin.message_tokens(role text, content text, name text, tool_call_id text,
                                      tool_calls jsonb, encoding text)
RETURNS int
AS 'MODULE_PATHNAME', 'ctxwin_message_tokens'
LANGUAGE C STABLE PARALLEL SAFE;

CREATE OR REPLACE FUNCTION ctxwin.truncate_middle(t text, max_tokens int, encoding text DEFAULT 'cl100k_base')
RETURNS text
AS 'MODULE_PATHNAME', 'ctxwin_truncate_middle'
LANGUAGE C STABLE STRICT PARALLEL SAFE;

CREATE OR REPLACE FUNCTION ctxwin._fit_contents(contents text[], room int, encoding text)
RETURNS text[]
AS 'MODULE_PATHNAME', 'ctxwin_fit_contents'
LANGUAGE C IMMUTABLE STRICT PARALLEL SAFE;

CREATE OR REPLACE FUNCTION ctxwin._contents_least(contents text[], encoding text)
RETURNS bigint
AS 'MODULE_PATHNAME', 'ctxwin_contents_least'
LANGUAGE C IMMUTABLE STRICT PARALLEL SAFE;

CREATE OR REPLACE FUNCTION ctxwin._messages_insert() RETURNS trigger
AS 'MODULE_PATHNAME', 'ctxwin_messages_insert'
LANGUAGE C;

CREATE OR REPLACE FUNCTION ctxwin._sessions_guard() RETURNS trigger
AS 'MODULE_PATHNAME', 'ctxwin_sessions_guard'
LANGUAGE C;

CREATE OR REPLACE FUNCTION ctxwin._llm_post(body jsonb)
RETURNS jsonb
AS 'MODULE_PATHNAME', 'ctxwin_llm_post'
LANGUAGE C VOLATILE STRICT
SET search_path = pg_catalog, pg_temp;
