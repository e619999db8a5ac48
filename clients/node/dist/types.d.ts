/** The shapes ctxwin stores and returns. */
/** A tool call in OpenAI's chat shape, as ctxwin stores it. */
export interface ChatToolCall {
    id: string;
    type: "function";
    function: {
        name: string;
        arguments: string;
    };
}
/** A message in OpenAI's chat shape: what ctxwin stores and what build_context returns ('openai'). */
export interface ChatMessage {
    role: "system" | "user" | "assistant" | "tool";
    content?: string | null;
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
    cache_control?: {
        type: "ephemeral";
    };
}
/** build_context's 'anthropic' format: the Messages API's system and messages. */
export interface AnthropicContext {
    system: AnthropicTextBlock[] | string;
    messages: Array<{
        role: "user" | "assistant";
        content: Array<Record<string, unknown>>;
    }>;
}
/**
 * A message of build_request's 'openai' body: a ChatMessage as the chat
 * completions API takes it, per role (what OpenAI's SDK types as
 * ChatCompletionMessageParam), so that the body can be passed to
 * `openai.chat.completions.create` as it is.
 */
export type RequestMessage = {
    role: "system";
    content: string;
    name?: string;
} | {
    role: "user";
    content: string;
    name?: string;
} | {
    role: "assistant";
    content?: string | null;
    name?: string;
    tool_calls?: ChatToolCall[];
} | {
    role: "tool";
    content: string;
    tool_call_id: string;
    name?: string;
};
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
    tools?: Array<{
        name: string;
        description?: string;
        input_schema: Record<string, unknown>;
    }>;
}
export type Format = "openai" | "anthropic";
