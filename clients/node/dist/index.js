export { Ctxwin, CtxwinSession, usageOf } from "./client.js";
export { contentText, toChatMessages } from "./convert.js";
export { BudgetTooSmall, ConnectionLost, CtxwinError, DuplicateMessage, ERROR_CLASS_BY_SQLSTATE, errorClassFor, ExtensionNotInstalled, IntegrityViolation, InvalidArgument, LockTimeout, MessageConversionError, MessageNotFound, NullValueNotAllowed, PermissionDenied, SessionNotFound, SummaryFailed, SummaryJobStale, toCtxwinError, } from "./errors.js";
export { NAMESPACE_URL, parseUuidAsPython, sessionIdForThread, THREAD_NAMESPACE, uuidv5 } from "./uuid.js";
