import { contentText } from "./convert.js";
function parseArgs(s) {
    try {
        return JSON.parse(s);
    }
    catch {
        return s;
    }
}
/** A part of a user message of the window as an AI SDK part: an image by its URL, or its bytes (base64) and media type. */
function toUserPart(p) {
    if (p.type === "text")
        return { type: "text", text: p.text };
    const url = p.type === "image_url" ? p.image_url.url
        : p.source.type === "url" ? p.source.url : `data:${p.source.media_type};base64,${p.source.data}`;
    const m = /^data:([^;,]+);base64,(.*)$/s.exec(url);
    return m ? { type: "image", image: m[2], mediaType: m[1] } : { type: "image", image: new URL(url) };
}
/** ctxwin's window (build_context's 'openai' format) as AI SDK ModelMessages. */
export function toModelMessages(context) {
    const out = [];
    const callNames = new Map();
    for (const m of context) {
        if (m.role === "system") {
            out.push({ role: "system", content: contentText(m.content) });
        }
        else if (m.role === "user") {
            out.push({ role: "user", content: Array.isArray(m.content) ? m.content.map(toUserPart) : m.content ?? "" });
        }
        else if (m.role === "assistant") {
            if (m.tool_calls?.length) {
                const content = [];
                if (contentText(m.content))
                    content.push({ type: "text", text: contentText(m.content) });
                for (const c of m.tool_calls) {
                    callNames.set(c.id, c.function.name);
                    content.push({ type: "tool-call", toolCallId: c.id, toolName: c.function.name, input: parseArgs(c.function.arguments) });
                }
                out.push({ role: "assistant", content });
            }
            else {
                out.push({ role: "assistant", content: contentText(m.content) });
            }
        }
        else {
            const id = m.tool_call_id ?? "";
            const part = { type: "tool-result", toolCallId: id,
                toolName: m.name ?? callNames.get(id) ?? "unknown", output: { type: "text", value: contentText(m.content) } };
            const last = out.at(-1);
            if (last?.role === "tool")
                last.content.push(part);
            else
                out.push({ role: "tool", content: [part] });
        }
    }
    return out;
}
function isAnswerWithoutCalls(m) {
    const o = m;
    return o.role === "assistant" &&
        !(Array.isArray(o.content) && o.content.some((p) => p.type === "tool-call"));
}
/** A ctxwin session driven by the AI SDK. */
export class CtxwinChat {
    ctxwin;
    sessionId;
    options;
    /** Steps (by response id) whose usage and messages are stored. */
    done = new Set();
    constructor(ctxwin, session, options = {}) {
        this.ctxwin = ctxwin;
        this.sessionId = typeof session === "string" ? session : session.id;
        this.options = options;
    }
    window() {
        return { budget: this.options.budget ?? null, tools: this.options.tools ?? null, cache: this.options.cache ?? true };
    }
    /**
     * One turn in one round trip: appends the user's message (a string, a
     * ModelMessage or several) and returns the window as ModelMessages.
     */
    async turn(message, options = {}) {
        const input = typeof message === "string" ? { role: "user", content: message } : message;
        const list = Array.isArray(input) ? input : [input];
        const keys = options.key != null ? list.map((_, i) => (list.length === 1 ? options.key : `${options.key}#${i}`)) : undefined;
        const r = await this.ctxwin.turn(this.sessionId, list, { ...this.window(), ...(keys ? { keys } : {}), ...(this.options.create ? { create: this.options.create } : {}) });
        return { ids: r.ids, messages: toModelMessages(r.context) };
    }
    /** The window now, as ModelMessages (no append). */
    async messages() {
        return toModelMessages(await this.ctxwin.buildContext(this.sessionId, this.window()));
    }
    /**
     * Stores the steps not stored yet, in order: each step's usage (before its
     * messages, so that the window recorded is the one it sent), then its new
     * response messages (an AI SDK step's response.messages holds those of the
     * steps before it too).
     */
    async storeSteps(steps, recordUsage = this.options.recordUsage ?? true) {
        let seen = 0;
        for (const step of steps) {
            const all = step.response.messages;
            const fresh = all.slice(seen);
            seen = all.length;
            if (this.done.has(step.response.id))
                continue;
            if (recordUsage)
                await this.ctxwin.recordUsage(this.sessionId, step.usage);
            if (fresh.length) {
                const keys = fresh.map((m, j) => (isAnswerWithoutCalls(m) ? `ai:${step.response.id}:${j}` : null));
                await this.ctxwin.append(this.sessionId, fresh, { keys });
            }
            this.done.add(step.response.id);
        }
    }
    /**
     * For prepareStep: from the second step on, stores the steps so far and
     * sends ctxwin's window (with the tool results just stored) instead of
     * the SDK's growing list.
     */
    prepareStep = async (options) => {
        if (options.stepNumber === 0 || options.steps.length === 0)
            return {};
        await this.storeSteps(options.steps);
        return { messages: await this.messages() };
    };
    /** For onFinish of generateText and streamText: stores the answer and records usage. */
    onFinish = async (event) => {
        await this.storeSteps(event.steps);
    };
}
