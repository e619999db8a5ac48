/**
 * The LangGraph.js node in a real StateGraph with a MemorySaver
 * checkpointer, over many turns of a tool-calling agent whose chat model is
 * @langchain/openai's ChatOpenAI served by the mock LLM over HTTP, in both
 * key modes, against PostgreSQL with ctxwin.
 */
import assert from "node:assert/strict";
import { after, before, describe, test } from "node:test";
import { AIMessage, HumanMessage, RemoveMessage, ToolMessage, type BaseMessage } from "@langchain/core/messages";
import { tool } from "@langchain/core/tools";
import { Annotation, END, MemorySaver, REMOVE_ALL_MESSAGES, START, StateGraph, messagesStateReducer } from "@langchain/langgraph";
import { ToolNode } from "@langchain/langgraph/prebuilt";
import { ChatOpenAI } from "@langchain/openai";
import { z } from "zod";
import { Ctxwin, toChatMessages } from "../src/index.js";
import { SummarizationNode, sessionIdForThread, type RunningSummary } from "../src/langgraph.js";
import { createTestDb, startMockLlm, windowTokens, type MockLlm, type TestDb } from "./helpers.js";

let db: TestDb;
let mock: MockLlm;
let cw: Ctxwin;

before(async () => {
  db = await createTestDb("lg");
  mock = await startMockLlm();
  cw = new Ctxwin(db.pool);
  // a profile whose own triggers stay out of the way: the node's budget decides; it keeps at most 2 messages out of
  // summaries, as the node's own profile does (MIN_RECENT), so a summary can cover what the window leaves out
  await db.pool.query(`INSERT INTO ctxwin.profiles (name, model, min_recent_messages, max_summary_tokens, max_messages_before_summary)
                       VALUES ('agent', 'gpt-4o', 2, 200, NULL)`);
});
after(async () => {
  await db?.drop();
  await mock?.stop();
});

// a long result, so that windows are cut by the budget and not only by summaries
const searchHistory = tool(async ({ query }: { query: string }) => `Found invoices about ${query}: INV-7 (USD 120) and INV-9 (USD 80). ` +
  Array.from({ length: 12 }, (_, i) => `Line ${i}: invoice INV-${100 + i} paid by card on day ${i + 1}.`).join(" "),
  { name: "search_history", description: "Search the billing history.", schema: z.object({ query: z.string() }) });

function chatModel(name: string) {
  return new ChatOpenAI({ model: name, apiKey: mock.key, configuration: { baseURL: mock.url + "/v1" }, maxRetries: 0 })
    .bindTools([searchHistory]);
}

const State = Annotation.Root({
  messages: Annotation<BaseMessage[]>({ reducer: messagesStateReducer, default: () => [] }),
  summarized_messages: Annotation<BaseMessage[]>({ reducer: (_a, b) => b, default: () => [] }),
  context: Annotation<Record<string, unknown>>({ reducer: (a, b) => ({ ...a, ...b }), default: () => ({}) }),
});

/** An agent: summarize, then the model (a tool call for a new question, then a plain answer), then tools. */
function buildGraph(node: SummarizationNode, windowKey: "messages" | "summarized_messages", outputs: BaseMessage[][]) {
  const spy = async (state: typeof State.State, config: Parameters<SummarizationNode["invoke"]>[1]) => {
    const u = await node.invoke(state, config);
    const out = u[node.outputMessagesKey] as BaseMessage[];
    outputs.push(out);
    // no message leaves the model's view unsummarized: each stored one is covered by the summary or in the window
    const session = sessionIdForThread(String(config?.configurable?.["thread_id"]));
    const through = Number((await db.pool.query("SELECT summary_through_id AS t FROM ctxwin.sessions WHERE id = $1", [session])).rows[0].t);
    const shown = new Set(out.map((m) => m.id));
    checked++;
    for (const r of await rows(session)) {
      if (r.retracted_at === null && r.id > through && !shown.has(r.client_key ?? "")) unsummarized.push(`${session} #${r.id} (${r.role}), summary through #${through}`);
    }
    return u;
  };
  const agent = async (state: typeof State.State) => {
    const window = state[windowKey];
    const last = window.at(-1);
    const model = chatModel(last && last.getType() === "human" ? "fault-tool-calls" : "mock");
    return { messages: [await model.invoke(window)] };
  };
  return new StateGraph(State)
    .addNode("summarize", spy)
    .addNode("agent", agent)
    .addNode("tools", new ToolNode([searchHistory]))
    .addEdge(START, "summarize")
    .addEdge("summarize", "agent")
    .addConditionalEdges("agent", (s) => ((s.messages.at(-1) as AIMessage).tool_calls?.length ? "tools" : END))
    .addEdge("tools", "summarize")
    .compile({ checkpointer: new MemorySaver() });
}

