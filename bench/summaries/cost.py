#!/usr/bin/env python3
"""What the extractive summarizer costs, against 0.2.0's in the same run
(standard library only): prints SQL that loads 0.2.0's extract_facts,
extractive_summary and its helpers (from sql/ctxwin--0.2.0.sql, the
released script) into the schema ctxwin_020, then times both summarizers
on the same inputs, each case 5 times, alternating, and prints one row per
case: the median ms of each and their ratio.  Each call is one statement timed by psql.

    python3 cost.py corpus.json ../../sql/ctxwin--0.2.0.sql   (psql's PG* settings)

Cases: each conversation of the corpus (all its messages as one segment,
max_tokens 512, as the bench's profile gives a first summary) summed, and
synthetic segments of 60, 600 and 2,000 messages (a question and an answer
by turns, each with identifiers).
"""
import json
import re
import statistics
import subprocess
import sys


# 0.2.0's functions loaded into ctxwin_020, calling one another there (this
# tree has no _render_summary and _fallback_summary: they are part of the C
# of extractive_summary)
RELEASED = ("extract_facts", "extractive_summary", "_render_summary", "_fallback_summary")


def released(path, name):
    src = open(path).read()
    i = src.index("CREATE FUNCTION ctxwin.%s(" % name)
    k = src.index("COMMENT ON FUNCTION ctxwin.%s(" % name, i)
    body = src[i:k]
    for other in RELEASED:
        body = body.replace("ctxwin.%s(" % other, "ctxwin_020.%s(" % other)
    return body


def lit(s):
    return "'" + s.replace("'", "''") + "'"


def main():
    corpus = json.load(open(sys.argv[1]))
    out = ["SET client_min_messages = warning;", "DROP SCHEMA IF EXISTS ctxwin_020 CASCADE;",
           "CREATE SCHEMA ctxwin_020;"]
    for name in RELEASED:
        out.append(released(sys.argv[2], name))
    out.append("CREATE TEMP TABLE cases (name text, n int, msgs jsonb);")
    for c in corpus:
        msgs = [{k: v for k, v in m.items() if k in ("role", "content", "tool_calls", "tool_call_id", "name")}
                for m in c["messages"]]
        out.append("INSERT INTO cases VALUES ('the corpus (%d conversations)', %d, %s::jsonb);"
                   % (len(corpus), len(msgs), lit(json.dumps(msgs))))
    out.append("""
INSERT INTO cases
SELECT format('%s messages', n), n, jsonb_agg(m ORDER BY i) FROM (
  SELECT n, i, CASE WHEN i % 2 = 1
      THEN jsonb_build_object('role', 'user', 'content', format(
           'Does job %s in billing/money.py still fail with E%s? I want it fixed first, see ORD-%s.', i, 1000 + i, 20000 + i))
      ELSE jsonb_build_object('role', 'assistant', 'content', format(
           'Job %s fails because the float rounding in money.py is wrong. We decided to use Decimal. It took 12 ms on web-%s.prod.internal.', i, i)) END AS m
  FROM (VALUES (60), (600), (2000)) v(n), generate_series(1, n) i) x
GROUP BY n;
""")
    # each case 5 times, alternating, timed by psql (\timing): one
    # statement per call, its result row followed by its time
    out.append("ALTER TABLE cases ADD COLUMN k serial;")
    out.append("\\timing on")
    calls = []
    for rep in range(1, 6):
        for k in range(1, len(corpus) + 4):
            for impl, fn in (("0.2.0", "ctxwin_020.extractive_summary"), ("this tree", "ctxwin.extractive_summary")):
                out.append("SELECT name FROM cases, LATERAL %s(NULL, msgs, 512) s WHERE k = %d;" % (fn, k))
                calls.append((k, impl, rep))
    run = subprocess.run(["psql", "-X", "-q", "-At", "-v", "ON_ERROR_STOP=1"], input="\n".join(out),
                         capture_output=True, text=True, check=True)
    lines = [l for l in run.stdout.splitlines() if l]
    names, times = lines[0::2], [float(re.match(r"Time: ([0-9.]+) ms", l).group(1)) for l in lines[1::2]]
    if len(times) != len(calls):
        sys.exit("cost.py: %d timings for %d calls" % (len(times), len(calls)))
    sums = {}
    for (k, impl, rep), name, ms in zip(calls, names, times):
        sums.setdefault((name, impl, rep), 0.0)
        sums[(name, impl, rep)] += ms
    order = []
    for (name, impl, rep) in sums:
        if name not in order:
            order.append(name)
    for name in sorted(order, key=lambda n: (not n.startswith("the corpus"), -int(n.split()[0]) if n[0].isdigit() else 0)):
        a = statistics.median(v for (n, i, r), v in sums.items() if n == name and i == "0.2.0")
        b = statistics.median(v for (n, i, r), v in sums.items() if n == name and i == "this tree")
        print("| %s | %.1f | %.1f | %.2fx |" % (name, a, b, b / a))


if __name__ == "__main__":
    main()
