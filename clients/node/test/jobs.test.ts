/**
 * Summaries by the application's own model: the LangGraph node given a
 * LangChain chat model (ChatOpenAI on the mock LLM) claims the summary job
 * (ctxwin.claim_summary), sends the model ctxwin's prompt and completes the
 * job (ctxwin.complete_summary) when the server has no LLM of its own; a
 * stale token is SummaryJobStale (CW001).  Skipped where the database's
 * ctxwin hands out no summary jobs.
 */
import assert from "node:assert/strict";
import { after, before, test } from "node:test";
import { HumanMessage } from "@langchain/core/messages";
import { ChatOpenAI } from "@langchain/openai";
import { Ctxwin, SummaryJobStale } from "../src/index.js";
import { SummarizationNode, sessionIdForThread } from "../src/langgraph.js";
import { createTestDb, startMockLlm, type MockLlm, type TestDb } from "./helpers.js";

let db: TestDb;
let mock: MockLlm;
let cw: Ctxwin;
let jobs = false;
/** The sessions the node's model summarized, and how many answers it gave. */
const answered: Array<{ session: string; requests: number }> = [];

before(async () => {
  db = await createTestDb("jobs");
  mock = await startMockLlm();
  cw = new Ctxwin(db.pool);
  jobs = await cw.hasSummaryJobs();
  await db.pool.query(`INSERT INTO ctxwin.profiles (name, model, min_recent_messages, max_summary_tokens, max_messages_before_summary)
                       VALUES ('jobs', 'gpt-4o', 2, 200, NULL)`);
});
after(async () => {
  await db?.drop();
  await mock?.stop();
});

test("the node's model writes its summaries: ctxwin's prompt to the model, its answer and usage stored", async (t) => {
  if (!jobs) { t.skip("this ctxwin has no ctxwin.claim_summary"); return; }
  const model = new ChatOpenAI({ model: "mock", apiKey: mock.key, configuration: { baseURL: mock.url + "/v1" }, maxRetries: 0 });
  const node = new SummarizationNode({ ctxwin: cw, maxTokens: 300, maxSummaryTokens: 100, profile: "jobs", model });
  const thread = "jobs-1";
  const session = sessionIdForThread(thread);
  const msgs: HumanMessage[] = [];
  const start = mock.requests().length;
  for (let i = 0; i < 8; i++) {
    msgs.push(new HumanMessage({ id: `q${i}`, content: `Order ORD-${100 + i} for customer C-${i}: ` + "please check the shipment. ".repeat(8) }));
    await node.invoke({ messages: msgs }, { configurable: { thread_id: thread } });
  }
  const info = (await cw.getSession(session))!;
  assert.ok(info.summaryVersion >= 1, "summarized");
  const reqs = mock.requests().slice(start);
  assert.ok(reqs.length >= 1, "by the node's model, over HTTP");
  answered.push({ session, requests: reqs.length });
  const first = reqs[0]!;
  assert.equal(first.body.messages[0]!["role"], "system", "ctxwin's summary prompt");
  assert.equal(info.conversationSummary, reqs.at(-1)!.response_text, "the model's last answer is the summary");
  const row = (await db.pool.query(
    "SELECT usage FROM ctxwin.summaries WHERE session_id = $1 AND version = 1", [session])).rows[0];
  assert.equal(row.usage?.prompt_tokens ?? row.usage?.input_tokens, first.usage?.["prompt_tokens"], "its usage recorded");
});

test("a job's token used twice is SummaryJobStale (CW001), nothing written", async (t) => {
  if (!jobs) { t.skip("this ctxwin has no ctxwin.claim_summary"); return; }
  const s = await cw.createSession({ profile: "jobs" });
  await cw.append(s.id, Array.from({ length: 6 }, (_, i) => ({ role: "user", content: `message ${i} about ORD-${i}` })));
  const job = (await cw.claimSummary(s.id, { force: true }))!;
  assert.ok(job.token);
  assert.ok(job.messages.length >= 1);
  await cw.completeSummary(job.token, "Orders ORD-0 to ORD-3 were discussed.");
  const version = (await cw.getSession(s.id))!.summaryVersion;
  await assert.rejects(cw.completeSummary(job.token, "again"), (e: unknown) => e instanceof SummaryJobStale && e.code === "CW001");
  assert.equal((await cw.getSession(s.id))!.summaryVersion, version);
});

test("a job given back (releaseSummary) frees its session at once, recording no failure", async (t) => {
  if (!jobs) { t.skip("this ctxwin has no ctxwin.claim_summary"); return; }
  const s = await cw.createSession({ profile: "jobs" });
  await cw.append(s.id, Array.from({ length: 6 }, (_, i) => ({ role: "user", content: `message ${i} about ORD-${i}` })));
  const job = (await cw.claimSummary(s.id, { force: true }))!;
  assert.equal(await cw.claimSummary(s.id, { force: true }), null, "held by the job");
  assert.equal(await cw.releaseSummary(job.token), true);
  assert.equal(await cw.releaseSummary(job.token), false, "a second release: it held nothing");
  const again = await cw.claimSummary(s.id, { force: true });
  assert.ok(again && again.token !== job.token, "claimed again at once, not after the lease");
  await assert.rejects(cw.completeSummary(job.token, "late"), (e: unknown) => e instanceof SummaryJobStale);
  const row = (await db.pool.query("SELECT compaction_failures, summary_version FROM ctxwin.sessions WHERE id = $1",
    [s.id])).rows[0];
  assert.deepEqual([row.compaction_failures, row.summary_version], [0, 0], "no failure and no summary recorded");
});

test("a model that answers longer than asked never stalls the summaries: each of its answers becomes one", async (t) => {
  if (!jobs) { t.skip("this ctxwin has no ctxwin.claim_summary"); return; }
  assert.ok(answered.length > 0);
  for (const a of answered) {
    const n = (await db.pool.query("SELECT count(*)::int AS n FROM ctxwin.summaries WHERE session_id = $1", [a.session])).rows[0].n;
    assert.equal(n, a.requests, "every answer of the model became a summary");
  }
});
