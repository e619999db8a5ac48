/**
 * The READMEs' TypeScript runs as written: the ```ts blocks of README.md and
 * of clients/node/README.md, made modules by test/snippets.mjs (and so
 * type-checked by tsc with the tests, strict, against the package's dist/),
 * run in order against PostgreSQL with ctxwin and the mock LLM, each block
 * followed by checks of what it did.  The prelude (test/snippets-prelude.ts)
 * gives the blocks what a reader's program would already have; the database
 * is the test's (PGDATABASE names it, for a block's `new pg.Pool()`), its
 * "default" profile naming the mock's model, as a reader's names the model
 * their provider serves, so that ctxwin's request bodies go out as they are.
 */
import assert from "node:assert/strict";
import { existsSync, readFileSync } from "node:fs";
import { join } from "node:path";
import { after, before, test } from "node:test";
import { HumanMessage, type BaseMessage } from "@langchain/core/messages";
import type OpenAI from "openai";
import * as mainReadme from "../.snippets/readme.js";
import * as nodeReadme from "../.snippets/node-readme.js";
import { sessionIdForThread } from "../src/langgraph.js";
import { createTestDb, repoRoot, startMockLlm, type MockLlm, type TestDb } from "./helpers.js";
import { setUp, tearDown, type AfterBlock, type SnippetBlock } from "./snippets-prelude.js";

let db: TestDb;
let mock: MockLlm;
const pgDatabase = process.env["PGDATABASE"];

before(async () => {
  db = await createTestDb("readme");
  mock = await startMockLlm();
  await db.pool.query("INSERT INTO ctxwin.models (name, encoding, context_window) VALUES ('mock', 'o200k_base', 128000)");
  await db.pool.query("INSERT INTO ctxwin.profiles (name, model) VALUES ('default', 'mock')");   // replaces the built-in row
  process.env["PGDATABASE"] = db.name;
  setUp(mock.url + "/v1", mock.key, db.name);
});
after(async () => {
  try {
    await tearDown();
  } finally {
    if (pgDatabase === undefined) delete process.env["PGDATABASE"];
    else process.env["PGDATABASE"] = pgDatabase;
    try {
      await db?.drop();
    } finally {
      await mock?.stop();   // else the mock outlives the test, and so does its runner
    }
  }
});

interface Row { role: string; content: string | null; client_key: string | null }

async function rows(session: string): Promise<Row[]> {
  return (await db.pool.query("SELECT role, content, client_key FROM ctxwin.messages WHERE session_id = $1 ORDER BY id",
    [session])).rows as Row[];
}

async function usage(session: string): Promise<Array<[number, number]>> {
  return (await db.pool.query("SELECT input_tokens::int AS i, output_tokens::int AS o FROM ctxwin.usage_log WHERE session_id = $1 ORDER BY id",
    [session])).rows.map((r: { i: number; o: number }) => [r.i, r.o]);
}

/** (role, content) of each chat request the mock got after the first n requests. */
function sent(n: number): Array<Array<[unknown, unknown]>> {
  return mock.requests().slice(n).filter((r) => r.path.endsWith("/chat/completions"))
    .map((r) => r.body.messages.map((m): [unknown, unknown] => [m["role"], m["content"]]));
}

/** A check of a block: what it declared, and the mock's requests before it. */
type Check = (made: Record<string, unknown>, mark: number) => Promise<void>;

const question: Row = { role: "user", content: "Where is order 8812?", client_key: null };

/** The core blocks: the question and the answer stored (the answer keyed by its id), the body sent as ctxwin built it, the usage recorded. */
async function chatTurn(made: Record<string, unknown>, mark: number): Promise<{ id: string; answer: string }> {
  const s = made["s"] as { id: string };
  const answer = made["answer"] as OpenAI.ChatCompletion;
  const text = answer.choices[0]?.message.content;
  assert.ok(text);
  assert.equal((made["request"] as { model: string }).model, "mock");
  assert.deepEqual(await rows(s.id), [question, { role: "assistant", content: text, client_key: answer.id }]);
  assert.deepEqual(sent(mark), [[["system", "You are a support agent."], ["user", "Where is order 8812?"]]]);
  assert.deepEqual(await usage(s.id), [[answer.usage!.prompt_tokens, answer.usage!.completion_tokens]]);
  return { id: s.id, answer: text };
}

