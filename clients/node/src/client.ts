/**
 * The ctxwin client over node-postgres: sessions, appending messages of any
 * shape (idempotent by key), windows and request bodies, one chat turn in
 * one round trip, usage, status and summaries.  Works with a pg Client, a
 * Pool or a PoolClient: anything with query(text, values).
 */
import { toChatMessages, type MessageInput } from "./convert.js";
import { CtxwinError, toCtxwinError } from "./errors.js";
import type {
  AnthropicContext, AnthropicRequest, ChatMessage, Format, OpenAIRequest, RequestFormat, RecallToolCall, SearchHit,
  StoredChatMessage, ToolDefinition, ToolMessage,
} from "./types.js";

/** What the client needs of node-postgres: pg.Client, pg.Pool and pg.PoolClient all have it. */
export interface Queryable {
  // eslint-disable-next-line @typescript-eslint/no-explicit-any
  query(text: string, values?: any[]): Promise<{ rows: any[] }>;
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

export type SessionRef = string | { id: string };

const TIMESTAMP = /_at$/;

function camel(row: Record<string, unknown>): Record<string, unknown> {
  const out: Record<string, unknown> = {};
  for (const [k, v] of Object.entries(row)) {
    const c = k.replace(/_([a-z])/g, (_, x: string) => x.toUpperCase());
    out[c] = TIMESTAMP.test(k) && typeof v === "string" ? new Date(v) : v;
  }
  return out;
}

function sid(s: SessionRef): string {
  return typeof s === "string" ? s : s.id;
}

function jsonOrNull(v: unknown): string | null {
  return v == null ? null : JSON.stringify(v);
}

/**
 * The session argument of a statement that writes: $1::uuid, or with
 * create the session ctxwin.ensure_session returns (created in the same
 * statement when missing), its settings in $n, $n+1, $n+2.
 */
function sessionArg(create: AppendOptions["create"], n: number): { sql: string; values: unknown[] } {
  if (!create) return { sql: "$1::uuid", values: [] };
  const o = create === true ? {} : create;
  return {
    sql: `(ctxwin.ensure_session($1::uuid, $${n}::text, $${n + 1}::text, $${n + 2}::jsonb)).id`,
    values: [o.profile ?? null, o.systemPrompt ?? null, jsonOrNull(o.metadata)],
  };
}

/**
 * The usage object to record for an answer: the answer's own usage (OpenAI
 * chat or responses, Anthropic), a usage object as it came, or the AI SDK's
 * LanguageModelUsage (its raw provider usage if it has one, else its counts
 * in the OpenAI chat shape).
 */
export function usageOf(responseOrUsage: object): Record<string, unknown> {
  const o = responseOrUsage as Record<string, unknown>;
  if (typeof o["usage"] === "object" && o["usage"] !== null && !("inputTokens" in o)) {
    return usageOf(o["usage"] as object);
  }
  if ("inputTokens" in o || "outputTokens" in o) {
    const raw = o["raw"];
    if (typeof raw === "object" && raw !== null &&
      ("prompt_tokens" in raw || "input_tokens" in raw)) return raw as Record<string, unknown>;
    const input = Number(o["inputTokens"] ?? 0);
    const output = Number(o["outputTokens"] ?? 0);
    const details = o["inputTokenDetails"] as Record<string, unknown> | undefined;
    const cached = Number(details?.["cacheReadTokens"] ?? o["cachedInputTokens"] ?? 0);
    const u: Record<string, unknown> = { prompt_tokens: input, completion_tokens: output, total_tokens: input + output };
    if (cached) u["prompt_tokens_details"] = { cached_tokens: cached };
    return u;
  }
  return o;
}

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
  messages: Array<{ role: "system" | "user"; content: string }>;
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
export const WORKER_SERVES_SQL =
  `EXISTS (SELECT FROM ctxwin.worker_status ws WHERE ws.database = current_database()
           AND ws.pid IS NOT NULL AND ws.state IN ('idle', 'working'))`;

export class Ctxwin {
  readonly db: Queryable;

