/** RFC 9562's namespace for URLs (Python's uuid.NAMESPACE_URL). */
export declare const NAMESPACE_URL = "6ba7b811-9dad-11d1-80b4-00c04fd430c8";
/** RFC 9562 version 5 (SHA-1, name-based) uuid: the same name and namespace always give the same uuid. */
export declare function uuidv5(name: string, namespace: string): string;
/**
 * A uuid as Python's uuid.UUID(text) reads it, in canonical form, or null
 * where Python raises ValueError: "urn:" and "uuid:" removed, braces
 * stripped from both ends, hyphens removed, then 32 characters that
 * int(text, 16) reads (spaces around, a sign, a 0x prefix and single
 * underscores between digits are allowed) to a value below 2**128.
 */
export declare function parseUuidAsPython(text: string): string | null;
/** The namespace of the sessions of LangGraph threads whose id is not a uuid (the Python client's). */
export declare const THREAD_NAMESPACE = "8e1b9f8c-62a3-4d3e-9a49-5c2b8f0d7a11";
/**
 * The ctxwin session of a LangGraph thread, the same as the Python client's
 * session_for_thread: the thread id itself when it is a uuid (as Python's
 * uuid.UUID reads it), else uuid5(THREAD_NAMESPACE, "langgraph:" + id).
 * Python and Node services of one application share a thread's session.
 */
export declare function sessionIdForThread(threadId: string | number): string;
