/**
 * The core client against a real PostgreSQL with ctxwin: sessions, every
 * message shape with tool calls and their results, idempotent appends, one
 * round trip per chat turn, windows within the budget, usage from real
 * answers of the mock LLM over HTTP, status, summaries, typed errors.
 */
import assert from "node:assert/strict";
import { after, before, describe, test } from "node:test";
import { AIMessage, HumanMessage, SystemMessage, ToolMessage } from "@langchain/core/messages";
import type { ModelMessage } from "ai";
import pg from "pg";
import {
  BudgetTooSmall, contentText, Ctxwin, MessageConversionError, CtxwinError, InvalidArgument, MessageNotFound, SessionNotFound, toChatMessages, uuidv5, NAMESPACE_URL,
  type ChatMessage, type Queryable, type ToolDefinition,
} from "../src/index.js";
import { createTestDb, post, startMockLlm, windowTokens, type MockLlm, type TestDb } from "./helpers.js";

let db: TestDb;
let mock: MockLlm;
let cw: Ctxwin;

before(async () => {
  db = await createTestDb("core");
  mock = await startMockLlm();
  cw = new Ctxwin(db.pool);
});
after(async () => {
  await db?.drop();
  await mock?.stop();
});

async function rows(session: string): Promise<Array<Record<string, unknown>>> {
  const r = await db.pool.query(
    `SELECT id::int, role, content, tool_calls, tool_call_id, name, client_key, metadata
     FROM ctxwin.messages WHERE session_id = $1 ORDER BY id`, [session]);
  return r.rows;
}

const weatherCall = { id: "call_w1", type: "function" as const, function: { name: "weather", arguments: "{\"city\":\"Oslo\"}" } };

describe("sessions", () => {
  test("createSession keeps profile, system prompt and metadata; getSession reads them back", async () => {
    await db.pool.query("INSERT INTO ctxwin.profiles (name, model) VALUES ('small', 'gpt-4o-mini')");
    const s = await cw.createSession({ profile: "small", systemPrompt: "You are terse.", metadata: { user: "u-1" } });
    assert.match(s.id, /^[0-9a-f-]{36}$/);
    assert.equal(s.profile, "small");
    assert.equal(s.systemPrompt, "You are terse.");
    assert.deepEqual(s.metadata, { user: "u-1" });
    assert.ok(s.createdAt instanceof Date);
    const g = await cw.getSession(s.id);
    assert.equal(g?.id, s.id);
    assert.equal(g?.systemPrompt, "You are terse.");
    assert.equal(g?.messageCount, 0);
    assert.equal(await cw.getSession("00000000-0000-0000-0000-000000000000"), null);
    const d = await cw.createSession();
    assert.equal(d.profile, "default");
    assert.equal(d.systemPrompt, null);
  });

  test("a session with a chosen id (uuid v5 of a name) is created once", async () => {
    const id = uuidv5("thread-42", NAMESPACE_URL);
    assert.equal(uuidv5("thread-42", NAMESPACE_URL), id);
    assert.notEqual(uuidv5("thread-43", NAMESPACE_URL), id);
    // Python's uuid.uuid5(uuid.NAMESPACE_URL, "http://example.com")
    assert.equal(uuidv5("http://example.com", NAMESPACE_URL), "8c9ddcb0-8084-5a7f-a988-1095ab18b5df");
    const s = await cw.createSession({ id });
    assert.equal(s.id, id);
    await assert.rejects(cw.createSession({ id }), (e: unknown) => e instanceof CtxwinError && e.code === "23505");
  });

  test("works with a pg.Client and a PoolClient as well as a Pool", async () => {
    const c = await db.client();
    const pc = await db.pool.connect();
    try {
      for (const q of [c, pc] as Queryable[]) {
        const x = new Ctxwin(q);
        const s = await x.createSession({ systemPrompt: "p" });
        assert.deepEqual(await x.append(s.id, { role: "user", content: "hello" }), [1]);
        assert.equal((await x.buildContext(s.id)).at(-1)?.content, "hello");
      }
    } finally {
      pc.release();
      await c.end();
    }
  });
});

