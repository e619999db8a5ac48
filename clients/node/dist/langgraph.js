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
import { AIMessage, HumanMessage, RemoveMessage, SystemMessage, ToolMessage, } from "@langchain/core/messages";
import { randomUUID } from "node:crypto";
import { RunnableLambda } from "@langchain/core/runnables";
import { REMOVE_ALL_MESSAGES } from "@langchain/langgraph";
import { Ctxwin, WORKER_SERVES_SQL } from "./client.js";
import { contentText, toChatMessages } from "./convert.js";
import { CtxwinError, PermissionDenied, SessionNotFound, SummaryFailed } from "./errors.js";
import { sessionIdForThread } from "./uuid.js";
export { sessionIdForThread, THREAD_NAMESPACE } from "./uuid.js";
/** The most messages the node's own profile keeps out of a summary (min_recent_messages), as the Python client's node. */
export const MIN_RECENT = 2;
/** Summaries one run makes at most while its window still leaves out unsummarized messages. */
const SETTLE_ROUNDS = 3;
/** The node's own entry in the state's context: the session (and thread) it wrote to. */
export const BOOKKEEPING_KEY = "ctxwin";
function lcType(m) {
    return m.getType();
}
/** The usage of a LangChain AIMessage as ctxwin.record_usage takes it (the provider's, else OpenAI's names). */
export function usageOfMessage(m) {
    const raw = m.response_metadata?.["usage"];
    if (raw && typeof raw === "object" && ("prompt_tokens" in raw || "input_tokens" in raw))
        return raw;
    const u = m.usage_metadata;
    if (!u)
        return null;
    const out = {
        prompt_tokens: u.input_tokens, completion_tokens: u.output_tokens, total_tokens: u.total_tokens,
    };
    const cached = u.input_token_details?.cache_read;
    if (cached)
        out["prompt_tokens_details"] = { cached_tokens: cached };
    return out;
}
/** A part of the window's user message as a LangChain content block (OpenAI's image_url shape). */
function toLangChainPart(p) {
    if (p.type === "text")
        return { type: "text", text: p.text };
    if (p.type === "image_url")
        return { type: "image_url", image_url: { ...p.image_url } };
    return { type: "image_url", image_url: { url: p.source.type === "url" ? p.source.url
                : `data:${p.source.media_type};base64,${p.source.data}` } };
}
/** A message of ctxwin's window as a LangChain message with the given id. */
export function toLangChainMessage(m, id) {
    const base = id === undefined ? {} : { id };
    switch (m.role) {
        case "system": return new SystemMessage({ content: contentText(m.content), ...base });
        // a user message with images: its parts, in OpenAI's shape, which LangChain's chat models take
        case "user": return new HumanMessage({
            content: (Array.isArray(m.content) ? m.content.map(toLangChainPart) : m.content ?? ""),
            ...base, ...(m.name ? { name: m.name } : {})
        });
        case "tool": return new ToolMessage({ content: contentText(m.content), tool_call_id: m.tool_call_id ?? "", ...base,
            ...(m.name ? { name: m.name } : {}) });
        default: return new AIMessage({
            content: contentText(m.content), ...base, ...(m.name ? { name: m.name } : {}),
            tool_calls: (m.tool_calls ?? []).map((c) => {
                let args = {};
                try {
                    args = JSON.parse(c.function.arguments);
                }
                catch { /* kept empty */ }
                return { id: c.id, name: c.function.name, args, type: "tool_call" };
            }),
        });
    }
}
function sameStored(a, b) {
    return a.role === b.role && (a.content ?? "") === (b.content ?? "") && (a.tool_call_id ?? null) === (b.tool_call_id ?? null) &&
        JSON.stringify((a.tool_calls ?? []).map((c) => [c.id, c.function.name])) ===
            JSON.stringify((b.tool_calls ?? []).map((c) => [c.id, c.function.name]));
}
/**
 * Whether the given model writes the summaries of a profile's sessions:
 * with "model" yes, with "server" no; with "auto" when the database hands
 * out summary jobs and the server has no LLM for the profile.
 */
