/**
 * The ctxwin client over node-postgres: sessions, appending messages of any
 * shape (idempotent by key), windows and request bodies, one chat turn in
 * one round trip, usage, status and summaries.  Works with a pg Client, a
 * Pool or a PoolClient: anything with query(text, values).
 */
import { type MessageInput } from "./convert.js";
import type { AnthropicContext, AnthropicRequest, ChatMessage, Format, OpenAIRequest, RecallToolCall, SearchHit, StoredChatMessage, ToolDefinition, ToolMessage } from "./types.js";
/** What the client needs of node-postgres: pg.Client, pg.Pool and pg.PoolClient all have it. */
export interface Queryable {
    query(text: string, values?: any[]): Promise<{
        rows: any[];
    }>;
}
/** A session's row (ctxwin.sessions), in camelCase. */
export interface SessionInfo {
    id: string;
    profile: string;
    systemPrompt: string | null;
    metadata: Record<string, unknown>;
    conversationSummary: string | null;
    summaryThroughId: number;
    summaryTokens: number;
    summaryVersion: number;
    summaryUpdatedAt: Date | null;
    messageCount: number;
    tokenCount: number;
    unsummarizedMessages: number;
    unsummarizedTokens: number;
    promptTokens: number;
    compactionQueuedAt: Date | null;
    compactionFailures: number;
    lastError: string | null;
    lastErrorAt: Date | null;
    createdAt: Date;
    updatedAt: Date;
}
/** ctxwin.context_status(session), in camelCase. */
export interface ContextStatus {
    sessionId: string;
    profile: string;
    model: string;
    encoding: string;
    contextWindow: number;
    budget: number;
    messageCount: number;
    summaryThroughId: number;
    messagesSinceSummary: number;
    tokensSinceSummary: number;
    maxMessagesBeforeSummary: number | null;
    messagesPct: number | null;
    maxTokensBeforeSummary: number | null;
    tokensPct: number | null;
    triggerRatio: number | null;
    contextTokens: number;
    contextPct: number | null;
    ratioPct: number | null;
    willTrigger: boolean;
    triggersFiring: string[] | null;
    summaryVersion: number;
    summaryTokens: number;
    summaryUpdatedAt: Date | null;
    /** An interval, as PostgreSQL writes it ("00:05:12.3"). */
    summaryAge: string | null;
    windowMessages: number;
    windowTokens: number;
    droppedMessages: number;
    queuedAt: Date | null;
    compactionFailures: number;
    lastError: string | null;
    lastErrorAt: Date | null;
    note: string | null;
    budgetMargin: number;
}
/** A row of ctxwin.summaries. */
export interface Summary {
    sessionId: string;
    version: number;
    fromId: number;
    throughId: number;
    content: string;
    tokenCount: number;
    strategy: string;
    model: string | null;
    usage: Record<string, unknown> | null;
    latencyMs: number | null;
    createdAt: Date;
}
/** A stored message (ctxwin.messages). */
export interface StoredMessage {
    sessionId: string;
    id: number;
    role: ChatMessage["role"];
    content: string | null;
    toolCalls: ChatMessage["tool_calls"] | null;
    toolCallId: string | null;
    name: string | null;
    tokenCount: number;
    tokenEncoding: string;
    metadata: Record<string, unknown>;
    clientKey: string | null;
    createdAt: Date;
}
export interface CreateSessionOptions {
    /** The session's id; default: a new random uuid. */
    id?: string;
    /** A row of ctxwin.profiles; default "default". */
    profile?: string;
    systemPrompt?: string | null;
    metadata?: Record<string, unknown>;
}
export interface WindowOptions {
    /** Tokens; default: the model's window less the profile's response_reserve. */
    budget?: number | null;
    tools?: readonly ToolDefinition[] | null;
    /** Anthropic prompt-cache marks (and OpenAI's prompt_cache_key in requests); default true. */
    cache?: boolean;
}
/** build_request's options: with recall, its tools end with ctxwin's conversation_search. */
export interface RequestOptions extends WindowOptions {
    /** Add the conversation_search tool (answer its calls with answerToolCall); default false. */
    recall?: boolean;
}
/** ctxwin.search's filters. */
export interface SearchOptions {
    /** Any of system, user, assistant, tool; default all. */
    roles?: readonly ChatMessage["role"][] | null;
    /** Messages created at or after it. */
    since?: Date | string | null;
    /** Messages created before it. */
    until?: Date | string | null;
    /** 1 to 100; default 10. */
    maxResults?: number;
}
export interface AppendOptions {
    /** One per input message: its key (null or undefined: its own id, if any). */
    keys?: readonly (string | null | undefined)[];
    /**
     * Create the session if it is missing, in the same statement
     * (ctxwin.ensure_session): true, or the settings of a session it creates.
     * An existing session's settings are left as they are.
     */
    create?: boolean | Omit<CreateSessionOptions, "id">;
}
export interface UsageOptions {
    /** Id of the oldest message of the window the request sent. */
    windowFirstId?: number | null;
    /** Tokens of that window as ctxwin counted them. */
    windowTokens?: number | null;
}
export type SessionRef = string | {
    id: string;
};
/**
 * The usage object to record for an answer: the answer's own usage (OpenAI
 * chat or responses, Anthropic), a usage object as it came, or the AI SDK's
 * LanguageModelUsage (its raw provider usage if it has one, else its counts
 * in the OpenAI chat shape).
 */
