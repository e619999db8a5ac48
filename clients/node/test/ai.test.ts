/**
 * The AI SDK helper in real programs of the SDK: generateText and
 * streamText with @ai-sdk/openai's provider pointed at the mock LLM over
 * HTTP, a tool-calling loop with prepareStep, usage from onFinish, against
 * PostgreSQL with ctxwin.
 */
import assert from "node:assert/strict";
import { after, before, describe, test } from "node:test";
import { createOpenAI } from "@ai-sdk/openai";
import { generateText, simulateStreamingMiddleware, stepCountIs, streamText, tool, wrapLanguageModel } from "ai";
import { z } from "zod";
import { Ctxwin } from "../src/index.js";
import { CtxwinChat, toModelMessages } from "../src/ai.js";
import { createTestDb, startMockLlm, windowTokens, type MockLlm, type MockRequest, type TestDb } from "./helpers.js";

let db: TestDb;
let mock: MockLlm;
let cw: Ctxwin;
let openai: ReturnType<typeof createOpenAI>;

before(async () => {
  db = await createTestDb("ai");
  mock = await startMockLlm();
  cw = new Ctxwin(db.pool);
  openai = createOpenAI({ baseURL: mock.url + "/v1", apiKey: mock.key });
});
after(async () => {
  await db?.drop();
  await mock?.stop();
});

interface Row { id: number; role: string; content: string | null; tool_calls: Array<{ id: string }> | null;
  tool_call_id: string | null; name: string | null; client_key: string | null }

async function rows(session: string): Promise<Row[]> {
  return (await db.pool.query(
    "SELECT id::int, role, content, tool_calls, tool_call_id, name, client_key FROM ctxwin.messages WHERE session_id = $1 ORDER BY id",
    [session])).rows as Row[];
}

async function usageRows(session: string): Promise<Array<{ input_tokens: number; output_tokens: number }>> {
  return (await db.pool.query(
    "SELECT input_tokens::int, output_tokens::int FROM ctxwin.usage_log WHERE session_id = $1 ORDER BY id", [session])).rows;
}

/** The requests the mock got since n requests. */
function since(n: number): MockRequest[] {
  return mock.requests().slice(n);
}

/** Every tool message of a request follows the assistant message that called it. */
function assertPaired(messages: Array<Record<string, unknown>>): void {
  messages.forEach((m, i) => {
    if (m["role"] !== "tool") return;
    const prev = messages.slice(0, i).reverse().find((x) => x["role"] !== "tool");
    const calls = (prev?.["tool_calls"] ?? []) as Array<{ id: string }>;
    assert.ok(calls.some((c) => c.id === m["tool_call_id"]), `tool result ${String(m["tool_call_id"])} follows its call`);
  });
}

const searchHistory = tool({
  description: "Search the conversation's history.",
  inputSchema: z.object({ query: z.string() }),
  execute: async ({ query }) => `Found 2 invoices about ${query}: INV-7 and INV-9.`,
});

