/**
 * LangChain.js 1.x middleware: the model call of a createAgent agent gets
 * ctxwin's window while the agent's state keeps every message.
 *
 *   const agent = createAgent({ model, tools, systemPrompt, checkpointer,
 *     middleware: [ctxwinMiddleware({ ctxwin: pool, budget: 4000 })] });
 *
 * Before each model call the state's messages not stored yet are appended
 * to the thread's session (keyed by their ids; the session created in the
 * same statement on first use) and the window is built in that statement:
 * the system prompt, ctxwin's summary, the newest messages within the
 * budget (tool definitions counted), tool results cleared as the profile
 * says.  The model gets that window instead of the state's list; the state
 * is left as it is.  The answer is stored after the call, with the usage
 * the provider reported.
 */
import { AIMessage, SystemMessage, type BaseMessage } from "@langchain/core/messages";
import { convertToOpenAITool } from "@langchain/core/utils/function_calling";
import { createMiddleware } from "langchain";
import { z } from "zod";
import { Ctxwin, WORKER_SERVES_SQL, type Queryable } from "./client.js";
import { contentText } from "./convert.js";
import { CtxwinError } from "./errors.js";
import { modelSummarizes, summarizeWithModel, toLangChainMessage, usageOfMessage, type SummaryModel } from "./langgraph.js";
import type { ChatMessage, ToolDefinition } from "./types.js";
import { sessionIdForThread, uuidv5 } from "./uuid.js";

export interface CtxwinMiddlewareOptions {
  /** A Ctxwin, or a pg Pool / Client (see "Transactions" in the README). */
  ctxwin: Ctxwin | Queryable;
  /** The window's budget in tokens; default the profile's (the model's window less its response reserve). */
  budget?: number;
  /** The profile of the sessions the middleware creates (default "default"). */
  profile?: string;
  /** The session of a run: default the thread's (sessionIdForThread, the Python client's mapping). */
  sessionId?: (threadId: string) => string;
  /** Record each answer's usage (default true). */
  recordUsage?: boolean;
  /** Count the agent's tool definitions in the budget (default true). */
  countTools?: boolean;
  /**
   * auto (default): when the session is queued for a summary and no
   * background worker serves the database, the middleware asks for it
   * (ctxwin.summarize_session) before the call; inline: whether a worker
   * serves or not; worker: never (the worker or summarize() does).
   */
  summarize?: "auto" | "inline" | "worker";
  /**
   * A LangChain chat model (SummarizationMiddleware's model): it writes the
   * summaries when the server has no LLM for the profile (or with
   * summarizeWith: "model"), through ctxwin's summary jobs
   * (claim_summary, the model, complete_summary; fail_summary when it
   * fails).  A due summary is written beside the model call, never waited
   * for, unless the window would otherwise leave out messages no summary
   * covers: then it is written first.
   */
  model?: SummaryModel;
  /** auto (default): the model when the server has no LLM for the profile; model; server (ctxwin.summarize_session). */
  summarizeWith?: "auto" | "model" | "server";
}

/** The namespace of the sessions of agents run without a thread (the Python client's middleware's). */
export const AGENT_NAMESPACE = "5d0f6a53-2f55-4f3e-a2bb-0c1a3e4b7f21";

/** The middleware's own state: the id of the newest state message stored. */
const stateSchema = z.object({ ctxwinStoredThrough: z.string().optional() });

export { usageOfMessage };

function textOf(m: ChatMessage): string {
  return contentText(m.content);
}

/**
 * The middleware: createAgent({ ..., middleware: [ctxwinMiddleware({ ctxwin: pool })] }).
 * Needs a thread (a checkpointer and config.configurable.thread_id) or sessionId.
 */