export declare function usageOf(responseOrUsage: object): Record<string, unknown>;
/**
 * A summary job (ctxwin.claim_summary): what the application's own model is
 * to summarize, and the prompt ctxwin's worker would send for it.
 */
export interface SummaryJob {
    token: string;
    session_id: string;
    from_id: number;
    through_id: number;
    previous_summary: string | null;
    previous_version: number | null;
    /** The exact prompt the worker would send. */
    messages: Array<{
        role: "system" | "user";
        content: string;
    }>;
    /** The stored messages the summary will cover, for an application's own prompt. */
    transcript: Array<Record<string, unknown>>;
    max_tokens: number;
    model: string | null;
    strategy: string;
    /** Whether ctxwin's own worker would call an LLM for this session. */
    server_llm: boolean;
    expires_at: string;
}
/** A stored message shown in a window: its id, client key and role (ctxwin.build_window's "messages"). */
export interface WindowMessage {
    id: number;
    client_key: string | null;
    role: ChatMessage["role"];
}
/** ctxwin.build_window: the window and what it shows, from one walk. */
export interface WindowResult<C> {
    /** What buildContext returns for the same arguments. */
    context: C;
    /** The stored rows in the window, oldest first (a cleared or cut one included); the system prompt and summary are not rows. */
    messages: WindowMessage[];
    summary: string | null;
    summary_version: number | null;
    summary_through_id: number | null;
    tokens: number;
}
/** The result of one chat turn: the stored ids of the messages appended, and the window with the rows it shows. */
export interface TurnResult<C> {
    ids: number[];
    context: C;
    messages: WindowMessage[];
}
/** The result of one chat turn with request: true: the ids and the whole request body, with the rows it shows. */
export interface TurnRequestResult<R> {
    ids: number[];
    request: R;
    messages: WindowMessage[];
}
/**
 * Whether a background worker serves the current database, as an SQL
 * expression: its process runs and it is idle or working in
 * ctxwin.worker_status (one that runs and waits, for ALTER EXTENSION ctxwin
 * UPDATE or on a Citus worker node, compacts nothing; one starting, stopped
 * or paused has no process).
 */
