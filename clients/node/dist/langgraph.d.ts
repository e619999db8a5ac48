/**
 * A LangGraph.js node with the semantics of LangMem's SummarizationNode,
 * whose history and summaries are ctxwin's.
 *
 * It reads the messages of inputMessagesKey ("messages") and writes the
 * window to send to outputMessagesKey ("summarized_messages"): ctxwin's
 * system prompt and summary as SystemMessages, then the newest messages that
 * fit maxTokens, a tool call never apart from its results.  When the two
 * keys are equal it writes RemoveMessage(REMOVE_ALL_MESSAGES) followed by
 * that list, so the state holds the window only.  The state's
 * context.running_summary holds a RunningSummary once there is a summary.
 *
 * The LangGraph thread (config.configurable.thread_id) is the ctxwin
 * session: sessionId(threadId), a uuid v5 of the thread id, created on first
 * use with metadata {"langgraph_thread_id": ...} and the profile
 * profileName: the profile option as it is, or else
 * "langgraph-<baseProfile>-<maxTokensBeforeSummary>-<maxSummaryTokens>",
 * a copy of baseProfile ("default") whose only summary trigger is
 * maxTokensBeforeSummary tokens and whose summaries are at most
 * maxSummaryTokens long, created once if missing (INSERT ... ON CONFLICT
 * DO NOTHING; the role needs INSERT on ctxwin.profiles, or else name a
 * profile), so that the worker summarizes at the node's trigger.  Each message of the state
 * is appended once, keyed by its id; messages whose id starts with
 * "ctxwin:" (the system prompt and summary the node wrote) are not.
 * Nothing is ever deleted from the database.  Summaries are ctxwin's: the
 * background worker's, made when the profile's trigger queues the session
 * (the node never waits for one: the first run after it lands carries it),
 * or, when no worker serves the database (ctxwin.worker_status, read on
 * every run) or with summarize: "inline", made by the node with
 * ctxwin.summarize_session when the session is queued, the messages since
 * the summary pass maxTokensBeforeSummary less maxSummaryTokens, or the
 * window would leave messages out.
 */
import { AIMessage, type BaseMessage } from "@langchain/core/messages";
import { RunnableLambda } from "@langchain/core/runnables";
import { Ctxwin, type Queryable } from "./client.js";
import type { ChatMessage } from "./types.js";
/** LangMem's RunningSummary (summarizedMessageIds an array, so that checkpoints keep it). */
export interface RunningSummary {
    summary: string;
    summarizedMessageIds: string[];
    lastSummarizedMessageId: string | null;
}
export { sessionIdForThread, THREAD_NAMESPACE } from "./uuid.js";
/** The most messages the node's own profile keeps out of a summary (min_recent_messages), as the Python client's node. */
export declare const MIN_RECENT = 2;
/** The node's own entry in the state's context: the session (and thread) it wrote to. */
export declare const BOOKKEEPING_KEY = "ctxwin";
export interface SummarizationNodeOptions {
    /** A Ctxwin, or a pg Pool / Client. */
    ctxwin: Ctxwin | Queryable;
    /** The largest window written to outputMessagesKey, in tokens (ctxwin's count). */
    maxTokens: number;
    /** Summarize when the messages since the summary (and the prompt) pass this less maxSummaryTokens; default maxTokens. */
    maxTokensBeforeSummary?: number;
    /** Room kept for the summary (its length is the profile's max_summary_tokens); default 256. */
    maxSummaryTokens?: number;
    inputMessagesKey?: string;
    outputMessagesKey?: string;
    /**
     * The profile of the sessions the node creates, as it is.  Default: a
     * profile made from baseProfile with this node's trigger and summary
     * length (maxTokensBeforeSummary tokens, no message-count or ratio
     * trigger, maxSummaryTokens), named
     * "langgraph-<baseProfile>-<maxTokensBeforeSummary>-<maxSummaryTokens>",
     * created once if missing (the role needs INSERT on ctxwin.profiles; else
     * name a profile).
     */
    profile?: string;
    /** The profile the node's own profile copies (model, window, summary settings); default "default". */
    baseProfile?: string;
    /** System prompt of the sessions the node creates. */
    systemPrompt?: string | null;
    /** inline: the node summarizes; worker: it leaves that to ctxwin's worker; auto (default): inline unless a worker serves the database. */
    summarize?: "inline" | "worker" | "auto";
    /** Focus for the summaries the node makes. */
    instructions?: string | null;
    /**
     * A LangChain chat model (LangMem's model): it writes the node's
     * summaries when the server has no LLM for the node's profile (or with
     * summarizeWith: "model"): the node claims the summary job
     * (ctxwin.claim_summary), sends the model ctxwin's prompt and completes
     * the job with its answer and usage (ctxwin.complete_summary).
     */
    model?: SummaryModel;
    /** auto (default): the model when the server has no LLM for the profile; model; server (ctxwin.summarize_session). */
    summarizeWith?: "auto" | "model" | "server";
    /** The session of a thread; default sessionIdForThread. */
    sessionId?: (threadId: string) => string;
    name?: string;
}
type State = Record<string, unknown>;
/** The usage of a LangChain AIMessage as ctxwin.record_usage takes it (the provider's, else OpenAI's names). */
export declare function usageOfMessage(m: AIMessage): Record<string, unknown> | null;
/** A message of ctxwin's window as a LangChain message with the given id. */
export declare function toLangChainMessage(m: ChatMessage, id?: string): BaseMessage;
/** A LangChain chat model as the node and the middleware take it. */
export interface SummaryModel {
    invoke(input: BaseMessage[]): Promise<BaseMessage>;
}
/**
 * Whether the given model writes the summaries of a profile's sessions:
 * with "model" yes, with "server" no; with "auto" when the database hands
 * out summary jobs and the server has no LLM for the profile.
 */
export declare function modelSummarizes(cw: Ctxwin, profile: string, how?: "auto" | "model" | "server"): Promise<boolean>;
/** Whether ctxwin's own worker calls an LLM for a profile (the Python client's test). */
export declare function serverLlm(cw: Ctxwin, profile: string): Promise<boolean>;
/**
 * One summary of the session by the application's model, through ctxwin's
 * summary jobs: claim_summary (forced), the model given ctxwin's prompt,
 * complete_summary with its answer and usage; fail_summary when the model
 * fails or ctxwin refuses the answer.  Whether a summary was written
 * (false: none due, or another claim holds the session).
 */
export declare function summarizeWithModel(cw: Ctxwin, session: string, model: SummaryModel): Promise<boolean>;
/**
 * LangMem's SummarizationNode on ctxwin: add it to a StateGraph as a node
 * (graph.addNode("summarize", new SummarizationNode({ ctxwin: pool, maxTokens: 4000 }))).
 */
export declare class SummarizationNode extends RunnableLambda<State, State> {
    readonly inputMessagesKey: string;
    readonly outputMessagesKey: string;
    readonly maxTokens: number;
    readonly maxSummaryTokens: number;
    /** The profile of the sessions the node creates (the profile option, or the node's own). */
    readonly profileName: string;
    constructor(options: SummarizationNodeOptions);
}