describe("appending every shape", () => {
  test("OpenAI chat messages with tool calls and results, stored as they are; appended twice, stored once", async () => {
    const s = await cw.createSession({ systemPrompt: "Weather bot." });
    const msgs = [
      { role: "user", content: "Weather in Oslo?" },
      { role: "assistant", content: null, tool_calls: [weatherCall] },
      { role: "tool", tool_call_id: "call_w1", content: "4 °C, rain" },
      { role: "assistant", content: "It is 4 °C and raining in Oslo." },
    ];
    const ids = await cw.append(s.id, msgs, { keys: ["u1", null, null, "a1"] });
    assert.deepEqual(ids, [1, 2, 3, 4]);
    const again = await cw.append(s.id, msgs, { keys: ["u1", null, null, "a1"] });
    assert.deepEqual(again, [1, 2, 3, 4], "the same messages with the same keys are not stored again");
    const r = await rows(s.id);
    assert.equal(r.length, 4);
    assert.deepEqual(r.map((x) => x["client_key"]), ["u1", "calls:call_w1", "tool:call_w1", "a1"]);
    assert.deepEqual(r[1]!["tool_calls"], [weatherCall]);
    assert.equal(r[2]!["tool_call_id"], "call_w1");
    assert.equal(r[2]!["content"], "4 °C, rain");
    const ctx = await cw.buildContext(s.id);
    assert.deepEqual(ctx.map((m) => m.role), ["system", "user", "assistant", "tool", "assistant"]);
    // without keys a message is stored each time: keys are what make appends idempotent
    await cw.append(s.id, { role: "user", content: "thanks" });
    await cw.append(s.id, { role: "user", content: "thanks" });
    assert.equal((await rows(s.id)).length, 6);
  });

  test("a whole ChatCompletion from the mock is appended as its message, keyed by its id", async () => {
    const s = await cw.createSession();
    const body = await cw.turn(s.id, { role: "user", content: "Look up BILL-412 please" }, { request: true });
    const completion = await post(mock, "/v1/chat/completions", { ...body.request, model: "fault-tool-calls" });
    const ids1 = await cw.append(s.id, completion);
    const ids2 = await cw.append(s.id, completion);
    assert.deepEqual(ids1, ids2);
    const r = await rows(s.id);
    assert.equal(r.length, 2);
    assert.equal(r[1]!["client_key"], completion["id"]);
    const calls = r[1]!["tool_calls"] as Array<{ id: string; function: { name: string; arguments: string } }>;
    assert.equal(calls[0]!.function.name, "search_history");
    assert.deepEqual(JSON.parse(calls[0]!.function.arguments), { query: "billing" });
    assert.equal(r[1]!["content"], "Let me look that up first.");
  });

  test("Anthropic messages: tool_use in the assistant turn, tool_result blocks become tool messages before the text", async () => {
    const s = await cw.createSession();
    const msgs = [
      { role: "user", content: "Weather in Oslo and Bergen?" },
      { role: "assistant", content: [
        { type: "text", text: "Checking both." },
        { type: "tool_use", id: "toolu_1", name: "weather", input: { city: "Oslo" } },
        { type: "tool_use", id: "toolu_2", name: "weather", input: { city: "Bergen" } },
      ] },
      { role: "user", content: [
        { type: "tool_result", tool_use_id: "toolu_1", content: "4 °C" },
        { type: "tool_result", tool_use_id: "toolu_2", content: [{ type: "text", text: "7 °C" }], is_error: false },
        { type: "text", text: "And tomorrow?" },
      ] },
    ];
    const ids = await cw.append(s.id, msgs, { keys: ["q", "a", "r"] });
    assert.deepEqual(ids, [1, 2, 3, 4, 5]);
    assert.deepEqual(await cw.append(s.id, msgs, { keys: ["q", "a", "r"] }), ids);
    const r = await rows(s.id);
    assert.deepEqual(r.map((x) => x["role"]), ["user", "assistant", "tool", "tool", "user"]);
    assert.deepEqual(r.map((x) => x["client_key"]), ["q", "a", "r#0", "r#1", "r#2"]);
    assert.equal(r[1]!["content"], "Checking both.");
    assert.deepEqual((r[1]!["tool_calls"] as Array<{ function: { arguments: string } }>).map((c) => JSON.parse(c.function.arguments)),
      [{ city: "Oslo" }, { city: "Bergen" }]);
    assert.deepEqual(r.slice(2, 4).map((x) => [x["tool_call_id"], x["content"]]), [["toolu_1", "4 °C"], ["toolu_2", "7 °C"]]);
    // the anthropic window has the calls and results paired again
    const ctx = await cw.buildContext(s.id, { format: "anthropic", cache: false });
    const blocks = ctx.messages.flatMap((m) => m.content.map((b) => b["type"]));
    assert.deepEqual(blocks, ["text", "text", "tool_use", "tool_use", "tool_result", "tool_result", "text"]);
  });

  test("an Anthropic Message answer from the mock is appended once, keyed by its id", async () => {
    const s = await cw.createSession({ systemPrompt: "Help." });
    const t = await cw.turn(s.id, { role: "user", content: "Find the ticket OPS-311" }, { format: "anthropic", request: true });
    assert.equal(typeof t.request.max_tokens, "number");
    const answer = await post(mock, "/v1/messages", { ...t.request, model: "fault-tool-calls" });
    assert.equal(answer["type"], "message");
    await cw.append(s.id, answer);
    await cw.append(s.id, answer);
    const r = await rows(s.id);
    assert.equal(r.length, 2);
    assert.equal(r[1]!["client_key"], answer["id"]);
    assert.equal((r[1]!["tool_calls"] as unknown[]).length, 1);
  });

  test("LangChain messages keep their ids as keys; appended twice, stored once", async () => {
    const s = await cw.createSession();
    const msgs = [
      new SystemMessage({ content: "Note: the user is in Oslo.", id: "lc-0" }),
      new HumanMessage({ content: "Weather?", id: "lc-1" }),
      new AIMessage({ content: "", id: "lc-2", tool_calls: [{ id: "call_lc", name: "weather", args: { city: "Oslo" } }] }),
      new ToolMessage({ content: "4 °C", tool_call_id: "call_lc", id: "lc-3", name: "weather" }),
      new AIMessage({ content: [{ type: "text", text: "4 °C in Oslo." }], id: "lc-4" }),
    ];
    assert.deepEqual(await cw.append(s.id, msgs), [1, 2, 3, 4, 5]);
    assert.deepEqual(await cw.append(s.id, msgs.slice(1)), [2, 3, 4, 5]);
    const r = await rows(s.id);
    assert.equal(r.length, 5);
    assert.deepEqual(r.map((x) => x["client_key"]), ["lc-0", "lc-1", "lc-2", "lc-3", "lc-4"]);
    assert.deepEqual(r.map((x) => x["role"]), ["system", "user", "assistant", "tool", "assistant"]);
    assert.equal(r[2]!["content"], null);
    assert.deepEqual((r[2]!["tool_calls"] as ChatMessage["tool_calls"])![0], {
      id: "call_lc", type: "function", function: { name: "weather", arguments: "{\"city\":\"Oslo\"}" } });
    assert.equal(r[3]!["name"], "weather");
    assert.equal(r[4]!["content"], "4 °C in Oslo.");
  });

  test("AI SDK ModelMessages: tool-call parts and a tool message of two results", async () => {
    const s = await cw.createSession();
    const msgs: ModelMessage[] = [
      { role: "user", content: [{ type: "text", text: "Weather in Oslo and Bergen?" }] },
      { role: "assistant", content: [
        { type: "reasoning", text: "two cities" },
        { type: "tool-call", toolCallId: "c1", toolName: "weather", input: { city: "Oslo" } },
        { type: "tool-call", toolCallId: "c2", toolName: "weather", input: { city: "Bergen" } },
      ] },
      { role: "tool", content: [
        { type: "tool-result", toolCallId: "c1", toolName: "weather", output: { type: "text", value: "4 °C" } },
        { type: "tool-result", toolCallId: "c2", toolName: "weather", output: { type: "json", value: { c: 7 } } },
      ] },
    ];
    assert.deepEqual(await cw.append(s.id, msgs, { keys: ["u", null, null] }), [1, 2, 3, 4]);
    assert.deepEqual(await cw.append(s.id, msgs, { keys: ["u", null, null] }), [1, 2, 3, 4]);
    const r = await rows(s.id);
    assert.deepEqual(r.map((x) => x["role"]), ["user", "assistant", "tool", "tool"]);
    assert.deepEqual(r.map((x) => x["client_key"]), ["u", "calls:c1", "tool:c1", "tool:c2"]);
    assert.deepEqual(r.slice(2).map((x) => [x["tool_call_id"], x["name"], x["content"]]),
      [["c1", "weather", "4 °C"], ["c2", "weather", "{\"c\":7}"]]);
    assert.equal(r[1]!["content"], null, "reasoning is not stored as the answer's text");
  });

  test("a message ctxwin cannot store is refused before anything is appended (22023, its position named)", async () => {
    const s = await cw.createSession();
    await assert.rejects(
      cw.append(s.id, [{ role: "user", content: "ok" },
        { role: "user", content: [{ type: "input_audio", input_audio: { data: "UklGRg==", format: "wav" } }] }]),
      (e: unknown) => e instanceof MessageConversionError && e instanceof InvalidArgument && e.code === "22023" &&
        /messages\[1\]/.test(e.message) && !!e.hint);
    await assert.rejects(cw.append(s.id, { role: "robot", content: "x" }), InvalidArgument);
    await assert.rejects(cw.append(s.id, { role: "tool", content: "no id" }), /tool_call_id/);
    assert.equal((await rows(s.id)).length, 0);
    assert.throws(() => toChatMessages([{ role: "user", content: "a" }], ["k1", "k2"]), /one element per message/);
  });
});

