/**
 * One thread, one session, in both languages: the Node client maps a
 * LangGraph thread id to the ctxwin session the Python client's
 * session_for_thread gives it.  Checked against the table Python's code
 * wrote (test/thread-sessions.json, by test/thread-sessions.py: its header
 * has the command), and, when a Python with the Python client's
 * dependencies is at hand (the virtualenv clients/python/run-tests.sh
 * makes under $CTXWIN_CACHE), against Python's function called now, on the
 * table's ids and on random ones.
 */
import assert from "node:assert/strict";
import { execFileSync } from "node:child_process";
import { randomBytes, randomUUID } from "node:crypto";
import { existsSync, readdirSync, readFileSync } from "node:fs";
import { join } from "node:path";
import { test } from "node:test";
import { sessionIdForThread as fromLangGraph } from "../src/langgraph.js";
import { parseUuidAsPython, sessionIdForThread, THREAD_NAMESPACE, uuidv5 } from "../src/uuid.js";
import { packageDir, repoRoot } from "./helpers.js";

const table = JSON.parse(readFileSync(join(packageDir(), "test", "thread-sessions.json"), "utf8")) as Record<string, string>;

/** A python3 that imports the Python client from the tree, or null. */
function python(): string | null {
  const cache = process.env["CTXWIN_CACHE"] ?? "/var/cache/ctxwin";
  const candidates = existsSync(cache)
    ? readdirSync(cache).filter((d) => d.startsWith("py-venv-")).map((d) => join(cache, d, "bin", "python"))
    : [];
  for (const py of [...candidates, "python3"]) {
    try {
      execFileSync(py, ["-c", "import ctxwin.langgraph"], { env: pyEnv(), stdio: "ignore" });
      return py;
    } catch { /* not this one */ }
  }
  return null;
}

function pyEnv(): NodeJS.ProcessEnv {
  return { ...process.env, PYTHONPATH: join(repoRoot(), "clients", "python", "src") };
}

function pythonSessions(py: string, ids: string[]): Record<string, string> {
  const out = execFileSync(py, [join(packageDir(), "test", "thread-sessions.py"), ...ids.map((i) => JSON.stringify(i))],
    { env: pyEnv(), encoding: "utf8" });
  return JSON.parse(out) as Record<string, string>;
}

test("a thread's session is the Python client's: the table Python wrote", () => {
  assert.ok(Object.keys(table).length >= 20);
  for (const [id, session] of Object.entries(table)) {
    assert.equal(sessionIdForThread(id), session, JSON.stringify(id));
    assert.equal(fromLangGraph(id), session, JSON.stringify(id));
  }
  // a uuid is the session itself; anything else a uuid5 in the Python client's namespace
  assert.equal(sessionIdForThread("t-1"), uuidv5("langgraph:t-1", THREAD_NAMESPACE));
  assert.equal(sessionIdForThread(42), table["42"]);
  assert.equal(parseUuidAsPython("not a uuid"), null);
});

test("a thread's session is the Python client's: Python's function now, on random ids too", (t) => {
  const py = python();
  if (py === null) {
    t.skip("no Python with the Python client's dependencies (run clients/python/run-tests.sh once)");
    return;
  }
  const ids = [...Object.keys(table)];
  for (let i = 0; i < 40; i++) {
    const u = randomUUID();
    const r = randomBytes(12);
    ids.push(u, u.toUpperCase(), `{${u}}`, u.replace(/-/g, ""), `urn:uuid:${u}`, r.toString("hex"),
      r.toString("base64"), `thread-${r.readUInt32LE(0)}`, u.slice(0, 35) + "x", "0x" + u.replace(/-/g, "").slice(2));
  }
  const want = pythonSessions(py, ids);
  assert.deepEqual(Object.keys(want).sort(), [...new Set(ids)].sort());
  for (const id of ids) assert.equal(sessionIdForThread(id), want[id], `${py}: ${JSON.stringify(id)}`);
  // the committed table is what Python's code writes today
  for (const [id, session] of Object.entries(table)) assert.equal(want[id], session, `stale table: ${JSON.stringify(id)}`);
});
