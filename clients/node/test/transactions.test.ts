/**
 * The caller's transaction is the caller's: every entry point (the core,
 * the AI SDK helper, the LangGraph node, the LangChain middleware) on a
 * pg.Pool, a pg.Client and a client inside a transaction the caller began.
 * A first write to a new session creates it in the same statement: no
 * error raised or logged (the server log is read), the caller's
 * transaction neither aborted, committed nor rolled back by ctxwin; a
 * rollback of it takes everything ctxwin wrote with it.
 */
import assert from "node:assert/strict";
import { randomUUID } from "node:crypto";
import { after, before, test } from "node:test";
import { HumanMessage } from "@langchain/core/messages";
import { Annotation, MemorySaver, START, StateGraph, messagesStateReducer } from "@langchain/langgraph";
import type { BaseMessage } from "@langchain/core/messages";
import { ChatOpenAI } from "@langchain/openai";
import { createAgent } from "langchain";
import pg from "pg";
import { CtxwinChat } from "../src/ai.js";
import { Ctxwin, type Queryable } from "../src/index.js";
import { ctxwinMiddleware } from "../src/langchain.js";
import { SummarizationNode } from "../src/langgraph.js";
import { sessionIdForThread } from "../src/uuid.js";
import { createTestDb, serverLogMark, startMockLlm, type MockLlm, type TestDb } from "./helpers.js";

let db: TestDb;
let mock: MockLlm;

before(async () => {
  db = await createTestDb("tx");
  mock = await startMockLlm();
});
after(async () => {
  await db?.drop();
  await mock?.stop();
});

async function sessionCount(id: string): Promise<number> {
  return Number((await db.pool.query("SELECT count(*) AS n FROM ctxwin.sessions WHERE id = $1", [id])).rows[0].n);
}

/** The transaction status of a client: true when it is in a transaction that is not aborted. */
async function inOpenTransaction(c: pg.Client | pg.PoolClient): Promise<boolean> {
  // txid_current_if_assigned is non-null only inside the transaction that wrote; a SELECT in an aborted one raises
  const r = await c.query("SELECT txid_current_if_assigned() IS NOT NULL AS w");
  return r.rows[0].w === true;
}

const State = Annotation.Root({
  messages: Annotation<BaseMessage[]>({ reducer: messagesStateReducer, default: () => [] }),
  summarized_messages: Annotation<BaseMessage[]>({ reducer: (_a, b) => b, default: () => [] }),
  context: Annotation<Record<string, unknown>>({ reducer: (a, b) => ({ ...a, ...b }), default: () => ({}) }),
});

/** Every entry point's first write to a new session, on one connection kind. */
async function firstWrites(q: Queryable, tag: string): Promise<string[]> {
  const cw = new Ctxwin(q);
  const made: string[] = [];
  const a = randomUUID();
  assert.deepEqual(await cw.append(a, { role: "user", content: "hi" }, { create: { systemPrompt: "Be brief." } }), [1]);
  assert.deepEqual(await cw.append(a, { role: "user", content: "again" }, { create: true }), [2]);
  made.push(a);
  const b = randomUUID();
  const t = await cw.turn(b, { role: "user", content: "hello" }, { create: { profile: "default" } });
  assert.deepEqual(t.ids, [1]);
  assert.equal(t.context.at(-1)?.content, "hello");
  made.push(b);
  const c = randomUUID();
  assert.equal((await cw.ensureSession(c, { metadata: { tag } })).id, c);
  assert.deepEqual((await cw.ensureSession(c, { metadata: { other: 1 } })).metadata, { tag }, "an existing session is left as it is");
  made.push(c);
  const d = randomUUID();
  const chat = new CtxwinChat(cw, d, { create: true });
  assert.equal((await chat.turn("Where is order 8812?")).messages.at(-1)?.role, "user");
  made.push(d);
  const node = new SummarizationNode({ ctxwin: cw, maxTokens: 2000, profile: "default" });
  const graph = new StateGraph(State).addNode("summarize", node).addEdge(START, "summarize")
    .compile({ checkpointer: new MemorySaver() });
  const thread = `tx-${tag}-${randomUUID()}`;
  await graph.invoke({ messages: [new HumanMessage("Hi from the graph")] }, { configurable: { thread_id: thread } });
  made.push(sessionIdForThread(thread));
  const agent = createAgent({
    model: new ChatOpenAI({ model: "mock", apiKey: mock.key, configuration: { baseURL: mock.url + "/v1" }, maxRetries: 0 }),
    tools: [], systemPrompt: "You help.", checkpointer: new MemorySaver(),
    middleware: [ctxwinMiddleware({ ctxwin: cw })],
  });
  const thread2 = `tx-agent-${tag}-${randomUUID()}`;
  await agent.invoke({ messages: [new HumanMessage("Hi agent")] }, { configurable: { thread_id: thread2 } });
  made.push(sessionIdForThread(thread2));
  return made;
}

test("on a Pool and a Client: first writes create their sessions, nothing logged at ERROR", async () => {
  const log = await serverLogMark(db.pool);
  const onPool = await firstWrites(db.pool, "pool");
  const c = await db.client();
  let onClient: string[];
  try {
    onClient = await firstWrites(c, "client");
    assert.equal(await inOpenTransaction(c), false, "no transaction left open on the client");
  } finally {
    await c.end();
  }
  for (const s of [...onPool, ...onClient]) assert.equal(await sessionCount(s), 1, s);
  const text = await log.read();
  assert.doesNotMatch(text, /ERROR:/, "the server logged an error:\n" + text);
});

test("inside the caller's transaction: never aborted, committed or rolled back by ctxwin", async () => {
  const log = await serverLogMark(db.pool);
  for (const kind of ["client", "pool client"] as const) {
    const c: pg.Client | pg.PoolClient = kind === "client" ? await db.client() : await db.pool.connect();
    try {
      await c.query("BEGIN");
      const made = await firstWrites(c, kind.replace(" ", "-"));
      assert.equal(await inOpenTransaction(c), true, "the transaction is still open, and not aborted");
      for (const s of made) assert.equal(await sessionCount(s), 0, "nothing committed: other connections see nothing yet");
      await c.query("ROLLBACK");
      for (const s of made) assert.equal(await sessionCount(s), 0, "the caller's rollback takes it all");
      await c.query("BEGIN");
      const kept = await firstWrites(c, kind.replace(" ", "-") + "-2");
      await c.query("COMMIT");
      for (const s of kept) assert.equal(await sessionCount(s), 1, "the caller's commit keeps it");
    } finally {
      if (kind === "pool client") (c as pg.PoolClient).release(); else await (c as pg.Client).end();
    }
  }
  const text = await log.read();
  assert.doesNotMatch(text, /ERROR:/, "the server logged an error:\n" + text);
});
