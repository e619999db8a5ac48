-- Content parts and images: a message's content as an array of parts in
-- OpenAI's or Anthropic's shape, stored as given, checked (an error names
-- the message and the part, and nothing is stored half), counted by the
-- provider's published image rule (never the base64 as text), and sent in
-- either format, converted between the two shapes.
\ir lib/begin.sql
CREATE EXTENSION ctxwin;

-- Sessions of each rule: GPT-4o's tiles, Claude's standard tier, and
-- models a user adds (Claude 4.7's high-resolution tier, a dated OpenAI
-- name of the gpt-4o-mini family, a model of no provider).
INSERT INTO ctxwin.models (name, encoding, context_window, provider) VALUES
    ('claude-opus-4-7', 'cl100k_base', 200000, 'anthropic'),
    ('gpt-4o-mini-2024-07-18', 'o200k_base', 128000, 'openai'),
    ('local-vision', 'o200k_base', 32000, NULL);
INSERT INTO ctxwin.profiles (name, model, response_reserve, window_policy, max_messages_before_summary,
                             max_tokens_before_summary, trigger_ratio) VALUES
    ('po', 'gpt-4o', 0, 'sliding', NULL, NULL, NULL),
    ('pc', 'claude-sonnet-4-5', 0, 'sliding', NULL, NULL, NULL),
    ('ph', 'claude-opus-4-7', 0, 'sliding', NULL, NULL, NULL),
    ('pm', 'gpt-4o-mini-2024-07-18', 0, 'sliding', NULL, NULL, NULL),
    ('pl', 'local-vision', 0, 'sliding', NULL, NULL, NULL);
INSERT INTO ctxwin.sessions (id, profile) VALUES
    ('20000000-0000-0000-0000-00000000000a', 'po'),
    ('20000000-0000-0000-0000-00000000000b', 'po'),
    ('20000000-0000-0000-0000-00000000000c', 'pc'),
    ('20000000-0000-0000-0000-00000000000d', 'ph'),
    ('20000000-0000-0000-0000-00000000000e', 'pm'),
    ('20000000-0000-0000-0000-00000000000f', 'pl'),
    ('20000000-0000-0000-0000-000000000010', 'po');

-- Images made here: the base64 of bytes given in hex (encode() breaks its
-- lines, which strict base64 refuses).
CREATE FUNCTION pg_temp.b64(hex text) RETURNS text LANGUAGE sql AS
$$ SELECT translate(encode(decode(hex, 'hex'), 'base64'), E'\n', '') $$;
-- whole files: a PNG of 3x2 (IHDR, IDAT, IEND), and well-known GIF, WebP
-- (lossless) and JPEG (baseline) files of 1x1
CREATE TEMP TABLE img (name text PRIMARY KEY, media_type text, b64 text);
INSERT INTO img VALUES
    ('png', 'image/png', pg_temp.b64('89504e470d0a1a0a0000000d49484452000000030000000208020000001216f14d0000001049444154789c63f8cfc000410c70160041d205fb87f0b9480000000049454e44ae426082')),
    ('gif', 'image/gif', 'R0lGODlhAQABAIAAAAAAAP///yH5BAEAAAAALAAAAAABAAEAAAIBRAA7'),
    ('webp', 'image/webp', 'UklGRhoAAABXRUJQVlA4TA0AAAAvAAAAEAcQERGIiP4HAA=='),
    ('jpeg', 'image/jpeg', '/9j/4AAQSkZJRgABAQEASABIAAD/2wBDAP//////////////////////////////////////////////////////////////////////////////////////wgALCAABAAEBAREA/8QAFBABAAAAAAAAAAAAAAAAAAAAAP/aAAgBAQABPxA='),
-- headers of larger images (only the header is read): PNG 1024x1024 and
-- 2048x4096, JPEG 1920x1080 (SOF0), GIF 200x200, WebP 1000x1000 (VP8X)
    ('png1024', 'image/png', pg_temp.b64('89504e470d0a1a0a0000000d4948445200000400000004000802000000f07fbcd4')),
    ('png2048x4096', 'image/png', pg_temp.b64('89504e470d0a1a0a0000000d494844520000080000001000080200000069f496ce')),
    ('jpeg1920x1080', 'image/jpeg', pg_temp.b64('ffd8ffe000104a46494600010100000100010000ffc00011080438078003012200021101031101')),
    ('gif200', 'image/gif', pg_temp.b64('474946383961c800c800000000')),
    ('webp1000', 'image/webp', pg_temp.b64('524946461600000057454250565038580a00000000000000e70300e70300')),
-- a PNG 1024x1024 with 30,000 more bytes after its header: a long base64
    ('png1024big', 'image/png', translate(encode(decode('89504e470d0a1a0a0000000d4948445200000400000004000802000000f07fbcd4', 'hex')
                                                 || convert_to(repeat('q7Z!', 7500), 'UTF8'), 'base64'), E'\n', ''));

