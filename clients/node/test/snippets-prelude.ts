/**
 * The prelude of the READMEs' TypeScript blocks (test/snippets.mjs makes a
 * module of each README's blocks; test/readme.test.ts runs them): what a
 * reader's program would already have before the code a block shows.
 *
 * - the imports a block uses and does not show (the main README's block
 *   shows none): pg, Ctxwin, generateText, the LangGraph.js names;
 * - `openai`: the OpenAI SDK's client, on the mock LLM;
 * - `model` and `tools`: an AI SDK chat model on the mock LLM and a tool set;
 * - `pool`: a pg.Pool on the test's database (a block's own `new pg.Pool()`
 *   reaches it too: the test sets PGDATABASE); `pg` is node-postgres, whose
 *   pools tearDown ends, so that none is left connected to the database the
 *   test then drops (its connections ended by DROP DATABASE ... FORCE, an
 *   idle pool would raise an error with no one to catch it);
 * - `State` and `callModel`: a LangGraph.js state with the node's keys and an
 *   agent node that sends `summarized_messages` to a chat model on the mock;
 * - `chatModel`: that chat model (@langchain/openai's ChatOpenAI on the mock).
 *
 * A block's module imports the names below that its blocks do not import
 * themselves; they are bound (live) by setUp.
 */
import { createOpenAI } from "@ai-sdk/openai";
import { HumanMessage, type BaseMessage } from "@langchain/core/messages";
import { Annotation, MemorySaver, START, StateGraph, messagesStateReducer } from "@langchain/langgraph";
import { ChatOpenAI } from "@langchain/openai";
import { generateText, tool, type LanguageModel } from "ai";
import { Ctxwin } from "ctxwin";
import OpenAI from "openai";
import pg from "pg";
import { z } from "zod";

/** node-postgres as the blocks see it: each Pool they make is ended by tearDown. */
const opened: pg.Pool[] = [];
class Pool extends pg.Pool {
  constructor(config?: pg.PoolConfig) {
    super(config);
    // a connection still closing when the test drops its database is terminated: not the block's error
    this.on("error", () => { /* see above */ });
    opened.push(this);
  }
}
const blocksPg: typeof pg = Object.assign(Object.create(pg) as typeof pg, { Pool });

let openai: OpenAI;
let model: LanguageModel;
let pool: pg.Pool;
let chatModel: ChatOpenAI;

const tools = {
  lookup_order: tool({
    description: "Look up an order by its number.",
    inputSchema: z.object({ order: z.string() }),
    execute: async ({ order }) => `Order ${order} left the warehouse on Monday.`,
  }),
};

const State = Annotation.Root({
  messages: Annotation<BaseMessage[]>({ reducer: messagesStateReducer, default: () => [] }),
  summarized_messages: Annotation<BaseMessage[]>({ reducer: (_a, b) => b, default: () => [] }),
  context: Annotation<Record<string, unknown>>({ reducer: (a, b) => ({ ...a, ...b }), default: () => ({}) }),
});

async function callModel(state: typeof State.State): Promise<{ messages: BaseMessage[] }> {
  return { messages: [await chatModel.invoke(state.summarized_messages)] };
}

// prelude (test/snippets.mjs reads this list)
export { openai, model, tools, pool, State, callModel, chatModel, blocksPg as pg, Ctxwin, generateText, StateGraph, START, MemorySaver, HumanMessage };

/** Points the prelude at the mock LLM (its base URL, with /v1) and the test's database. */
export function setUp(baseURL: string, apiKey: string, database: string): void {
  openai = new OpenAI({ baseURL, apiKey, maxRetries: 0 });
  model = createOpenAI({ baseURL, apiKey }).chat("mock");
  pool = new pg.Pool({ database, max: 2 });
  pool.on("error", () => { /* a connection still closing when the test drops its database */ });
  chatModel = new ChatOpenAI({ model: "mock", apiKey, configuration: { baseURL }, maxRetries: 0 });
}

/** Closes what setUp opened. */
export async function tearDown(): Promise<void> {
  await pool?.end();
  // a block may have ended its own already (node-postgres refuses a second end)
  await Promise.all(opened.splice(0).filter((p) => !p.ending).map((p) => p.end()));
}

/** A fenced block of a README, as test/snippets.mjs found it. */
export interface SnippetBlock {
  /** The README, from the repository's root. */
  path: string;
  /** Its first line of code. */
  line: number;
  lang: string;
  /** The heading it is under. */
  heading: string;
  text: string;
}

/** Called after each ts block with the names the block declared, by name. */
export type AfterBlock = (block: SnippetBlock, made: Record<string, unknown>) => Promise<void>;
