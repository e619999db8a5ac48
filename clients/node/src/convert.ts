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
import type { ChatMessage, ChatToolCall, ContentPart } from "./types.js";

/** The text of a stored message's content: the text itself, or the text parts joined by a blank line (as ctxwin joins them). */
export function contentText(content: ChatMessage["content"]): string {
  if (typeof content === "string") return content;
  if (!Array.isArray(content)) return "";
  return content.flatMap((p) => (p.type === "text" ? [p.text] : [])).join("\n\n");
}

/** Any message of the shapes above. */
export type MessageInput = object;

export interface Converted {
  messages: ChatMessage[];
  /** One per message, null: none. */
  keys: (string | null)[];
}

type Obj = Record<string, unknown>;

function isObj(v: unknown): v is Obj {
  return typeof v === "object" && v !== null && !Array.isArray(v);
}

function bad(where: string, what: string, hint?: string): MessageConversionError {
  return new MessageConversionError(`${where}: ${what}`, {
    detail: "Nothing was appended.",
    hint: hint ?? "Pass OpenAI chat messages, Anthropic messages, LangChain messages or AI SDK ModelMessages.",
  });
}

const SKIPPED_PARTS = new Set([
  "reasoning", "thinking", "redacted_thinking", "tool-approval-request", "tool-approval-response",
  "step-start", "source", "source-url", "source-document",
]);

interface Parsed {
  text: string[];
  calls: ChatToolCall[];
  results: ChatMessage[];
  /** The text and image parts in order, as ctxwin stores parts (OpenAI's or Anthropic's shape). */
  parts: Obj[];
  /** Whether an image is among them. */
  images: boolean;
}

/** The media type of image bytes by their header: PNG, JPEG, GIF, WebP (what ctxwin sizes). */
function sniffImage(b: Uint8Array): string | null {
  if (b.length >= 4 && b[0] === 0x89 && b[1] === 0x50 && b[2] === 0x4e && b[3] === 0x47) return "image/png";
  if (b.length >= 3 && b[0] === 0xff && b[1] === 0xd8 && b[2] === 0xff) return "image/jpeg";
  if (b.length >= 4 && b[0] === 0x47 && b[1] === 0x49 && b[2] === 0x46 && b[3] === 0x38) return "image/gif";
  if (b.length >= 12 && String.fromCharCode(...b.subarray(0, 4)) === "RIFF" && String.fromCharCode(...b.subarray(8, 12)) === "WEBP")
    return "image/webp";
  return null;
}

/**
 * An OpenAI image part for an image given as a URL, a data: URL, base64
 * text or bytes (the AI SDK's and LangChain's shapes); inline data needs
 * its media type, read from its bytes when not given.
 */
function imageFrom(where: string, data: unknown, mediaType: unknown, extra: Obj = {}): Obj {
  let url: string;
  if (data instanceof URL) {
    url = data.href;
  } else if (typeof data === "string" && /^(https?:|data:)/i.test(data)) {
    url = data;
  } else {
    let bytes: Uint8Array;
    if (typeof data === "string") bytes = Buffer.from(data, "base64");
    else if (data instanceof Uint8Array) bytes = data;
    else if (data instanceof ArrayBuffer) bytes = new Uint8Array(data);
    else throw bad(where, "an image must be a URL, a data: URL, base64 text or bytes");
    const type = typeof mediaType === "string" && mediaType !== "image/*" && mediaType !== "" ? mediaType : sniffImage(bytes);
    if (type === null) throw bad(where, "the media type of an inline image is not given, and its bytes are not PNG, JPEG, GIF or WebP");
    url = `data:${type};base64,${typeof data === "string" ? data : Buffer.from(bytes).toString("base64")}`;
  }
  return { type: "image_url", image_url: { url }, ...extra };
}

/** ctxwin's own size keys of an image part (width and height of an image behind a URL), kept when given. */
function sizeOf(part: Obj): Obj {
  const o: Obj = {};
  if (part["width"] !== undefined) o["width"] = part["width"];
  if (part["height"] !== undefined) o["height"] = part["height"];
  return o;
}

/**
 * The image part ctxwin stores for an image part of any of the shapes, or
 * null if the part is no image: OpenAI's image_url (LangChain's, whose
 * image_url may be a string, too), Anthropic's image with its source (as it
 * is), the AI SDK's image and image file, LangChain's standard image block.
 */