interface Row { id: number; role: string; content: string | null; client_key: string | null; tool_call_id: string | null;
  retracted_at: Date | null }

async function rows(session: string): Promise<Row[]> {
  return (await db.pool.query("SELECT id::int, role, content, client_key, tool_call_id, retracted_at FROM ctxwin.messages WHERE session_id = $1 ORDER BY id",
    [session])).rows as Row[];
}

/** The checks every window written by the node must pass. */
async function checkWindow(out: BaseMessage[], maxTokens: number, equalKeys: boolean): Promise<BaseMessage[]> {
  let list = out;
  if (equalKeys) {
    assert.equal(list[0]!.getType(), "remove");
    assert.equal(list[0]!.id, REMOVE_ALL_MESSAGES);
    list = list.slice(1);
  } else {
    assert.ok(!list.some((m) => m.getType() === "remove"));
  }
  const chat = toChatMessages(list).messages;
  assert.ok(await windowTokens(db.pool, chat, "o200k_base") <= maxTokens, "the window is within maxTokens");
  // a tool result never without the call before it
  list.forEach((m, i) => {
    if (m.getType() !== "tool") return;
    const prev = list.slice(0, i).reverse().find((x) => x.getType() !== "tool") as AIMessage | undefined;
    assert.ok(prev?.tool_calls?.some((c) => c.id === (m as ToolMessage).tool_call_id), "tool result after its call");
  });
  // system messages (prompt, summary) only at the start
  const firstOther = list.findIndex((m) => m.getType() !== "system");
  assert.ok(!list.slice(firstOther).some((m) => m.getType() === "system"), "no system message inside the history");
  assert.ok(list.every((m) => typeof m.id === "string" && m.id.length > 0));
  return list;
}

async function runAgent(equalKeys: boolean) {
  const maxTokens = 420;
  const windowKey = equalKeys ? "messages" : "summarized_messages";
  const node = new SummarizationNode({ ctxwin: db.pool, maxTokens, maxSummaryTokens: 120, profile: "agent",
    systemPrompt: "You are a billing agent.", ...(equalKeys ? { outputMessagesKey: "messages" } : {}) });
  const outputs: BaseMessage[][] = [];
  const graph = buildGraph(node, windowKey, outputs);
  const thread = `billing-${equalKeys ? "equal" : "distinct"}`;
  const config = { configurable: { thread_id: thread } };
  const seen = new Map<string, BaseMessage>();          // every message the graph ever had, by id
  const turns = 12;
  for (let t = 0; t < turns; t++) {
    const n = mock.requests().length;
    const human = new HumanMessage({ content: `Turn ${t}: what did customer C-${t} pay on invoice INV-${t}?`, id: `human-${t}` });
    seen.set(human.id!, human);
    // every message the agent and the tools produce, as they produce them
    for await (const update of await graph.stream({ messages: [human] }, { ...config, streamMode: "updates" })) {
      for (const [name, u] of Object.entries(update as Record<string, { messages?: BaseMessage[] }>)) {
        if (name === "summarize") continue;
        for (const m of u.messages ?? []) seen.set(m.id!, m);
      }
    }
    const final = (await graph.getState(config)).values;
    const reqs = mock.requests().slice(n);
    assert.deepEqual(reqs.map((r) => r.model), ["fault-tool-calls", "mock"], `turn ${t}: a tool call, then an answer`);
    for (const r of reqs) assert.ok(await windowTokens(db.pool, r.body.messages, "o200k_base") <= maxTokens + 16,
      "what the model got is the window (its tool-call arguments as LangChain writes them)");
    assert.equal((final.messages as BaseMessage[]).at(-1)!.getType(), "ai");
  }
  assert.equal(outputs.length, 2 * turns, "the node ran before each model call");
  for (const o of outputs) await checkWindow(o, maxTokens, equalKeys);

  const session = sessionIdForThread(thread);
  // the last answer came after the node's last run: it is stored at the node's next run
  const lastAnswer = [...seen.values()].at(-1)!;
  assert.equal(lastAnswer.getType(), "ai");
  const rBefore = await rows(session);
  assert.ok(!rBefore.some((x) => x.client_key === lastAnswer.id));
  const infoBefore = (await cw.getSession(session))!;
  await node.invoke((await graph.getState(config)).values, config);
  const r = await rows(session);
  assert.equal(r.length, 4 * turns, "every message stored once: question, call, result, answer per turn");
  assert.equal(r.at(-1)!.client_key, lastAnswer.id);
  assert.equal(seen.size, 4 * turns);
  assert.deepEqual(r.map((x) => x.client_key).sort(), [...seen.keys()].sort(), "stored exactly the graph's messages");
  assert.deepEqual(r.filter((x) => x.role === "user").map((x) => x.client_key), Array.from({ length: turns }, (_, t) => `human-${t}`));
  assert.ok(!r.some((x) => x.role === "system"), "no summary or prompt written back as a chat message");
  assert.ok(!r.some((x) => x.client_key?.startsWith("ctxwin:")));
  r.forEach((x, i) => {
    if (x.role === "tool") assert.equal(r[i - 1]!.role, "assistant", "each result right after its call");
  });

  const info = (await cw.getSession(session))!;
  assert.deepEqual(info.metadata, { langgraph_thread_id: thread });
  assert.equal(info.profile, "agent");
  assert.ok(info.summaryVersion >= 2, `ctxwin summarized (${info.summaryVersion} summaries)`);
  assert.equal(info.messageCount, 4 * turns, "nothing deleted");
  const state = (await graph.getState(config)).values;
  const running = (state.context as { running_summary: RunningSummary }).running_summary;
  // the running summary is the session's as of the graph's last node run
  assert.equal(running.summary, infoBefore.conversationSummary);
  const throughKey = rBefore.find((x) => x.id === infoBefore.summaryThroughId)!.client_key;
  assert.equal(running.lastSummarizedMessageId, throughKey);
  const summarizedKeys = new Set(rBefore.filter((x) => x.id <= infoBefore.summaryThroughId).map((x) => x.client_key));
  assert.ok(running.summarizedMessageIds.length > 0);
  assert.ok(running.summarizedMessageIds.every((id) => summarizedKeys.has(id)));
  // the last window starts with the prompt and the summary, as system messages
  const last = await checkWindow(outputs.at(-1)!, maxTokens, equalKeys);
  assert.equal(last[0]!.getType(), "system");
  assert.ok(String(last[0]!.content).includes("You are a billing agent."));
  assert.ok(String(last[0]!.content).includes(infoBefore.conversationSummary!));
  if (equalKeys) {
    const msgs = state.messages as BaseMessage[];
    assert.ok(msgs.length < 4 * turns / 2, "the state holds the window, not the whole history");
    assert.equal(msgs[0]!.getType(), "system");
  } else {
    assert.equal((state.messages as BaseMessage[]).length, 4 * turns, "the input key keeps the whole history");
  }
}