export function ctxwinMiddleware(options: CtxwinMiddlewareOptions) {
  const cw = options.ctxwin instanceof Ctxwin ? options.ctxwin : new Ctxwin(options.ctxwin);
  /** System prompts stored per session (so that a changed one is written once). */
  const prompts = new Map<string, string | null>();
  const profile = options.profile ?? "default";
  /** Whether the model writes the summaries (decided once). */
  let useModel: Promise<boolean> | null = null;
  /** Summaries by the model under way beside a model call, per session. */
  const pending = new Map<string, Promise<void>>();

  /** A summary by the model, warned about (never raised) when it fails. */
  const byModel = async (session: string): Promise<boolean> => {
    try {
      return await summarizeWithModel(cw, session, options.model!);
    } catch (e) {
      process.emitWarning(`ctxwin could not summarize session ${session}: ${e instanceof Error ? e.message : String(e)}`,
        "CtxwinWarning");
      return false;
    }
  };

  /** The run's session: the thread's, else (as the Python client's) one named after the conversation's first message. */
  const sessionOf = (configurable: Record<string, unknown> | undefined, messages: readonly BaseMessage[]): string => {
    const tid = configurable?.["thread_id"];
    if (typeof tid === "string" || typeof tid === "number") return (options.sessionId ?? sessionIdForThread)(String(tid));
    const first = messages.find((m) => typeof m.id === "string" && m.id !== "")?.id;
    if (first === undefined)
      throw new CtxwinError("the ctxwin middleware needs a thread (config.configurable.thread_id) or messages with ids",
        { hint: "Compile the agent with a checkpointer and invoke it with { configurable: { thread_id } }." });
    return uuidv5(`langchain-agent:${first}`, AGENT_NAMESPACE);
  };

  return createMiddleware({
    name: "CtxwinMiddleware",
    stateSchema,
    wrapModelCall: async (request, handler) => {
      const all = request.messages as BaseMessage[];
      const session = sessionOf(request.runtime.configurable as Record<string, unknown> | undefined, all);
      const mark = (request.state as { ctxwinStoredThrough?: string }).ctxwinStoredThrough;
      let start = 0;
      if (mark !== undefined) {
        const i = all.findIndex((m) => m.id === mark);
        if (i >= 0) start = i + 1;
      }
      const fresh = all.slice(start).filter((m) => m.getType() !== "system");
      for (const m of fresh) {
        if (typeof m.id !== "string" || m.id === "")
          throw new CtxwinError("the ctxwin middleware needs messages with ids", {
            hint: "createAgent's state gives every message an id; messages passed around it need one too." });
      }
      const systemPrompt = request.systemMessage?.text || null;
      if (prompts.get(session) !== systemPrompt) {
        // the agent's prompt is the session's (a missing session: none updated, created below with it)
        await cw.query(`UPDATE ctxwin.sessions SET system_prompt = $2::text
                        WHERE id = $1::uuid AND system_prompt IS DISTINCT FROM $2::text`, [session, systemPrompt]);
        prompts.set(session, systemPrompt);
      }
      const tools: ToolDefinition[] | null = options.countTools === false || !request.tools?.length ? null
        : request.tools.map((t) => convertToOpenAITool(t as Parameters<typeof convertToOpenAITool>[0]) as ToolDefinition);
      let { context, messages: rows } = await cw.turn(session, fresh, {
        keys: fresh.map((m) => m.id as string),
        budget: options.budget ?? null,
        tools,
        create: { profile: options.profile ?? "default", systemPrompt },
      });
      if (options.model && options.summarize !== "worker") useModel ??= modelSummarizes(cw, profile, options.summarizeWith);
      if (useModel !== null && await useModel) {
        // the model's summary: before the call only when the window leaves out messages no summary covers
        const r = (await cw.query(
          `SELECT s.compaction_queued_at IS NOT NULL AS queued,
                  EXISTS (SELECT 1 FROM ctxwin.messages m WHERE m.session_id = s.id AND m.id > s.summary_through_id
                            AND m.id < $2::bigint AND m.retracted_at IS NULL) AS dropped
           FROM ctxwin.sessions s WHERE s.id = $1::uuid`, [session, rows[0]?.id ?? "9223372036854775807"]))[0];
        if (r?.["dropped"] === true) {
          await pending.get(session);
          if (await byModel(session))
            ({ context, messages: rows } = await cw.buildWindow(session, { budget: options.budget ?? null, tools }));
        } else if (r?.["queued"] === true && !pending.has(session)) {
          const job = byModel(session).then(() => undefined).finally(() => pending.delete(session));
          pending.set(session, job);
        }
      } else if (options.summarize !== "worker") {
        const due = (await cw.query(
          `SELECT s.compaction_queued_at IS NOT NULL AND ($2::boolean OR NOT ${WORKER_SERVES_SQL}) AS due
           FROM ctxwin.sessions s WHERE s.id = $1::uuid`, [session, options.summarize === "inline"]))[0]?.["due"] === true;
        if (due && (await cw.summarize(session)) !== null) {
          ({ context, messages: rows } = await cw.buildWindow(session, { budget: options.budget ?? null, tools }));
        }
      }
      let n = 0;
      while (n < context.length && context[n]!.role === "system") n++;
      const system = context.slice(0, n).map(textOf).filter((t) => t !== "").join("\n\n");
      const messages = context.slice(n).map((m) => toLangChainMessage(m));
      const response = await handler({ ...request, messages, systemMessage: new SystemMessage(system) });
      if (options.recordUsage !== false && AIMessage.isInstance(response)) {
        const usage = usageOfMessage(response);
        if (usage) await cw.recordUsage(session, usage, { windowFirstId: rows[0]?.id ?? null });
      }
      return response;
    },
    afterModel: async (state, runtime) => {
      const all = state.messages as BaseMessage[];
      const session = sessionOf((runtime as { configurable?: Record<string, unknown> }).configurable, all);
      const last = all.at(-1);
      if (!last || typeof last.id !== "string") return undefined;
      // the answer, stored now: the next model call appends what comes after it
      if (last.getType() === "ai") await cw.append(session, [last], { keys: [last.id as string] });
      return { ctxwinStoredThrough: last.id as string };
    },
  });
}