describe("one chat turn", () => {
  test("buildWindow and turn say which stored rows the window shows: ids and keys from the server", async () => {
    const s = await cw.createSession({ systemPrompt: "You are terse." });
    const ids = await cw.append(s.id, [{ role: "user", content: "one ".repeat(40) }, { role: "assistant", content: "two" },
      { role: "user", content: "three" }], { keys: ["k1", null, "k3"] });
    const w = await cw.buildWindow(s.id, { budget: 40 });
    assert.deepEqual(w.context, await cw.buildContext(s.id, { budget: 40 }));
    assert.equal(w.context[0]!.role, "system");
    assert.deepEqual(w.messages, [{ id: ids[1], client_key: null, role: "assistant" }, { id: ids[2], client_key: "k3", role: "user" }],
      "the first message does not fit; the others are shown, with their ids and keys");
    assert.ok(w.tokens <= 40);
    const t = await cw.turn(s.id, { role: "user", content: "four" }, { keys: ["k4"], budget: 40 });
    assert.deepEqual(t.messages.at(-1), { id: t.ids[0], client_key: "k4", role: "user" });
  });

  test("turn() appends the user's message and returns the window in one round trip", async () => {
    let queries = 0;
    const counting: Queryable = { query: (text: string, values?: unknown[]) => { queries++; return db.pool.query(text, values); } };
    const c = new Ctxwin(counting);
    const s = await cw.createSession({ systemPrompt: "You are a support agent." });
    queries = 0;
    const t = await c.turn(s.id, { role: "user", content: "My order 8812 has not arrived." }, { keys: ["m1"] });
    assert.equal(queries, 1, "one statement, one round trip");
    assert.deepEqual(t.ids, [1]);
    assert.deepEqual(t.context, [
      { role: "system", content: "You are a support agent." },
      { role: "user", content: "My order 8812 has not arrived." },
    ]);
    queries = 0;
    const again = await c.turn(s.id, { role: "user", content: "My order 8812 has not arrived." }, { keys: ["m1"] });
    assert.equal(queries, 1);
    assert.deepEqual(again.ids, [1], "a retried turn does not store the message twice");
    assert.equal(again.context.length, 2);
    const tools: ToolDefinition[] = [{ type: "function", function: { name: "track_order", description: "Track an order.",
      parameters: { type: "object", properties: { order: { type: "string" } } } } }];
    queries = 0;
    const req = await c.turn(s.id, { role: "user", content: "Where is it?" }, { request: true, tools });
    assert.equal(queries, 1);
    assert.equal(req.request.model, "gpt-4o");
    assert.deepEqual(req.request.tools, tools);
    assert.equal(req.request.prompt_cache_key, s.id);
    assert.equal(req.request.messages.at(-1)?.content, "Where is it?");
    // the body is what the provider takes: POST it as it is
    const answer = await post(mock, "/v1/chat/completions", { ...req.request, model: "mock" });
    assert.equal((answer["choices"] as unknown[]).length, 1);
  });

  test("windows stay within the budget, tools included, and keep a tool call with its result", async () => {
    const s = await cw.createSession({ systemPrompt: "Weather bot." });
    for (let i = 0; i < 30; i++) {
      await cw.append(s.id, [
        { role: "user", content: `Question ${i}: the weather in city number ${i}, with some words to take room.` },
        { role: "assistant", content: null, tool_calls: [{ ...weatherCall, id: `call_${i}` }] },
        { role: "tool", tool_call_id: `call_${i}`, content: `It is ${i} °C with a long description of clouds and wind.` },
        { role: "assistant", content: `In city ${i} it is ${i} °C.` },
      ]);
    }
    const tools: ToolDefinition[] = [{ type: "function", function: { name: "weather", parameters: { type: "object",
      properties: { city: { type: "string" } } } } }];
    const toolTokens = Number((await db.pool.query("SELECT ctxwin.count_tool_tokens($1::jsonb, 'o200k_base') AS n",
      [JSON.stringify(tools)])).rows[0].n);
    for (const budget of [150, 333, 1000]) {
      const ctx = await cw.buildContext(s.id, { budget, tools });
      assert.ok(await windowTokens(db.pool, ctx, "o200k_base") + toolTokens <= budget, `budget ${budget}`);
      assert.equal(ctx.at(-1)?.content, "In city 29 it is 29 °C.");
      // every tool message follows the assistant message that called it
      ctx.forEach((m, i) => {
        if (m.role === "tool") {
          const prev = ctx.slice(0, i).reverse().find((x) => x.role !== "tool");
          assert.ok(prev?.tool_calls?.some((c) => c.id === m.tool_call_id), `tool result ${m.tool_call_id} has its call`);
        }
      });
      assert.ok(ctx.filter((m) => m.role !== "system").length < 120);
    }
    const req = await cw.buildRequest(s.id, { budget: 500, format: "anthropic", tools });
    assert.equal(req.tools?.[0]?.name, "weather");
    assert.ok(Array.isArray(req.system));
  });
});

