/**
 * The LangChain.js 1.x middleware inside createAgent (langchain), with a
 * tool and a MemorySaver checkpointer, its model @langchain/openai's
 * ChatOpenAI on the mock LLM over HTTP: the requests the mock got hold
 * ctxwin's window (within the budget, tool results cleared by the
 * profile, the summary in the system message), the agent's state keeps
 * every message, ctxwin stores each once, usage is recorded per model call.
 */
import assert from "node:assert/strict";
import { after, before, test } from "node:test";
import { HumanMessage, type BaseMessage } from "@langchain/core/messages";
import { tool } from "@langchain/core/tools";
import { MemorySaver } from "@langchain/langgraph";
import { ChatOpenAI } from "@langchain/openai";
import { createAgent } from "langchain";
import { z } from "zod";
import { Ctxwin } from "../src/index.js";
import { AGENT_NAMESPACE, ctxwinMiddleware } from "../src/langchain.js";
import { sessionIdForThread, uuidv5 } from "../src/uuid.js";
import { createTestDb, startMockLlm, windowTokens, type MockLlm, type TestDb } from "./helpers.js";

let db: TestDb;
let mock: MockLlm;
let cw: Ctxwin;

before(async () => {
  db = await createTestDb("mw");
  mock = await startMockLlm();
  cw = new Ctxwin(db.pool);
  // older tool results are cleared in the window (the newest kept whole)
  await db.pool.query(`INSERT INTO ctxwin.profiles (name, model, keep_tool_results, max_messages_before_summary)
                       VALUES ('mw', 'gpt-4o', 1, NULL)`);
});
after(async () => {
  await db?.drop();
  await mock?.stop();
});

// the mock's "mock" model calls conversation_search when offered it after a user's message, then answers
const search = tool(async ({ query }: { query: string }) =>
  `Results for ${query}: ` + Array.from({ length: 20 }, (_, i) => `order ORD-${4000 + i} shipped on day ${i + 1}.`).join(" "),
{ name: "conversation_search", description: "Search the conversation.", schema: z.object({ query: z.string() }) });

function agent(budget: number) {
  return createAgent({
    model: new ChatOpenAI({ model: "mock", apiKey: mock.key, configuration: { baseURL: mock.url + "/v1" }, maxRetries: 0 }),
    tools: [search],
    systemPrompt: "You are a shipping assistant.",
    checkpointer: new MemorySaver(),
    middleware: [ctxwinMiddleware({ ctxwin: db.pool, budget, profile: "mw" })],
  });
}

type Body = { messages: Array<{ role: string; content: unknown; tool_calls?: unknown[] }>; tools?: unknown[] };

test("createAgent: each request is ctxwin's window, the state keeps every message", async () => {
  const budget = 900;
  const a = agent(budget);
  const thread = "mw-thread-1";
  const session = sessionIdForThread(thread);
  const config = { configurable: { thread_id: thread } };
  const start = mock.requests().length;
  const turns = 8;
  for (let i = 0; i < turns; i++) {
    await a.invoke({ messages: [new HumanMessage(`Where is order ORD-${4000 + i}? ` + "Please check it. ".repeat(20))] }, config);
  }
  const state = await a.graph.getState(config);
  const kept = state.values.messages as BaseMessage[];
  // each turn: the question, the tool call, its result, the answer
  assert.equal(kept.length, turns * 4);
  assert.match(String(kept[0]!.content), /ORD-4000/);

  const stored = (await db.pool.query(
    "SELECT role, client_key FROM ctxwin.messages WHERE session_id = $1 ORDER BY id", [session])).rows;
  assert.deepEqual(stored.map((r) => r.client_key), kept.map((m) => m.id), "each state message stored once, in order");
  const info = await cw.getSession(session);
  assert.equal(info?.profile, "mw");
  assert.equal(info?.systemPrompt, "You are a shipping assistant.");

  const reqs = mock.requests().slice(start);
  assert.equal(reqs.length, turns * 2, "two model calls a turn");
  for (const r of reqs) {
    const body = r.body as unknown as Body;
    assert.equal(body.messages[0]!.role, "system");
    assert.match(String(body.messages[0]!.content), /^You are a shipping assistant\./);
    assert.equal(body.messages.filter((m) => m.role === "system").length, 1, "one system message");
    // the window fits the budget, tool definitions included
    assert.ok(await windowTokens(db.pool, body.messages, "o200k_base") <= budget, "within the budget");
  }
  const last = reqs.at(-1)!.body as unknown as Body;
  const text = JSON.stringify(last.messages);
  assert.ok(!text.includes("ORD-4000?"), "the oldest question is out of the last request");
  assert.ok(text.includes(`ORD-${4000 + turns - 1}?`), "the newest question is in it");
  assert.ok(last.messages.length < kept.length + 1);
  assert.ok(reqs.some((r) => JSON.stringify(r.body.messages).includes("[tool result cleared")),
    "older tool results are cleared by the profile");

  // one usage row per model call, with the mock's counts
  const usage = (await db.pool.query("SELECT input_tokens::int AS p FROM ctxwin.usage_log WHERE session_id = $1 ORDER BY id",
    [session])).rows;
  assert.equal(usage.length, reqs.length);
  assert.deepEqual(usage.map((u) => u.p), reqs.map((r) => r.usage?.["prompt_tokens"]));
});

