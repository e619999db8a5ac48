#!/usr/bin/env python3
# Property test of build_context: random sessions, random budgets, both
# formats, every output checked against the contract by an independent
# reading of the stored messages.
#
# For each case (a session, a budget from the smallest one build_context
# accepts up to the context window, and a format):
#   1. tokens <= budget, recounted from the output with count_message_tokens
#      (+ 3 for the list); the Anthropic body is first converted back to
#      OpenAI messages (its "system" as one system message);
#   2. the conversation part is a contiguous run of the newest stored
#      messages, in order, each equal to its row except cut contents;
#   3. no tool result without its call, no call without its results;
#   4. the newest message is always there, last, in both formats;
#   5. only the newest unit is cut, and every cut content is its own
#      beginning and end around "[... N tokens omitted ...]";
#   6. a budget below the smallest accepted one fails with the
#      budget-too-small error (22023), never with another one;
#   7. the Anthropic body's prompt-cache breakpoints end the system prompt
#      and the summary and the last block of the last turn, and no other
#      block: never more than 4.
#
# CTXWIN_PROP_SEED (default 9) and CTXWIN_PROP_CASES (default 2400) choose
# the run; the seed of each failure is printed so it can be replayed.
# Needs a cluster in the environment (PGHOST etc.), as scripts/test.sh sets
# up; works in its own database.
import json
import os
import random
import re
import subprocess
import sys
import time

SEED = int(os.environ.get("CTXWIN_PROP_SEED", "9"))
CASES = int(os.environ.get("CTXWIN_PROP_CASES", "2400"))
DB = "ctxwin_window_props"
MARKER = re.compile(r"\n\[\.\.\. ([0-9]+) tokens omitted \.\.\.\]\n")
os.environ["PGCLIENTENCODING"] = "UTF8"

tests = 0
failed = 0


def ok(cond, name):
    global tests, failed
    tests += 1
    print(("ok %d - %s" if cond else "not ok %d - %s") % (tests, name))
    if not cond:
        failed += 1
    sys.stdout.flush()


def diag(msg):
    for line in str(msg).splitlines():
        print("# " + line)
    sys.stdout.flush()


def psql(sql, db=DB):
    r = subprocess.run(["psql", "-X", "-q", "-A", "-t", "-v", "ON_ERROR_STOP=1", "-d", db],
                       input=sql, capture_output=True, text=True)
    if r.returncode != 0:
        raise RuntimeError("psql failed: %s\n--- sql:\n%s" % (r.stderr, sql[:2000]))
    return r.stdout


def lit(s):
    if s is None:
        return "NULL"
    return "'" + s.replace("'", "''") + "'"


def jlit(v):
    if v is None:
        return "NULL"
    return lit(json.dumps(v, ensure_ascii=False)) + "::jsonb"


# ---- the generator ----------------------------------------------------------

WORDS = {
    "en": "the report shows quarterly revenue growth across all regions and the board will review it tomorrow".split(),
    "de": "Die Straße über dem Fluss wurde größer und schöner als erwartet weil die Bürger mitgeholfen haben".split(),
    "ru": "Привет мир это тестовое сообщение для проверки окна контекста и подсчёта токенов".split(),
    "zh": list("我们今天讨论季度报告的结果并决定下一步的计划以及预算"),
    "ja": list("今日はとても良い天気ですねカタカナとひらがなを混ぜて書きます"),
    "ar": "مرحبا بالعالم هذا نص تجريبي لاختبار نافذة السياق وعدد الرموز".split(),
    "emoji": ["😀", "👍🏽", "🇫🇷", "👩‍💻", "🎉", "✨", "❤️"],
    "code": ["def", "f(x):", "return", "x", "+", "1", "{", "}", "==", "->", "/*", "*/", "\n", "    "],
}


def words(rng, n):
    lang = rng.choice(list(WORDS))
    sep = "" if lang in ("zh", "ja", "emoji") else " "
    return sep.join(rng.choice(WORDS[lang]) for _ in range(n))


def content(rng, allow_empty=True):
    r = rng.random()
    if allow_empty and r < 0.07:
        return ""
    if r < 0.55:
        return words(rng, rng.randint(1, 30))
    if r < 0.75:
        return "\n".join(words(rng, rng.randint(3, 20)) for _ in range(rng.randint(2, 8)))
    if r < 0.83:
        # one long piece: a run of letters or one repeated character
        if rng.random() < 0.5:
            return rng.choice("ax-=# ") * rng.randint(100, 4000)
        return "".join(rng.choice("abcdefghijklmnopqrstuvwxyz") for _ in range(rng.randint(100, 4000)))
    if r < 0.92:
        return " ".join(words(rng, 40) for _ in range(rng.randint(10, 60)))
    return "Please summarize the attached quarterly report for the board meeting tomorrow morning."


