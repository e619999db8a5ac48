/**
 * The Vercel AI SDK helper: a ctxwin session as the messages of
 * generateText and streamText.
 *
 *   const chat = new CtxwinChat(ctxwin, sessionId);
 *   const { messages } = await chat.turn("Where is my order?");       // one round trip
 *   const result = await generateText({ model, tools, messages, allowSystemInMessages: true,
 *     prepareStep: chat.prepareStep, onFinish: chat.onFinish });
 *
 * turn() appends the user's message and returns the window as ModelMessages;
 * prepareStep (optional) stores each step's answer and tool results before
 * the next step and sends ctxwin's window again, so a long tool loop stays
 * within the budget; onFinish stores what is left of the answer and records
 * each step's usage (one ctxwin.usage_log row per request).  Stored messages
 * are keyed (tool results by their call id, answers by the provider's
 * response id), so nothing is stored twice.
 */
import type { ModelMessage } from "ai";
import { Ctxwin, type AppendOptions, type SessionRef, type WindowOptions } from "./client.js";
import { contentText } from "./convert.js";
import type { ChatMessage, ContentPart } from "./types.js";

type AssistantContent = Extract<ModelMessage, { role: "assistant" }>["content"];
type ToolContent = Extract<ModelMessage, { role: "tool" }>["content"];
type UserPart = Exclude<Extract<ModelMessage, { role: "user" }>["content"], string>[number];

function parseArgs(s: string): unknown {
  try {
    return JSON.parse(s);
  } catch {
    return s;
  }
}

/** A part of a user message of the window as an AI SDK part: an image by its URL, or its bytes (base64) and media type. */
function toUserPart(p: ContentPart): UserPart {
  if (p.type === "text") return { type: "text", text: p.text };
  const url = p.type === "image_url" ? p.image_url.url
    : p.source.type === "url" ? p.source.url : `data:${p.source.media_type};base64,${p.source.data}`;
  const m = /^data:([^;,]+);base64,(.*)$/s.exec(url);
  return m ? { type: "image", image: m[2]!, mediaType: m[1]! } : { type: "image", image: new URL(url) };
}

/** ctxwin's window (build_context's 'openai' format) as AI SDK ModelMessages. */
export function toModelMessages(context: readonly ChatMessage[]): ModelMessage[] {
  const out: ModelMessage[] = [];
  const callNames = new Map<string, string>();
  for (const m of context) {
    if (m.role === "system") {
      out.push({ role: "system", content: contentText(m.content) });
    } else if (m.role === "user") {
      out.push({ role: "user", content: Array.isArray(m.content) ? m.content.map(toUserPart) : m.content ?? "" });
    } else if (m.role === "assistant") {
      if (m.tool_calls?.length) {
        const content: Exclude<AssistantContent, string> = [];
        if (contentText(m.content)) content.push({ type: "text", text: contentText(m.content) });
        for (const c of m.tool_calls) {
          callNames.set(c.id, c.function.name);
          content.push({ type: "tool-call", toolCallId: c.id, toolName: c.function.name, input: parseArgs(c.function.arguments) });
        }
        out.push({ role: "assistant", content });
      } else {
        out.push({ role: "assistant", content: contentText(m.content) });
      }
    } else {
      const id = m.tool_call_id ?? "";
      const part: ToolContent[number] = { type: "tool-result", toolCallId: id,
        toolName: m.name ?? callNames.get(id) ?? "unknown", output: { type: "text", value: contentText(m.content) } };
      const last = out.at(-1);
      if (last?.role === "tool") last.content.push(part);
      else out.push({ role: "tool", content: [part] });
    }
  }
  return out;
}

/** What the helper reads of an AI SDK step (StepResult of ai 5 and 6). */
export interface StepLike {
  response: { id: string; messages: readonly unknown[] };
  usage: object;
}