  constructor(db: Queryable) {
    if (!db || typeof db.query !== "function")
      throw new TypeError("new Ctxwin(db): db must be a pg Client, Pool or PoolClient");
    this.db = db;
  }

  /** Runs one statement; PostgreSQL's errors become CtxwinErrors. */
  async query(text: string, values: unknown[] = []): Promise<Record<string, unknown>[]> {
    try {
      return (await this.db.query(text, values)).rows as Record<string, unknown>[];
    } catch (e) {
      throw toCtxwinError(e);
    }
  }

  private async one(text: string, values: unknown[]): Promise<unknown> {
    const rows = await this.query(text, values);
    return rows[0]?.["r"] ?? null;
  }

  /** A handle on a session, bound to this client (no query). */
  session(session: SessionRef): CtxwinSession {
    return new CtxwinSession(this, sid(session));
  }

  async createSession(options: CreateSessionOptions = {}): Promise<SessionInfo> {
    const r = await this.one(
      `INSERT INTO ctxwin.sessions AS s (id, profile, system_prompt, metadata)
       VALUES (coalesce($1::uuid, gen_random_uuid()), coalesce($2::text, 'default'), $3::text,
               coalesce($4::jsonb, '{}'))
       RETURNING to_jsonb(s) AS r`,
      [options.id ?? null, options.profile ?? null, options.systemPrompt ?? null, jsonOrNull(options.metadata)]);
    return camel(r as Record<string, unknown>) as unknown as SessionInfo;
  }

  /**
   * The session of that id, created when it is missing (ctxwin.ensure_session):
   * never an error for an existing one, whose settings are left as they are;
   * safe when several first writes race; nothing logged at ERROR.
   */
  async ensureSession(session: SessionRef, options: Omit<CreateSessionOptions, "id"> = {}): Promise<SessionInfo> {
    const r = await this.one(
      "SELECT to_jsonb(s) AS r FROM ctxwin.ensure_session($1::uuid, $2::text, $3::text, $4::jsonb) s",
      [sid(session), options.profile ?? null, options.systemPrompt ?? null, jsonOrNull(options.metadata)]);
    return camel(r as Record<string, unknown>) as unknown as SessionInfo;
  }

  /** The session's row, or null if there is none (or the role may not see it). */
  async getSession(session: SessionRef): Promise<SessionInfo | null> {
    const r = await this.one("SELECT to_jsonb(s) AS r FROM ctxwin.sessions s WHERE s.id = $1::uuid", [sid(session)]);
    return r === null ? null : camel(r as Record<string, unknown>) as unknown as SessionInfo;
  }

  /**
   * Appends messages of any supported shape; returns the stored ids, one per
   * stored message (a message whose key the session has returns its stored id).
   */
  async append(session: SessionRef, messages: MessageInput | readonly MessageInput[],
    options: AppendOptions = {}): Promise<number[]> {
    const c = toChatMessages(messages, options.keys);
    const a = sessionArg(options.create, 4);
    const r = await this.one(`SELECT to_jsonb(ctxwin.append_messages(${a.sql}, $2::jsonb, $3::text[])) AS r`,
      [sid(session), JSON.stringify(c.messages), c.keys, ...a.values]);
    return (r ?? []) as number[];
  }

  buildContext(session: SessionRef, options?: WindowOptions & { format?: "openai" }): Promise<ChatMessage[]>;
  buildContext(session: SessionRef, options: WindowOptions & { format: "anthropic" }): Promise<AnthropicContext>;
  buildContext(session: SessionRef, options?: WindowOptions & { format?: Format }): Promise<ChatMessage[] | AnthropicContext>;
  /** ctxwin.build_context: the window to send. */
  async buildContext(session: SessionRef, options: WindowOptions & { format?: Format } = {}): Promise<ChatMessage[] | AnthropicContext> {
    return await this.one("SELECT ctxwin.build_context($1::uuid, $2::int, $3::text, $4::jsonb, $5::boolean) AS r",
      [sid(session), options.budget ?? null, options.format ?? "openai", jsonOrNull(options.tools), options.cache ?? true]) as
      ChatMessage[] | AnthropicContext;
  }