def tool_calls(rng, k, serial):
    calls = []
    for j in range(k):
        if rng.random() < 0.2:
            args = json.dumps({"text": words(rng, rng.randint(50, 400))}, ensure_ascii=False)
        elif rng.random() < 0.1:
            args = "not json " + words(rng, 3)
        else:
            args = json.dumps({"q": words(rng, rng.randint(1, 6)), "n": rng.randint(1, 99)}, ensure_ascii=False)
        calls.append({"id": "call_%d_%d" % (serial, j), "type": "function",
                      "function": {"name": rng.choice(["search", "read_file", "run", "lookup"]),
                                   "arguments": args}})
    return calls


def gen_messages(rng, serial):
    """A list of (kind, row) steps; kind is 'msg' or 'model' (a model change)."""
    steps = []
    n = rng.randint(1, 14)
    for i in range(n):
        r = rng.random()
        if r < 0.06 and i > 0:
            steps.append(("model", None))
        if r < 0.38:
            row = {"role": "user", "content": content(rng)}
            if rng.random() < 0.1:
                row["name"] = rng.choice(["alice", "bob_2", "Zoë"])
            steps.append(("msg", row))
        elif r < 0.66:
            steps.append(("msg", {"role": "assistant", "content": content(rng)}))
        elif r < 0.71:
            steps.append(("msg", {"role": "system", "content": content(rng, False)}))
        else:
            k = rng.randint(1, 4)
            calls = tool_calls(rng, k, serial * 100 + i)
            c = rng.choice([None, None, "", content(rng, False)])
            steps.append(("msg", {"role": "assistant", "content": c, "tool_calls": calls}))
            order = list(range(k))
            rng.shuffle(order)
            for j in order:
                steps.append(("msg", {"role": "tool", "tool_call_id": calls[j]["id"],
                                      "content": content(rng)}))
    return steps


MODELS = ["gpt-4o", "gpt-4", "claude-sonnet-4", "pt-chars4", "pt-chars35"]