/** Messages that were neither in the summary nor in a window the node wrote (checked after every run of buildGraph's node). */
const unsummarized: string[] = [];
let checked = 0;

describe("SummarizationNode in a StateGraph", () => {
  test("input and output keys distinct: summarized_messages is the window, messages the history", async () => {
    await runAgent(false);
  });

  test("input and output keys equal: RemoveMessage(REMOVE_ALL_MESSAGES) then the window", async () => {
    await runAgent(true);
  });

  test("threads map to their own sessions; a retried node run stores nothing twice", async () => {
    const node = new SummarizationNode({ ctxwin: cw, maxTokens: 1000, summarize: "inline" });
    const msgs = [new HumanMessage({ content: "hello", id: "h1" }), new AIMessage({ content: "hi", id: "a1" })];
    const a = await node.invoke({ messages: msgs }, { configurable: { thread_id: "t-a" } });
    await node.invoke({ messages: msgs }, { configurable: { thread_id: "t-a" } });
    await node.invoke({ messages: msgs.slice(0, 1) }, { configurable: { thread_id: "t-b" } });
    assert.notEqual(sessionIdForThread("t-a"), sessionIdForThread("t-b"));
    assert.equal((await rows(sessionIdForThread("t-a"))).length, 2);
    assert.equal((await rows(sessionIdForThread("t-b"))).length, 1);
    const out = a["summarized_messages"] as BaseMessage[];
    assert.deepEqual(out.map((m) => m.id), ["h1", "a1"], "the window's messages keep their ids");
    assert.equal(out[0], msgs[0], "an unchanged message is passed on as it was");
    const ctx = a["context"] as Record<string, unknown>;
    assert.equal(ctx["running_summary"], undefined, "no running summary before there is a summary");
    // the node's bookkeeping: its session and thread, and the stored messages its output showed
    assert.deepEqual(ctx["ctxwin"], { session: sessionIdForThread("t-a"), thread: "t-a",
      window: (await rows(sessionIdForThread("t-a"))).map((r) => [r.id, r.client_key]) });
  });

  test("without a thread id the node works, as LangMem's does: on the session its state's context names", async () => {
    const node = new SummarizationNode({ ctxwin: cw, maxTokens: 1000, summarize: "inline" });
    const msgs = [new HumanMessage({ content: "hello", id: "n1" }), new AIMessage({ content: "hi", id: "n2" })];
    const a = await node.invoke({ messages: msgs }, {});
    const book = (a["context"] as Record<string, { session: string; thread: string | null }>)["ctxwin"]!;
    assert.equal(book.thread, null);
    assert.deepEqual((a["summarized_messages"] as BaseMessage[]).map((m) => m.id), ["n1", "n2"]);
    // the next run of the same graph state: the same session, nothing stored twice
    const more = [...msgs, new HumanMessage({ content: "and now?", id: "n3" })];
    const b = await node.invoke({ messages: more, context: a["context"] }, {});
    assert.equal((b["context"] as Record<string, { session: string }>)["ctxwin"]!.session, book.session);
    assert.deepEqual((await rows(book.session)).map((r) => r.client_key), ["n1", "n2", "n3"]);
    // another graph without a thread or context: a session of its own
    const c = await node.invoke({ messages: msgs }, {});
    assert.notEqual((c["context"] as Record<string, { session: string }>)["ctxwin"]!.session, book.session);
    await assert.rejects(node.invoke({ messages: [new HumanMessage("no id")] }, { configurable: { thread_id: "t-c" } }),
      /required to have ID/);
  });
});

