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
