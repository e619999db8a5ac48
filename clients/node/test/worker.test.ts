/**
 * The LangGraph.js node with ctxwin's background worker, on a cluster of
 * its own with ctxwin preloaded (helpers' startWorkerCluster): the worker
 * writes the summaries, no run of the node waits for one, and the run
 * after a summary lands carries it; when the worker stops serving the
 * database, the node summarizes by itself again.
 */
import assert from "node:assert/strict";
import { after, before, describe, test } from "node:test";
import { HumanMessage, type BaseMessage } from "@langchain/core/messages";
import { Annotation, MemorySaver, START, StateGraph, messagesStateReducer } from "@langchain/langgraph";
import { ChatOpenAI } from "@langchain/openai";
import pg from "pg";
import { Ctxwin, toChatMessages } from "../src/index.js";
import { SummarizationNode, sessionIdForThread, type RunningSummary } from "../src/langgraph.js";
import {
  WAITING_DB, WORKER_DB, startMockLlm, startWorkerCluster, waitFor, windowTokens, type MockLlm, type WorkerCluster,
} from "./helpers.js";

/** The summary model: the mock answers after 4 s, so runs go on while the worker's summary is pending. */
const SLOW = "slow-4000";
const MAX_TOKENS = 600;

let mock: MockLlm;
let cluster: WorkerCluster;
let pool: pg.Pool;

before(async () => {
  mock = await startMockLlm();
  cluster = await startWorkerCluster(mock);
  pool = new pg.Pool({ ...cluster.config(WORKER_DB), max: 4 });
});
after(async () => {
  await pool?.end();
  await cluster?.stop();
  await mock?.stop();
});

const State = Annotation.Root({
  messages: Annotation<BaseMessage[]>({ reducer: messagesStateReducer, default: () => [] }),
  summarized_messages: Annotation<BaseMessage[]>({ reducer: (_a, b) => b, default: () => [] }),
  context: Annotation<Record<string, unknown>>({ reducer: (a, b) => ({ ...a, ...b }), default: () => ({}) }),
});

type Update = { summarized_messages: BaseMessage[]; context?: { running_summary?: RunningSummary } };

function userText(i: number): string {
  return `Turn ${i}: please remember that the parcel for customer number ${i} leaves the warehouse on a weekday morning.`;
}