test("RemoveMessage of the newest turn retracts it: out of the window and the summary, the rows kept", async () => {
  const node = new SummarizationNode({ ctxwin: db.pool, maxTokens: 3000, profile: "agent", summarize: "inline" });
  const outputs: BaseMessage[][] = [];
  const graph = buildGraph(node, "summarized_messages", outputs);
  const thread = "retract-turn";
  const session = sessionIdForThread(thread);
  const config = { configurable: { thread_id: thread } };
  const ask = (t: number) => new HumanMessage({ content: `Turn ${t}: what did customer C-${100 + t} pay on invoice INV-${900 + t}?`, id: `rq-${t}` });
  for (let t = 0; t < 3; t++) await graph.invoke({ messages: [ask(t)] }, config);
  // a summary that covers the last turn's question
  const made = await cw.summarize(session, { force: true });
  assert.ok(made?.content.includes("INV-902"), "the summary holds the turn taken back");
  const turn2 = (await graph.getState(config)).values.messages.slice(8) as BaseMessage[];
  assert.equal(turn2[0]!.id, "rq-2");
  assert.equal(turn2.length, 4);
  const before = await rows(session);
  const from = before.find((r) => r.client_key === "rq-2")!.id;
  assert.ok(made!.throughId >= from);

  // the chat UI's "edit and resend": the turn removed from the state, another question asked
  await graph.updateState(config, { messages: turn2.map((m) => new RemoveMessage({ id: m.id! })) }, "agent");
  const n = outputs.length;
  await graph.invoke({ messages: [ask(3)] }, config);
  const gone = new Set(turn2.map((m) => m.id));
  for (const o of outputs.slice(n)) {
    assert.ok(!o.some((m) => gone.has(m.id)), "the turn taken back is in no later window");
    assert.ok(!o.some((m) => String(m.content).includes("INV-902")), "nor in the summary the window carries");
  }
  const info = (await cw.getSession(session))!;
  assert.ok(info.summaryThroughId < from, "the summary that covered it was replaced");
  assert.ok(!(info.conversationSummary ?? "").includes("INV-902"));
  const after = await rows(session);
  // the rows stay, marked; what came after is stored anew
  const taken = after.filter((r) => r.retracted_at !== null);
  assert.deepEqual(taken.map((r) => r.id), before.filter((r) => r.id >= from).map((r) => r.id));
  assert.equal(taken.length, 3, "the question, the call and its result (the answer was never stored)");
  const m = await cw.message(session, from);
  assert.equal(m.content, String(turn2[0]!.content));
  assert.ok((m as unknown as { retracted_at?: string }).retracted_at, "message() returns it with retracted_at");
  assert.ok(after.some((r) => r.client_key === "rq-3" && r.id > from));
  assert.equal(await cw.retract(session, after.at(-1)!.id + 1), 0, "nothing from past the newest message");
});

// after the agent tests above: over their 2 x 12 turns at maxTokens 420, with a tool result that fills half the budget
test("no message ever leaves the model's view unsummarized (a profile that keeps at most 2 messages out of summaries)", () => {
  assert.ok(checked > 40, `the check ran after each run of the node (${checked})`);
  assert.deepEqual(unsummarized, []);
});
