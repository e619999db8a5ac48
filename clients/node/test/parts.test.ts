/**
 * Content parts and images, wherever the server takes them (docs/images.md):
 * OpenAI's text and image_url parts, Anthropic's image blocks, the AI SDK's
 * image and file parts, LangChain's image blocks, stored as parts and
 * counted by their size; the window's images reach the model through the
 * AI SDK (generateText) and LangChain (ChatOpenAI), both on the mock LLM.
 * Images where the server refuses them (outside user messages) and parts
 * it does not store are refused before anything is sent.
 */
import assert from "node:assert/strict";
import { after, before, test } from "node:test";
import { createOpenAI } from "@ai-sdk/openai";
import { AIMessage, HumanMessage } from "@langchain/core/messages";
import { ChatOpenAI } from "@langchain/openai";
import { generateText } from "ai";
import { CtxwinChat, toModelMessages } from "../src/ai.js";
import { Ctxwin, MessageConversionError, toChatMessages } from "../src/index.js";
import { toLangChainMessage } from "../src/langgraph.js";
import { createTestDb, startMockLlm, type MockLlm, type TestDb } from "./helpers.js";

let db: TestDb;
let mock: MockLlm;
let cw: Ctxwin;

before(async () => {
  db = await createTestDb("parts");
  mock = await startMockLlm();
  cw = new Ctxwin(db.pool);
});
after(async () => {
  await db?.drop();
  await mock?.stop();
});

const GIF = "R0lGODlhAQABAIAAAAAAAP///yH5BAEAAAAALAAAAAABAAEAAAIBRAA7";                        // 1x1
const PNG = "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mNkYPhfDwAChwGA60e6kgAAAABJRU5ErkJggg=="; // 1x1

async function stored(session: string): Promise<Array<{ role: string; content: string; parts: unknown; tokens: number }>> {
  return (await db.pool.query(
    `SELECT role, content, content_parts AS parts, token_count AS tokens FROM ctxwin.messages WHERE session_id = $1 ORDER BY id`,
    [session])).rows;
}

test("every shape's image is stored as a part and counted by its size, not its base64", async () => {
  const s = await cw.createSession();
  await cw.append(s.id, [
    // OpenAI, with ctxwin's size of an image behind a URL
    { role: "user", content: [{ type: "text", text: "What is on this plan?" },
      { type: "image_url", image_url: { url: "https://example.com/plan.png", detail: "high" }, width: 1024, height: 1024 }] },
    // Anthropic
    { role: "user", content: [{ type: "image", source: { type: "base64", media_type: "image/gif", data: GIF } },
      { type: "text", text: "And this one?" }] },
    // AI SDK: bytes without a media type (read from them), and an image file
    { role: "user", content: [{ type: "image", image: Buffer.from(GIF, "base64") }, { type: "text", text: "bytes" }] },
    { role: "user", content: [{ type: "file", data: PNG, mediaType: "image/png" }] },
    // LangChain: image_url as a string, and a standard image block
    new HumanMessage({ id: "lc-1", content: [{ type: "text", text: "from LangChain" }, { type: "image_url", image_url: "https://example.com/x.png" }] }),
    new HumanMessage({ id: "lc-2", content: [{ type: "image", url: "https://example.com/y.png" }] }),
  ]);
  const r = await stored(s.id);
  assert.equal(r.length, 6);
  assert.equal(r[0]!.content, "What is on this plan?");
  assert.equal(r[0]!.tokens, 776, "765 for the 1024x1024 image on gpt-4o (docs/images.md), not its URL's tokens");
  assert.deepEqual(r[1]!.parts, [{ type: "image", source: { type: "base64", media_type: "image/gif", data: GIF } },
    { type: "text", text: "And this one?" }]);
  assert.deepEqual((r[2]!.parts as unknown[])[0], { type: "image_url", image_url: { url: `data:image/gif;base64,${GIF}` } });
  assert.deepEqual(r[3]!.parts, [{ type: "image_url", image_url: { url: `data:image/png;base64,${PNG}` } }]);
  assert.deepEqual((r[4]!.parts as unknown[])[1], { type: "image_url", image_url: { url: "https://example.com/x.png" } });
  assert.deepEqual(r[5]!.parts, [{ type: "image_url", image_url: { url: "https://example.com/y.png" } }]);
  for (const m of r.slice(1, 4)) assert.ok(m.tokens < 300, `an inline 1x1 image is one tile, not its base64 (${m.tokens})`);

  // the window carries the parts, in either format
  const ctx = await cw.buildContext(s.id);
  assert.deepEqual(ctx[1]!.content, [{ type: "image_url", image_url: { url: `data:image/gif;base64,${GIF}` } },
    { type: "text", text: "And this one?" }]);
  const anth = await cw.buildContext(s.id, { format: "anthropic" });
  assert.ok(JSON.stringify(anth.messages).includes('"media_type":"image/png"'));
});

