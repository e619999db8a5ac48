/** The shapes ctxwin stores and returns. */

/** A tool call in OpenAI's chat shape, as ctxwin stores it. */
export interface ChatToolCall {
  id: string;
  type: "function";
  function: { name: string; arguments: string };
}

/**
 * A part of a message's content, as ctxwin stores and sends it (docs/images.md):
 * text, OpenAI's image_url (an http(s) or data: URL), Anthropic's image
 * (a base64 or url source); an image may carry ctxwin's own width and
 * height (never sent).
 */
export type ContentPart =
  | { type: "text"; text: string }
  | { type: "image_url"; image_url: { url: string; detail?: "low" | "high" | "auto" }; width?: number; height?: number }
  | { type: "image"; source: { type: "base64"; media_type: string; data: string } | { type: "url"; url: string };
    width?: number; height?: number };

/** A part of a user message of an 'openai' request body: text, or an image by its URL (ctxwin's sizes are not sent). */
export type RequestContentPart =
  | { type: "text"; text: string }
  | { type: "image_url"; image_url: { url: string; detail?: "low" | "high" | "auto" } };

/** A message in OpenAI's chat shape: what ctxwin stores and what build_context returns ('openai'). */
export interface ChatMessage {
  role: "system" | "user" | "assistant" | "tool";
  /** A text, or (a user message with images) its parts. */
  content?: string | ContentPart[] | null;
  name?: string;
  tool_call_id?: string;
  tool_calls?: ChatToolCall[];
  /** Stored with the message, never sent to a model. */
  metadata?: Record<string, unknown>;
}

/** An OpenAI function tool, as build_context and build_request take them. */
export interface ToolDefinition {
  type: "function";
  function: {
    name: string;
    description?: string;
    parameters?: Record<string, unknown>;
    strict?: boolean;
  };
}

export interface AnthropicTextBlock {
  type: "text";
  text: string;
  cache_control?: { type: "ephemeral" };
}

/** build_context's 'anthropic' format: the Messages API's system and messages. */
export interface AnthropicContext {
  system: AnthropicTextBlock[] | string;
  messages: Array<{ role: "user" | "assistant"; content: Array<Record<string, unknown>> }>;
}

/**
 * A message of build_request's 'openai' body: a ChatMessage as the chat
 * completions API takes it, per role (what OpenAI's SDK types as
 * ChatCompletionMessageParam), so that the body can be passed to
 * `openai.chat.completions.create` as it is.
 */
export type RequestMessage =
  | { role: "system"; content: string; name?: string }
  | { role: "user"; content: string | RequestContentPart[]; name?: string }
  | { role: "assistant"; content?: string | null; name?: string; tool_calls?: ChatToolCall[] }
  | { role: "tool"; content: string; tool_call_id: string; name?: string };

/** build_request's 'openai' body (chat completions). */
export interface OpenAIRequest {
  model: string;
  messages: RequestMessage[];
  max_completion_tokens?: number;
  max_tokens?: number;
  tools?: ToolDefinition[];
  prompt_cache_key?: string;
}

/** build_request's 'anthropic' body (Messages API). */
export interface AnthropicRequest extends AnthropicContext {
  model: string;
  max_tokens: number;
  tools?: Array<{ name: string; description?: string; input_schema: Record<string, unknown> }>;
}

export type Format = "openai" | "anthropic";

/** build_request's formats: build_context's two, and OpenAI Responses' and Gemini's bodies. */
export type RequestFormat = Format | "responses" | "gemini";

/** A message ctxwin.search found (Ctxwin.search), best first. */
export interface SearchHit {
  id: number;
  role: ChatMessage["role"];
  createdAt: Date;
  /** About 200 characters around the terms found. */
  snippet: string;
  /** Comparable within one search. */
  rank: number;
}

/**
 * A model's call of conversation_search, as answerToolCall takes it: an
 * OpenAI tool call (arguments a JSON text) or an Anthropic tool_use block.
 */
export type RecallToolCall =
  | { id: string; type?: "function"; function: { name: string; arguments: string } }
  | { type: "tool_use"; id: string; name: string; input: Record<string, unknown> };

/** The tool message answering a conversation_search call (ctxwin.answer_tool_call): append it as it is. */
export interface ToolMessage {
  role: "tool";
  tool_call_id: string;
  name: string;
  content: string;
}

/** One stored message whole (ctxwin.message): the chat message with its id and time. */
export type StoredChatMessage = ChatMessage & {
  id: number;
  /** ISO 8601, as the JSON of the message has it. */
  created_at: string;
  content_parts?: Array<Record<string, unknown>>;
};
