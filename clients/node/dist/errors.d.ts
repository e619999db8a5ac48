/**
 * Errors of ctxwin: the SQLSTATE, detail and hint PostgreSQL sent, kept as
 * they came, or a client-side check of the same kind (a message that cannot
 * be stored is 22023, invalid_parameter_value, as the server says it).
 */
export interface CtxwinErrorFields {
    /** PostgreSQL's SQLSTATE, e.g. "22023", "P0002". */
    code?: string | undefined;
    detail?: string | undefined;
    hint?: string | undefined;
    /** The PostgreSQL error this one wraps, or another cause. */
    cause?: unknown;
}
/** An error ctxwin or PostgreSQL raised, with its SQLSTATE, detail and hint. */
export declare class CtxwinError extends Error {
    readonly code: string | undefined;
    readonly detail: string | undefined;
    readonly hint: string | undefined;
    constructor(message: string, fields?: CtxwinErrorFields);
}
/** P0002: the session does not exist, or the role may not see it. */
export declare class SessionNotFoundError extends CtxwinError {
    constructor(message: string, fields?: CtxwinErrorFields);
}
/** P0002 from Ctxwin.message: the session has no message of that id. */
export declare class MessageNotFoundError extends CtxwinError {
    constructor(message: string, fields?: CtxwinErrorFields);
}
/** 22023 (invalid_parameter_value) and 22004 (null_value_not_allowed): a value ctxwin refuses. */
export declare class InvalidValueError extends CtxwinError {
    constructor(message: string, fields?: CtxwinErrorFields);
}
/**
 * The CtxwinError for an error of node-postgres (its DatabaseError carries
 * code, detail and hint); anything else is returned as it is.
 */
export declare function toCtxwinError(e: unknown): unknown;
