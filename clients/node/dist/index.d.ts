export { Ctxwin, CtxwinSession, usageOf } from "./client.js";
export type { AppendOptions, ContextStatus, CreateSessionOptions, Queryable, RequestOptions, SearchOptions, SessionInfo, SessionRef, StoredMessage, Summary, SummaryJob, TurnRequestResult, TurnResult, UsageOptions, WindowMessage, WindowOptions, WindowResult, } from "./client.js";
export { contentText, toChatMessages } from "./convert.js";
export type { Converted, MessageInput } from "./convert.js";
export { BudgetTooSmall, ConnectionLost, CtxwinError, DuplicateMessage, ERROR_CLASS_BY_SQLSTATE, errorClassFor, ExtensionNotInstalled, IntegrityViolation, InvalidArgument, LockTimeout, MessageConversionError, MessageNotFound, NullValueNotAllowed, PermissionDenied, SessionNotFound, SummaryFailed, SummaryJobStale, toCtxwinError, } from "./errors.js";
export type { CtxwinErrorFields } from "./errors.js";
export type { AnthropicContext, AnthropicRequest, AnthropicTextBlock, ChatMessage, ChatToolCall, ContentPart, Format, OpenAIRequest, RequestFormat, RecallToolCall, RequestContentPart, RequestMessage, SearchHit, StoredChatMessage, ToolDefinition, ToolMessage, } from "./types.js";
export { NAMESPACE_URL, parseUuidAsPython, sessionIdForThread, THREAD_NAMESPACE, uuidv5 } from "./uuid.js";