  buildWindow(session: SessionRef, options?: WindowOptions & { format?: "openai" }): Promise<WindowResult<ChatMessage[]>>;
  buildWindow(session: SessionRef, options: WindowOptions & { format: "anthropic" }): Promise<WindowResult<AnthropicContext>>;
  /**
   * ctxwin.build_window: the window (what buildContext returns) with the
   * stored rows it shows (ids, client keys, roles) and the summary's fields,
   * in one statement: no matching of the window against stored messages.
   */
  async buildWindow(session: SessionRef, options: WindowOptions & { format?: Format } = {}):
    Promise<WindowResult<ChatMessage[] | AnthropicContext>> {
    return await this.one("SELECT ctxwin.build_window($1::uuid, $2::int, $3::text, $4::jsonb, $5::boolean) AS r",
      [sid(session), options.budget ?? null, options.format ?? "openai", jsonOrNull(options.tools), options.cache ?? true]) as
      WindowResult<ChatMessage[] | AnthropicContext>;
  }

  buildRequest(session: SessionRef, options?: RequestOptions & { format?: "openai" }): Promise<OpenAIRequest>;
  buildRequest(session: SessionRef, options: RequestOptions & { format: "anthropic" }): Promise<AnthropicRequest>;
  buildRequest(session: SessionRef, options: RequestOptions & { format: "responses" | "gemini" }): Promise<Record<string, unknown>>;
  buildRequest(session: SessionRef, options?: RequestOptions & { format?: Format }): Promise<OpenAIRequest | AnthropicRequest>;
  /** ctxwin.build_request: the whole body to POST (with recall: the conversation_search tool last). */
  async buildRequest(session: SessionRef, options: RequestOptions & { format?: RequestFormat } = {}):
    Promise<OpenAIRequest | AnthropicRequest | Record<string, unknown>> {
    return await this.one(
      "SELECT ctxwin.build_request($1::uuid, $2::int, $3::text, $4::jsonb, $5::boolean, $6::boolean) AS r",
      [sid(session), options.budget ?? null, options.format ?? "openai", jsonOrNull(options.tools), options.cache ?? true,
        options.recall ?? false]) as OpenAIRequest | AnthropicRequest | Record<string, unknown>;
  }

  /**
   * ctxwin.search: the messages of the session's whole history (summarized
   * ones included) that best match the query, best first.
   */
  async search(session: SessionRef, query: string, options: SearchOptions = {}): Promise<SearchHit[]> {
    const rows = await this.query(
      `SELECT id, role, created_at, snippet, rank
       FROM ctxwin.search($1::uuid, $2::text, $3::text[], $4::timestamptz, $5::timestamptz, $6::int)`,
      [sid(session), query, options.roles ?? null, options.since ?? null, options.until ?? null,
        options.maxResults ?? 10]);
    return rows.map((r) => ({
      id: Number(r["id"]), role: r["role"] as ChatMessage["role"],
      createdAt: r["created_at"] instanceof Date ? r["created_at"] : new Date(String(r["created_at"])),
      snippet: String(r["snippet"]), rank: Number(r["rank"]),
    }));
  }

  /**
   * ctxwin.message: one stored message whole, with its id and created_at
   * (what a cleared tool result of a window, or a search hit, points to).
   */
  async message(session: SessionRef, id: number): Promise<StoredChatMessage> {
    return await this.one("SELECT ctxwin.message($1::uuid, $2::bigint) AS r", [sid(session), id]) as StoredChatMessage;
  }

  /**
   * ctxwin.retract: takes back the session's messages from fromId onwards.
   * They stay stored (message() returns them with retracted_at set) and
   * leave every later window, summary, search and count; a summary that
   * covers one is replaced by the newest one ending before fromId.  The
   * number of messages retracted (0: none, or all already were).
   */
  async retract(session: SessionRef, fromId: number): Promise<number> {
    return Number(await this.one("SELECT ctxwin.retract($1::uuid, $2::bigint) AS r", [sid(session), fromId]));
  }