test("after a summary, the model's system message carries it; the state still keeps everything", async () => {
  const a = agent(900);
  const thread = "mw-thread-2";
  const session = sessionIdForThread(thread);
  const config = { configurable: { thread_id: thread } };
  for (let i = 0; i < 3; i++) await a.invoke({ messages: [new HumanMessage(`Track ORD-${5000 + i} please.`)] }, config);
  const made = await cw.summarize(session, { force: true });
  assert.ok(made);
  const start = mock.requests().length;
  await a.invoke({ messages: [new HumanMessage("And ORD-5009?")] }, config);
  const first = mock.requests()[start]!.body as unknown as Body;
  assert.equal(first.messages[0]!.role, "system");
  assert.ok(String(first.messages[0]!.content).includes(made.content.slice(0, 40)), "the summary is in the system message");
  assert.equal(((await a.graph.getState(config)).values.messages as BaseMessage[]).length, 4 * 4);
});

test("without a thread: the session is named after the conversation's first message, as the Python client's", async () => {
  const a = createAgent({
    model: new ChatOpenAI({ model: "mock", apiKey: mock.key, configuration: { baseURL: mock.url + "/v1" }, maxRetries: 0 }),
    tools: [search],
    middleware: [ctxwinMiddleware({ ctxwin: db.pool })],
  });
  const out = await a.invoke({ messages: [new HumanMessage({ content: "Where is ORD-7?", id: "first-7" })] });
  assert.equal((out.messages as BaseMessage[]).length, 4);
  const session = uuidv5("langchain-agent:first-7", AGENT_NAMESPACE);
  const n = Number((await db.pool.query("SELECT count(*) AS n FROM ctxwin.messages WHERE session_id = $1", [session])).rows[0].n);
  assert.equal(n, 4);
});

test("no worker serves the database: the middleware makes the summary the profile queues, before the call", async () => {
  await db.pool.query(`INSERT INTO ctxwin.profiles (name, model, max_messages_before_summary, min_recent_messages)
                       VALUES ('mwsum', 'gpt-4o', 6, 2)`);
  const a = createAgent({
    model: new ChatOpenAI({ model: "mock", apiKey: mock.key, configuration: { baseURL: mock.url + "/v1" }, maxRetries: 0 }),
    tools: [search], systemPrompt: "You track orders.", checkpointer: new MemorySaver(),
    middleware: [ctxwinMiddleware({ ctxwin: db.pool, profile: "mwsum" })],
  });
  const thread = "mw-summaries";
  const session = sessionIdForThread(thread);
  const start = mock.requests().length;
  for (let i = 0; i < 3; i++) {
    await a.invoke({ messages: [new HumanMessage(`Track ORD-${6000 + i}.`)] }, { configurable: { thread_id: thread } });
  }
  const info = (await cw.getSession(session))!;
  assert.ok(info.summaryVersion >= 1, "summarized without a worker");
  assert.ok(info.conversationSummary);
  const last = mock.requests().at(-1)!.body as unknown as Body;
  assert.ok(String(last.messages[0]!.content).includes(info.conversationSummary!.slice(0, 30)), "the summary went to the model");
  assert.ok(mock.requests().length - start === 6, "two model calls a turn, the summaries not by the agent's model");
});

test("a profile whose summaries are the app's ('app'): the model given to the middleware writes them, beside the turn", async () => {
  await db.pool.query(`INSERT INTO ctxwin.profiles (name, model, max_messages_before_summary, min_recent_messages, summary_strategy)
                       VALUES ('mwapp', 'gpt-4o', 6, 2, 'app')`);
  const summarizer = new ChatOpenAI({ model: "mock", apiKey: mock.key, configuration: { baseURL: mock.url + "/v1" }, maxRetries: 0,
    modelKwargs: { user: "ctxwin-summarizer" } });
  const a = createAgent({
    model: new ChatOpenAI({ model: "mock", apiKey: mock.key, configuration: { baseURL: mock.url + "/v1" }, maxRetries: 0 }),
    tools: [search], systemPrompt: "You track orders.", checkpointer: new MemorySaver(),
    middleware: [ctxwinMiddleware({ ctxwin: db.pool, profile: "mwapp", model: summarizer })],
  });
  const thread = "mw-app-summaries";
  const session = sessionIdForThread(thread);
  const start = mock.requests().length;
  for (let i = 0; i < 4; i++) {
    await a.invoke({ messages: [new HumanMessage(`Track ORD-${8000 + i}.`)] }, { configurable: { thread_id: thread } });
  }
  // the summaries are written beside the turns: the last one may still be under way
  let info = (await cw.getSession(session))!;
  for (let i = 0; i < 100 && (info.summaryVersion < 1 || info.compactionQueuedAt !== null); i++) {
    await new Promise((r) => setTimeout(r, 50));
    info = (await cw.getSession(session))!;
  }
  assert.ok(info.summaryVersion >= 1, "summarized, with no LLM on the server");
  const reqs = mock.requests().slice(start);
  const bySummarizer = reqs.filter((r) => (r.body as { user?: string }).user === "ctxwin-summarizer");
  assert.ok(bySummarizer.length >= 1, "by the middleware's model, over HTTP");
  assert.equal(reqs.length - bySummarizer.length, 8, "two agent calls a turn besides");
  assert.ok(bySummarizer.every((r) => !(r.body as { tools?: unknown[] }).tools), "ctxwin's prompt, no tools");
  assert.ok(bySummarizer.some((r) => JSON.stringify(r.body.messages).includes("ORD-8000")), "the conversation in the prompt");
  // ctxwin's summaries are incremental: the session's ends with the model's last answer
  assert.ok(info.conversationSummary!.endsWith(bySummarizer.at(-1)!.response_text!), "the model's last answer is the newest summary");
  const row = (await db.pool.query(
    "SELECT usage FROM ctxwin.summaries WHERE session_id = $1 ORDER BY version DESC LIMIT 1", [session])).rows[0];
  assert.equal(row.usage?.prompt_tokens ?? row.usage?.input_tokens, bySummarizer.at(-1)!.usage?.["prompt_tokens"],
    "its usage recorded");
});
