export { Ctxwin, CtxwinSession, usageOf } from "./client.js";
export type {
  AppendOptions, ContextStatus, CreateSessionOptions, Queryable, RequestOptions, SearchOptions, SessionInfo, SessionRef,
  StoredMessage, Summary, TurnRequestResult, TurnResult, UsageOptions, WindowOptions,
} from "./client.js";
export { toChatMessages } from "./convert.js";
export type { Converted, MessageInput } from "./convert.js";
export { CtxwinError, InvalidValueError, MessageNotFoundError, SessionNotFoundError, toCtxwinError } from "./errors.js";
export type { CtxwinErrorFields } from "./errors.js";
export type {
  AnthropicContext, AnthropicRequest, AnthropicTextBlock, ChatMessage, ChatToolCall, Format, OpenAIRequest,
  RecallToolCall, RequestMessage, SearchHit, StoredChatMessage, ToolDefinition, ToolMessage,
} from "./types.js";
export { uuidv5, NAMESPACE_URL } from "./uuid.js";
