
-- search_path: every function that runs SQL or resolves a name pins it with
-- a SET clause.  The C functions count_tokens, tokenize and detokenize run no
-- SQL and resolve no name, except the encoding conversion of a database that
-- is neither UTF8 nor SQL_ASCII, which they pin internally; a SET clause would
-- triple their cost on short texts.  The C insert trigger of ctxwin.messages
-- runs SQL without one: every name in its queries is schema-qualified.  The
-- C guard of ctxwin.sessions runs no SQL.

-- The schema: ctxwin makes its own and refuses one that exists already.  A
-- schema made by someone else (a database owner, say) could hold operators,
-- functions or casts that outrank pg_catalog's for the argument types of a
-- call in the bodies below, and would run as whoever calls them: the
-- superuser in the background worker, among others.  The control file names
-- pg_catalog as the extension's schema, so this script runs with
-- search_path = pg_catalog, pg_temp.
DO $$
BEGIN
    IF EXISTS (SELECT FROM pg_catalog.pg_namespace WHERE nspname OPERATOR(pg_catalog.=) 'ctxwin') THEN
        RAISE EXCEPTION 'schema "ctxwin" already exists'
            USING ERRCODE = 'duplicate_schema',
                  DETAIL = 'ctxwin creates its own schema and does not install into one that another role may have prepared.',
                  HINT = 'Drop or rename the existing schema "ctxwin", then run CREATE EXTENSION ctxwin again.';
    END IF;
END $$;

CREATE SCHEMA ctxwin;
COMMENT ON SCHEMA ctxwin IS 'ctxwin: LLM context windows, token counting and running summaries';


-- The library this backend runs.  A server that preloads ctxwin keeps the
-- library it started with: update scripts ask it for its version first.
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