describe("usage, status, summaries, errors", () => {
  test("recordUsage takes the answers of both wire formats and AI SDK usage", async () => {
    const s = await cw.createSession();
    const t = await cw.turn(s.id, { role: "user", content: "hello" }, { request: true });
    const completion = await post(mock, "/v1/chat/completions", { ...t.request, model: "mock" });
    assert.equal(await cw.recordUsage(s.id, completion), 1);
    const at = await cw.buildRequest(s.id, { format: "anthropic" });
    const message = await post(mock, "/v1/messages", { ...at, model: "mock" });
    assert.equal(await cw.recordUsage(s.id, message), 2);
    assert.equal(await cw.recordUsage(s.id, { inputTokens: 100, outputTokens: 20, totalTokens: 120,
      inputTokenDetails: { noCacheTokens: 60, cacheReadTokens: 40, cacheWriteTokens: 0 } }), 3);
    const r = (await db.pool.query(
      "SELECT id::int, provider, input_tokens::int, cached_tokens::int, output_tokens::int FROM ctxwin.usage_log WHERE session_id = $1 ORDER BY id",
      [s.id])).rows;
    const cu = completion["usage"] as { prompt_tokens: number; completion_tokens: number };
    const mu = message["usage"] as { input_tokens: number; output_tokens: number };
    assert.deepEqual(r, [
      { id: 1, provider: "openai", input_tokens: cu.prompt_tokens, cached_tokens: 0, output_tokens: cu.completion_tokens },
      { id: 2, provider: "anthropic", input_tokens: mu.input_tokens, cached_tokens: 0, output_tokens: mu.output_tokens },
      { id: 3, provider: "openai", input_tokens: 100, cached_tokens: 40, output_tokens: 20 },
    ]);
    await assert.rejects(cw.recordUsage(s.id, { tokens: 12 }), (e: unknown) =>
      e instanceof InvalidArgument && e.code === "22023" && /is not an OpenAI, Anthropic or Gemini usage object/.test(e.message) && !!e.detail && !!e.hint);
  });

  test("status() is typed: numbers, dates, arrays", async () => {
    const s = await cw.createSession({ systemPrompt: "Be brief." });
    await cw.append(s.id, [{ role: "user", content: "one" }, { role: "assistant", content: "two" }]);
    const st = await cw.status(s.id);
    assert.equal(st.sessionId, s.id);
    assert.equal(st.messageCount, 2);
    assert.equal(typeof st.budget, "number");
    assert.equal(st.windowMessages, 2);
    assert.equal(typeof st.windowTokens, "number");
    assert.equal(st.willTrigger, false);
    assert.equal(st.model, "gpt-4o");
    assert.equal(st.summaryUpdatedAt, null);
    assert.match(await cw.report(s.id), /gpt-4o/);
  });

  test("summarize(force, instructions) writes ctxwin's summary; no message is deleted", async () => {
    const s = await cw.createSession({ systemPrompt: "Trip planner." });
    const msgs = Array.from({ length: 12 }, (_, i) => ({ role: i % 2 ? "assistant" : "user",
      content: `Day ${i}: Oslo to Bergen by train, seat 4${i}, ticket NSB-${100 + i}.` }));
    await cw.append(s.id, msgs);
    assert.equal(await cw.summarize(s.id), null, "no trigger fires: nothing to summarize");
    const sum = await cw.summarize(s.id, { force: true, instructions: "keep the ticket numbers" });
    assert.ok(sum);
    assert.equal(sum.version, 1);
    assert.equal(sum.fromId, 1);
    assert.equal(sum.throughId, 6);
    assert.match(sum.content, /NSB-10/);
    assert.ok(sum.createdAt instanceof Date);
    const st = await cw.status(s.id);
    assert.equal(st.summaryThroughId, 6);
    assert.equal(st.summaryVersion, 1);
    assert.equal((await rows(s.id)).length, 12, "summaries never delete messages");
    assert.equal((await cw.messages(s.id)).length, 12);
    const ctx = await cw.buildContext(s.id);
    assert.equal(ctx.length, 7);
    assert.equal(ctx[0]!.role, "system");
    assert.ok(contentText(ctx[0]!.content).includes("Trip planner.") && contentText(ctx[0]!.content).includes(sum.content));
    assert.equal(ctx.filter((m) => m.role !== "system").length, 6);
    const session = cw.session(s.id);
    assert.equal((await session.messages({ after: 10 })).map((m) => m.id).join(), "11,12");
  });

  test("errors keep PostgreSQL's SQLSTATE, detail and hint", async () => {
    const missing = "00000000-0000-4000-8000-000000000001";
    await assert.rejects(cw.append(missing, { role: "user", content: "x" }), (e: unknown) =>
      e instanceof SessionNotFound && e.code === "P0002" && /does not exist/.test(e.message) && /Create it first/.test(e.hint!));
    await assert.rejects(cw.turn(missing, { role: "user", content: "x" }), SessionNotFound);
    await assert.rejects(cw.status(missing), (e: unknown) => e instanceof CtxwinError && e.code === "P0002");
    const s = await cw.createSession({ systemPrompt: "You are a helpful assistant." });
    await cw.append(s.id, { role: "user", content: "Hello!" });
    await assert.rejects(cw.buildContext(s.id, { budget: 18 }), (e: unknown) =>
      e instanceof BudgetTooSmall && e instanceof InvalidArgument && e.code === "22023" && /too small/.test(e.message) && !!e.detail);
    await assert.rejects(cw.buildContext(s.id, { tools: [{ type: "function", function: { name: "" } }] }), (e: unknown) =>
      e instanceof CtxwinError && e.code === "22023" && /tools\[0\]\.function\.name/.test(e.message));
    // errors that are not ctxwin's pass through as CtxwinErrors with their code
    await assert.rejects(cw.query("SELECT 1/0"), (e: unknown) => e instanceof CtxwinError && e.code === "22012");
    assert.throws(() => new Ctxwin({} as unknown as pg.Pool), TypeError);
  });
});

