/**
 * Messages in the shapes applications hold, converted to the OpenAI chat
 * shape ctxwin stores: OpenAI chat messages (and a whole ChatCompletion),
 * Anthropic message params (and a whole Message answer), LangChain.js
 * BaseMessages, and the Vercel AI SDK's ModelMessages.  One message may
 * become several: an Anthropic user turn with tool_result blocks, or an AI
 * SDK tool message with several results, is one tool message per result
 * (then the text, if any).
 *
 * Each stored message may carry a key (ctxwin.messages.client_key): a
 * message whose key the session already has is not stored again.  The key
 * of an input message is the one given, else its own id (a LangChain
 * message's id, an Anthropic Message's or a ChatCompletion's id), else for
 * a tool result "tool:" and its call id and for an assistant message with
 * tool calls "calls:" and its first call's id (call ids are unique in a
 * conversation), else none.  An input message that becomes n > 1 messages
 * gives them its key followed by "#0", "#1" ...
 */
import { MessageConversionError } from "./errors.js";
function isObj(v) {
    return typeof v === "object" && v !== null && !Array.isArray(v);
}
function bad(where, what, hint) {
    return new MessageConversionError(`${where}: ${what}`, {
        detail: "Nothing was appended.",
        hint: hint ?? "Pass OpenAI chat messages, Anthropic messages, LangChain messages or AI SDK ModelMessages.",
    });
}
const SKIPPED_PARTS = new Set([
    "reasoning", "thinking", "redacted_thinking", "tool-approval-request", "tool-approval-response",
    "step-start", "source", "source-url", "source-document",
]);
function stringifyArgs(v) {
    if (typeof v === "string")
        return v;
    return JSON.stringify(v ?? {});
}
function aiSdkOutput(where, part) {
    const out = part["output"];
    if (isObj(out)) {
        const t = out["type"];
        const value = out["value"];
        switch (t) {
            case "text": return { text: String(value ?? ""), error: false };
            case "error-text": return { text: String(value ?? ""), error: true };
            case "json": return { text: JSON.stringify(value ?? null), error: false };
            case "error-json": return { text: JSON.stringify(value ?? null), error: true };
            case "execution-denied":
                return { text: typeof out["reason"] === "string" ? out["reason"] : "Tool execution denied.", error: true };
            case "content": {
                const texts = [];
                for (const c of Array.isArray(value) ? value : []) {
                    if (isObj(c) && c["type"] === "text")
                        texts.push(String(c["text"] ?? ""));
                    else
                        throw bad(where, `a tool result part of type ${JSON.stringify(isObj(c) ? c["type"] : c)} is not stored by ctxwin (text only)`);
                }
                return { text: texts.join("\n"), error: false };
            }
            default:
                throw bad(where, `a tool result output of type ${JSON.stringify(t)} is not known`);
        }
    }
    // AI SDK 4's "result"
    const r = part["result"];
    return { text: typeof r === "string" ? r : JSON.stringify(r ?? null), error: part["isError"] === true };
}
function anthropicResultText(where, content) {
    if (typeof content === "string")
        return content;
    if (content == null)
        return "";
    if (!Array.isArray(content))
        throw bad(where, "a tool_result's content must be a string or an array of blocks");
    return content.map((b) => {
        if (isObj(b) && b["type"] === "text")
            return String(b["text"] ?? "");
        throw bad(where, `a tool_result block of type ${JSON.stringify(isObj(b) ? b["type"] : b)} is not stored by ctxwin (text only)`);
    }).join("\n");
}
/** The parts of a content array, of any of the shapes. */
function parseParts(where, content) {
    const p = { text: [], calls: [], results: [] };
    content.forEach((part, i) => {
        const w = `${where}.content[${i}]`;
        if (typeof part === "string") {
            p.text.push(part);
            return;
        }
        if (!isObj(part))
            throw bad(w, "a content part must be an object");
        const type = part["type"];
        if (type === "text" || type === "input_text" || type === "output_text") {
            p.text.push(String(part["text"] ?? ""));
        }
        else if (type === "refusal") {
            p.text.push(String(part["refusal"] ?? ""));
        }
        else if (type === "tool_use") {
            p.calls.push({ id: String(part["id"]), type: "function",
                function: { name: String(part["name"]), arguments: stringifyArgs(part["input"]) } });
        }
        else if (type === "tool-call") {
            p.calls.push({ id: String(part["toolCallId"]), type: "function",
                function: { name: String(part["toolName"]), arguments: stringifyArgs(part["input"] ?? part["args"]) } });
        }
        else if (type === "tool_result") {
            const m = { role: "tool", tool_call_id: String(part["tool_use_id"]),
                content: anthropicResultText(w, part["content"]) };
            if (part["is_error"] === true)
                m.metadata = { is_error: true };
            p.results.push(m);
        }
        else if (type === "tool-result") {
            const { text, error } = aiSdkOutput(w, part);
            const m = { role: "tool", tool_call_id: String(part["toolCallId"]), content: text };
            if (typeof part["toolName"] === "string")
                m.name = part["toolName"];
            if (error)
                m.metadata = { is_error: true };
            p.results.push(m);
        }
        else if (typeof type === "string" && SKIPPED_PARTS.has(type)) {
            // reasoning and provider bookkeeping: not part of what ctxwin stores
        }
        else {
            throw bad(w, `content parts of type ${JSON.stringify(type)} are not stored by ctxwin (text, tool calls and tool results are)`, "Keep images and files elsewhere and put a text reference in the message.");
        }
    });
    return p;
}
function checkToolCalls(where, v) {
    if (v == null)
        return undefined;
    if (!Array.isArray(v))
        throw bad(where, "tool_calls must be an array");
    const out = v.map((c, i) => {
        const fn = isObj(c) ? c["function"] : undefined;
        if (!isObj(c) || typeof c["id"] !== "string" || !isObj(fn) || typeof fn["name"] !== "string")
            throw bad(`${where}.tool_calls[${i}]`, "a tool call needs an id and a function name");
        return { id: c["id"], type: "function",
            function: { name: fn["name"], arguments: stringifyArgs(fn["arguments"]) } };
    });
    return out.length ? out : undefined;
}
/** An assistant, user or system message from parsed parts, then its tool results. */
function assemble(role, parts, extra) {
    const out = [...parts.results];
    const hasText = parts.text.length > 0;
    if (role === "assistant") {
        if (hasText || parts.calls.length || !parts.results.length) {
            const m = { role, content: hasText ? parts.text.join("\n") : null, ...extra };
            if (parts.calls.length)
                m.tool_calls = parts.calls;
            out.push(m);
        }
    }
    else if (hasText || !parts.results.length) {
        out.push({ role, content: parts.text.join("\n"), ...extra });
    }
    return out;
}
function fromRoleMessage(where, m) {
    let role = m["role"];
    if (role === "developer")
        role = "system";
    if (role !== "system" && role !== "user" && role !== "assistant" && role !== "tool")
        throw bad(where, `role ${JSON.stringify(role)} is not one of system, developer, user, assistant, tool`);
    const extra = {};
    if (typeof m["name"] === "string")
        extra.name = m["name"];
    const content = m["content"];
    if (role === "tool") {
        if (Array.isArray(content) && content.some((c) => isObj(c) && c["type"] === "tool-result")) {
            const p = parseParts(where, content); // AI SDK tool message
            if (p.text.length || p.calls.length)
                throw bad(where, "an AI SDK tool message holds tool results only");
            return p.results;
        }
        if (typeof m["tool_call_id"] !== "string")
            throw bad(where, "a tool message needs a tool_call_id");
        const text = typeof content === "string" ? content
            : Array.isArray(content) ? parseParts(where, content).text.join("\n") : content == null ? "" : undefined;
        if (text === undefined)
            throw bad(where, "content must be a string, an array of parts or null");
        return [{ role: "tool", tool_call_id: m["tool_call_id"], content: text, ...extra }];
    }
    let parts;
    if (typeof content === "string")
        parts = { text: content === "" && role === "assistant" ? [] : [content], calls: [], results: [] };
    else if (content == null)
        parts = { text: [], calls: [], results: [] };
    else if (Array.isArray(content))
        parts = parseParts(where, content);
    else
        throw bad(where, "content must be a string, an array of parts or null");
    if (role === "assistant") {
        const calls = checkToolCalls(where, m["tool_calls"]);
        if (calls)
            parts.calls.push(...calls);
        if (parts.calls.length && parts.text.every((t) => t === ""))
            parts.text = [];
        if (!parts.text.length && typeof m["refusal"] === "string")
            parts.text.push(m["refusal"]);
    }
    else if (parts.calls.length) {
        throw bad(where, `a ${role} message cannot hold tool calls`);
    }
    if (role === "system" && parts.results.length)
        throw bad(where, "a system message cannot hold tool results");
    return assemble(role, parts, extra);
}
function isLangChain(m) {
    const x = m;
    return typeof x._getType === "function" || typeof x.getType === "function";
}
function langChainType(m) {
    return typeof m.getType === "function" ? m.getType() : m._getType();
}
function fromLangChain(where, m) {
    const t = langChainType(m);
    if (t === "remove")
        return [];
    const role = t === "human" ? "user" : t === "ai" ? "assistant" : t === "system" ? "system" : t === "tool" ? "tool"
        : t === "generic" || t === "chat" ? String(m.role) : undefined;
    if (role === undefined)
        throw bad(where, `LangChain messages of type ${JSON.stringify(t)} are not stored by ctxwin`);
    const o = { role, content: m.content ?? "" };
    if (typeof m.name === "string" && m.name)
        o["name"] = m.name;
    if (role === "tool") {
        o["tool_call_id"] = m.tool_call_id;
        const out = fromRoleMessage(where, o);
        if (m.status === "error")
            out.forEach((x) => { x.metadata = { ...x.metadata, is_error: true }; });
        return out;
    }
    if (role === "assistant") {
        const calls = Array.isArray(m.tool_calls) ? m.tool_calls : [];
        if (calls.length) {
            o["tool_calls"] = calls.map((c, i) => {
                const cc = isObj(c) ? c : {};
                if (typeof cc["id"] !== "string" || typeof cc["name"] !== "string")
                    throw bad(`${where}.tool_calls[${i}]`, "a tool call needs an id and a name");
                return { id: cc["id"], type: "function", function: { name: cc["name"], arguments: JSON.stringify(cc["args"] ?? {}) } };
            });
            // the same calls as content blocks (Anthropic's), kept once
            if (Array.isArray(o["content"]))
                o["content"] = o["content"].filter((b) => !(isObj(b) && (b["type"] === "tool_use" || b["type"] === "tool-call")));
        }
    }
    return fromRoleMessage(where, o);
}
/** The messages one input stands for, and the key it carries of its own. */
function convertOne(where, m) {
    if (!isObj(m) && !(typeof m === "object" && m !== null))
        throw bad(where, "a message must be an object");
    const o = m;
    if (isLangChain(o)) {
        return { messages: fromLangChain(where, o), key: typeof o.id === "string" && o.id ? o.id : null };
    }
    if (o["object"] === "chat.completion" && Array.isArray(o["choices"])) {
        const choice = o["choices"][0];
        if (!isObj(choice) || !isObj(choice["message"]))
            throw bad(where, "a ChatCompletion without a message");
        return { messages: fromRoleMessage(where, choice["message"]), key: typeof o["id"] === "string" ? o["id"] : null };
    }
    if (o["type"] === "message" && o["role"] === "assistant" && Array.isArray(o["content"])) {
        return { messages: fromRoleMessage(where, { role: "assistant", content: o["content"] }),
            key: typeof o["id"] === "string" ? o["id"] : null };
    }
    if (!("role" in o))
        throw bad(where, "a message needs a role");
    return { messages: fromRoleMessage(where, o), key: null };
}
function derivedKey(m) {
    if (m.role === "tool" && m.tool_call_id)
        return `tool:${m.tool_call_id}`;
    if (m.role === "assistant" && m.tool_calls?.length)
        return `calls:${m.tool_calls[0].id}`;
    return null;
}
/**
 * Converts messages of any of the shapes to the chat messages ctxwin
 * stores, with their keys.  keys, if given, has one element per input
 * message (null or undefined: its own key, if it has one).
 */
export function toChatMessages(input, keys) {
    const list = Array.isArray(input) ? input : [input];
    if (keys && keys.length !== list.length)
        throw new MessageConversionError("keys must have one element per message", {
            detail: `There are ${list.length} messages and ${keys.length} keys.`,
            hint: "Give null for a message without a key of its own.",
        });
    const out = { messages: [], keys: [] };
    list.forEach((m, i) => {
        const { messages, key } = convertOne(`messages[${i}]`, m);
        if (messages.length === 0)
            return;
        const k = keys?.[i] ?? key;
        messages.forEach((x, j) => {
            out.messages.push(x);
            out.keys.push(k == null ? derivedKey(x) : messages.length === 1 ? k : `${k}#${j}`);
        });
    });
    return out;
}