  /**
   * ctxwin.answer_tool_call: the tool message answering the model's call of
   * conversation_search (an OpenAI tool call or an Anthropic tool_use block,
   * as the SDKs give them), to append to the session as it is.
   */
  async answerToolCall(session: SessionRef, toolCall: RecallToolCall | object): Promise<ToolMessage> {
    return await this.one("SELECT ctxwin.answer_tool_call($1::uuid, $2::jsonb) AS r",
      [sid(session), JSON.stringify(toolCall)]) as ToolMessage;
  }

  turn(session: SessionRef, messages: MessageInput | readonly MessageInput[],
    options?: AppendOptions & WindowOptions & { format?: "openai"; request?: false }): Promise<TurnResult<ChatMessage[]>>;
  turn(session: SessionRef, messages: MessageInput | readonly MessageInput[],
    options: AppendOptions & WindowOptions & { format: "anthropic"; request?: false }): Promise<TurnResult<AnthropicContext>>;
  turn(session: SessionRef, messages: MessageInput | readonly MessageInput[],
    options: AppendOptions & RequestOptions & { format?: "openai"; request: true }): Promise<TurnRequestResult<OpenAIRequest>>;
  turn(session: SessionRef, messages: MessageInput | readonly MessageInput[],
    options: AppendOptions & RequestOptions & { format: "anthropic"; request: true }): Promise<TurnRequestResult<AnthropicRequest>>;
  /**
   * One chat turn in one round trip (ctxwin.append_and_build): appends the
   * messages (the user's, or a tool's results) and returns the window to
   * send, or with request: true the whole request body (with recall: the
   * conversation_search tool last).
   */
  async turn(session: SessionRef, messages: MessageInput | readonly MessageInput[],
    options: AppendOptions & WindowOptions & { format?: RequestFormat; request?: boolean; recall?: boolean } = {}):
    Promise<TurnResult<ChatMessage[] | AnthropicContext> | TurnRequestResult<OpenAIRequest | AnthropicRequest>> {
    const c = toChatMessages(messages, options.keys);
    const a = sessionArg(options.create, 10);
    const r = await this.one(
      `SELECT ctxwin.append_and_build(${a.sql}, $2::jsonb, $3::text[], $4::int, $5::text, $6::jsonb,
                                      $7::boolean, $8::boolean, $9::boolean) AS r`,
      [sid(session), JSON.stringify(c.messages), c.keys, options.budget ?? null, options.format ?? "openai",
        jsonOrNull(options.tools), options.cache ?? true, options.request ?? false, options.recall ?? false, ...a.values]);
    return r as TurnResult<ChatMessage[]>;
  }

  /**
   * ctxwin.record_usage: what the provider billed for one request.  Takes the
   * answer (OpenAI ChatCompletion or Response, Anthropic Message), its usage
   * object, or an AI SDK usage.  Returns the request's number in the session.
   */
  async recordUsage(session: SessionRef, responseOrUsage: object, options: UsageOptions = {}): Promise<number> {
    const r = await this.one("SELECT ctxwin.record_usage($1::uuid, $2::jsonb, $3::bigint, $4::int) AS r",
      [sid(session), JSON.stringify(usageOf(responseOrUsage)), options.windowFirstId ?? null, options.windowTokens ?? null]);
    return Number(r);
  }

  /** ctxwin.context_status: where the session stands. */
  async status(session: SessionRef): Promise<ContextStatus> {
    const r = await this.one("SELECT to_jsonb(s) AS r FROM ctxwin.context_status($1::uuid) s", [sid(session)]);
    if (r === null) throw new CtxwinError(`no status for session ${sid(session)}`);
    return camel(r as Record<string, unknown>) as unknown as ContextStatus;
  }

  /** ctxwin.context_report: the status for a person. */
  async report(session: SessionRef): Promise<string> {
    return String(await this.one("SELECT ctxwin.context_report($1::uuid) AS r", [sid(session)]));
  }

