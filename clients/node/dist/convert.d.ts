import type { ChatMessage } from "./types.js";
/** The text of a stored message's content: the text itself, or the text parts joined by a blank line (as ctxwin joins them). */
export declare function contentText(content: ChatMessage["content"]): string;
/** Any message of the shapes above. */
export type MessageInput = object;
export interface Converted {
    messages: ChatMessage[];
    /** One per message, null: none. */
    keys: (string | null)[];
}
/**
 * Converts messages of any of the shapes to the chat messages ctxwin
 * stores, with their keys.  keys, if given, has one element per input
 * message (null or undefined: its own key, if it has one).
 */
export declare function toChatMessages(input: MessageInput | readonly MessageInput[], keys?: readonly (string | null | undefined)[]): Converted;