describe("generateText", () => {
  test("many turns: each request is ctxwin's window, each answer stored once, each request's usage recorded", async () => {
    const s = await cw.createSession({ systemPrompt: "You are a billing assistant." });
    const chat = new CtxwinChat(cw, s.id);
    const answers: string[] = [];
    for (let i = 0; i < 8; i++) {
      const n = mock.requests().length;
      const { messages, ids } = await chat.turn(`Question ${i}: what about invoice INV-${i}?`, { key: `u${i}` });
      assert.equal(ids.length, 1);
      assert.deepEqual(messages[0], { role: "system", content: "You are a billing assistant." });
      assert.deepEqual(messages.at(-1), { role: "user", content: `Question ${i}: what about invoice INV-${i}?` });
      const result = await generateText({ model: openai.chat("mock"), messages, allowSystemInMessages: true,
        onFinish: chat.onFinish });
      answers.push(result.text);
      const reqs = since(n);
      assert.equal(reqs.length, 1);
      // what the provider got is ctxwin's window, in order
      assert.deepEqual(reqs[0]!.body.messages.map((m) => [m["role"], m["content"]]),
        messages.map((m) => [m.role, m.content]));
    }
    const r = await rows(s.id);
    assert.equal(r.length, 16, "8 questions and 8 answers, no message dropped or duplicated");
    assert.deepEqual(r.filter((x) => x.role === "assistant").map((x) => x.content), answers);
    assert.deepEqual(r.filter((x) => x.role === "user").map((x) => x.client_key), [0, 1, 2, 3, 4, 5, 6, 7].map((i) => `u${i}`));
    const u = await usageRows(s.id);
    const logged = mock.requests().filter((q) => q.body.messages[0]?.["content"] === "You are a billing assistant.");
    assert.deepEqual(u.map((x) => x.input_tokens), logged.map((q) => q.usage!["prompt_tokens"]));
    assert.deepEqual(u.map((x) => x.output_tokens), logged.map((q) => q.usage!["completion_tokens"]));
    // a retried turn stores nothing twice
    await chat.turn("Question 7: what about invoice INV-7?", { key: "u7" });
    assert.equal((await rows(s.id)).length, 16);
  });

  test("a tool-calling loop: call and result stored in order, paired in every request, usage per step", async () => {
    const s = await cw.createSession({ systemPrompt: "You answer from the history." });
    const chat = new CtxwinChat(cw, s.id);
    const n = mock.requests().length;
    const { messages } = await chat.turn("Which invoices did we discuss?");
    let finished = 0;
    const result = await generateText({
      model: openai.chat("fault-tool-calls"),       // the mock answers this model with a tool call
      tools: { search_history: searchHistory },
      messages,
      allowSystemInMessages: true,
      stopWhen: stepCountIs(4),
      prepareStep: async (o) => {
        const p = await chat.prepareStep(o);
        return o.stepNumber === 0 ? p : { ...p, model: openai.chat("mock") };   // then a plain answer
      },
      onFinish: async (e) => { await chat.onFinish(e); finished++; },
    });
    assert.equal(finished, 1);
    assert.equal(result.steps.length, 2);
    const r = await rows(s.id);
    assert.deepEqual(r.map((x) => x.role), ["user", "assistant", "tool", "assistant"]);
    const callId = r[1]!.tool_calls![0]!.id;
    assert.equal(r[1]!.content, "Let me look that up first.");
    assert.equal(r[2]!.tool_call_id, callId);
    assert.equal(r[2]!.name, "search_history");
    assert.equal(r[2]!.content, "Found 2 invoices about billing: INV-7 and INV-9.");
    assert.equal(r[3]!.content, result.text);
    assert.deepEqual(r.map((x) => x.client_key?.replace(/:chatcmpl-[0-9a-f]+/, ":ID") ?? null),
      [null, `calls:${callId}`, `tool:${callId}`, "ai:ID:0"]);
    const reqs = since(n);
    assert.equal(reqs.length, 2);
    // step 2's request was ctxwin's window: the call, then its result
    const second = reqs[1]!.body.messages;
    assert.deepEqual(second.map((m) => m["role"]), ["system", "user", "assistant", "tool"]);
    assertPaired(second);
    assert.deepEqual(await usageRows(s.id), reqs.map((q) => ({ input_tokens: q.usage!["prompt_tokens"], output_tokens: q.usage!["completion_tokens"] })));
    // onFinish called again (a retry) stores nothing twice
    await chat.onFinish({ steps: result.steps });
    assert.equal((await rows(s.id)).length, 4);
    assert.equal((await usageRows(s.id)).length, 2);
    // the next turn sees the whole exchange, the tool call with its result
    const next = await chat.turn("Thanks. And INV-9?");
    assert.deepEqual(next.messages.map((m) => m.role), ["system", "user", "assistant", "tool", "assistant", "user"]);
  });

  test("a long tool loop with prepareStep keeps every request within the budget", async () => {
    await db.pool.query("INSERT INTO ctxwin.profiles (name, max_messages_before_summary) VALUES ('tight', NULL)");
    const s = await cw.createSession({ systemPrompt: "Budgeted.", profile: "tight" });
    const budget = 260;
    const chat = new CtxwinChat(cw, s.id, { budget });
    for (let turn = 0; turn < 5; turn++) {
      const n = mock.requests().length;
      const { messages } = await chat.turn(`Turn ${turn}: look up the invoices of customer C-${turn} once more please.`);
      await generateText({
        model: openai.chat("fault-tool-calls"), tools: { search_history: searchHistory }, messages,
        allowSystemInMessages: true, stopWhen: stepCountIs(3),
        prepareStep: chat.prepareStep, onFinish: chat.onFinish,
      });
      const reqs = since(n);
      assert.equal(reqs.length, 3);
      for (const q of reqs.slice(1)) {
        assert.ok(await windowTokens(db.pool, q.body.messages, "o200k_base") <= budget, "within the budget");
        assertPaired(q.body.messages);
      }
    }
    const r = await rows(s.id);
    // each turn: the question, then 3 steps of an answer with a call and its result
    assert.equal(r.length, 5 * 7);
    assert.deepEqual(r.slice(0, 7).map((x) => x.role), ["user", "assistant", "tool", "assistant", "tool", "assistant", "tool"]);
    assert.equal(new Set(r.map((x) => x.client_key).filter(Boolean)).size, r.filter((x) => x.client_key).length);
    assert.equal((await usageRows(s.id)).length, 15);
    const last = mock.requests().at(-1)!.body.messages;
    assert.ok(last.length < r.length / 2, "the history is longer than the budget: older messages are left out, not deleted");
  });
});