def make_session(rng, serial):
    """Creates a profile, a session and its messages; returns the session id."""
    sid = "00000000-0000-0000-0000-%012d" % serial
    prof = "pt_%d" % serial
    window = rng.choice([rng.randint(60, 600), rng.randint(600, 4000), rng.randint(4000, 40000)])
    sql = ["BEGIN;"]
    sql.append("INSERT INTO ctxwin.profiles (name, model, context_window, response_reserve, "
               "summary_placement, max_messages_before_summary, max_tokens_before_summary, trigger_ratio) "
               "VALUES (%s, %s, %d, %d, %s, NULL, NULL, NULL);"
               % (lit(prof), lit(rng.choice(MODELS)), window, rng.randint(0, window // 4),
                  lit(rng.choice(["system", "message"]))))
    sp = rng.choice([None, "", "You are a helpful assistant.", content(rng, False)])
    sql.append("INSERT INTO ctxwin.sessions (id, profile, system_prompt) VALUES (%s, %s, %s);"
               % (lit(sid), lit(prof), lit(sp)))
    for kind, row in gen_messages(rng, serial):
        if kind == "model":
            sql.append("UPDATE ctxwin.profiles SET model = %s WHERE name = %s;"
                       % (lit(rng.choice(MODELS)), lit(prof)))
            continue
        sql.append("INSERT INTO ctxwin.messages (session_id, role, content, name, tool_call_id, tool_calls) "
                   "VALUES (%s, %s, %s, %s, %s, %s);"
                   % (lit(sid), lit(row["role"]), lit(row.get("content")), lit(row.get("name")),
                      lit(row.get("tool_call_id")), jlit(row.get("tool_calls"))))
    if rng.random() < 0.3:
        # a summary through a random unit boundary (never inside a tool group)
        sql.append("""
            UPDATE ctxwin.sessions s SET conversation_summary = %s, summary_through_id = b.id
            FROM (SELECT m.id FROM ctxwin.messages m
                  WHERE m.session_id = %s AND m.tool_calls IS NULL AND m.role <> 'tool'
                    AND NOT EXISTS (SELECT 1 FROM ctxwin.messages n
                                    WHERE n.session_id = m.session_id AND n.id = m.id + 1 AND n.role = 'tool')
                    AND m.id < (SELECT message_count FROM ctxwin.sessions WHERE id = %s)
                  ORDER BY m.id LIMIT 1 OFFSET %d) b
            WHERE s.id = %s;""" % (lit(content(rng, False)), lit(sid), lit(sid), rng.randint(0, 6), lit(sid)))
    if rng.random() < 0.15:
        sql.append("UPDATE ctxwin.profiles SET model = %s WHERE name = %s;" % (lit(rng.choice(MODELS)), lit(prof)))
    sql.append("COMMIT;")
    psql("\n".join(sql))
    return sid


SETUP = r"""
INSERT INTO ctxwin.models (name, encoding, context_window) VALUES
    ('pt-chars4', 'chars4', 100000), ('pt-chars35', 'chars3.5', 100000);

-- build_context, or its error as {"err": sqlstate, "msg": message}
CREATE FUNCTION pt_try(s uuid, b int, f text) RETURNS jsonb LANGUAGE plpgsql AS $$
BEGIN
    RETURN jsonb_build_object('ok', ctxwin.build_context(s, b, f));
EXCEPTION WHEN others THEN
    RETURN jsonb_build_object('err', SQLSTATE, 'msg', SQLERRM);
END $$;

-- the smallest budget build_context accepts, by bisection, or NULL if none up to hi
CREATE FUNCTION pt_min_budget(s uuid, hi int) RETURNS int LANGUAGE plpgsql AS $$
DECLARE
    lo int := 0;
    mid int;
    r jsonb;
BEGIN
    r := pt_try(s, hi, 'openai');
    IF r ? 'err' THEN
        RETURN NULL;
    END IF;
    WHILE hi - lo > 1 LOOP
        mid := (lo + hi) / 2;
        IF pt_try(s, mid, 'openai') ? 'err' THEN lo := mid; ELSE hi := mid; END IF;
    END LOOP;
    RETURN hi;
END $$;
"""


# ---- the checks -------------------------------------------------------------

def system_messages(system_prompt, summary, placement):
    """The system messages the contract puts first (DESIGN: summary_placement)."""
    sp = system_prompt or ""
    if not summary:
        return [{"role": "system", "content": sp}] if sp else []
    s = "Summary of earlier conversation:\n" + summary
    if placement == "message":
        return ([{"role": "system", "content": sp}] if sp else []) + [{"role": "system", "content": s}]
    return [{"role": "system", "content": (sp + "\n\n" + s) if sp else s}]


def row_json(m):
    out = {"role": m["role"]}
    for k in ("content", "name", "tool_calls", "tool_call_id"):
        if m.get(k) is not None:
            out[k] = m[k]
    return out


def is_cut_of(cut, orig):
    """Whether cut is orig's beginning and end around the omission marker."""
    if cut is None or orig is None:
        return False
    for mt in MARKER.finditer(cut):
        head, tail = cut[:mt.start()], cut[mt.end():]
        if int(mt.group(1)) > 0 and orig.startswith(head) and orig.endswith(tail) \
                and len(head) + len(tail) < len(orig):
            return True
    return False


def unit_start(rows):
    """Index in rows of the first message of the newest unit."""
    i = len(rows) - 1
    while i > 0 and rows[i]["role"] == "tool":
        i -= 1
    return i


def check_openai(msgs, meta, rows, problems):
    """Checks 2-5 on an OpenAI array; returns its conversation part."""
    sysm = system_messages(meta["system_prompt"], meta["summary"], meta["placement"])
    if msgs[:len(sysm)] != sysm:
        problems.append("system messages differ from the prompt and summary")
    conv = msgs[len(sysm):]
    unsum = [m for m in rows if m["id"] > (meta["through"] or 0)]
    if not conv:
        problems.append("no conversation message: the newest message is missing")
        return conv
    if len(conv) > len(unsum):
        problems.append("more messages than the unsummarized ones")
        return conv
    tail = unsum[len(unsum) - len(conv):]
    ustart = unit_start(unsum)
    for i, (got, row) in enumerate(zip(conv, tail)):
        want = row_json(row)
        g = dict(got)
        gc, wc = g.pop("content", None), want.pop("content", None)
        if g != want:
            problems.append("message %d is not the stored row %d (or order changed)" % (i, row["id"]))
            return conv
        if gc != wc:
            idx = len(unsum) - len(conv) + i
            if idx < ustart:
                problems.append("message %d was cut but is older than the newest unit" % row["id"])
            elif not is_cut_of(gc, wc):
                problems.append("message %d has cut content without the marker: %r" % (row["id"], (gc or "")[:80]))
    if conv[0]["role"] == "tool":
        problems.append("the window starts with a tool result")
    called = set()
    for m in conv:
        for c in m.get("tool_calls") or []:
            called.add(c["id"])
        if m["role"] == "tool" and m["tool_call_id"] not in called:
            problems.append("tool result %s without its call" % m["tool_call_id"])
    answered = {m["tool_call_id"] for m in conv if m["role"] == "tool"}
    stored_answers = {m["tool_call_id"] for m in unsum if m["role"] == "tool"}
    for cid in called:
        if cid in stored_answers and cid not in answered:
            problems.append("call %s without its result" % cid)
    return conv


def system_text(body):
    """An Anthropic body's system: its text, or its text blocks' joined by a blank line."""
    sysv = body.get("system")
    if isinstance(sysv, list):
        return "\n\n".join(b["text"] for b in sysv)
    return sysv


def from_anthropic(body, rows):
    """An Anthropic body back to OpenAI messages; tool calls come back as stored."""
    by_call = {}
    for m in rows:
        for c in m.get("tool_calls") or []:
            by_call[c["id"]] = m
    out = []
    if "system" in body:
        out.append({"role": "system", "content": system_text(body)})
    for turn in body["messages"]:
        cur = None          # the assistant message being rebuilt in this turn
        for b in turn["content"]:
            if b["type"] == "text":
                cur = {"role": turn["role"], "content": b["text"]}
                out.append(cur)
            elif b["type"] == "tool_result":
                cur = None
                out.append({"role": "tool", "content": b["content"], "tool_call_id": b["tool_use_id"]})
            elif b["type"] == "tool_use":
                src = by_call[b["id"]]
                if cur is not None and "tool_calls" in cur and cur["_src"] is src:
                    continue
                if cur is not None and "tool_calls" not in cur and turn["role"] == "assistant" \
                        and src["content"] is not None \
                        and (cur["content"] == src["content"] or is_cut_of(cur["content"], src["content"])):
                    cur["tool_calls"] = src["tool_calls"]
                else:
                    cur = {"role": "assistant", "tool_calls": src["tool_calls"]}
                    if src["content"] is not None:
                        cur["content"] = ""     # "", or text cut to nothing: no block
                    out.append(cur)
                cur["_src"] = src
    for m in out:
        m.pop("_src", None)
    return out


def sendable(m):
    return bool(m.get("content")) or bool(m.get("tool_calls")) or m["role"] == "tool"


def check_anthropic(body, openai_sys, openai_conv, rows, problems):
    if not isinstance(body, dict) or not isinstance(body.get("messages"), list):
        problems.append("not an Anthropic body")
        return None
    turns = body["messages"]
    for a, b in zip(turns, turns[1:]):
        if a["role"] == b["role"]:
            problems.append("two consecutive turns of one role")
    back = from_anthropic(body, rows)
    got = back[1:] if "system" in body else back
    # the same messages as the OpenAI form, system ones joined in "system",
    # less those with nothing to send
    # (a text block each, but for empty ones; prompt-cache breakpoints end
    # the session's own: prompt and summary, and the last block of the last turn)
    sys_texts = [m["content"] for m in openai_sys + openai_conv if m["role"] == "system" and m.get("content")]
    own = len([m for m in openai_sys if m.get("content")])
    sysv = body.get("system")
    if sys_texts and not isinstance(sysv, list) or not sys_texts and sysv is not None:
        problems.append("anthropic body system is not the system messages as text blocks")
    elif sys_texts:
        if [b.get("text") for b in sysv] != sys_texts or any(b.get("type") != "text" for b in sysv):
            problems.append("anthropic body system is not the system messages as text blocks")
        if ["cache_control" in b for b in sysv] != [i < own for i in range(len(sysv))]:
            problems.append("anthropic body system: the breakpoints do not end the prompt and the summary")
    marks = [(i, j) for i, t in enumerate(turns) for j, b in enumerate(t["content"]) if "cache_control" in b]
    if turns and marks != [(len(turns) - 1, len(turns[-1]["content"]) - 1)]:
        problems.append("anthropic body: the only breakpoint of the messages is not their last block")
    if json.dumps(body).count('"cache_control"') > 4:
        problems.append("anthropic body: more than 4 breakpoints")
    want = [m for m in openai_conv if sendable(m) and m["role"] != "system"]
    # Anthropic has no per-message name
    norm = lambda ms: [{k: v for k, v in m.items() if not (k == "content" and v == "") and k != "name"}
                       for m in ms]
    if norm(got) != norm(want):
        problems.append("the Anthropic body is not the OpenAI messages converted")
    newest = rows[-1]
    if newest["role"] == "system":
        if not openai_conv or not (system_text(body) or "").endswith(openai_conv[-1].get("content") or ""):
            problems.append("anthropic body system text: the newest (system) message does not end the system text")
    elif sendable(newest):
        if not turns:
            problems.append("anthropic body has no message at all, the newest message is missing")
        else:
            last = turns[-1]
            blk = last["content"][-1] if last["content"] else None
            if newest["role"] == "tool":
                good = last["role"] == "user" and blk and blk["type"] == "tool_result" \
                    and blk["tool_use_id"] == newest["tool_call_id"]
            elif newest.get("tool_calls"):
                good = last["role"] == "assistant" and blk and blk["type"] == "tool_use" \
                    and blk["id"] == newest["tool_calls"][-1]["id"]
            else:
                good = last["role"] == ("assistant" if newest["role"] == "assistant" else "user") \
                    and blk and blk["type"] == "text"
            if not good:
                problems.append("anthropic body does not end with the newest message")
    return back


def main():
    rng = random.Random(SEED)
    psql("DROP DATABASE IF EXISTS %s" % DB, db="postgres")
    psql("CREATE DATABASE %s" % DB, db="postgres")
    psql("CREATE EXTENSION ctxwin;" + SETUP)
    print("# seed %d, cases %d" % (SEED, CASES))
    started = time.time()
    stats = {"cases": 0, "sessions": 0, "skipped": 0, "cut": 0, "errors_checked": 0}
    fails = {}
    examples = []

    failing_cases = set()

    def fail(kind, info):
        failing_cases.add(info.split(":")[0])
        fails[kind] = fails.get(kind, 0) + 1
        if fails[kind] <= 2:
            examples.append("%s: %s" % (kind, info))

    serial = 0
    while stats["cases"] < CASES:
        serial += 1
        srng = random.Random("%d/%d" % (SEED, serial))
        sid = make_session(srng, serial)
        stats["sessions"] += 1
        meta = json.loads(psql("""
            SELECT jsonb_build_object(
                'encoding', st.encoding, 'window', st.context_window, 'reserve', st.response_reserve,
                'placement', st.summary_placement, 'system_prompt', s.system_prompt,
                'summary', s.conversation_summary, 'through', s.summary_through_id,
                'bmin', pt_min_budget(s.id, st.context_window),
                'rows', (SELECT jsonb_agg(jsonb_build_object('id', m.id, 'role', m.role, 'content', m.content,
                                  'name', m.name, 'tool_call_id', m.tool_call_id, 'tool_calls', m.tool_calls)
                                  ORDER BY m.id)
                         FROM ctxwin.messages m WHERE m.session_id = s.id))
            FROM ctxwin.sessions s JOIN ctxwin.session_settings st ON st.session_id = s.id
            WHERE s.id = %s""" % lit(sid)))
        rows = meta["rows"]
        window = meta["window"]
        bmin = meta["bmin"]
        tag = "seed %d session %d" % (SEED, serial)
        if bmin is None:
            stats["skipped"] += 1
            continue
        budgets = {bmin, bmin + 1, bmin + 2, bmin + 3, bmin + 5, bmin + 8, bmin + 13, window}
        for _ in range(6):
            budgets.add(rng.randint(bmin, window) if rng.random() < 0.5
                        else min(window, bmin + rng.randint(0, 60)))
        budgets = sorted(b for b in budgets if b <= window)
        default_budget = window - meta["reserve"]
        calls = [(b, f) for b in budgets for f in ("openai", "anthropic")]
        if default_budget >= bmin:
            calls += [(None, "openai"), (None, "anthropic")]
        q = ",\n".join("(%s, %s, %d)" % ("NULL::int" if b is None else str(b), lit(f), i)
                      for i, (b, f) in enumerate(calls))
        res = json.loads(psql("""
            SELECT jsonb_build_object('below', CASE WHEN %d > 1 THEN pt_try(%s, %d, 'openai') END,
                   'runs', jsonb_agg(jsonb_build_object('b', v.b, 'f', v.f, 'r', r.r,
                       'tokens', CASE WHEN v.f = 'openai' AND r.r ? 'ok' THEN
                           (SELECT sum(ctxwin.count_message_tokens(m, %s)) + 3
                            FROM jsonb_array_elements(r.r -> 'ok') m) END) ORDER BY v.ord))
            FROM (VALUES %s) v(b, f, ord), LATERAL (SELECT pt_try(%s, v.b, v.f) AS r) r
            """ % (bmin, lit(sid), bmin - 1, lit(meta["encoding"]), q, lit(sid))))
        below = res["below"]
        if below is not None:
            stats["errors_checked"] += 1
            if "ok" in below or below.get("err") != "22023" or "too small" not in below.get("msg", ""):
                fail("budget below the smallest accepted one: not the budget-too-small error",
                     "%s budget %d: %s" % (tag, bmin - 1, json.dumps(below)[:200]))
        backs = []
        openai_by_budget = {}
        for run in res["runs"]:
            b = run["b"]
            if run["f"] == "openai" and "ok" in run["r"]:
                openai_by_budget[b] = run["r"]["ok"]
        for run in res["runs"]:
            b, f, r = run["b"], run["f"], run["r"]
            stats["cases"] += 1
            where = "%s budget %s %s" % (tag, b, f)
            if "err" in r:
                fail("error at a budget >= the smallest accepted one", "%s: %s %s" % (where, r["err"], r["msg"][:200]))
                continue
            limit = default_budget if b is None else b
            problems = []
            if f == "openai":
                conv = check_openai(r["ok"], meta, rows, problems)
                if run["tokens"] is None or run["tokens"] > limit:
                    problems.append("over budget: %s tokens for %d" % (run["tokens"], limit))
                if conv and any(m.get("content") != row_json(rw).get("content")
                                for m, rw in zip(conv, rows[len(rows) - len(conv):])):
                    stats["cut"] += 1
            else:
                oa = openai_by_budget.get(b)
                if oa is None:
                    problems.append("no OpenAI output to compare with")
                else:
                    nsys = len(system_messages(meta["system_prompt"], meta["summary"], meta["placement"]))
                    back = check_anthropic(r["ok"], oa[:nsys], oa[nsys:], rows, problems)
                    if back is not None:
                        backs.append((len(backs), limit, where, back))
            if problems and os.environ.get("CTXWIN_PROP_DEBUG"):
                diag("%s: %s\n  output: %s\n  openai: %s" % (where, problems, json.dumps(r["ok"], ensure_ascii=False)[:400],
                                                   json.dumps(openai_by_budget.get(b), ensure_ascii=False)[:400]))
            for p in problems:
                kind = re.sub(r"[0-9]+", "N", p.split(":")[0])
                fail(kind, "%s: %s" % (where, p))
        if backs:
            q2 = ",\n".join("(%d, %s)" % (i, jlit(back)) for i, _, _, back in backs)
            counts = json.loads(psql("""
                SELECT jsonb_object_agg(v.i, (SELECT coalesce(sum(ctxwin.count_message_tokens(m, %s)), 0) + 3
                                              FROM jsonb_array_elements(v.msgs) m))
                FROM (VALUES %s) v(i, msgs)""" % (lit(meta["encoding"]), q2)))
            for i, limit, where, back in backs:
                if counts[str(i)] > limit:
                    fail("anthropic over budget", "%s: %s tokens for %d; as OpenAI messages: %s"
                         % (where, counts[str(i)], limit, json.dumps(back, ensure_ascii=False)[:300]))

    elapsed = time.time() - started
    diag("%d cases on %d sessions (%d skipped: no budget up to the window fits), %d with a cut, in %.1f s"
         % (stats["cases"], stats["sessions"], stats["skipped"], stats["cut"], elapsed))
    total_fail = sum(fails.values())
    diag("%d of %d cases failed" % (len(failing_cases), stats["cases"]))
    for kind, n in sorted(fails.items()):
        diag("%6d  %s" % (n, kind))
    for e in examples:
        diag("example: " + e)
    ok(stats["cases"] >= CASES, "ran at least %d cases" % CASES)
    ok(stats["cut"] > 0, "some cases cut the newest unit")
    ok(stats["errors_checked"] > 0, "some budgets below the smallest accepted one were tried")
    for kind in ["over budget", "anthropic over budget"]:
        ok(fails.get(kind, 0) == 0, "never over budget (%s)" % kind)
    ok(total_fail == 0, "every property holds in every case (%d failures)" % total_fail)
    psql("DROP DATABASE %s" % DB, db="postgres")
    print("1..%d" % tests)
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()