function imagePart(where: string, part: Obj): Obj | null {
  const type = part["type"];
  if (type === "image_url") {
    const iu = part["image_url"];
    const image_url = typeof iu === "string" ? { url: iu } : iu;
    return { ...part, image_url };
  }
  if (type === "input_image" && typeof part["image_url"] === "string") {
    const detail = part["detail"];
    return { type: "image_url", image_url: { url: part["image_url"], ...(typeof detail === "string" ? { detail } : {}) }, ...sizeOf(part) };
  }
  if (type === "image" && isObj(part["source"])) return part;                        // Anthropic's
  if (type === "image" && "image" in part) return imageFrom(where, part["image"], part["mediaType"] ?? part["mimeType"], sizeOf(part)); // AI SDK
  if (type === "image") {                                                            // LangChain's image blocks
    if (typeof part["url"] === "string") return imageFrom(where, part["url"], null, sizeOf(part));
    const data = part["data"] ?? part["base64"];
    if (data !== undefined) return imageFrom(where, data, part["mimeType"] ?? part["mime_type"], sizeOf(part));
    throw bad(where, "an image block needs a url or data (an uploaded file's id is not stored by ctxwin)");
  }
  if (type === "file") {
    const mt = part["mediaType"] ?? part["mimeType"] ?? part["mime_type"];
    if (typeof mt === "string" && mt.startsWith("image/"))
      return imageFrom(where, part["data"] ?? part["url"] ?? part["base64"], mt, sizeOf(part));
  }
  return null;
}

function stringifyArgs(v: unknown): string {
  if (typeof v === "string") return v;
  return JSON.stringify(v ?? {});
}

