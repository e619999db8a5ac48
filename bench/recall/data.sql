-- bench/recall/data.sql: the generator of bench/recall/run's chat history
-- (psql variables: session, n, first: the messages first .. first + n - 1
-- of the session, in one INSERT through ctxwin's trigger; random() seeded
-- from the session and first, so that a run's data is the same every time).
--
-- Words are made of syllables (letters only, so that none is an
-- identifier) with a Zipf distribution (rank r drawn as floor(20000^u)):
-- the top word is in nearly every message, rank 50 in about one in ten, a
-- word of rank 15,000 in a few hundred of a million.  Every 20th message
-- is a tool result of 1 to 3 kB.  Identifiers are sprinkled in: order
-- numbers ORD-nnnnn (1 in 20), paths src/modN/fileM.c (1 in 30), error
-- codes Ennnn (1 in 50).  The planted needles of the measurements:
--   zebrafjord   in the messages whose id is divisible by 97,000 (rare)
--   staleword    in one message of 20 with an id from 100,000 to 300,000
--                (frequent, but not in the newest messages)
--   ORD-48213    in the messages whose id is divisible by 50,000
CREATE OR REPLACE FUNCTION pg_temp.word(r int) RETURNS text LANGUAGE sql IMMUTABLE AS $$
    SELECT (ARRAY['ba','ke','lo','mi','nu','pa','re','si','to','vu','da','fe','gi','ho','ju',
                  'ka','le','mo','ni','po','ra','se','ti','vo','wu'])[1 + r % 25]
        || (ARRAY['n','r','s','t','l','m',''])[1 + (r / 25) % 7]
        || CASE WHEN r >= 175 THEN (ARRAY['ba','ke','lo','mi','nu','pa','re','si','to','vu','da','fe','gi','ho','ju',
                  'ka','le','mo','ni','po','ra','se','ti','vo','wu'])[1 + (r / 175) % 25] ELSE '' END
        || CASE WHEN r >= 4375 THEN (ARRAY['x','y','z','q'])[1 + (r / 4375) % 4] ELSE '' END $$;
CREATE OR REPLACE FUNCTION pg_temp.words(k int) RETURNS text LANGUAGE sql VOLATILE AS $$
    SELECT string_agg(pg_temp.word(floor(power(20000, random()))::int - 1), ' ')
           || CASE WHEN random() < 0.05 THEN ' ORD-' || (10000 + floor(random() * 90000))::int ELSE '' END
           || CASE WHEN random() < 0.033 THEN ' src/mod' || floor(random() * 40)::int || '/file' || floor(random() * 200)::int || '.c' ELSE '' END
           || CASE WHEN random() < 0.02 THEN ' E' || (1000 + floor(random() * 9000))::int ELSE '' END
           || '.'
    FROM generate_series(1, k) $$;
SELECT setseed(((hashtext(:'session') # :first) & 65535) / 65536.0) \gset
INSERT INTO ctxwin.messages (session_id, role, content)
SELECT :'session', CASE WHEN i % 20 = 0 THEN 'assistant' WHEN i % 2 = 1 THEN 'user' ELSE 'assistant' END,
       CASE WHEN i % 20 = 0 THEN 'Result: ' || pg_temp.words(150 + (i % 300))
            WHEN i % 2 = 1 THEN pg_temp.words(8 + (i % 30))
            ELSE pg_temp.words(30 + (i % 120)) END
       || CASE WHEN i % 97000 = 0 THEN ' zebrafjord' ELSE '' END
       || CASE WHEN i BETWEEN 100000 AND 300000 AND i % 20 = 7 THEN ' staleword' ELSE '' END
       || CASE WHEN i % 50000 = 0 THEN ' ORD-48213' ELSE '' END
FROM generate_series(:first, :first + :n - 1) i;