  /**
   * ctxwin.summarize_session: a summary now (with force, whatever is
   * unsummarized beyond the newest min_recent_messages; without, only if a
   * trigger fires).  Returns the new summary, or null when there was nothing
   * to summarize.
   */
  async summarize(session: SessionRef, options: { force?: boolean; instructions?: string | null } = {}): Promise<Summary | null> {
    const r = await this.one("SELECT to_jsonb(ctxwin.summarize_session($1::uuid, $2::boolean, $3::text)) AS r",
      [sid(session), options.force ?? false, options.instructions ?? null]);
    if (r === null || (r as Record<string, unknown>)["version"] == null) return null;
    return camel(r as Record<string, unknown>) as unknown as Summary;
  }

  /**
   * ctxwin.claim_summary: the session's due summary as a job for the
   * application's own model (with force: whatever is unsummarized beyond
   * the newest min_recent_messages), or null when none is due or another
   * claim or the worker holds the session.
   */
  async claimSummary(session: SessionRef, options: { force?: boolean } = {}): Promise<SummaryJob | null> {
    return await this.one("SELECT ctxwin.claim_summary($1::uuid, $2::boolean) AS r", [sid(session), options.force ?? false]) as
      SummaryJob | null;
  }

  /** ctxwin.claim_next_summary: the job of the next queued session (oldest first), or null. */
  async claimNextSummary(): Promise<SummaryJob | null> {
    return await this.one("SELECT ctxwin.claim_next_summary() AS r", []) as SummaryJob | null;
  }

  /**
   * ctxwin.complete_summary: the model's summary for a job, applied by the
   * worker's own code and checks; its usage recorded.  A stale job is
   * SummaryJobStale (CW001), a refused summary InvalidArgument (22023):
   * nothing written either way.
   */
  async completeSummary(token: string, summary: string, usage?: object | null): Promise<Summary> {
    const r = await this.one("SELECT to_jsonb(ctxwin.complete_summary($1::text, $2::text, $3::jsonb)) AS r",
      [token, summary, usage == null ? null : JSON.stringify(usageOf(usage))]);
    return camel(r as Record<string, unknown>) as unknown as Summary;
  }

  /** ctxwin.fail_summary: releases a job the model could not do, recording the failure. */
  async failSummary(token: string, error: string): Promise<void> {
    await this.query("SELECT ctxwin.fail_summary($1::text, $2::text)", [token, error]);
  }

  /**
   * ctxwin.release_summary: gives a claimed job back undone, with no summary
   * and no failure recorded; false when the job no longer held its session.
   */
  async releaseSummary(token: string): Promise<boolean> {
    return (await this.one("SELECT ctxwin.release_summary($1::text) AS r", [token])) === true;
  }

  /** Whether the database's ctxwin hands out summary jobs (ctxwin.claim_summary exists). */
  async hasSummaryJobs(): Promise<boolean> {
    return (await this.one("SELECT to_regprocedure('ctxwin.claim_summary(uuid, boolean)') IS NOT NULL AS r", [])) === true;
  }

  /** Whether ctxwin's background worker serves this database now (ctxwin.worker_status). */
  async workerRunning(): Promise<boolean> {
    return (await this.one(`SELECT ${WORKER_SERVES_SQL} AS r`, [])) === true;
  }

  /** The stored messages after a message id (all of them by default), oldest first. */
  async messages(session: SessionRef, options: { after?: number | null } = {}): Promise<StoredMessage[]> {
    const r = await this.one(
      "SELECT coalesce(jsonb_agg(to_jsonb(m) ORDER BY m.id), '[]') AS r FROM ctxwin.messages_after($1::uuid, $2::bigint) m",
      [sid(session), options.after ?? null]);
    return (r as Record<string, unknown>[]).map((m) => camel(m) as unknown as StoredMessage);
  }
}

/** A session bound to a client: the client's calls without the session argument. */
export class CtxwinSession {
  constructor(readonly client: Ctxwin, readonly id: string) {}

