import { z } from "zod";
import { Ctxwin, type Queryable } from "./client.js";
import { usageOfMessage, type SummaryModel } from "./langgraph.js";
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
export declare const AGENT_NAMESPACE = "5d0f6a53-2f55-4f3e-a2bb-0c1a3e4b7f21";
export { usageOfMessage };
/**
 * The middleware: createAgent({ ..., middleware: [ctxwinMiddleware({ ctxwin: pool })] }).
 * Needs a thread (a checkpointer and config.configurable.thread_id) or sessionId.
 */
export declare function ctxwinMiddleware(options: CtxwinMiddlewareOptions): import("langchain").AgentMiddleware<z.ZodObject<{
    ctxwinStoredThrough: z.ZodOptional<z.ZodString>;
}, z.core.$strip>, undefined, unknown, readonly (import("@langchain/core/tools").ClientTool | import("@langchain/core/tools").ServerTool)[], readonly []>;
