-- bench/prose.sql: deterministic English-like chat text for the benchmarks
-- (bench/window, bench/cache); needs a schema named bench.

-- English-like text of about `target` bytes, the same for the same seed: words
-- of a chat about building a web service, sentences of about ten words.
CREATE FUNCTION bench.prose(seed bigint, target int DEFAULT 500) RETURNS text
LANGUAGE sql IMMUTABLE AS $$
WITH w(words) AS (SELECT ARRAY[
    'the', 'the', 'the', 'a', 'a', 'of', 'of', 'to', 'to', 'and', 'and', 'in', 'in', 'is', 'is',
    'it', 'it', 'that', 'for', 'for', 'on', 'with', 'we', 'you', 'this', 'be', 'can', 'not', 'are',
    'as', 'at', 'by', 'from', 'or', 'an', 'will', 'should', 'would', 'if', 'when', 'then', 'but',
    'so', 'all', 'each', 'one', 'two', 'new', 'old', 'first', 'last', 'next', 'only', 'also',
    'request', 'response', 'server', 'client', 'database', 'table', 'index', 'query', 'column',
    'migration', 'schema', 'service', 'endpoint', 'handler', 'function', 'method', 'class',
    'module', 'package', 'version', 'release', 'deploy', 'build', 'test', 'tests', 'error',
    'errors', 'exception', 'timeout', 'retry', 'cache', 'queue', 'worker', 'job', 'log', 'logs',
    'user', 'users', 'account', 'order', 'orders', 'invoice', 'payment', 'customer', 'token',
    'session', 'config', 'setting', 'value', 'field', 'record', 'file', 'path', 'directory',
    'change', 'changes', 'update', 'add', 'remove', 'rename', 'check', 'run', 'runs', 'read',
    'write', 'return', 'returns', 'call', 'calls', 'send', 'fetch', 'parse', 'validate',
    'handle', 'fix', 'fixed', 'works', 'fails', 'failed', 'slow', 'fast', 'small', 'large',
    'correct', 'wrong', 'missing', 'empty', 'null', 'default', 'current', 'previous', 'because',
    'before', 'after', 'during', 'while', 'instead', 'again', 'still', 'already', 'probably',
    'maybe', 'exactly', 'really', 'good', 'better', 'simple', 'clear', 'safe', 'idea', 'plan',
    'step', 'steps', 'problem', 'question', 'answer', 'reason', 'example', 'case', 'cases',
    'look', 'looks', 'think', 'know', 'need', 'needs', 'want', 'use', 'uses', 'make', 'makes',
    'keep', 'keeps', 'try', 'see', 'seems', 'like', 'about', 'there', 'here', 'what', 'which',
    'how', 'why', 'where', 'page', 'line', 'lines', 'branch', 'commit', 'review', 'PostgreSQL',
    'Redis', 'Python', 'TypeScript', 'API', 'JSON', 'HTTP', 'SQL', 'orders_v2', 'user_id',
    'created_at', '/api/orders', '404', '500', '30', '2', '10'] AS words),
k AS (
    SELECT i,
           words[1 + (abs(hashint8(seed * 1009 + i)) % cardinality(words))] AS word,
           abs(hashint8(seed * 1013 + i)) % 10 = 0 AS ends,
           i = 1 OR abs(hashint8(seed * 1013 + i - 1)) % 10 = 0 AS starts
    FROM w, generate_series(1, (target / 4)::int) AS i)
SELECT regexp_replace(
           left(string_agg(CASE WHEN starts THEN upper(left(word, 1)) || substr(word, 2) ELSE word END
                           || CASE WHEN ends THEN '.' ELSE '' END, ' ' ORDER BY i), target),
           '[ .]*[^ ]*$', '') || '.'
FROM k
$$;