  info(): Promise<SessionInfo | null> { return this.client.getSession(this.id); }
  ensure(options?: Omit<CreateSessionOptions, "id">): Promise<SessionInfo> { return this.client.ensureSession(this.id, options); }
  append(messages: MessageInput | readonly MessageInput[], options?: AppendOptions): Promise<number[]> {
    return this.client.append(this.id, messages, options);
  }
  buildContext(options?: WindowOptions & { format?: "openai" }): Promise<ChatMessage[]>;
  buildContext(options: WindowOptions & { format: "anthropic" }): Promise<AnthropicContext>;
  buildContext(options?: WindowOptions & { format?: Format }): Promise<ChatMessage[] | AnthropicContext> {
    return this.client.buildContext(this.id, options);
  }
  buildWindow(options?: WindowOptions & { format?: "openai" }): Promise<WindowResult<ChatMessage[]>>;
  buildWindow(options: WindowOptions & { format: "anthropic" }): Promise<WindowResult<AnthropicContext>>;
  buildWindow(options?: WindowOptions & { format?: Format }): Promise<WindowResult<ChatMessage[] | AnthropicContext>> {
    // eslint-disable-next-line @typescript-eslint/no-explicit-any
    return this.client.buildWindow(this.id, options as any);
  }
  buildRequest(options?: RequestOptions & { format?: "openai" }): Promise<OpenAIRequest>;
  buildRequest(options: RequestOptions & { format: "anthropic" }): Promise<AnthropicRequest>;
  buildRequest(options: RequestOptions & { format: "responses" | "gemini" }): Promise<Record<string, unknown>>;
  buildRequest(options?: RequestOptions & { format?: RequestFormat }): Promise<OpenAIRequest | AnthropicRequest | Record<string, unknown>> {
    return this.client.buildRequest(this.id, options as RequestOptions & { format?: Format });
  }
  search(query: string, options?: SearchOptions): Promise<SearchHit[]> {
    return this.client.search(this.id, query, options);
  }
  message(id: number): Promise<StoredChatMessage> { return this.client.message(this.id, id); }
  answerToolCall(toolCall: RecallToolCall | object): Promise<ToolMessage> {
    return this.client.answerToolCall(this.id, toolCall);
  }
  turn(messages: MessageInput | readonly MessageInput[],
    options?: AppendOptions & WindowOptions & { format?: "openai"; request?: false }): Promise<TurnResult<ChatMessage[]>>;
  turn(messages: MessageInput | readonly MessageInput[],
    options: AppendOptions & WindowOptions & { format: "anthropic"; request?: false }): Promise<TurnResult<AnthropicContext>>;
  turn(messages: MessageInput | readonly MessageInput[],
    options: AppendOptions & RequestOptions & { format?: "openai"; request: true }): Promise<TurnRequestResult<OpenAIRequest>>;
  turn(messages: MessageInput | readonly MessageInput[],
    options: AppendOptions & RequestOptions & { format: "anthropic"; request: true }): Promise<TurnRequestResult<AnthropicRequest>>;
  turn(messages: MessageInput | readonly MessageInput[],
    options: AppendOptions & WindowOptions & { format?: RequestFormat; request?: boolean; recall?: boolean } = {}): Promise<unknown> {
    // eslint-disable-next-line @typescript-eslint/no-explicit-any
    return this.client.turn(this.id, messages, options as any);
  }
  recordUsage(responseOrUsage: object, options?: UsageOptions): Promise<number> {
    return this.client.recordUsage(this.id, responseOrUsage, options);
  }
  status(): Promise<ContextStatus> { return this.client.status(this.id); }
  report(): Promise<string> { return this.client.report(this.id); }
  summarize(options?: { force?: boolean; instructions?: string | null }): Promise<Summary | null> {
    return this.client.summarize(this.id, options);
  }
  messages(options?: { after?: number | null }): Promise<StoredMessage[]> {
    return this.client.messages(this.id, options);
  }
}