-- parts: an OpenAI image by URL (with ctxwin's width and height, or not), an
-- OpenAI inline image (a data: URL), an Anthropic one (base64 or URL), a text
CREATE FUNCTION pg_temp.url(w int, h int, detail text DEFAULT NULL) RETURNS jsonb LANGUAGE sql AS $$
    SELECT jsonb_strip_nulls(jsonb_build_object('type', 'image_url',
               'image_url', jsonb_strip_nulls(jsonb_build_object('url', 'https://img.example/a.png', 'detail', detail)),
               'width', w, 'height', h)) $$;
CREATE FUNCTION pg_temp.data_url(name text, detail text DEFAULT NULL) RETURNS jsonb LANGUAGE sql AS $$
    SELECT jsonb_build_object('type', 'image_url', 'image_url',
               jsonb_strip_nulls(jsonb_build_object('url', 'data:' || i.media_type || ';base64,' || i.b64, 'detail', detail)))
    FROM img i WHERE i.name = data_url.name $$;
CREATE FUNCTION pg_temp.b64_block(name text) RETURNS jsonb LANGUAGE sql AS $$
    SELECT jsonb_build_object('type', 'image', 'source',
               jsonb_build_object('type', 'base64', 'media_type', i.media_type, 'data', i.b64))
    FROM img i WHERE i.name = b64_block.name $$;
CREATE FUNCTION pg_temp.url_block(w int, h int) RETURNS jsonb LANGUAGE sql AS $$
    SELECT jsonb_strip_nulls(jsonb_build_object('type', 'image', 'source',
               jsonb_build_object('type', 'url', 'url', 'https://img.example/b.jpg'), 'width', w, 'height', h)) $$;
CREATE FUNCTION pg_temp.txt(t text) RETURNS jsonb LANGUAGE sql AS
$$ SELECT jsonb_build_object('type', 'text', 'text', t) $$;
-- what an image costs in a user message of its own on a model: the
-- message's count less that of the user message with no content
CREATE FUNCTION pg_temp.cost(part jsonb, model text) RETURNS int LANGUAGE sql AS $$
    SELECT ctxwin.count_message_tokens(jsonb_build_object('role', 'user', 'content', jsonb_build_array(part)), model)
           - ctxwin.count_message_tokens('{"role": "user"}', model) $$;
-- the error of a statement: its SQLSTATE, message and detail
CREATE FUNCTION pg_temp.err(stmt text) RETURNS text LANGUAGE plpgsql AS $$
DECLARE st text; msg text; det text;
BEGIN
    EXECUTE stmt;
    RETURN 'no error';
EXCEPTION WHEN OTHERS THEN
    GET STACKED DIAGNOSTICS st = RETURNED_SQLSTATE, msg = MESSAGE_TEXT, det = PG_EXCEPTION_DETAIL;
    RETURN st || ': ' || msg || coalesce(' / ' || nullif(det, ''), '');
END $$;
-- a message inserted into a session, with its parts
CREATE FUNCTION pg_temp.add(s text, r text, parts jsonb, c text DEFAULT NULL) RETURNS bigint LANGUAGE sql AS $$
    INSERT INTO ctxwin.messages (session_id, role, content, content_parts)
    VALUES (('20000000-0000-0000-0000-0000000000' || s)::uuid, r, c, parts) RETURNING id $$;

------------------------------------------------------------------------------
-- OpenAI's published worked examples ("Images and vision", calculating costs)
------------------------------------------------------------------------------
SELECT is(pg_temp.cost(pg_temp.url(1024, 1024, 'high'), 'gpt-4o'), 765,
          'gpt-4o: 1024x1024 in high detail costs 765 (768x768, 4 tiles of 170, plus 85)');
SELECT is(pg_temp.cost(pg_temp.url(2048, 4096, 'high'), 'gpt-4o'), 1105,
          'gpt-4o: 2048x4096 in high detail costs 1105 (768x1536, 6 tiles)');
SELECT is(pg_temp.cost(pg_temp.url(4096, 8192, 'low'), 'gpt-4o'), 85,
          'gpt-4o: 4096x8192 in low detail costs 85, whatever its size');
SELECT is(ctxwin.count_message_tokens(jsonb_build_object('role', 'user', 'content', jsonb_build_array(pg_temp.url(1024, 1024, 'high'))), 'gpt-4o'),
          765 + 4 + ctxwin.count_tokens('user', 'gpt-4o'),
          'a message of one image costs its 765 plus the overhead of 4 and its role, no more');
SELECT is(pg_temp.cost(pg_temp.url(1024, 1024), 'gpt-4o'), 765,
          'no detail (auto) is counted as high, the count that never falls short');
SELECT is(pg_temp.cost(pg_temp.url(1024, 1024, 'auto'), 'gpt-4o'), 765, 'detail auto is counted as high');
SELECT is(pg_temp.cost(pg_temp.url(NULL, NULL, 'high'), 'gpt-4o'), 85 + 8 * 170,
          'a URL without width and height costs the most the rule gives (8 tiles: 1445)');
SELECT is(pg_temp.cost(pg_temp.url(NULL, NULL, 'low'), 'gpt-4o'), 85, '... and 85 in low detail');
SELECT is(pg_temp.cost(pg_temp.url(1024, 1024, 'high'), 'o200k_base'), 765,
          'an encoding instead of a model: OpenAI''s rule at gpt-4o''s prices');
SELECT is(pg_temp.cost(pg_temp.url(1024, 1024, 'high'), 'gpt-5'), 70 + 4 * 140, 'gpt-5''s prices: 70 + 140 a tile');
SELECT is(pg_temp.cost(pg_temp.url(1024, 1024, 'high'), 'o1'), 75 + 4 * 150, 'o1''s prices: 75 + 150 a tile');
SELECT is(pg_temp.cost(pg_temp.url(1024, 1024, 'high'), 'gpt-4o-mini'), 2833 + 4 * 5667,
          'gpt-4o-mini''s prices: 2833 + 5667 a tile');
SELECT is(pg_temp.cost(pg_temp.url(1024, 1024, 'low'), 'gpt-4.1-mini'), 1659,
          'gpt-4.1-mini counts 32-px patches: 1024 for 1024x1024, times 1.62, rounded up; detail does not enter');
SELECT is(pg_temp.cost(pg_temp.url(1800, 2400), 'gpt-4.1-mini'), 2353,
          'gpt-4.1-mini: 1800x2400 is scaled to 1452 patches (the published example), times 1.62');
SELECT is(pg_temp.cost(pg_temp.url(1024, 1024), 'o4-mini'), 1762, 'o4-mini: 1024 patches times 1.72');

------------------------------------------------------------------------------
-- Anthropic's published table ("Vision", resolution and token cost)
------------------------------------------------------------------------------
SELECT is(array_agg(pg_temp.cost(pg_temp.url_block(w, h), 'claude-sonnet-4-5') ORDER BY o),
          ARRAY[64, 1296, 1521, 1560, 1564, 1560],
          'claude-sonnet-4-5 (standard tier): 200x200 64, 1000x1000 1296, 1092x1092 1521, 1920x1080 1560, 2000x1500 1564, 3840x2160 1560')
FROM (VALUES (1, 200, 200), (2, 1000, 1000), (3, 1092, 1092), (4, 1920, 1080), (5, 2000, 1500), (6, 3840, 2160)) v(o, w, h);
SELECT is(pg_temp.cost(pg_temp.url(1000, 1000, 'low'), 'claude-sonnet-4-5'), 1296,
          'an OpenAI-shaped part on a Claude model: Anthropic''s rule, detail ignored');
SELECT is(pg_temp.cost(pg_temp.url_block(NULL, NULL), 'claude-sonnet-4-5'), 1568,
          'a URL without a size on the standard tier: its budget, 1568');
-- the high-resolution tier: a model a user adds, counted by the trigger
SELECT pg_temp.add('0d', 'user', jsonb_build_array(pg_temp.url_block(w, h)))
FROM (VALUES (1920, 1080), (2000, 1500), (3840, 2160), (NULL, NULL), (200, 200)) v(w, h);
SELECT is(array_agg(token_count - ctxwin.message_tokens('user', '', NULL, NULL, NULL, 'cl100k_base') ORDER BY id),
          ARRAY[2691, 3888, 4784, 4784, 64],
          'claude-opus-4-7 (high-resolution tier): 1920x1080 2691, 2000x1500 3888, 3840x2160 4784, no size 4784, 200x200 64')
FROM ctxwin.messages WHERE session_id = '20000000-0000-0000-0000-00000000000d';

------------------------------------------------------------------------------
-- Inline images: sized from their headers, never counted as text
------------------------------------------------------------------------------
SELECT is(array_agg(pg_temp.cost(pg_temp.data_url(name, 'high'), 'gpt-4o') ORDER BY name),
          ARRAY[255, 255, 255, 255],
          'whole GIF, JPEG, PNG and WebP files, inline as data: URLs: one tile each in high detail on gpt-4o (255)')
FROM img WHERE name IN ('png', 'gif', 'webp', 'jpeg');
SELECT is(array_agg(pg_temp.cost(pg_temp.data_url(name, 'low'), 'gpt-4o') ORDER BY name),
          ARRAY[85, 85, 85, 85], '... and 85 in low detail')
FROM img WHERE name IN ('png', 'gif', 'webp', 'jpeg');
SELECT is(array_agg(pg_temp.cost(pg_temp.b64_block(name), 'claude-sonnet-4-5') ORDER BY name),
          ARRAY[1, 1, 1, 1], '... as Anthropic base64 sources on Claude: one 28-px patch each')
FROM img WHERE name IN ('png', 'gif', 'webp', 'jpeg');
SELECT is(pg_temp.cost(pg_temp.data_url('png1024', 'high'), 'gpt-4o'), 765, 'a PNG header of 1024x1024 costs 765 on gpt-4o');
SELECT is(pg_temp.cost(pg_temp.data_url('png2048x4096', 'high'), 'gpt-4o'), 1105, 'a PNG header of 2048x4096 costs 1105');
SELECT is(pg_temp.cost(pg_temp.b64_block('jpeg1920x1080'), 'claude-sonnet-4-5'), 1560, 'a JPEG of 1920x1080 costs 1560 on Claude');
SELECT is(pg_temp.cost(pg_temp.b64_block('gif200'), 'claude-sonnet-4-5'), 64, 'a GIF of 200x200 costs 64 on Claude');
SELECT is(pg_temp.cost(pg_temp.b64_block('webp1000'), 'claude-sonnet-4-5'), 1296, 'a WebP of 1000x1000 costs 1296 on Claude');
SELECT is(pg_temp.cost(pg_temp.data_url('png1024big', 'high'), 'gpt-4o'), 765,
          'a 40,000-character base64 image costs what its size says (765), not its text');
SELECT cmp_ok(ctxwin.count_tokens(b64, 'gpt-4o'), '>', 10000, '... whose text alone would be over 10,000 tokens')
FROM img WHERE name = 'png1024big';

------------------------------------------------------------------------------
-- Stored: content_parts as given, content the text of the text parts
------------------------------------------------------------------------------
SELECT pg_temp.add('0a', 'user', jsonb_build_array(pg_temp.txt('What is in'), pg_temp.url(1024, 1024, 'high'),
                                                   pg_temp.txt('this picture?')));
SELECT is((SELECT content_parts FROM ctxwin.messages WHERE session_id = '20000000-0000-0000-0000-00000000000a' AND id = 1),
          jsonb_build_array(pg_temp.txt('What is in'), pg_temp.url(1024, 1024, 'high'), pg_temp.txt('this picture?')),
          'content_parts is stored as given, width and height included');
SELECT is((SELECT content FROM ctxwin.messages WHERE session_id = '20000000-0000-0000-0000-00000000000a' AND id = 1),
          E'What is in\n\nthis picture?', 'content is the text of the text parts, joined by a blank line');
SELECT is((SELECT token_count FROM ctxwin.messages WHERE session_id = '20000000-0000-0000-0000-00000000000a' AND id = 1),
          ctxwin.message_tokens('user', E'What is in\n\nthis picture?', NULL, NULL, NULL, 'o200k_base') + 765,
          'its count: the message with its text as content, plus 765 for the image');
SELECT is(pg_temp.add('0a', 'user', jsonb_build_array(pg_temp.txt('Same text')), 'Same text'), 2::bigint,
          'a content given with the parts is taken when it is their text');
SELECT is(pg_temp.add('0a', 'user', jsonb_build_array(pg_temp.data_url('png1024big', 'low'))), 3::bigint,
          'a message of an image alone is taken');
SELECT is((SELECT content FROM ctxwin.messages WHERE session_id = '20000000-0000-0000-0000-00000000000a' AND id = 3),
          '', '... its content is empty');
SELECT is((SELECT token_count FROM ctxwin.messages WHERE session_id = '20000000-0000-0000-0000-00000000000a' AND id = 3),
          ctxwin.message_tokens('user', '', NULL, NULL, NULL, 'o200k_base') + 85, '... and it costs 85 in low detail');
SELECT is((SELECT token_count FROM ctxwin.sessions WHERE id = '20000000-0000-0000-0000-00000000000a'),
          (SELECT sum(token_count) FROM ctxwin.messages WHERE session_id = '20000000-0000-0000-0000-00000000000a'),
          'the session''s token count includes the images');
-- the family of a dated name, and a model of no provider
SELECT pg_temp.add('0e', 'user', jsonb_build_array(pg_temp.url(1024, 1024, 'high')));
SELECT is((SELECT token_count - ctxwin.message_tokens('user', '', NULL, NULL, NULL, 'o200k_base') FROM ctxwin.messages
           WHERE session_id = '20000000-0000-0000-0000-00000000000e'), 2833 + 4 * 5667,
          'gpt-4o-mini-2024-07-18 (a user''s row) is counted at the prices of its family, gpt-4o-mini');
SELECT pg_temp.add('0f', 'user', jsonb_build_array(pg_temp.url(1024, 1024, 'high')));
SELECT is((SELECT token_count - ctxwin.message_tokens('user', '', NULL, NULL, NULL, 'o200k_base') FROM ctxwin.messages
           WHERE session_id = '20000000-0000-0000-0000-00000000000f'), 765,
          'a model of no provider and no OpenAI family: OpenAI''s rule at gpt-4o''s prices');

-- the trigger's count is count_message_tokens' for the same message
SELECT pg_temp.add('0c', 'user', jsonb_build_array(pg_temp.txt('Compare'), pg_temp.b64_block('jpeg1920x1080'),
                                                   pg_temp.url_block(1000, 1000), pg_temp.data_url('gif200', 'low')));
SELECT pg_temp.add('0c', 'user', jsonb_build_array(pg_temp.b64_block('png'), pg_temp.txt('tiny')));
SELECT is((SELECT count(*) FROM ctxwin.messages m JOIN ctxwin.sessions s ON s.id = m.session_id
           JOIN ctxwin.profiles p ON p.name = s.profile
           WHERE m.content_parts IS NOT NULL AND p.model IN ('gpt-4o', 'claude-sonnet-4-5')
             AND m.token_count <> ctxwin.count_message_tokens(jsonb_build_object('role', m.role, 'content', m.content_parts), p.model))::int,
          0, 'every stored message with parts costs what count_message_tokens counts for it on its model');
SELECT cmp_ok((SELECT count(*) FROM ctxwin.messages m WHERE m.content_parts IS NOT NULL
               AND m.session_id IN ('20000000-0000-0000-0000-00000000000a', '20000000-0000-0000-0000-00000000000c'))::int,
              '>=', 5, '... checked on messages of both providers');

------------------------------------------------------------------------------
-- Refused: each error names the message and the part; nothing stored half
------------------------------------------------------------------------------
CREATE FUNCTION pg_temp.bad(parts jsonb, r text DEFAULT 'user', c text DEFAULT NULL) RETURNS text LANGUAGE sql AS $$
    SELECT pg_temp.err(format('INSERT INTO ctxwin.messages (session_id, role, content, content_parts) VALUES (%L, %L, %L, %L)',
                              '20000000-0000-0000-0000-00000000000b', r, c, parts)) $$;
SELECT pg_temp.add('0b', 'user', jsonb_build_array(pg_temp.txt('first')));
SELECT is(pg_temp.bad(jsonb_build_array(pg_temp.txt('ok'), '{"type": "input_audio", "input_audio": {}}'::jsonb)),
          '22023: content_parts[1] of message 2 of session 20000000-0000-0000-0000-00000000000b has type "input_audio" / A part is of type text, image_url (OpenAI''s shape) or image (Anthropic''s).',
          'an unknown type: refused, naming the part (by its index) and the message (by the id it would have)');
SELECT is(pg_temp.bad('[{"type": "text"}]'),
          '22023: content_parts[0] of message 2 of session 20000000-0000-0000-0000-00000000000b has no string "text"',
          'a text part without its text');
SELECT is(pg_temp.bad('[{"type": "image_url", "image_url": {"detail": "low"}}]'),
          '22023: content_parts[0] of message 2 of session 20000000-0000-0000-0000-00000000000b has no string "url" in its image_url',
          'an image_url without its url');
SELECT is(pg_temp.bad('[{"type": "image_url", "image_url": {"url": "data:image/png;base64,iVBORw0KGgo%AAAA"}}]'),
          '22023: content_parts[0] of message 2 of session 20000000-0000-0000-0000-00000000000b is an invalid image: image data is not valid base64 / The base64 text has a character outside the base64 alphabet (A-Z, a-z, 0-9, ''+'', ''/''; no white space).',
          'bad base64: the detail says what is wrong with it');
SELECT is(pg_temp.bad(jsonb_build_array(jsonb_build_object('type', 'image', 'source', jsonb_build_object(
              'type', 'base64', 'media_type', 'image/png', 'data', encode(convert_to('hello, world! not an image', 'UTF8'), 'base64'))))),
          '22023: content_parts[0] of message 2 of session 20000000-0000-0000-0000-00000000000b is an invalid image: image is not a PNG, JPEG, GIF or WebP file / The image data does not start with the signature of a PNG, JPEG, GIF or WebP file.',
          'bytes that are no PNG, JPEG, GIF or WebP file');
SELECT is(pg_temp.bad(jsonb_build_array(jsonb_build_object('type', 'image_url', 'image_url', jsonb_build_object(
              'url', 'data:image/jpeg;base64,' || (SELECT b64 FROM img WHERE name = 'png'))))),
          '22023: content_parts[0] of message 2 of session 20000000-0000-0000-0000-00000000000b has media type "image/jpeg" for png data / An image''s media type must be that of its bytes, here image/png.',
          'a data: URL whose media type disagrees with its bytes');
SELECT is(pg_temp.bad(jsonb_build_array(pg_temp.txt('x'), (SELECT jsonb_set(pg_temp.b64_block('gif'), '{source,media_type}', '"image/webp"')))),
          '22023: content_parts[1] of message 2 of session 20000000-0000-0000-0000-00000000000b has media type "image/webp" for gif data / An image''s media type must be that of its bytes, here image/gif.',
          'a base64 source whose media type disagrees with its bytes');
SELECT is(pg_temp.bad(jsonb_build_array(pg_temp.url(10, 10, 'medium'))),
          '22023: content_parts[0] of message 2 of session 20000000-0000-0000-0000-00000000000b has detail "medium" / An image''s detail is low, high or auto.',
          'a detail other than low, high and auto');
SELECT is(pg_temp.bad('[{"type": "image_url", "image_url": {"url": "https://img.example/a.png", "detial": "low"}}]'),
          '22023: content_parts[0] of message 2 of session 20000000-0000-0000-0000-00000000000b has a key ctxwin does not know in its image_url: "detial" / An image_url object has url and detail.',
          'a misspelt key is refused, not ignored');
SELECT is(pg_temp.bad('[{"type": "image_url", "image_url": {"url": "https://img.example/a.png"}, "width": 640}]'),
          '22023: content_parts[0] of message 2 of session 20000000-0000-0000-0000-00000000000b has a width without a height, or a height without a width / An image''s size is given by both, or not at all.',
          'a width without a height');
SELECT is(pg_temp.bad('[{"type": "image_url", "image_url": {"url": "https://img.example/a.png"}, "width": 0, "height": 10}]'),
          '22023: content_parts[0] of message 2 of session 20000000-0000-0000-0000-00000000000b has a "width" of 0 / A width or height is a whole number of pixels from 1 to 65535.',
          'a width of 0');
SELECT is(pg_temp.bad(jsonb_build_array(pg_temp.data_url('png1024') || '{"width": 512, "height": 512}')),
          '22023: content_parts[0] of message 2 of session 20000000-0000-0000-0000-00000000000b gives a size of 512x512 for an image of 1024x1024 / The size of an inline image is read from its header; a width and height given with it must be that size.',
          'an inline image''s header overrules no size given with it: a wrong one is refused');
SELECT is(pg_temp.bad('[{"type": "image_url", "image_url": {"url": "ftp://img.example/a.png"}}]'),
          '22023: content_parts[0] of message 2 of session 20000000-0000-0000-0000-00000000000b has a URL that is neither http(s) nor a data: URL / An image is given by an http or https URL, or inline as a base64 data: URL.',
          'a URL of another scheme');
SELECT is(pg_temp.bad('[{"type": "image", "source": {"type": "file", "file_id": "file_123"}}]'),
          '22023: content_parts[0] of message 2 of session 20000000-0000-0000-0000-00000000000b has a source of type "file" / An image''s source is of type base64 or url (ctxwin does not read files uploaded to a provider).',
          'an Anthropic source of type file');
SELECT is(pg_temp.bad('[{"type": "image_url", "image_url": {"url": "data:image/png,rawbytes"}}]'),
          '22023: content_parts[0] of message 2 of session 20000000-0000-0000-0000-00000000000b is an invalid image: image URL is not a base64 data URL / The data: URL is not base64-encoded (";base64" before the comma).',
          'a data: URL that is not base64');
SELECT is(pg_temp.bad(jsonb_build_array(pg_temp.url(10, 10)), 'assistant'),
          '22023: content_parts[0] of message 2 of session 20000000-0000-0000-0000-00000000000b is an image in a message of role assistant / Images are taken in user messages only: OpenAI''s chat API takes them nowhere else.',
          'an image in an assistant message');
SELECT is(pg_temp.bad('[]'),
          '22023: content_parts of message 2 of session 20000000-0000-0000-0000-00000000000b is not a non-empty JSON array of content parts',
          'an empty array of parts');
SELECT is(pg_temp.bad('{"type": "text", "text": "x"}'),
          '22023: content_parts of message 2 of session 20000000-0000-0000-0000-00000000000b is not a non-empty JSON array of content parts',
          'an object instead of an array');
SELECT is(pg_temp.bad(jsonb_build_array(pg_temp.txt('one'), pg_temp.txt('two')), 'user', 'one two'),
          '22023: content of message 2 of session 20000000-0000-0000-0000-00000000000b is not the text of its content_parts / The content of a message with content parts is the text of its text parts, joined by a blank line.',
          'a content that disagrees with the parts: refused, so the summary never reads other than what is sent');
SELECT is(pg_temp.err($$SELECT ctxwin.count_message_tokens('{"role": "user", "content": [{"type": "text", "text": "a"}, {"type": "image"}]}', 'gpt-4o')$$),
          '22023: content[1] of the message has no object "source" / An image part is {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": "..."}} or has a source {"type": "url", "url": "..."}.',
          'count_message_tokens checks the parts as the trigger does');
SELECT is((SELECT message_count FROM ctxwin.sessions WHERE id = '20000000-0000-0000-0000-00000000000b'), 1::bigint,
          'after the refusals the session still has its one message');

-- a statement of three messages whose third is bad stores none of them
SELECT is(pg_temp.err(format($$INSERT INTO ctxwin.messages (session_id, role, content_parts) VALUES
              ('20000000-0000-0000-0000-00000000000b', 'user', %L),
              ('20000000-0000-0000-0000-00000000000b', 'user', %L),
              ('20000000-0000-0000-0000-00000000000b', 'user', %L)$$,
              jsonb_build_array(pg_temp.txt('second')), jsonb_build_array(pg_temp.url(100, 100)),
              jsonb_build_array(pg_temp.txt('fourth'), pg_temp.url(10, 10, 'HIGH')))),
          '22023: content_parts[1] of message 4 of session 20000000-0000-0000-0000-00000000000b has detail "HIGH" / An image''s detail is low, high or auto.',
          'a multi-row INSERT whose third row is bad fails, naming that row''s message');
SELECT is((SELECT count(*) FROM ctxwin.messages WHERE session_id = '20000000-0000-0000-0000-00000000000b')::int, 1,
          '... and stores none of its rows');
SELECT is((SELECT (message_count, token_count, unsummarized_tokens)::text FROM ctxwin.sessions
           WHERE id = '20000000-0000-0000-0000-00000000000b'),
          (SELECT (1::bigint, sum(token_count)::bigint, sum(token_count)::bigint)::text FROM ctxwin.messages
           WHERE session_id = '20000000-0000-0000-0000-00000000000b'),
          '... nor counts them in its session');

-- messages stay as written
SELECT throws_ok($$UPDATE ctxwin.messages SET content_parts = '[{"type": "text", "text": "edited"}]'
                   WHERE session_id = '20000000-0000-0000-0000-00000000000a' AND id = 2$$,
                 '23000', 'messages cannot be changed', 'content_parts cannot be changed');

------------------------------------------------------------------------------
-- append_messages takes an OpenAI message whose content is an array
------------------------------------------------------------------------------
SELECT is(ctxwin.append_messages('20000000-0000-0000-0000-000000000010', jsonb_build_array(
              jsonb_build_object('role', 'user', 'content', jsonb_build_array(pg_temp.txt('Look:'), pg_temp.data_url('png', 'low'))),
              jsonb_build_object('role', 'assistant', 'content', 'A red picture.'))),
          ARRAY[1, 2]::bigint[], 'append_messages appends a message with a content array');
SELECT is((SELECT (content, content_parts, token_count)::text FROM ctxwin.messages
           WHERE session_id = '20000000-0000-0000-0000-000000000010' AND id = 1),
          (SELECT ('Look:', jsonb_build_array(pg_temp.txt('Look:'), pg_temp.data_url('png', 'low')),
                   ctxwin.message_tokens('user', 'Look:', NULL, NULL, NULL, 'o200k_base') + 85)::text),
          '... stored in content_parts, its text in content, its image counted');
SELECT is(pg_temp.err($$SELECT ctxwin.append_messages('20000000-0000-0000-0000-000000000010',
              '[{"role": "user", "content": "fine"}, {"role": "user", "content": [{"type": "image_url", "image_url": "https://x"}]}]')$$),
          '22023: content_parts[0] of message 4 of session 20000000-0000-0000-0000-000000000010 has no object "image_url" / An image_url part is {"type": "image_url", "image_url": {"url": "...", "detail": "auto"}}.',
          'append_messages: a bad part is refused, naming the message');
SELECT is((SELECT message_count FROM ctxwin.sessions WHERE id = '20000000-0000-0000-0000-000000000010'), 2::bigint,
          '... and no message of the call is appended');

------------------------------------------------------------------------------
-- Sent: OpenAI content arrays and Anthropic content blocks, converted
------------------------------------------------------------------------------
SELECT is(ctxwin.build_context('20000000-0000-0000-0000-00000000000a') -> 0 -> 'content',
          jsonb_build_array(pg_temp.txt('What is in'),
                            '{"type": "image_url", "image_url": {"url": "https://img.example/a.png", "detail": "high"}}'::jsonb,
                            pg_temp.txt('this picture?')),
          'openai format: the parts as a content array, without ctxwin''s width and height');
SELECT is(jsonb_path_query_array(ctxwin.build_context('20000000-0000-0000-0000-00000000000a', NULL, 'anthropic', NULL, false),
                                 '$.messages[0].content[0 to 3]'),
          jsonb_build_array(pg_temp.txt('What is in'),
                            '{"type": "image", "source": {"type": "url", "url": "https://img.example/a.png"}}'::jsonb,
                            pg_temp.txt('this picture?'), pg_temp.txt('Same text')),
          'anthropic format: an image_url by URL becomes an image block with a url source (detail dropped); the turns of one role merge');
SELECT is(ctxwin.build_context('20000000-0000-0000-0000-00000000000a', NULL, 'anthropic', NULL, false) -> 'messages' -> 0 -> 'content' -> 4,
          (SELECT jsonb_build_object('type', 'image', 'source', jsonb_build_object('type', 'base64', 'media_type', 'image/png', 'data', b64))
           FROM img WHERE name = 'png1024big'),
          'anthropic format: a data: URL becomes a base64 source with its media type and data');
SELECT is(ctxwin.build_context('20000000-0000-0000-0000-00000000000c', NULL, 'openai') -> 0 -> 'content',
          jsonb_build_array(pg_temp.txt('Compare'),
                            (SELECT jsonb_build_object('type', 'image_url', 'image_url', jsonb_build_object('url', 'data:image/jpeg;base64,' || b64))
                             FROM img WHERE name = 'jpeg1920x1080'),
                            '{"type": "image_url", "image_url": {"url": "https://img.example/b.jpg"}}'::jsonb,
                            pg_temp.data_url('gif200', 'low')),
          'openai format of Anthropic blocks: a base64 source becomes a data: URL, a url source an image_url; an OpenAI part keeps its detail');
SELECT is(ctxwin.build_context('20000000-0000-0000-0000-00000000000c', NULL, 'anthropic', NULL, false) -> 'messages' -> 0 -> 'content',
          jsonb_build_array(pg_temp.txt('Compare'), pg_temp.b64_block('jpeg1920x1080'),
                            '{"type": "image", "source": {"type": "url", "url": "https://img.example/b.jpg"}}'::jsonb,
                            pg_temp.b64_block('gif200'), pg_temp.b64_block('png'), pg_temp.txt('tiny')),
          'anthropic format of Anthropic blocks: as given, without width and height');
SELECT is(ctxwin.build_context('20000000-0000-0000-0000-00000000000c', NULL, 'anthropic') -> 'messages' -> 0 -> 'content' -> -1,
          pg_temp.txt('tiny') || '{"cache_control": {"type": "ephemeral"}}',
          'with the cache on, the breakpoint ends the last block as before');
-- an upper-case media type is sent as Anthropic takes it
SELECT pg_temp.add('0c', 'user', jsonb_build_array(jsonb_build_object('type', 'image_url', 'image_url',
           jsonb_build_object('url', 'data:IMAGE/GIF;base64,' || (SELECT b64 FROM img WHERE name = 'gif'))))) ;
SELECT is(ctxwin.build_context('20000000-0000-0000-0000-00000000000c', NULL, 'anthropic', NULL, false) -> 'messages' -> 0 -> 'content' -> -1 -> 'source' -> 'media_type',
          '"image/gif"', 'a media type given in upper case is sent in lower case');

-- an Anthropic cache_control is taken, and not sent: ctxwin places the breakpoints
INSERT INTO ctxwin.sessions (id, profile) VALUES ('20000000-0000-0000-0000-000000000012', 'pc');
SELECT pg_temp.add('12', 'user', jsonb_build_array(pg_temp.txt('Keep this.') || '{"cache_control": {"type": "ephemeral"}}',
                                                   pg_temp.b64_block('gif') || '{"cache_control": {"type": "ephemeral"}}'));
SELECT is(ctxwin.build_context('20000000-0000-0000-0000-000000000012', NULL, 'anthropic', NULL, false) -> 'messages' -> 0 -> 'content',
          jsonb_build_array(pg_temp.txt('Keep this.'), pg_temp.b64_block('gif')),
          'a cache_control given with a part is taken, and not sent (ctxwin places the breakpoints)');

-- each message sent costs what it was counted when stored (so the window's
-- budget, made of stored counts, is what the provider counts); an image
-- behind a URL is sent without ctxwin's width and height, so only messages
-- of inline images are compared
SELECT is((SELECT count(*) FROM jsonb_array_elements(ctxwin._window(s, 1000000) -> 'messages') WITH ORDINALITY e(msg, n)
           JOIN ctxwin.messages m ON m.session_id = s AND m.id = n
           WHERE NOT jsonb_path_exists(m.content_parts, '$[*].width')
             AND ctxwin.count_message_tokens(e.msg, p.model) <> m.token_count)::int, 0,
          'each message of a window, as sent, costs its stored count: session ' || s)
FROM (VALUES ('20000000-0000-0000-0000-00000000000a'::uuid, 'gpt-4o'), ('20000000-0000-0000-0000-00000000000c', 'claude-sonnet-4-5'),
             ('20000000-0000-0000-0000-000000000010', 'gpt-4o')) p(s, model);

------------------------------------------------------------------------------
-- The window's budget with images
------------------------------------------------------------------------------
-- a session of texts and inline images (sent as stored, so what is sent can
-- be counted again), and budgets from its newest message to all of it
INSERT INTO ctxwin.sessions (id, profile) VALUES ('20000000-0000-0000-0000-000000000011', 'po');
SELECT pg_temp.add('11', 'user', jsonb_build_array(pg_temp.txt('Here is the plan.'), pg_temp.data_url('png1024', 'high')));
SELECT pg_temp.add('11', 'assistant', jsonb_build_array(pg_temp.txt(repeat('It shows a floor plan. ', 20))));
SELECT pg_temp.add('11', 'user', jsonb_build_array(pg_temp.data_url('gif', 'low'), pg_temp.txt('And the logo.')));
SELECT pg_temp.add('11', 'assistant', jsonb_build_array(pg_temp.txt('A red dot.')));
SELECT pg_temp.add('11', 'user', jsonb_build_array(pg_temp.txt('Last, the photo:'), pg_temp.data_url('jpeg1920x1080')));
SELECT pg_temp.add('11', 'user', jsonb_build_array(pg_temp.txt('Which is largest?')));
SELECT is((SELECT array_agg(token_count - ctxwin.message_tokens(role, content, NULL, NULL, NULL, 'o200k_base') ORDER BY id)
           FROM ctxwin.messages WHERE session_id = '20000000-0000-0000-0000-000000000011'),
          ARRAY[765, 0, 85, 0, 1105, 0], 'the session''s images cost 765, 85 and 1105 (1920x1080 in auto detail: 6 tiles)');
CREATE TEMP TABLE budgets AS SELECT b FROM generate_series(20, 2200, 11) b;
SELECT is((SELECT count(*) FROM budgets
           WHERE ctxwin.messages_tokens(ctxwin.build_context('20000000-0000-0000-0000-000000000011', b), 'gpt-4o') + 3 > b)::int, 0,
          'build_context never exceeds the budget with images in the window (' || (SELECT count(*) FROM budgets) || ' budgets)');
SELECT is((SELECT count(*) FROM budgets
           WHERE ctxwin.messages_tokens(ctxwin.build_context('20000000-0000-0000-0000-000000000011', b), 'gpt-4o') + 3
                 <> (ctxwin._window('20000000-0000-0000-0000-000000000011', b) ->> 'tokens')::int)::int, 0,
          '... and its tokens are always those of what it sends, images included');
SELECT is(ctxwin._window('20000000-0000-0000-0000-00000000000a', 700) -> 'first_id', '2',
          'a budget of 700 leaves out the message whose image costs 765, short as its text is');
SELECT is((SELECT (w -> 'first_id', (w -> 'tokens')::int) FROM ctxwin._window('20000000-0000-0000-0000-00000000000a', b) w),
          ('1'::jsonb, b), 'a budget of all the messages'' stored counts (' || b || ') holds them all, to the token')
FROM (SELECT 3 + sum(token_count)::int AS b FROM ctxwin.messages WHERE session_id = '20000000-0000-0000-0000-00000000000a') x;
SELECT is(ctxwin._window('20000000-0000-0000-0000-00000000000a', b - 1) -> 'first_id', '2',
          '... and a token less leaves the oldest, its image included, out')
FROM (SELECT 3 + sum(token_count)::int AS b FROM ctxwin.messages WHERE session_id = '20000000-0000-0000-0000-00000000000a') x;

-- the newest message over the budget: its text is cut, its image never
SELECT pg_temp.add('0b', 'user', jsonb_build_array(pg_temp.txt(repeat('lorem ipsum dolor ', 400)), pg_temp.data_url('png1024', 'high'),
                                                   pg_temp.txt('The end.')));
SELECT is((ctxwin._window('20000000-0000-0000-0000-00000000000b', 900) ->> 'cut')::boolean, true,
          'the newest message, over a budget of 900, is cut');
SELECT is(jsonb_path_query_array(ctxwin.build_context('20000000-0000-0000-0000-00000000000b', 900), '$[*].content[*].type'),
          '["text", "image_url"]', '... to one text part where its text parts were, and its image whole');
SELECT ok(ctxwin.build_context('20000000-0000-0000-0000-00000000000b', 900) -> 0 -> 'content' -> 0 ->> 'text'
              ~ '^lorem ipsum.*\[\.\.\. [0-9]+ tokens omitted \.\.\.\].*The end\.$',
          '... the text cut in its middle, its beginning and end kept around the marker');
SELECT cmp_ok(ctxwin.messages_tokens(ctxwin.build_context('20000000-0000-0000-0000-00000000000b', 900), 'gpt-4o') + 3, '<=', 900,
          '... within the budget');
SELECT is(ctxwin.messages_tokens(ctxwin.build_context('20000000-0000-0000-0000-00000000000b', 900), 'gpt-4o') + 3,
          (ctxwin._window('20000000-0000-0000-0000-00000000000b', 900) ->> 'tokens')::int,
          '... the window''s tokens being what is sent, its image counted');
SELECT is(jsonb_path_query_array(ctxwin.build_context('20000000-0000-0000-0000-00000000000b', 900, 'anthropic'), '$.messages[*].content[*].type'),
          '["text", "image"]', '... and so in the anthropic format');
SELECT is(pg_temp.err($$SELECT ctxwin.build_context('20000000-0000-0000-0000-00000000000b', 780)$$),
          (SELECT '22023: token budget 780 is too small for the newest message / Even with its contents cut to their omission markers it needs '
                  || (765 + ctxwin.message_tokens('user', '', NULL, NULL, NULL, 'o200k_base')
                      + ctxwin._contents_least(ARRAY[content], 'o200k_base'))
                  || ' tokens besides the 3 of the system prompt and summary.'
           FROM ctxwin.messages WHERE session_id = '20000000-0000-0000-0000-00000000000b' AND id = 2),
          'a budget under its image and overhead: refused, the image counted in what it needs');

------------------------------------------------------------------------------
-- Counters recounted in another encoding keep the images
------------------------------------------------------------------------------
UPDATE ctxwin.profiles SET model = 'claude-sonnet-4-5' WHERE name = 'po';
SELECT pg_temp.add('0a', 'user', jsonb_build_array(pg_temp.txt('and now?')));
SELECT is((SELECT unsummarized_tokens FROM ctxwin.sessions WHERE id = '20000000-0000-0000-0000-00000000000a'),
          (SELECT sum(ctxwin.message_tokens(role, content, name, tool_call_id, tool_calls, 'cl100k_base'))
                  + 765 + 85 FROM ctxwin.messages WHERE session_id = '20000000-0000-0000-0000-00000000000a'),
          'a model of another encoding: the texts recounted in cl100k_base, the images as they were counted (765 + 85)');
SELECT is((ctxwin._window('20000000-0000-0000-0000-00000000000a', 100000) -> 'tokens')::bigint,
          3 + (SELECT unsummarized_tokens FROM ctxwin.sessions WHERE id = '20000000-0000-0000-0000-00000000000a'),
          '... and the window, recounting its rows, agrees');

SELECT * FROM finish();
ROLLBACK;