export async function modelSummarizes(cw, profile, how = "auto") {
    if (how !== "auto")
        return how === "model";
    return await cw.hasSummaryJobs() && !(await serverLlm(cw, profile));
}
/** Whether ctxwin's own worker calls an LLM for a profile (the Python client's test). */
export async function serverLlm(cw, profile) {
    const r = await cw.query(`SELECT coalesce(p.summary_strategy,
                     CASE WHEN coalesce(current_setting('ctxwin.llm_provider', true), 'extractive') <> 'extractive'
                          THEN 'llm' ELSE 'extractive' END) IN ('llm', 'hybrid')
            AND coalesce(current_setting('ctxwin.llm_provider', true), 'extractive') <> 'extractive' AS llm
     FROM ctxwin.profiles p WHERE p.name = $1::text`, [profile]);
    return r[0]?.["llm"] === true;
}
/**
 * One summary of the session by the application's model, through ctxwin's
 * summary jobs: claim_summary (forced), the model given ctxwin's prompt,
 * complete_summary with its answer and usage; fail_summary when the model
 * fails or ctxwin refuses the answer.  Whether a summary was written
 * (false: none due, or another claim holds the session).
 */
export async function summarizeWithModel(cw, session, model) {
    const job = await cw.claimSummary(session, { force: true });
    if (job === null)
        return false;
    let answer;
    try {
        answer = await model.invoke(job.messages.map((m) => (m.role === "system" ? new SystemMessage(m.content) : new HumanMessage(m.content))));
    }
    catch (e) {
        await cw.failSummary(job.token, `the model failed: ${String(e)}`);
        throw new SummaryFailed(`the model could not summarize session ${session}: ${String(e)}`, { cause: e });
    }
    const text = typeof answer.content === "string" ? answer.content : answer.text;
    try {
        // an answer longer than the summary's length is cut by ctxwin to fit
        await cw.completeSummary(job.token, text, AIMessage.isInstance(answer) ? usageOfMessage(answer) : null);
    }
    catch (e) {
        if (e instanceof CtxwinError && e.code !== "CW001")
            await cw.failSummary(job.token, `refused: ${e.message}`);
        throw e;
    }
    return true;
}
class Summarizer {
    o;
    cw;
    maxTokens;
    maxTokensBeforeSummary;
    maxSummaryTokens;
    inputKey;
    outputKey;
    profileName;
    /** The node's profile exists (or was named, and is used as it is). */
    profileReady;
    /** Whether the model writes the summaries (decided once). */
    useModel = null;
    constructor(o) {
        this.o = o;
        this.cw = o.ctxwin instanceof Ctxwin ? o.ctxwin : new Ctxwin(o.ctxwin);
        if (!Number.isInteger(o.maxTokens) || o.maxTokens <= 0)
            throw new TypeError("maxTokens must be a positive integer");
        this.maxTokens = o.maxTokens;
        this.maxTokensBeforeSummary = o.maxTokensBeforeSummary ?? o.maxTokens;
        this.maxSummaryTokens = o.maxSummaryTokens ?? 256;
        if (this.maxSummaryTokens >= this.maxTokensBeforeSummary)
            throw new TypeError("maxSummaryTokens must be less than maxTokensBeforeSummary");
        this.inputKey = o.inputMessagesKey ?? "messages";
        this.outputKey = o.outputMessagesKey ?? "summarized_messages";
        this.profileName = o.profile ??
            `langgraph-${o.baseProfile ?? "default"}-${this.maxTokensBeforeSummary}-${this.maxSummaryTokens}`;
        this.profileReady = o.profile !== undefined;
    }
    /** Creates the node's profile, once, if it is missing: a copy of baseProfile with the node's trigger and summary length. */
    async ensureProfile() {
        if (this.profileReady)
            return;
        try {
            await this.cw.query(`INSERT INTO ctxwin.profiles (name, model, context_window, trigger_ratio, max_messages_before_summary,
           max_tokens_before_summary, min_recent_messages, response_reserve, max_summary_tokens,
           summary_strategy, summary_model, summary_prompt, summary_placement, window_policy,
           window_low_water, cache_ttl, keep_tool_results, tool_result_max_tokens, clear_tool_inputs,
           exclude_tools, clear_at_least)
         SELECT $1::text, model, context_window, NULL, NULL, $2::int, least(min_recent_messages, ${MIN_RECENT}), response_reserve,
           $3::int, summary_strategy, summary_model, summary_prompt, summary_placement, window_policy,
           window_low_water, cache_ttl, keep_tool_results, tool_result_max_tokens, clear_tool_inputs,
           exclude_tools, clear_at_least
         FROM ctxwin.profiles WHERE name = $4::text
         ON CONFLICT (name) DO NOTHING`, [this.profileName, this.maxTokensBeforeSummary, this.maxSummaryTokens, this.o.baseProfile ?? "default"]);
        }
        catch (e) {
            if (e instanceof CtxwinError && e.code === "42501")
                throw new PermissionDenied(`cannot create the ctxwin profile "${this.profileName}": ${e.message}`, {
                    code: e.code, detail: e.detail, cause: e,
                    hint: `Create a profile and name it: new SummarizationNode({ ..., profile: "name" }).`,
                });
            throw e;
        }
        this.profileReady = true;
    }
    /** One summary of the session, by the model or the server; whether one was written (a failure is a warning). */
    async summarizeNow(session) {
        const model = this.o.model;
        if (model && this.useModel === null)
            this.useModel = await modelSummarizes(this.cw, this.profileName, this.o.summarizeWith);
        try {
            if (!model || !this.useModel)
                return (await this.cw.summarize(session, { force: true, instructions: this.o.instructions ?? null })) !== null;
            return await summarizeWithModel(this.cw, session, model);
        }
        catch (e) {
            if (!(e instanceof CtxwinError))
                throw e;
            process.emitWarning(`ctxwin could not summarize session ${session}: ${e.message}`, "CtxwinWarning");
            return false;
        }
    }
    /** Whether the node makes the summary the session needs (else the worker does). */
    summarizesInline(st) {
        if (this.o.summarize === "inline")
            return true;
        if (this.o.summarize === "worker")
            return false;
        return !st.worker;
    }
    /**
     * Appends the messages, the session created in the same statement when it
     * is missing (ctxwin.ensure_session): nothing raised, nothing logged, the
     * caller's transaction never aborted on a first write.
     */
    async append(session, threadId, messages) {
        await this.ensureProfile();
        return await this.cw.append(session, messages, {
            keys: messages.map((m) => m.id),
            create: { profile: this.profileName, systemPrompt: this.o.systemPrompt ?? null,
                metadata: { langgraph_thread_id: threadId } },
        });
    }
    async state(session) {
        const r = await this.cw.query(`SELECT jsonb_build_object(
         'window', w, 'through', s.summary_through_id, 'summary', s.conversation_summary,
         'version', s.summary_version, 'queued', s.compaction_queued_at IS NOT NULL,
         'unsummarized_tokens', s.unsummarized_tokens, 'prompt_tokens', s.prompt_tokens,
         'worker', ${WORKER_SERVES_SQL},
         'lastKey', (SELECT m.client_key FROM ctxwin.messages m WHERE m.session_id = s.id AND m.id = s.summary_through_id),
         'dropped', (SELECT count(*) FROM ctxwin.messages m WHERE m.session_id = s.id AND m.id > s.summary_through_id
                       AND m.id < coalesce((w->'messages'->0->>'id')::bigint, 9223372036854775807)
                       AND m.retracted_at IS NULL)) AS r
       FROM ctxwin.sessions s, ctxwin.build_window(s.id, $2::int) w WHERE s.id = $1::uuid`, [session, this.maxTokens]);
        if (!r[0])
            throw new SessionNotFound(`session ${session} does not exist`);
        return r[0]["r"];
    }
    /**
     * Retracts a turn taken back: when the newest stored messages of the
     * node's last output are gone from the state (RemoveMessage, as a chat
     * UI's "edit and resend" does), ctxwin.retract from the first of them
     * (with distinct keys, also the stored messages just before it that are
     * gone too).  Older messages removed with newer ones kept (the state
     * trimmed) are left as they are: the window is ctxwin's.  Whether
     * messages were retracted; a failure is a warning.
     */
    async retractRemoved(session, book, all) {
        if (book?.session !== session || !Array.isArray(book.window) || book.window.length === 0)
            return false;
        const present = new Set(all.filter((m) => lcType(m) !== "remove").map((m) => m.id));
        const gone = book.window.filter(([, k]) => !present.has(k)).map(([i]) => Number(i));
        if (gone.length === 0)
            return false;
        let first = Math.min(...gone);
        if (book.window.some(([i, k]) => Number(i) >= first && present.has(k)))
            return false;
        try {
            if (this.inputKey !== this.outputKey) {
                const before = await this.cw.query(`SELECT id::bigint AS id, client_key FROM ctxwin.messages
           WHERE session_id = $1::uuid AND id < $2::bigint AND retracted_at IS NULL ORDER BY id DESC LIMIT 200`, [session, first]);
                for (const r of before) {
                    const key = r["client_key"];
                    if (key === null || present.has(key))
                        break;
                    first = Number(r["id"]);
                }
            }
            return (await this.cw.retract(session, first)) > 0;
        }
        catch (e) {
            if (!(e instanceof CtxwinError))
                throw e;
            process.emitWarning(`ctxwin could not retract the messages of session ${session} from ${first}: ${e.message}`, "CtxwinWarning");
            return false;
        }
    }
    async run(input, config) {
        const threadId = config?.configurable?.["thread_id"];
        const tid = typeof threadId === "string" || typeof threadId === "number" ? String(threadId) : null;
        const all = (input[this.inputKey] ?? []);
        const context = (input["context"] ?? {});
        const book = context[BOOKKEEPING_KEY];
        // no thread (a graph without a checkpointer, as LangMem's node allows): the
        // session the state's context carries, else a new one
        const session = tid !== null ? (this.o.sessionId ?? sessionIdForThread)(tid)
            : typeof book?.session === "string" && book.thread == null ? book.session : randomUUID();
        const prev = context["running_summary"];
        const fresh = all.filter((m) => lcType(m) !== "remove" && !(typeof m.id === "string" && m.id.startsWith("ctxwin:")));
        for (const m of fresh) {
            if (typeof m.id !== "string" || m.id === "")
                throw new CtxwinError("Messages are required to have ID field", { hint: "Keep them in a channel with messagesStateReducer, which gives every message an id." });
        }
        // a turn taken back (RemoveMessage of the newest stored messages the node showed): retracted before anything is appended
        const retracted = await this.retractRemoved(session, book, all);
        const stored = await this.append(session, tid, fresh);
        const storedId = new Map();
        const byId = new Map();
        fresh.forEach((m, i) => { storedId.set(m.id, stored[i]); byId.set(m.id, m); });
        let st = await this.state(session);
        // a summary when one is due; while the window still leaves out messages no summary covers, another (at most
        // SETTLE_ROUNDS), so that no message leaves the model's view unsummarized
        for (let round = 0; round < SETTLE_ROUNDS; round++) {
            const since = Number(st.unsummarized_tokens) + Number(st.prompt_tokens);
            const due = st.queued || st.dropped > 0 || (round === 0 && since > this.maxTokensBeforeSummary - this.maxSummaryTokens);
            if (!due || !this.summarizesInline(st) || !(await this.summarizeNow(session)))
                break;
            st = await this.state(session);
            if (st.dropped === 0)
                break;
        }
        if (st.dropped > 0 && this.summarizesInline(st))
            process.emitWarning(`ctxwin: ${st.dropped} messages of session ${session} are neither in its summary nor in the window ` +
                `(the profile keeps its newest min_recent_messages out of summaries)`, "CtxwinWarning");
        const ctx = st.window.context;
        const lead = ctx.length - st.window.messages.length;
        const out = [];
        ctx.forEach((m, i) => {
            if (i < lead) {
                out.push(toLangChainMessage(m, `ctxwin:system:${session}:${i}`));
                return;
            }
            const row = st.window.messages[i - lead];
            const key = row?.client_key ?? `ctxwin:message:${session}:${row?.id ?? i}`;
            const original = byId.get(key);
            const converted = original ? toChatMessages(original).messages : [];
            out.push(original && converted.length === 1 && sameStored(converted[0], m) ? original : toLangChainMessage(m, key));
        });
        const shown = st.window.messages.filter((r) => r.client_key !== null).map((r) => [r.id, r.client_key]);
        const update = { context: { ...context, [BOOKKEEPING_KEY]: { session, thread: tid, window: shown } } };
        update[this.outputKey] = this.inputKey === this.outputKey
            ? [new RemoveMessage({ id: REMOVE_ALL_MESSAGES }), ...out]
            : out;
        if (st.version > 0 && st.summary !== null) {
            // after a retract the summary may be an older one: the ids the state still holds only
            const present = new Set(all.map((m) => m.id));
            const ids = new Set((prev?.summarizedMessageIds ?? []).filter((id) => !retracted || present.has(id)));
            for (const [id, n] of storedId)
                if (n <= st.through)
                    ids.add(id);
            const running = {
                summary: st.summary,
                summarizedMessageIds: [...ids],
                lastSummarizedMessageId: st.lastKey ?? prev?.lastSummarizedMessageId ?? null,
            };
            update["context"] = { ...update["context"], running_summary: running };
        }
        return update;
    }
}
/**
 * LangMem's SummarizationNode on ctxwin: add it to a StateGraph as a node
 * (graph.addNode("summarize", new SummarizationNode({ ctxwin: pool, maxTokens: 4000 }))).
 */
export class SummarizationNode extends RunnableLambda {
    inputMessagesKey;
    outputMessagesKey;
    maxTokens;
    maxSummaryTokens;
    /** The profile of the sessions the node creates (the profile option, or the node's own). */
    profileName;
    constructor(options) {
        const s = new Summarizer(options);
        super({ func: (input, config) => s.run(input, config) });
        this.name = options.name ?? "summarization";
        this.inputMessagesKey = s.inputKey;
        this.outputMessagesKey = s.outputKey;
        this.maxTokens = s.maxTokens;
        this.maxSummaryTokens = s.maxSummaryTokens;
        this.profileName = s.profileName;
    }
}
