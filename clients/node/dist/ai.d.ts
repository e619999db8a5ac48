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
import type { ChatMessage } from "./types.js";
/** ctxwin's window (build_context's 'openai' format) as AI SDK ModelMessages. */
export declare function toModelMessages(context: readonly ChatMessage[]): ModelMessage[];
/** What the helper reads of an AI SDK step (StepResult of ai 5 and 6). */
export interface StepLike {
    response: {
        id: string;
        messages: readonly unknown[];
    };
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
/** A ctxwin session driven by the AI SDK. */
export declare class CtxwinChat {
    readonly ctxwin: Ctxwin;
    readonly sessionId: string;
    readonly options: CtxwinChatOptions;
    /** Steps (by response id) whose usage and messages are stored. */
    private readonly done;
    constructor(ctxwin: Ctxwin, session: SessionRef, options?: CtxwinChatOptions);
    private window;
    /**
     * One turn in one round trip: appends the user's message (a string, a
     * ModelMessage or several) and returns the window as ModelMessages.
     */
    turn(message: string | ModelMessage | readonly ModelMessage[], options?: {
        key?: string | null;
    }): Promise<{
        ids: number[];
        messages: ModelMessage[];
    }>;
    /** The window now, as ModelMessages (no append). */
    messages(): Promise<ModelMessage[]>;
    /**
     * Stores the steps not stored yet, in order: each step's usage (before its
     * messages, so that the window recorded is the one it sent), then its new
     * response messages (an AI SDK step's response.messages holds those of the
     * steps before it too).
     */
    storeSteps(steps: readonly StepLike[], recordUsage?: boolean): Promise<void>;
    /**
     * For prepareStep: from the second step on, stores the steps so far and
     * sends ctxwin's window (with the tool results just stored) instead of
     * the SDK's growing list.
     */
    readonly prepareStep: (options: {
        steps: readonly StepLike[];
        stepNumber: number;
    }) => Promise<{
        messages?: ModelMessage[];
    }>;
    /** For onFinish of generateText and streamText: stores the answer and records usage. */
    readonly onFinish: (event: {
        steps: readonly StepLike[];
    }) => Promise<void>;
}