export declare const WORKER_SERVES_SQL = "EXISTS (SELECT FROM ctxwin.worker_status ws WHERE ws.database = current_database()\n           AND ws.pid IS NOT NULL AND ws.state IN ('idle', 'working'))";
export declare class Ctxwin {
    readonly db: Queryable;
    constructor(db: Queryable);
    /** Runs one statement; PostgreSQL's errors become CtxwinErrors. */
    query(text: string, values?: unknown[]): Promise<Record<string, unknown>[]>;
    private one;
    /** A handle on a session, bound to this client (no query). */
    session(session: SessionRef): CtxwinSession;
    createSession(options?: CreateSessionOptions): Promise<SessionInfo>;
    /**
     * The session of that id, created when it is missing (ctxwin.ensure_session):
     * never an error for an existing one, whose settings are left as they are;
     * safe when several first writes race; nothing logged at ERROR.
     */
    ensureSession(session: SessionRef, options?: Omit<CreateSessionOptions, "id">): Promise<SessionInfo>;
    /** The session's row, or null if there is none (or the role may not see it). */
    getSession(session: SessionRef): Promise<SessionInfo | null>;
    /**
     * Appends messages of any supported shape; returns the stored ids, one per
     * stored message (a message whose key the session has returns its stored id).
     */
    append(session: SessionRef, messages: MessageInput | readonly MessageInput[], options?: AppendOptions): Promise<number[]>;
    buildContext(session: SessionRef, options?: WindowOptions & {
        format?: "openai";
    }): Promise<ChatMessage[]>;
    buildContext(session: SessionRef, options: WindowOptions & {
        format: "anthropic";
    }): Promise<AnthropicContext>;
    buildContext(session: SessionRef, options?: WindowOptions & {
        format?: Format;
    }): Promise<ChatMessage[] | AnthropicContext>;
    buildWindow(session: SessionRef, options?: WindowOptions & {
        format?: "openai";
    }): Promise<WindowResult<ChatMessage[]>>;
    buildWindow(session: SessionRef, options: WindowOptions & {
        format: "anthropic";
    }): Promise<WindowResult<AnthropicContext>>;
    buildRequest(session: SessionRef, options?: RequestOptions & {
        format?: "openai";
    }): Promise<OpenAIRequest>;
    buildRequest(session: SessionRef, options: RequestOptions & {
        format: "anthropic";
    }): Promise<AnthropicRequest>;
    buildRequest(session: SessionRef, options: RequestOptions & {
        format: "responses" | "gemini";
    }): Promise<Record<string, unknown>>;
    buildRequest(session: SessionRef, options?: RequestOptions & {
        format?: Format;
    }): Promise<OpenAIRequest | AnthropicRequest>;
    /**
     * ctxwin.search: the messages of the session's whole history (summarized
     * ones included) that best match the query, best first.
     */
    search(session: SessionRef, query: string, options?: SearchOptions): Promise<SearchHit[]>;
    /**
     * ctxwin.message: one stored message whole, with its id and created_at
     * (what a cleared tool result of a window, or a search hit, points to).
     */
    message(session: SessionRef, id: number): Promise<StoredChatMessage>;
    /**
     * ctxwin.retract: takes back the session's messages from fromId onwards.
     * They stay stored (message() returns them with retracted_at set) and
     * leave every later window, summary, search and count; a summary that
     * covers one is replaced by the newest one ending before fromId.  The
     * number of messages retracted (0: none, or all already were).
     */
    retract(session: SessionRef, fromId: number): Promise<number>;
    /**
     * ctxwin.answer_tool_call: the tool message answering the model's call of
     * conversation_search (an OpenAI tool call or an Anthropic tool_use block,
     * as the SDKs give them), to append to the session as it is.
     */
    answerToolCall(session: SessionRef, toolCall: RecallToolCall | object): Promise<ToolMessage>;
    turn(session: SessionRef, messages: MessageInput | readonly MessageInput[], options?: AppendOptions & WindowOptions & {
        format?: "openai";
        request?: false;
    }): Promise<TurnResult<ChatMessage[]>>;
    turn(session: SessionRef, messages: MessageInput | readonly MessageInput[], options: AppendOptions & WindowOptions & {
        format: "anthropic";
        request?: false;
    }): Promise<TurnResult<AnthropicContext>>;
    turn(session: SessionRef, messages: MessageInput | readonly MessageInput[], options: AppendOptions & RequestOptions & {
        format?: "openai";
        request: true;
    }): Promise<TurnRequestResult<OpenAIRequest>>;
    turn(session: SessionRef, messages: MessageInput | readonly MessageInput[], options: AppendOptions & RequestOptions & {
        format: "anthropic";
        request: true;
    }): Promise<TurnRequestResult<AnthropicRequest>>;
    /**
     * ctxwin.record_usage: what the provider billed for one request.  Takes the
     * answer (OpenAI ChatCompletion or Response, Anthropic Message), its usage
     * object, or an AI SDK usage.  Returns the request's number in the session.
     */
    recordUsage(session: SessionRef, responseOrUsage: object, options?: UsageOptions): Promise<number>;
    /** ctxwin.context_status: where the session stands. */
    status(session: SessionRef): Promise<ContextStatus>;
    /** ctxwin.context_report: the status for a person. */
    report(session: SessionRef): Promise<string>;
    /**
     * ctxwin.summarize_session: a summary now (with force, whatever is
     * unsummarized beyond the newest min_recent_messages; without, only if a
     * trigger fires).  Returns the new summary, or null when there was nothing
     * to summarize.
     */
    summarize(session: SessionRef, options?: {
        force?: boolean;
        instructions?: string | null;
    }): Promise<Summary | null>;
    /**
     * ctxwin.claim_summary: the session's due summary as a job for the
     * application's own model (with force: whatever is unsummarized beyond
     * the newest min_recent_messages), or null when none is due or another
     * claim or the worker holds the session.
     */
    claimSummary(session: SessionRef, options?: {
        force?: boolean;
    }): Promise<SummaryJob | null>;
    /** ctxwin.claim_next_summary: the job of the next queued session (oldest first), or null. */
    claimNextSummary(): Promise<SummaryJob | null>;
    /**
     * ctxwin.complete_summary: the model's summary for a job, applied by the
     * worker's own code and checks; its usage recorded.  A stale job is
     * SummaryJobStale (CW001), a refused summary InvalidArgument (22023):
     * nothing written either way.
     */
    completeSummary(token: string, summary: string, usage?: object | null): Promise<Summary>;
    /** ctxwin.fail_summary: releases a job the model could not do, recording the failure. */
    failSummary(token: string, error: string): Promise<void>;
    /**
     * ctxwin.release_summary: gives a claimed job back undone, with no summary
     * and no failure recorded; false when the job no longer held its session.
     */
    releaseSummary(token: string): Promise<boolean>;
    /** Whether the database's ctxwin hands out summary jobs (ctxwin.claim_summary exists). */
    hasSummaryJobs(): Promise<boolean>;
    /** Whether ctxwin's background worker serves this database now (ctxwin.worker_status). */
    workerRunning(): Promise<boolean>;
    /** The stored messages after a message id (all of them by default), oldest first. */
    messages(session: SessionRef, options?: {
        after?: number | null;
    }): Promise<StoredMessage[]>;
}
/** A session bound to a client: the client's calls without the session argument. */
export declare class CtxwinSession {
    readonly client: Ctxwin;
    readonly id: string;
    constructor(client: Ctxwin, id: string);
    info(): Promise<SessionInfo | null>;
    ensure(options?: Omit<CreateSessionOptions, "id">): Promise<SessionInfo>;
    append(messages: MessageInput | readonly MessageInput[], options?: AppendOptions): Promise<number[]>;
    buildContext(options?: WindowOptions & {
        format?: "openai";
    }): Promise<ChatMessage[]>;
    buildContext(options: WindowOptions & {
        format: "anthropic";
    }): Promise<AnthropicContext>;
    buildWindow(options?: WindowOptions & {
        format?: "openai";
    }): Promise<WindowResult<ChatMessage[]>>;
    buildWindow(options: WindowOptions & {
        format: "anthropic";
    }): Promise<WindowResult<AnthropicContext>>;
    buildRequest(options?: RequestOptions & {
        format?: "openai";
    }): Promise<OpenAIRequest>;
    buildRequest(options: RequestOptions & {
        format: "anthropic";
    }): Promise<AnthropicRequest>;
    buildRequest(options: RequestOptions & {
        format: "responses" | "gemini";
    }): Promise<Record<string, unknown>>;
    search(query: string, options?: SearchOptions): Promise<SearchHit[]>;
    message(id: number): Promise<StoredChatMessage>;
    answerToolCall(toolCall: RecallToolCall | object): Promise<ToolMessage>;
    turn(messages: MessageInput | readonly MessageInput[], options?: AppendOptions & WindowOptions & {
        format?: "openai";
        request?: false;
    }): Promise<TurnResult<ChatMessage[]>>;
    turn(messages: MessageInput | readonly MessageInput[], options: AppendOptions & WindowOptions & {
        format: "anthropic";
        request?: false;
    }): Promise<TurnResult<AnthropicContext>>;
    turn(messages: MessageInput | readonly MessageInput[], options: AppendOptions & RequestOptions & {
        format?: "openai";
        request: true;
    }): Promise<TurnRequestResult<OpenAIRequest>>;
    turn(messages: MessageInput | readonly MessageInput[], options: AppendOptions & RequestOptions & {
        format: "anthropic";
        request: true;
    }): Promise<TurnRequestResult<AnthropicRequest>>;
    recordUsage(responseOrUsage: object, options?: UsageOptions): Promise<number>;
    status(): Promise<ContextStatus>;
    report(): Promise<string>;
    summarize(options?: {
        force?: boolean;
        instructions?: string | null;
    }): Promise<Summary | null>;
    messages(options?: {
        after?: number | null;
    }): Promise<StoredMessage[]>;
}
