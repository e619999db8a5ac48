/**
 * The ctxwin client over node-postgres: sessions, appending messages of any
 * shape (idempotent by key), windows and request bodies, one chat turn in
 * one round trip, usage, status and summaries.  Works with a pg Client, a
 * Pool or a PoolClient: anything with query(text, values).
 */
import { toChatMessages } from "./convert.js";
import { CtxwinError, toCtxwinError } from "./errors.js";
const TIMESTAMP = /_at$/;
function camel(row) {
    const out = {};
    for (const [k, v] of Object.entries(row)) {
        const c = k.replace(/_([a-z])/g, (_, x) => x.toUpperCase());
        out[c] = TIMESTAMP.test(k) && typeof v === "string" ? new Date(v) : v;
    }
    return out;
}
function sid(s) {
    return typeof s === "string" ? s : s.id;
}
function jsonOrNull(v) {
    return v == null ? null : JSON.stringify(v);
}
/**
 * The session argument of a statement that writes: $1::uuid, or with
 * create the session ctxwin.ensure_session returns (created in the same
 * statement when missing), its settings in $n, $n+1, $n+2.
 */
function sessionArg(create, n) {
    if (!create)
        return { sql: "$1::uuid", values: [] };
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
export function usageOf(responseOrUsage) {
    const o = responseOrUsage;
    if (typeof o["usage"] === "object" && o["usage"] !== null && !("inputTokens" in o)) {
        return usageOf(o["usage"]);
    }
    if ("inputTokens" in o || "outputTokens" in o) {
        const raw = o["raw"];
        if (typeof raw === "object" && raw !== null &&
            ("prompt_tokens" in raw || "input_tokens" in raw))
            return raw;
        const input = Number(o["inputTokens"] ?? 0);
        const output = Number(o["outputTokens"] ?? 0);
        const details = o["inputTokenDetails"];
        const cached = Number(details?.["cacheReadTokens"] ?? o["cachedInputTokens"] ?? 0);
        const u = { prompt_tokens: input, completion_tokens: output, total_tokens: input + output };
        if (cached)
            u["prompt_tokens_details"] = { cached_tokens: cached };
        return u;
    }
    return o;
}
/**
 * Whether a background worker serves the current database, as an SQL
 * expression: its process runs and it is idle or working in
 * ctxwin.worker_status (one that runs and waits, for ALTER EXTENSION ctxwin
 * UPDATE or on a Citus worker node, compacts nothing; one starting, stopped
 * or paused has no process).
 */
export const WORKER_SERVES_SQL = `EXISTS (SELECT FROM ctxwin.worker_status ws WHERE ws.database = current_database()
           AND ws.pid IS NOT NULL AND ws.state IN ('idle', 'working'))`;
export class Ctxwin {
    db;
    constructor(db) {
        if (!db || typeof db.query !== "function")
            throw new TypeError("new Ctxwin(db): db must be a pg Client, Pool or PoolClient");
        this.db = db;
    }
    /** Runs one statement; PostgreSQL's errors become CtxwinErrors. */
    async query(text, values = []) {
        try {
            return (await this.db.query(text, values)).rows;
        }
        catch (e) {
            throw toCtxwinError(e);
        }
    }
    async one(text, values) {
        const rows = await this.query(text, values);
        return rows[0]?.["r"] ?? null;
    }
    /** A handle on a session, bound to this client (no query). */
    session(session) {
        return new CtxwinSession(this, sid(session));
    }
    async createSession(options = {}) {
        const r = await this.one(`INSERT INTO ctxwin.sessions AS s (id, profile, system_prompt, metadata)
       VALUES (coalesce($1::uuid, gen_random_uuid()), coalesce($2::text, 'default'), $3::text,
               coalesce($4::jsonb, '{}'))
       RETURNING to_jsonb(s) AS r`, [options.id ?? null, options.profile ?? null, options.systemPrompt ?? null, jsonOrNull(options.metadata)]);
        return camel(r);
    }
    /**
     * The session of that id, created when it is missing (ctxwin.ensure_session):
     * never an error for an existing one, whose settings are left as they are;
     * safe when several first writes race; nothing logged at ERROR.
     */
    async ensureSession(session, options = {}) {
        const r = await this.one("SELECT to_jsonb(s) AS r FROM ctxwin.ensure_session($1::uuid, $2::text, $3::text, $4::jsonb) s", [sid(session), options.profile ?? null, options.systemPrompt ?? null, jsonOrNull(options.metadata)]);
        return camel(r);
    }
    /** The session's row, or null if there is none (or the role may not see it). */
    async getSession(session) {
        const r = await this.one("SELECT to_jsonb(s) AS r FROM ctxwin.sessions s WHERE s.id = $1::uuid", [sid(session)]);
        return r === null ? null : camel(r);
    }
    /**
     * Appends messages of any supported shape; returns the stored ids, one per
     * stored message (a message whose key the session has returns its stored id).
     */
    async append(session, messages, options = {}) {
        const c = toChatMessages(messages, options.keys);
        const a = sessionArg(options.create, 4);
        const r = await this.one(`SELECT to_jsonb(ctxwin.append_messages(${a.sql}, $2::jsonb, $3::text[])) AS r`, [sid(session), JSON.stringify(c.messages), c.keys, ...a.values]);
        return (r ?? []);
    }
    /** ctxwin.build_context: the window to send. */
    async buildContext(session, options = {}) {
        return await this.one("SELECT ctxwin.build_context($1::uuid, $2::int, $3::text, $4::jsonb, $5::boolean) AS r", [sid(session), options.budget ?? null, options.format ?? "openai", jsonOrNull(options.tools), options.cache ?? true]);
    }
    /**
     * ctxwin.build_window: the window (what buildContext returns) with the
     * stored rows it shows (ids, client keys, roles) and the summary's fields,
     * in one statement: no matching of the window against stored messages.
     */
    async buildWindow(session, options = {}) {
        return await this.one("SELECT ctxwin.build_window($1::uuid, $2::int, $3::text, $4::jsonb, $5::boolean) AS r", [sid(session), options.budget ?? null, options.format ?? "openai", jsonOrNull(options.tools), options.cache ?? true]);
    }
    /** ctxwin.build_request: the whole body to POST (with recall: the conversation_search tool last). */
    async buildRequest(session, options = {}) {
        return await this.one("SELECT ctxwin.build_request($1::uuid, $2::int, $3::text, $4::jsonb, $5::boolean, $6::boolean) AS r", [sid(session), options.budget ?? null, options.format ?? "openai", jsonOrNull(options.tools), options.cache ?? true,
            options.recall ?? false]);
    }
    /**
     * ctxwin.search: the messages of the session's whole history (summarized
     * ones included) that best match the query, best first.
     */
    async search(session, query, options = {}) {
        const rows = await this.query(`SELECT id, role, created_at, snippet, rank
       FROM ctxwin.search($1::uuid, $2::text, $3::text[], $4::timestamptz, $5::timestamptz, $6::int)`, [sid(session), query, options.roles ?? null, options.since ?? null, options.until ?? null,
            options.maxResults ?? 10]);
        return rows.map((r) => ({
            id: Number(r["id"]), role: r["role"],
            createdAt: r["created_at"] instanceof Date ? r["created_at"] : new Date(String(r["created_at"])),
            snippet: String(r["snippet"]), rank: Number(r["rank"]),
        }));
    }
    /**
     * ctxwin.message: one stored message whole, with its id and created_at
     * (what a cleared tool result of a window, or a search hit, points to).
     */
    async message(session, id) {
        return await this.one("SELECT ctxwin.message($1::uuid, $2::bigint) AS r", [sid(session), id]);
    }
    /**
     * ctxwin.retract: takes back the session's messages from fromId onwards.
     * They stay stored (message() returns them with retracted_at set) and
     * leave every later window, summary, search and count; a summary that
     * covers one is replaced by the newest one ending before fromId.  The
     * number of messages retracted (0: none, or all already were).
     */
    async retract(session, fromId) {
        return Number(await this.one("SELECT ctxwin.retract($1::uuid, $2::bigint) AS r", [sid(session), fromId]));
    }
    /**
     * ctxwin.answer_tool_call: the tool message answering the model's call of
     * conversation_search (an OpenAI tool call or an Anthropic tool_use block,
     * as the SDKs give them), to append to the session as it is.
     */
    async answerToolCall(session, toolCall) {
        return await this.one("SELECT ctxwin.answer_tool_call($1::uuid, $2::jsonb) AS r", [sid(session), JSON.stringify(toolCall)]);
    }
    /**
     * One chat turn in one round trip (ctxwin.append_and_build): appends the
     * messages (the user's, or a tool's results) and returns the window to
     * send, or with request: true the whole request body (with recall: the
     * conversation_search tool last).
     */
    async turn(session, messages, options = {}) {
        const c = toChatMessages(messages, options.keys);
        const a = sessionArg(options.create, 10);
        const r = await this.one(`SELECT ctxwin.append_and_build(${a.sql}, $2::jsonb, $3::text[], $4::int, $5::text, $6::jsonb,
                                      $7::boolean, $8::boolean, $9::boolean) AS r`, [sid(session), JSON.stringify(c.messages), c.keys, options.budget ?? null, options.format ?? "openai",
            jsonOrNull(options.tools), options.cache ?? true, options.request ?? false, options.recall ?? false, ...a.values]);
        return r;
    }
    /**
     * ctxwin.record_usage: what the provider billed for one request.  Takes the
     * answer (OpenAI ChatCompletion or Response, Anthropic Message), its usage
     * object, or an AI SDK usage.  Returns the request's number in the session.
     */
    async recordUsage(session, responseOrUsage, options = {}) {
        const r = await this.one("SELECT ctxwin.record_usage($1::uuid, $2::jsonb, $3::bigint, $4::int) AS r", [sid(session), JSON.stringify(usageOf(responseOrUsage)), options.windowFirstId ?? null, options.windowTokens ?? null]);
        return Number(r);
    }
    /** ctxwin.context_status: where the session stands. */
    async status(session) {
        const r = await this.one("SELECT to_jsonb(s) AS r FROM ctxwin.context_status($1::uuid) s", [sid(session)]);
        if (r === null)
            throw new CtxwinError(`no status for session ${sid(session)}`);
        return camel(r);
    }
    /** ctxwin.context_report: the status for a person. */
    async report(session) {
        return String(await this.one("SELECT ctxwin.context_report($1::uuid) AS r", [sid(session)]));
    }
    /**
     * ctxwin.summarize_session: a summary now (with force, whatever is
     * unsummarized beyond the newest min_recent_messages; without, only if a
     * trigger fires).  Returns the new summary, or null when there was nothing
     * to summarize.
     */
    async summarize(session, options = {}) {
        const r = await this.one("SELECT to_jsonb(ctxwin.summarize_session($1::uuid, $2::boolean, $3::text)) AS r", [sid(session), options.force ?? false, options.instructions ?? null]);
        if (r === null || r["version"] == null)
            return null;
        return camel(r);
    }
    /**
     * ctxwin.claim_summary: the session's due summary as a job for the
     * application's own model (with force: whatever is unsummarized beyond
     * the newest min_recent_messages), or null when none is due or another
     * claim or the worker holds the session.
     */
    async claimSummary(session, options = {}) {
        return await this.one("SELECT ctxwin.claim_summary($1::uuid, $2::boolean) AS r", [sid(session), options.force ?? false]);
    }
    /** ctxwin.claim_next_summary: the job of the next queued session (oldest first), or null. */
    async claimNextSummary() {
        return await this.one("SELECT ctxwin.claim_next_summary() AS r", []);
    }
    /**
     * ctxwin.complete_summary: the model's summary for a job, applied by the
     * worker's own code and checks; its usage recorded.  A stale job is
     * SummaryJobStale (CW001), a refused summary InvalidArgument (22023):
     * nothing written either way.
     */
    async completeSummary(token, summary, usage) {
        const r = await this.one("SELECT to_jsonb(ctxwin.complete_summary($1::text, $2::text, $3::jsonb)) AS r", [token, summary, usage == null ? null : JSON.stringify(usageOf(usage))]);
        return camel(r);
    }
    /** ctxwin.fail_summary: releases a job the model could not do, recording the failure. */
    async failSummary(token, error) {
        await this.query("SELECT ctxwin.fail_summary($1::text, $2::text)", [token, error]);
    }
    /**
     * ctxwin.release_summary: gives a claimed job back undone, with no summary
     * and no failure recorded; false when the job no longer held its session.
     */
    async releaseSummary(token) {
        return (await this.one("SELECT ctxwin.release_summary($1::text) AS r", [token])) === true;
    }
    /** Whether the database's ctxwin hands out summary jobs (ctxwin.claim_summary exists). */
    async hasSummaryJobs() {
        return (await this.one("SELECT to_regprocedure('ctxwin.claim_summary(uuid, boolean)') IS NOT NULL AS r", [])) === true;
    }
    /** Whether ctxwin's background worker serves this database now (ctxwin.worker_status). */
    async workerRunning() {
        return (await this.one(`SELECT ${WORKER_SERVES_SQL} AS r`, [])) === true;
    }
    /** The stored messages after a message id (all of them by default), oldest first. */
    async messages(session, options = {}) {
        const r = await this.one("SELECT coalesce(jsonb_agg(to_jsonb(m) ORDER BY m.id), '[]') AS r FROM ctxwin.messages_after($1::uuid, $2::bigint) m", [sid(session), options.after ?? null]);
        return r.map((m) => camel(m));
    }
}
/** A session bound to a client: the client's calls without the session argument. */
export class CtxwinSession {
    client;
    id;
    constructor(client, id) {
        this.client = client;
        this.id = id;
    }
    info() { return this.client.getSession(this.id); }
    ensure(options) { return this.client.ensureSession(this.id, options); }
    append(messages, options) {
        return this.client.append(this.id, messages, options);
    }
    buildContext(options) {
        return this.client.buildContext(this.id, options);
    }
    buildWindow(options) {
        // eslint-disable-next-line @typescript-eslint/no-explicit-any
        return this.client.buildWindow(this.id, options);
    }
    buildRequest(options) {
        return this.client.buildRequest(this.id, options);
    }
    search(query, options) {
        return this.client.search(this.id, query, options);
    }
    message(id) { return this.client.message(this.id, id); }
    answerToolCall(toolCall) {
        return this.client.answerToolCall(this.id, toolCall);
    }
    turn(messages, options = {}) {
        // eslint-disable-next-line @typescript-eslint/no-explicit-any
        return this.client.turn(this.id, messages, options);
    }
    recordUsage(responseOrUsage, options) {
        return this.client.recordUsage(this.id, responseOrUsage, options);
    }
    status() { return this.client.status(this.id); }
    report() { return this.client.report(this.id); }
    summarize(options) {
        return this.client.summarize(this.id, options);
    }
    messages(options) {
        return this.client.messages(this.id, options);
    }
}