function nodeChecks(): Record<string, Check> {
  let core: { id: string; answer: string };
  return {
    "The core": async (made, mark) => { core = await chatTurn(made, mark); },
    "The Vercel AI SDK": async (made, mark) => {
      // the same session: the turn's window held the core block's exchange, and the answer was stored by onFinish
      const text = (made["result"] as { text: string }).text;
      assert.ok(text);
      const r = await rows(core.id);
      assert.deepEqual(r.slice(0, 3), [question, { ...r[1]!, content: core.answer }, question]);
      assert.equal(r.length, 4);
      assert.deepEqual([r[3]!.role, r[3]!.content], ["assistant", text]);
      assert.match(r[3]!.client_key ?? "", /^ai:/);
      assert.deepEqual(sent(mark), [[["system", "You are a support agent."], ["user", "Where is order 8812?"],
        ["assistant", core.answer], ["user", "Where is order 8812?"]]]);
      assert.equal((await usage(core.id)).length, 2);
    },
    "LangGraph.js": async (made, mark) => {
      // the thread's session has the message; the agent got the node's window
      const sid = sessionIdForThread("t-1");
      assert.deepEqual(await rows(sid), [{ role: "user", content: "Hi", client_key: (await rows(sid))[0]!.client_key }]);
      assert.deepEqual(sent(mark), [[["user", "Hi"]]]);
      // a second turn: the first answer is stored when the node next runs
      const graph = made["graph"] as { invoke(input: unknown, config: unknown): Promise<{ messages: BaseMessage[]; summarized_messages: BaseMessage[] }> };
      const out = await graph.invoke({ messages: [new HumanMessage("And order 8813?")] }, { configurable: { thread_id: "t-1" } });
      const first = out.messages[1]!.content;
      assert.deepEqual(out.summarized_messages.map((m) => [m.getType(), m.content]), [["human", "Hi"], ["ai", first], ["human", "And order 8813?"]]);
      assert.deepEqual((await rows(sid)).map((x) => [x.role, x.content]), [["user", "Hi"], ["assistant", first], ["user", "And order 8813?"]]);
    },
    "LangChain.js agents": async (made, mark) => {
      // the thread's session has the question and the answer; the model got the window; the state has both
      const sid = sessionIdForThread("t-2");
      const out = made["out"] as { messages: BaseMessage[] };
      assert.deepEqual(out.messages.map((m) => m.getType()), ["human", "ai"]);
      const answer = String(out.messages[1]!.content);
      assert.deepEqual((await rows(sid)).map((x) => [x.role, x.content]), [["user", "Where is order 8812?"], ["assistant", answer]]);
      assert.deepEqual(sent(mark), [[["system", "You are a support agent."], ["user", "Where is order 8812?"]]]);
      assert.equal((await usage(sid)).length, 1);
    },
    Recall: async (made, mark) => {
      // on the core block's session: the mock calls conversation_search when offered it after the user's
      // message; ctxwin's answer names the message about order 8812; then the model answers
      const r = (await db.pool.query(
        `SELECT role, tool_calls, tool_call_id, content, client_key FROM ctxwin.messages
         WHERE session_id = $1 AND id > 4 ORDER BY id`, [core.id])).rows as Array<Record<string, unknown>>;
      assert.deepEqual(r.map((x) => x["role"]), ["user", "assistant", "tool", "assistant"]);
      const call = (r[1]!["tool_calls"] as Array<{ id: string; function: { name: string; arguments: string } }>)[0]!;
      assert.equal(call.function.name, "conversation_search");
      assert.deepEqual(JSON.parse(call.function.arguments), { query: "8812" });
      assert.equal(r[2]!["tool_call_id"], call.id);
      assert.match(String(r[2]!["content"]), /\[#1 user [^\]]*\] Where is order 8812\?/);
      const reply = made["reply"] as OpenAI.ChatCompletion;
      assert.equal(r[3]!["content"], reply.choices[0]!.message.content);
      assert.equal(r[3]!["client_key"], reply.id);
      const reqs = mock.requests().slice(mark).filter((q) => q.path.endsWith("/chat/completions"));
      assert.equal(reqs.length, 2);
      for (const q of reqs) {
        const tools = (q.body as unknown as { tools: Array<{ function: { name: string } }> }).tools;
        assert.equal(tools.at(-1)!.function.name, "conversation_search");
      }
      assert.equal(reqs[1]!.body.messages.at(-1)!["tool_call_id"], call.id);
    },
  };
}

const checks = (): Record<string, Record<string, Check>> => ({
  [mainReadme.path]: { ctxwin: async (made, mark) => { await chatTurn(made, mark); } },
  [nodeReadme.path]: nodeChecks(),
});

interface SnippetModule { path: string; blocks: readonly SnippetBlock[]; run(after: AfterBlock): Promise<void> }

async function runReadme(mod: SnippetModule): Promise<void> {
  const known = checks()[mod.path]!;
  const ran: string[] = [];
  const pools: Array<{ end(): Promise<void> }> = [];
  let mark = mock.requests().length;
  try {
    await mod.run(async (block, made) => {
      const check = known[block.heading];
      assert.ok(check, `${block.path}:${block.line}: no check for the ts block under "${block.heading}" (test/readme.test.ts)`);
      if (made["cw"]) pools.push((made["cw"] as { db: { end(): Promise<void> } }).db);
      await check(made, mark);
      mark = mock.requests().length;
      ran.push(block.heading);
    });
  } finally {
    for (const p of pools) await p.end();
  }
  assert.deepEqual(ran, mod.blocks.filter((b) => b.lang === "ts").map((b) => b.heading));
}

test("README.md: its ts block runs, and stores, sends and records what it says", async () => {
  await runReadme(mainReadme);
});

test("clients/node/README.md: its ts blocks run in order, and do what they say", async () => {
  await runReadme(nodeReadme);
});

test("every ts block is checked; the package's README has only ts and sh blocks", () => {
  for (const mod of [mainReadme, nodeReadme]) {
    assert.deepEqual(mod.blocks.filter((b) => b.lang === "ts").map((b) => b.heading), Object.keys(checks()[mod.path]!), mod.path);
  }
  assert.deepEqual([...new Set(nodeReadme.blocks.map((b) => b.lang))].sort(), ["sh", "ts"]);
});

test("the README's npm install lines name the package", () => {
  const lines = nodeReadme.blocks.filter((b) => b.lang === "sh").flatMap((b) => b.text.split("\n"))
    .map((l) => /^npm install (?:--\S+ )*(\S+)/.exec(l)?.[1]).filter((p): p is string => p !== undefined);
  assert.deepEqual(lines, ["/path/to/ctxwin/clients/node"]);
  for (const p of lines) {
    const dir = join(repoRoot(), p.replace(/^(\.\/|\/path\/to\/ctxwin\/)/, ""));
    assert.ok(existsSync(join(dir, "package.json")), p);
    assert.equal((JSON.parse(readFileSync(join(dir, "package.json"), "utf8")) as { name: string }).name, "ctxwin", p);
  }
});