describe("streamText", () => {
  test("a streamed answer is stored whole, once, with its usage", async () => {
    const s = await cw.createSession({ systemPrompt: "Stream." });
    const chat = new CtxwinChat(cw, s.id);
    const model = wrapLanguageModel({ model: openai.chat("mock"), middleware: simulateStreamingMiddleware() });
    for (let i = 0; i < 3; i++) {
      const { messages } = await chat.turn(`Stream answer ${i} about DEPLOY-${i}`);
      let done!: () => void;
      const finished = new Promise<void>((r) => { done = r; });
      const result = streamText({ model, messages, allowSystemInMessages: true,
        onFinish: async (e) => { await chat.onFinish(e); done(); } });
      let text = "";
      for await (const chunk of result.textStream) text += chunk;
      await finished;
      assert.ok(text.length > 0);
      const r = await rows(s.id);
      assert.equal(r.length, 2 * (i + 1));
      assert.equal(r.at(-1)!.content, text);
    }
    assert.equal((await usageRows(s.id)).length, 3);
  });
});

describe("summaries", () => {
  test("after a summary the request carries it in the system message; it is never stored as a chat message", async () => {
    const s = await cw.createSession({ systemPrompt: "Support." });
    const chat = new CtxwinChat(cw, s.id);
    for (let i = 0; i < 6; i++) {
      const { messages } = await chat.turn(`Order ORD-${100 + i} is late, ticket SUP-${i}.`);
      await generateText({ model: openai.chat("mock"), messages, allowSystemInMessages: true, onFinish: chat.onFinish });
    }
    const sum = await cw.summarize(s.id, { force: true });
    assert.ok(sum);
    const n = mock.requests().length;
    const { messages } = await chat.turn("Any news?");
    await generateText({ model: openai.chat("mock"), messages, allowSystemInMessages: true, onFinish: chat.onFinish });
    const sent = since(n)[0]!.body.messages;
    assert.equal(sent[0]!["role"], "system");
    assert.ok(String(sent[0]!["content"]).includes(sum.content));
    assert.equal(sent.filter((m) => m["role"] !== "system").length, 7);
    const r = await rows(s.id);
    assert.equal(r.length, 14, "no message deleted, the summary not added");
    assert.ok(!r.some((x) => x.content?.includes(sum.content)));
  });

  test("toModelMessages keeps tool calls with their results", () => {
    const m = toModelMessages([
      { role: "system", content: "s" },
      { role: "assistant", content: null, tool_calls: [
        { id: "a", type: "function", function: { name: "f", arguments: "{\"x\":1}" } },
        { id: "b", type: "function", function: { name: "g", arguments: "{}" } }] },
      { role: "tool", tool_call_id: "a", content: "1" },
      { role: "tool", tool_call_id: "b", content: "2", name: "g" },
    ]);
    assert.deepEqual(m, [
      { role: "system", content: "s" },
      { role: "assistant", content: [
        { type: "tool-call", toolCallId: "a", toolName: "f", input: { x: 1 } },
        { type: "tool-call", toolCallId: "b", toolName: "g", input: {} }] },
      { role: "tool", content: [
        { type: "tool-result", toolCallId: "a", toolName: "f", output: { type: "text", value: "1" } },
        { type: "tool-result", toolCallId: "b", toolName: "g", output: { type: "text", value: "2" } }] },
    ]);
  });
});
