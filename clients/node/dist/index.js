export { Ctxwin, CtxwinSession, usageOf } from "./client.js";
export { toChatMessages } from "./convert.js";
export { CtxwinError, InvalidValueError, MessageNotFoundError, SessionNotFoundError, toCtxwinError } from "./errors.js";
export { uuidv5, NAMESPACE_URL } from "./uuid.js";