function aiSdkOutput(where: string, part: Obj): { text: string; error: boolean } {
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
        return { text: typeof out["reason"] === "string" ? out["reason"] as string : "Tool execution denied.", error: true };
      case "content": {
        const texts: string[] = [];
        for (const c of Array.isArray(value) ? value : []) {
          if (isObj(c) && c["type"] === "text") texts.push(String(c["text"] ?? ""));
          else throw bad(where, `a tool result part of type ${JSON.stringify(isObj(c) ? c["type"] : c)} is not stored by ctxwin (text only)`);
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

function anthropicResultText(where: string, content: unknown): string {
  if (typeof content === "string") return content;
  if (content == null) return "";
  if (!Array.isArray(content)) throw bad(where, "a tool_result's content must be a string or an array of blocks");
  return content.map((b) => {
    if (isObj(b) && b["type"] === "text") return String(b["text"] ?? "");
    throw bad(where, `a tool_result block of type ${JSON.stringify(isObj(b) ? b["type"] : b)} is not stored by ctxwin (text only)`);
  }).join("\n");
}

/** The parts of a content array, of any of the shapes. */
function parseParts(where: string, content: unknown[]): Parsed {
  const p: Parsed = { text: [], calls: [], results: [], parts: [], images: false };
  content.forEach((part, i) => {
    const w = `${where}.content[${i}]`;
    if (typeof part === "string") { p.text.push(part); p.parts.push({ type: "text", text: part }); return; }
    if (!isObj(part)) throw bad(w, "a content part must be an object");
    const type = part["type"];
    const image = imagePart(w, part);
    if (image !== null) {
      p.parts.push(image);
      p.images = true;
    } else if (type === "text" || type === "input_text" || type === "output_text") {
      p.text.push(String(part["text"] ?? ""));
      p.parts.push({ type: "text", text: String(part["text"] ?? "") });
    } else if (type === "refusal") {
      p.text.push(String(part["refusal"] ?? ""));
    } else if (type === "tool_use") {
      p.calls.push({ id: String(part["id"]), type: "function",
        function: { name: String(part["name"]), arguments: stringifyArgs(part["input"]) } });
    } else if (type === "tool-call") {
      p.calls.push({ id: String(part["toolCallId"]), type: "function",
        function: { name: String(part["toolName"]), arguments: stringifyArgs(part["input"] ?? part["args"]) } });
    } else if (type === "tool_result") {
      const m: ChatMessage = { role: "tool", tool_call_id: String(part["tool_use_id"]),
        content: anthropicResultText(w, part["content"]) };
      if (part["is_error"] === true) m.metadata = { is_error: true };
      p.results.push(m);
    } else if (type === "tool-result") {
      const { text, error } = aiSdkOutput(w, part);
      const m: ChatMessage = { role: "tool", tool_call_id: String(part["toolCallId"]), content: text };
      if (typeof part["toolName"] === "string") m.name = part["toolName"] as string;
      if (error) m.metadata = { is_error: true };
      p.results.push(m);
    } else if (typeof type === "string" && SKIPPED_PARTS.has(type)) {
      // reasoning and provider bookkeeping: not part of what ctxwin stores
    } else {
      throw bad(w, `content parts of type ${JSON.stringify(type)} are not stored by ctxwin (text, images, tool calls and tool results are)`,
        "Keep files and audio elsewhere and put a text reference in the message.");
    }
  });
  return p;
}

function checkToolCalls(where: string, v: unknown): ChatToolCall[] | undefined {
  if (v == null) return undefined;
  if (!Array.isArray(v)) throw bad(where, "tool_calls must be an array");
  const out = v.map((c, i): ChatToolCall => {
    const fn = isObj(c) ? c["function"] : undefined;
    if (!isObj(c) || typeof c["id"] !== "string" || !isObj(fn) || typeof fn["name"] !== "string")
      throw bad(`${where}.tool_calls[${i}]`, "a tool call needs an id and a function name");
    return { id: c["id"] as string, type: "function",
      function: { name: fn["name"] as string, arguments: stringifyArgs(fn["arguments"]) } };
  });
  return out.length ? out : undefined;
}

/** An assistant, user or system message from parsed parts, then its tool results. */
function assemble(where: string, role: ChatMessage["role"], parts: Parsed, extra: Partial<ChatMessage>): ChatMessage[] {
  const out: ChatMessage[] = [...parts.results];
  if (parts.images) {
    // stored as parts: ctxwin counts each image by its size and sends it in either format
    if (role !== "user")
      throw bad(where, `images are taken in user messages only, not in a ${role} message`,
        "Put an image a tool or the model made in a user message after the tool results.");
    out.push({ role, content: parts.parts as ContentPart[], ...extra });
    return out;
  }
  const hasText = parts.text.length > 0;
  if (role === "assistant") {
    if (hasText || parts.calls.length || !parts.results.length) {
      const m: ChatMessage = { role, content: hasText ? parts.text.join("\n") : null, ...extra };
      if (parts.calls.length) m.tool_calls = parts.calls;
      out.push(m);
    }
  } else if (hasText || !parts.results.length) {
    out.push({ role, content: parts.text.join("\n"), ...extra });
  }
  return out;
}

function fromRoleMessage(where: string, m: Obj): ChatMessage[] {
  let role = m["role"];
  if (role === "developer") role = "system";
  if (role !== "system" && role !== "user" && role !== "assistant" && role !== "tool")
    throw bad(where, `role ${JSON.stringify(role)} is not one of system, developer, user, assistant, tool`);
  const extra: Partial<ChatMessage> = {};
  if (typeof m["name"] === "string") extra.name = m["name"] as string;
  const content = m["content"];
  if (role === "tool") {
    if (Array.isArray(content) && content.some((c) => isObj(c) && c["type"] === "tool-result")) {
      const p = parseParts(where, content);           // AI SDK tool message
      if (p.text.length || p.calls.length) throw bad(where, "an AI SDK tool message holds tool results only");
      return p.results;
    }
    if (typeof m["tool_call_id"] !== "string") throw bad(where, "a tool message needs a tool_call_id");
    const text = typeof content === "string" ? content
      : Array.isArray(content) ? parseParts(where, content).text.join("\n") : content == null ? "" : undefined;
    if (text === undefined) throw bad(where, "content must be a string, an array of parts or null");
    return [{ role: "tool", tool_call_id: m["tool_call_id"] as string, content: text, ...extra }];
  }
  let parts: Parsed;
  if (typeof content === "string") parts = { text: content === "" && role === "assistant" ? [] : [content], calls: [], results: [], parts: [], images: false };
  else if (content == null) parts = { text: [], calls: [], results: [], parts: [], images: false };
  else if (Array.isArray(content)) parts = parseParts(where, content);
  else throw bad(where, "content must be a string, an array of parts or null");
  if (role === "assistant") {
    const calls = checkToolCalls(where, m["tool_calls"]);
    if (calls) parts.calls.push(...calls);
    if (parts.calls.length && parts.text.every((t) => t === "")) parts.text = [];
    if (!parts.text.length && typeof m["refusal"] === "string") parts.text.push(m["refusal"] as string);
  } else if (parts.calls.length) {
    throw bad(where, `a ${role} message cannot hold tool calls`);
  }
  if (role === "system" && parts.results.length) throw bad(where, "a system message cannot hold tool results");
  return assemble(where, role, parts, extra);
}

interface LangChainLike {
  _getType?: () => string;
  getType?: () => string;
  type?: unknown;
  id?: unknown;
  content?: unknown;
  name?: unknown;
  tool_calls?: unknown;
  tool_call_id?: unknown;
  role?: unknown;
  status?: unknown;
}

function isLangChain(m: object): m is LangChainLike {
  const x = m as LangChainLike;
  return typeof x._getType === "function" || typeof x.getType === "function";
}

function langChainType(m: LangChainLike): string {
  return typeof m.getType === "function" ? m.getType() : (m._getType as () => string)();
}

function fromLangChain(where: string, m: LangChainLike): ChatMessage[] {
  const t = langChainType(m);
  if (t === "remove") return [];
  const role = t === "human" ? "user" : t === "ai" ? "assistant" : t === "system" ? "system" : t === "tool" ? "tool"
    : t === "generic" || t === "chat" ? String(m.role) : undefined;
  if (role === undefined) throw bad(where, `LangChain messages of type ${JSON.stringify(t)} are not stored by ctxwin`);
  const o: Obj = { role, content: m.content ?? "" };
  if (typeof m.name === "string" && m.name) o["name"] = m.name;
  if (role === "tool") {
    o["tool_call_id"] = m.tool_call_id;
    const out = fromRoleMessage(where, o);
    if (m.status === "error") out.forEach((x) => { x.metadata = { ...x.metadata, is_error: true }; });
    return out;
  }
  if (role === "assistant") {
    const calls = Array.isArray(m.tool_calls) ? m.tool_calls : [];
    if (calls.length) {
      o["tool_calls"] = calls.map((c: unknown, i: number) => {
        const cc = isObj(c) ? c : {};
        if (typeof cc["id"] !== "string" || typeof cc["name"] !== "string")
          throw bad(`${where}.tool_calls[${i}]`, "a tool call needs an id and a name");
        return { id: cc["id"], type: "function", function: { name: cc["name"], arguments: JSON.stringify(cc["args"] ?? {}) } };
      });
      // the same calls as content blocks (Anthropic's), kept once
      if (Array.isArray(o["content"]))
        o["content"] = (o["content"] as unknown[]).filter((b) => !(isObj(b) && (b["type"] === "tool_use" || b["type"] === "tool-call")));
    }
  }
  return fromRoleMessage(where, o);
}

/** The messages one input stands for, and the key it carries of its own. */
function convertOne(where: string, m: unknown): { messages: ChatMessage[]; key: string | null } {
  if (!isObj(m) && !(typeof m === "object" && m !== null)) throw bad(where, "a message must be an object");
  const o = m as Obj;
  if (isLangChain(o)) {
    return { messages: fromLangChain(where, o), key: typeof o.id === "string" && o.id ? o.id as string : null };
  }
  if (o["object"] === "chat.completion" && Array.isArray(o["choices"])) {
    const choice = (o["choices"] as unknown[])[0];
    if (!isObj(choice) || !isObj(choice["message"])) throw bad(where, "a ChatCompletion without a message");
    return { messages: fromRoleMessage(where, choice["message"] as Obj), key: typeof o["id"] === "string" ? o["id"] as string : null };
  }
  if (o["type"] === "message" && o["role"] === "assistant" && Array.isArray(o["content"])) {
    return { messages: fromRoleMessage(where, { role: "assistant", content: o["content"] }),
      key: typeof o["id"] === "string" ? o["id"] as string : null };
  }
  if (!("role" in o)) throw bad(where, "a message needs a role");
  return { messages: fromRoleMessage(where, o), key: null };
}

function derivedKey(m: ChatMessage): string | null {
  if (m.role === "tool" && m.tool_call_id) return `tool:${m.tool_call_id}`;
  if (m.role === "assistant" && m.tool_calls?.length) return `calls:${m.tool_calls[0]!.id}`;
  return null;
}

/**
 * Converts messages of any of the shapes to the chat messages ctxwin
 * stores, with their keys.  keys, if given, has one element per input
 * message (null or undefined: its own key, if it has one).
 */
export function toChatMessages(input: MessageInput | readonly MessageInput[],
  keys?: readonly (string | null | undefined)[]): Converted {
  const list: readonly unknown[] = Array.isArray(input) ? input : [input];
  if (keys && keys.length !== list.length)
    throw new MessageConversionError("keys must have one element per message", {
      detail: `There are ${list.length} messages and ${keys.length} keys.`,
      hint: "Give null for a message without a key of its own.",
    });
  const out: Converted = { messages: [], keys: [] };
  list.forEach((m, i) => {
    const { messages, key } = convertOne(`messages[${i}]`, m);
    if (messages.length === 0) return;
    const k = keys?.[i] ?? key;
    messages.forEach((x, j) => {
      out.messages.push(x);
      out.keys.push(k == null ? derivedKey(x) : messages.length === 1 ? k : `${k}#${j}`);
    });
  });
  return out;
}