export interface CtxwinChatOptions extends Omit<WindowOptions, "tools"> {
  /** Tools in OpenAI's shape, counted into the window's budget (the SDK's own tools are sent by the SDK). */
  tools?: WindowOptions["tools"];
  /** Record each step's usage in onFinish (default true). */
  recordUsage?: boolean;
  /** Create the session on the first turn if it is missing, in that turn's statement (ctxwin.ensure_session). */
  create?: AppendOptions["create"];
}

function isAnswerWithoutCalls(m: unknown): boolean {
  const o = m as { role?: unknown; content?: unknown };
  return o.role === "assistant" &&
    !(Array.isArray(o.content) && o.content.some((p) => (p as { type?: unknown }).type === "tool-call"));
}

/** A ctxwin session driven by the AI SDK. */
export class CtxwinChat {
  readonly ctxwin: Ctxwin;
  readonly sessionId: string;
  readonly options: CtxwinChatOptions;
  /** Steps (by response id) whose usage and messages are stored. */
  private readonly done = new Set<string>();

  constructor(ctxwin: Ctxwin, session: SessionRef, options: CtxwinChatOptions = {}) {
    this.ctxwin = ctxwin;
    this.sessionId = typeof session === "string" ? session : session.id;
    this.options = options;
  }

  private window(): WindowOptions {
    return { budget: this.options.budget ?? null, tools: this.options.tools ?? null, cache: this.options.cache ?? true };
  }

  /**
   * One turn in one round trip: appends the user's message (a string, a
   * ModelMessage or several) and returns the window as ModelMessages.
   */
  async turn(message: string | ModelMessage | readonly ModelMessage[], options: { key?: string | null } = {}):
    Promise<{ ids: number[]; messages: ModelMessage[] }> {
    const input = typeof message === "string" ? { role: "user" as const, content: message } : message;
    const list = Array.isArray(input) ? input : [input];
    const keys = options.key != null ? list.map((_, i) => (list.length === 1 ? options.key! : `${options.key}#${i}`)) : undefined;
    const r = await this.ctxwin.turn(this.sessionId, list,
      { ...this.window(), ...(keys ? { keys } : {}), ...(this.options.create ? { create: this.options.create } : {}) });
    return { ids: r.ids, messages: toModelMessages(r.context) };
  }

  /** The window now, as ModelMessages (no append). */
  async messages(): Promise<ModelMessage[]> {
    return toModelMessages(await this.ctxwin.buildContext(this.sessionId, this.window()));
  }

  /**
   * Stores the steps not stored yet, in order: each step's usage (before its
   * messages, so that the window recorded is the one it sent), then its new
   * response messages (an AI SDK step's response.messages holds those of the
   * steps before it too).
   */
  async storeSteps(steps: readonly StepLike[], recordUsage = this.options.recordUsage ?? true): Promise<void> {
    let seen = 0;
    for (const step of steps) {
      const all = step.response.messages;
      const fresh = all.slice(seen);
      seen = all.length;
      if (this.done.has(step.response.id)) continue;
      if (recordUsage) await this.ctxwin.recordUsage(this.sessionId, step.usage);
      if (fresh.length) {
        const keys = fresh.map((m, j) => (isAnswerWithoutCalls(m) ? `ai:${step.response.id}:${j}` : null));
        await this.ctxwin.append(this.sessionId, fresh as object[], { keys });
      }
      this.done.add(step.response.id);
    }
  }

  /**
   * For prepareStep: from the second step on, stores the steps so far and
   * sends ctxwin's window (with the tool results just stored) instead of
   * the SDK's growing list.
   */
  readonly prepareStep = async (options: { steps: readonly StepLike[]; stepNumber: number }):
    Promise<{ messages?: ModelMessage[] }> => {
    if (options.stepNumber === 0 || options.steps.length === 0) return {};
    await this.storeSteps(options.steps);
    return { messages: await this.messages() };
  };

  /** For onFinish of generateText and streamText: stores the answer and records usage. */
  readonly onFinish = async (event: { steps: readonly StepLike[] }): Promise<void> => {
    await this.storeSteps(event.steps);
  };
}