test("images are refused where the server refuses them, before anything is stored", async () => {
  const s = await cw.createSession();
  assert.throws(() => toChatMessages({ role: "assistant", content: [{ type: "image_url", image_url: { url: "https://x/y.png" } }] }),
    (e: unknown) => e instanceof MessageConversionError && /user messages only/.test(e.message));
  assert.throws(() => toChatMessages(new AIMessage({ content: [{ type: "image_url", image_url: "https://x/y.png" }] })),
    MessageConversionError);
  assert.throws(() => toChatMessages({ role: "user", content: [{ type: "image", image: Buffer.from("not an image") }] }),
    (e: unknown) => e instanceof MessageConversionError && /media type/.test(e.message));
  assert.throws(() => toChatMessages({ role: "user", content: [{ type: "file", data: "JVBERi0=", mediaType: "application/pdf" }] }),
    MessageConversionError);
  assert.equal((await stored(s.id)).length, 0);
});

test("the AI SDK: a turn with an image sends it to the model; the window's images become image parts", async () => {
  const s = await cw.createSession({ systemPrompt: "You describe pictures." });
  const chat = new CtxwinChat(cw, s.id);
  const { messages } = await chat.turn({ role: "user", content: [{ type: "text", text: "What is this?" },
    { type: "image", image: Buffer.from(GIF, "base64"), mediaType: "image/gif" }] });
  assert.deepEqual(messages.at(-1), { role: "user", content: [{ type: "text", text: "What is this?" },
    { type: "image", image: GIF, mediaType: "image/gif" }] });
  assert.deepEqual(toModelMessages([{ role: "user", content: [{ type: "image_url", image_url: { url: "https://example.com/a.png" } }] }]),
    [{ role: "user", content: [{ type: "image", image: new URL("https://example.com/a.png") }] }]);
  const start = mock.requests().length;
  const model = createOpenAI({ baseURL: mock.url + "/v1", apiKey: mock.key }).chat("mock");
  const result = await generateText({ model, messages, allowSystemInMessages: true, onFinish: chat.onFinish });
  assert.ok(result.text);
  const sent = mock.requests()[start]!.body.messages.at(-1)!;
  assert.deepEqual(sent["content"], [{ type: "text", text: "What is this?" },
    { type: "image_url", image_url: { url: `data:image/gif;base64,${GIF}` } }]);
  assert.equal((await stored(s.id)).length, 2, "the question with its image, and the answer");
});

test("LangChain: the window's images reach ChatOpenAI as image_url blocks", async () => {
  const s = await cw.createSession();
  await cw.append(s.id, { role: "user", content: [{ type: "text", text: "Look:" },
    { type: "image", source: { type: "url", url: "https://example.com/z.png" } }] });
  const window = (await cw.buildContext(s.id)).map((m) => toLangChainMessage(m));
  const start = mock.requests().length;
  const model = new ChatOpenAI({ model: "mock", apiKey: mock.key, configuration: { baseURL: mock.url + "/v1" }, maxRetries: 0 });
  await model.invoke(window);
  const sent = mock.requests()[start]!.body.messages.at(-1)!;
  assert.deepEqual(sent["content"], [{ type: "text", text: "Look:" }, { type: "image_url", image_url: { url: "https://example.com/z.png" } }]);
});