describe("recall: search, the conversation_search tool, one message whole", () => {
  const talk: ChatMessage[] = [
    { role: "user", content: "Order ORD-48213 never arrived. The label was src/labels/eu-2025.pdf." },
    { role: "assistant", content: "The carrier returned ORD-48213 with error E4031 (address incomplete)." },
    { role: "user", content: "Thanks. Please also refund the shipping." },
    { role: "assistant", content: "Done: the shipping is refunded." },
    ...Array.from({ length: 6 }, (_, i): ChatMessage => ({ role: i % 2 ? "assistant" : "user",
      content: `Small talk number ${i} about the weather.` })),
  ];
  const missing = "00000000-0000-4000-8000-000000000002";

  /** The tool call a model makes, in OpenAI's shape (arguments a JSON text). */
  function searchCall(id: string, args: Record<string, unknown>) {
    return { id, type: "function" as const, function: { name: "conversation_search", arguments: JSON.stringify(args) } };
  }

  /** A session whose first messages (the order's) a summary covers. */
  async function summarized(): Promise<string> {
    await db.pool.query(`INSERT INTO ctxwin.profiles (name, model, max_messages_before_summary, min_recent_messages,
                                                      max_summary_tokens, summary_strategy)
                         VALUES ('offline', 'gpt-4o', 8, 2, 200, 'extractive') ON CONFLICT (name) DO NOTHING`);
    const s = await cw.createSession({ profile: "offline", systemPrompt: "You track orders." });
    await cw.append(s.id, talk);
    const sum = await cw.summarize(s.id, { force: true });
    assert.ok(sum && sum.throughId >= 2);
    const ctx = await cw.buildContext(s.id);
    assert.ok(!ctx.slice(1).some((m) => contentText(m.content).includes("src/labels/eu-2025.pdf")), "the window no longer shows it");
    return s.id;
  }

  test("search finds what the summary covers, with roles, maxResults and a time window", async () => {
    const s = await summarized();
    const hits = await cw.search(s, "ORD-48213");
    assert.deepEqual(hits.map((h) => h.id).sort(), [1, 2]);
    const first = hits.find((h) => h.id === 1)!;
    assert.equal(first.role, "user");
    assert.match(first.snippet, /ORD-48213/);
    assert.ok(first.createdAt instanceof Date && first.rank > 0);
    assert.ok(hits[0]!.rank >= hits[1]!.rank);
    assert.deepEqual((await cw.search(s, "48213", { roles: ["user"] })).map((h) => h.id), [1]);
    assert.deepEqual((await cw.search({ id: s }, "eu-2025.pdf")).map((h) => h.id), [1]);
    assert.deepEqual((await cw.search(s, "ORD-48213", { roles: ["assistant"] })).map((h) => [h.id, h.role]), [[2, "assistant"]]);
    assert.equal((await cw.search(s, "ORD-48213", { maxResults: 1 })).length, 1);
    const later = new Date(first.createdAt.getTime() + 365 * 86400e3);
    assert.deepEqual(await cw.search(s, "ORD-48213", { since: later }), []);
    assert.equal((await cw.search(s, "ORD-48213", { until: later.toISOString() })).length, 2);
    assert.deepEqual(await cw.session(s).search("nothing-like-this-9999"), []);
  });

  test("search's errors keep their SQLSTATE: an unknown session P0002, a bad maxResults or role 22023", async () => {
    const s = await cw.createSession();
    await assert.rejects(cw.search(missing, "ORD-48213"), (e: unknown) =>
      e instanceof SessionNotFound && e.code === "P0002" && /does not exist/.test(e.message));
    await assert.rejects(cw.search(s.id, "ORD-48213", { maxResults: 0 }), (e: unknown) =>
      e instanceof InvalidArgument && e.code === "22023" && e.detail === "It is 0.");
    await assert.rejects(cw.search(s.id, "ORD-48213", { maxResults: 101 }), (e: unknown) =>
      e instanceof InvalidArgument && e.code === "22023");
    await assert.rejects(cw.search(s.id, "ORD-48213", { roles: ["robot" as ChatMessage["role"]] }), (e: unknown) =>
      e instanceof InvalidArgument && e.code === "22023" && /robot/.test(e.message));
  });

  test("message() returns one stored message whole; an unknown id is MessageNotFound (P0002)", async () => {
    const s = await summarized();
    const m = await cw.message(s, 1);
    assert.equal(m.id, 1);
    assert.equal(m.role, "user");
    assert.equal(m.content, talk[0]!.content);
    assert.equal(typeof m.created_at, "string");
    assert.equal((await cw.session(s).message(2)).content, talk[1]!.content);
    await assert.rejects(cw.message(s, 999), (e: unknown) =>
      e instanceof MessageNotFound && e.code === "P0002" && /message 999/.test(e.message));
    await assert.rejects(cw.message(missing, 1), (e: unknown) => e instanceof SessionNotFound && e.code === "P0002");
  });

  test("buildRequest({ recall }) offers conversation_search; answerToolCall answers the model's call", async () => {
    const s = await summarized();
    const req = await cw.buildRequest(s, { recall: true });
    assert.deepEqual(req.tools?.map((t) => t.function.name), ["conversation_search"]);
    assert.equal((await cw.buildRequest(s)).tools?.length ?? 0, 0);
    const anthropic = await cw.buildRequest(s, { format: "anthropic", recall: true });
    assert.deepEqual(anthropic.tools?.map((t) => t.name), ["conversation_search"]);
    // build_request's other formats: the same window as Responses input items and as Gemini contents
    const responses = await cw.buildRequest(s, { format: "responses", recall: true });
    const items = responses["input"] as Array<Record<string, unknown>>;
    assert.deepEqual(items.filter((i) => "role" in i).map((i) => i["content"]),
      req.messages.filter((m) => !("tool_call_id" in m)).map((m) => m.content));
    assert.deepEqual((responses["tools"] as Array<{ name: string }>).map((t) => t.name), ["conversation_search"]);
    const gemini = await cw.buildRequest(s, { format: "gemini" });
    assert.ok(!("model" in gemini) && Array.isArray(gemini["contents"]));
    await assert.rejects(cw.buildContext(s, { format: "gemini" as "openai" }), (e: unknown) =>
      e instanceof CtxwinError && e.code === "22023");
    // the model's call, answered by ctxwin, appended as it is
    const call = searchCall("call_r1", { query: "ORD-48213", roles: ["user"], max_results: 3 });
    const answer = await cw.answerToolCall(s, call);
    assert.equal(answer.role, "tool");
    assert.equal(answer.tool_call_id, "call_r1");
    assert.equal(answer.name, "conversation_search");
    assert.match(answer.content, /\[#1 user /);
    assert.doesNotMatch(answer.content, /#2 /);
    const ids = await cw.append(s, [{ role: "assistant", content: null, tool_calls: [call] }, answer]);
    const ctx = await cw.buildContext(s);
    assert.equal(ctx.at(-1)!.tool_call_id, "call_r1");
    assert.equal(ctx.at(-1)!.content, answer.content);
    assert.equal((await cw.message(s, ids[1]!)).content, answer.content);
    // an Anthropic tool_use block
    const got = await cw.session(s).answerToolCall({ type: "tool_use", id: "toolu_r3", name: "conversation_search",
      input: { query: "refund" } });
    assert.equal(got.tool_call_id, "toolu_r3");
    assert.match(got.content, /\[#3 user /);
    // a call of another tool is the application's: 22023
    await assert.rejects(cw.answerToolCall(s, { id: "call_x", type: "function", function: { name: "get_weather", arguments: "{}" } }),
      (e: unknown) => e instanceof InvalidArgument && e.code === "22023" && /get_weather/.test(e.message));
    await assert.rejects(cw.answerToolCall(missing, call), (e: unknown) => e instanceof SessionNotFound && e.code === "P0002");
  });

  test("turn({ request, recall }) is build_request's body with the tool; recall without request is 22023", async () => {
    const s = await cw.createSession();
    const { ids, request } = await cw.turn(s.id, { role: "user", content: "Where is ORD-48213?" }, { request: true, recall: true });
    assert.deepEqual(ids, [1]);
    assert.deepEqual(request.tools?.map((t) => t.function.name), ["conversation_search"]);
    assert.deepEqual(request, await cw.buildRequest(s.id, { recall: true }));
    await assert.rejects(cw.turn(s.id, [], { recall: true } as unknown as { request: true }), (e: unknown) =>
      e instanceof InvalidArgument && e.code === "22023" && /recall needs request/.test(e.message));
  });
});