describe("SummarizationNode with ctxwin's background worker", () => {
  test("workerRunning(): true where the worker serves, false where it runs and waits for ALTER EXTENSION UPDATE", async () => {
    assert.equal(await new Ctxwin(pool).workerRunning(), true);
    const waiting = await cluster.worker(WAITING_DB);
    assert.ok(waiting && waiting.pid !== null && waiting.state === "version mismatch", JSON.stringify(waiting));
    const c = new pg.Client(cluster.config(WAITING_DB));
    await c.connect();
    try {
      assert.equal(await new Ctxwin(c).workerRunning(), false, "a worker that serves nothing counted as running");
    } finally {
      await c.end();
    }
  });

  test("without a profile the node's own profile carries its trigger: the worker summarizes there, not at 30 messages", async () => {
    const sent: string[] = [];
    const recorded = { query: (text: string, values?: unknown[]) => { sent.push(text); return pool.query(text, values); } };
    const node = new SummarizationNode({ ctxwin: recorded, maxTokens: MAX_TOKENS, maxTokensBeforeSummary: 300,
      maxSummaryTokens: 100 });
    assert.equal(node.profileName, "langgraph-default-300-100");
    const model = new ChatOpenAI({ model: "mock", apiKey: mock.key, configuration: { baseURL: mock.url + "/v1" }, maxRetries: 0 });
    const graph = new StateGraph(State)
      .addNode("summarize", (state: typeof State.State, config: Parameters<SummarizationNode["invoke"]>[1]) => node.invoke(state, config))
      .addNode("agent", async (state: typeof State.State) => ({ messages: [await model.invoke(state.summarized_messages)] }))
      .addEdge(START, "summarize")
      .addEdge("summarize", "agent")
      .compile({ checkpointer: new MemorySaver() });
    const thread = "node-trigger-thread";
    const session = sessionIdForThread(thread);
    const config = { configurable: { thread_id: thread } };
    const summaries = async () => (await pool.query(
      "SELECT through_id::int FROM ctxwin.summaries WHERE session_id = $1 ORDER BY version", [session])).rows as Array<{ through_id: number }>;
    const sessionRow = async () => (await pool.query(
      `SELECT profile, compaction_queued_at IS NOT NULL AS queued,
              (SELECT count(*)::int FROM ctxwin.messages m WHERE m.session_id = s.id) AS n
       FROM ctxwin.sessions s WHERE id = $1`, [session])).rows[0] as { profile: string; queued: boolean; n: number };
    let t = 0;
    const turn = () => graph.invoke({ messages: [new HumanMessage({ content: userText(t), id: `trigger-${t++}` })] }, config);

    await turn();
    const s0 = await sessionRow();
    assert.equal(s0.profile, "langgraph-default-300-100", "the session is not on the node's profile");
    const p = (await pool.query(
      `SELECT p.trigger_ratio, p.max_messages_before_summary, p.max_tokens_before_summary, p.max_summary_tokens,
              p.model = d.model AND p.window_policy = d.window_policy AND p.min_recent_messages = least(d.min_recent_messages, 2)
                AND p.summary_model IS NOT DISTINCT FROM d.summary_model AS copied
       FROM ctxwin.profiles p, ctxwin.profiles d WHERE p.name = $1 AND d.name = 'default'`, [node.profileName])).rows[0];
    assert.deepEqual(p, { trigger_ratio: null, max_messages_before_summary: null, max_tokens_before_summary: 300,
      max_summary_tokens: 100, copied: true });
    assert.equal(s0.queued, false, "queued before the node's trigger");
    assert.deepEqual(await summaries(), []);

    // turns until the session passes the node's 300 tokens, far before the default profile's 30 messages
    let s = s0;
    while (!s.queued && (await summaries()).length === 0) {
      assert.ok(s.n < 29, `no summary queued after ${s.n} messages: the node's trigger has no effect`);
      await turn();
      s = await sessionRow();
    }
    const sums = await waitFor(async () => { const r = await summaries(); return r.length ? r : null; }, 30000, "the worker's summary");
    assert.ok(sums[0]!.through_id > 0 && sums[0]!.through_id < 30, JSON.stringify(sums));
    assert.ok(!sent.some((q) => q.includes("summarize_session")), "the node summarized, not the worker");
    // a second node with the same arguments finds the profile made (ON CONFLICT DO NOTHING)
    const again = new SummarizationNode({ ctxwin: pool, maxTokens: MAX_TOKENS, maxTokensBeforeSummary: 300, maxSummaryTokens: 100 });
    await again.invoke({ messages: [new HumanMessage({ content: "hello", id: "again-0" })] }, { configurable: { thread_id: "node-trigger-again" } });
    assert.equal((await pool.query("SELECT profile FROM ctxwin.sessions WHERE id = $1", [sessionIdForThread("node-trigger-again")])).rows[0]?.profile,
      "langgraph-default-300-100");
  });

  test("a StateGraph: the worker summarizes, no run waits, the next carries it; without the worker the node does", async () => {
    await pool.query(`INSERT INTO ctxwin.profiles (name, model, trigger_ratio, max_messages_before_summary,
                        max_tokens_before_summary, min_recent_messages, max_summary_tokens, summary_strategy,
                        summary_model, window_policy)
                      VALUES ('worker-small', 'gpt-4o', NULL, NULL, 300, 2, 200, 'llm', $1, 'sliding')`, [SLOW]);
    // the node's statements, as it sends them to the pool
    const sent: string[] = [];
    const recorded = { query: (text: string, values?: unknown[]) => { sent.push(text); return pool.query(text, values); } };
    const node = new SummarizationNode({ ctxwin: recorded, maxTokens: MAX_TOKENS, maxTokensBeforeSummary: 500,
      maxSummaryTokens: 200, profile: "worker-small" });
    const updates: Update[] = [];
    const model = new ChatOpenAI({ model: "mock", apiKey: mock.key, configuration: { baseURL: mock.url + "/v1" }, maxRetries: 0 });
    const graph = new StateGraph(State)
      .addNode("summarize", async (state: typeof State.State, config: Parameters<SummarizationNode["invoke"]>[1]) => {
        const u = await node.invoke(state, config);
        updates.push(u as unknown as Update);
        return u;
      })
      .addNode("agent", async (state: typeof State.State) => ({ messages: [await model.invoke(state.summarized_messages)] }))
      .addEdge(START, "summarize")
      .addEdge("summarize", "agent")
      .compile({ checkpointer: new MemorySaver() });
    const thread = "worker-thread";
    const session = sessionIdForThread(thread);
    const config = { configurable: { thread_id: thread } };
    const since = mock.requests().length;
    const worker0 = (await cluster.worker())!;
    const texts: string[] = [];

    type Row = { id: number; role: string; content: string; client_key: string };
    const rows = async () => (await pool.query(
      "SELECT id::int, role, content, client_key FROM ctxwin.messages WHERE session_id = $1 ORDER BY id", [session])).rows as Row[];
    const summaries = async () => (await pool.query(
      "SELECT version, through_id::int, content, strategy, model FROM ctxwin.summaries WHERE session_id = $1 ORDER BY version",
      [session])).rows as Array<{ version: number; through_id: number; content: string; strategy: string; model: string }>;
    const summaryRequests = () => mock.requests().slice(since).filter((r) => r.model === SLOW);
    const due = async () => (await pool.query("SELECT compaction_queued_at IS NOT NULL AS q FROM ctxwin.sessions WHERE id = $1",
      [session])).rows[0]?.q === true || summaryRequests().length > 0;

    /** One turn; checks that every message is stored once, in order; returns the node's update. */
    const turn = async (): Promise<Update> => {
      const t = texts.length;
      texts.push(userText(t));
      await graph.invoke({ messages: [new HumanMessage({ content: texts[t]!, id: `human-${t}` })] }, config);
      const u = updates.at(-1)!;
      const r = await rows();
      // the newest answer is stored on the next turn (the node runs before the model)
      assert.deepEqual(r.filter((x) => x.role === "user").map((x) => x.content), texts, "a user message lost or duplicated");
      assert.deepEqual(r.map((x) => x.role), [...Array.from({ length: t }, () => ["user", "assistant"]).flat(), "user"]);
      assert.deepEqual(r.map((x) => x.id), Array.from({ length: r.length }, (_, i) => i + 1));
      assert.equal(new Set(r.map((x) => x.client_key)).size, r.length, "a client key stored twice");
      assert.ok(await windowTokens(pool, toChatMessages(u.summarized_messages).messages, "o200k_base") <= MAX_TOKENS,
        "the window is within maxTokens");
      const req = mock.requests().filter((x) => x.model === "mock").at(-1)!;
      assert.deepEqual(req.body.messages.at(-1), { role: "user", content: texts[t] });
      return u;
    };

    // 1. runs until the session passes its trigger: the node leaves the
    // summary to the worker and returns the window as it is
    let u: Update | undefined;
    for (let i = 0; i < 20 && !(u && await due()); i++) {
      u = await turn();
      assert.equal(u.context?.running_summary, undefined);
    }
    assert.ok(await due(), "the session never passed its trigger");
    assert.deepEqual(await summaries(), [], "the run waited for the summary");
    assert.equal(u!.summarized_messages[0]!.getType(), "human", "a summary in the window before there is one");
    // 2. the worker's request is in flight (answered after 4 s): a run now goes on without it
    await waitFor(() => summaryRequests().length > 0, 10000, "the worker's summary request");
    u = await turn();
    assert.deepEqual(await summaries(), [], "the run waited for the summary");
    assert.equal(u.context?.running_summary, undefined);
    // 3. the worker's summary lands; the next run carries it
    const sums = await waitFor(async () => { const s = await summaries(); return s.length ? s : null; }, 30000, "the summary");
    u = await turn();
    assert.ok(!sent.some((q) => q.includes("summarize_session")), "the node summarized, not the worker");
    assert.equal(sums.length, 1);
    assert.equal(sums[0]!.strategy, "llm");
    assert.ok(sums[0]!.model.startsWith(SLOW), sums[0]!.model);
    const worker1 = (await cluster.worker())!;
    assert.equal(worker1.pid, worker0.pid);
    assert.ok(worker1.done - worker0.done >= 1, "the worker counts no summary done");
    const running = u.context?.running_summary;
    assert.ok(running, "the run after the summary landed has no running summary");
    assert.equal(running.summary, sums[0]!.content);
    const keys = (await rows()).map((x) => x.client_key);
    assert.equal(running.lastSummarizedMessageId, keys[sums[0]!.through_id - 1]);
    assert.deepEqual(new Set(running.summarizedMessageIds), new Set(keys.slice(0, sums[0]!.through_id)));
    const first = u.summarized_messages[0]!;
    assert.equal(first.getType(), "system", "the summary is not first");
    assert.ok(String(first.content).includes(sums[0]!.content));
    const window = mock.requests().filter((x) => x.model === "mock").at(-1)!.body.messages;
    assert.equal(window[0]!["role"], "system");
    assert.ok(String(window[0]!["content"]).includes(sums[0]!.content), "the model got no summary");
    assert.ok(window.length < keys.length, "the model got the whole history");
    for (const r of mock.requests().slice(since).filter((x) => x.model === "mock"))
      assert.ok(await windowTokens(pool, r.body.messages, "o200k_base") <= MAX_TOKENS, "a request over maxTokens");

    // 4. the worker stops serving the database: the next run that needs a
    // summary makes it in the node, and carries it
    await pool.query("UPDATE ctxwin.profiles SET summary_model = 'mock' WHERE name = 'worker-small'");
    await cluster.sql("postgres", `ALTER SYSTEM SET ctxwin.databases = '${WAITING_DB}'`, "SELECT pg_reload_conf()");
    try {
      await waitFor(async () => (await cluster.worker()) === null, 30000, "the worker to stop");
      const mark = sent.length;
      let made: Awaited<ReturnType<typeof summaries>> | null = null;
      for (let i = 0; i < 20 && !made; i++) {
        const before = (await summaries()).length;
        u = await turn();
        const now = await summaries();
        if (now.length > before) made = now;
      }
      assert.ok(made, "no summary without the worker");
      assert.ok(sent.slice(mark).some((q) => q.includes("summarize_session")), "no summary made by the node");
      assert.equal(u.context?.running_summary?.summary, made.at(-1)!.content, "the run that made the summary does not carry it");
      assert.equal(made.at(-1)!.strategy, "llm");
      assert.equal((await rows()).length, 2 * texts.length - 1);
    } finally {
      await cluster.sql("postgres", "ALTER SYSTEM RESET ctxwin.databases", "SELECT pg_reload_conf()");
      await waitFor(() => cluster.serving(), 30000, "the worker to serve again");
    }
  });
});
