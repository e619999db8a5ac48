/**
 * Errors of ctxwin: the SQLSTATE, detail and hint PostgreSQL sent, kept as
 * they came, or a client-side check of the same kind (a message that cannot
 * be stored is 22023, invalid_parameter_value, as the server says it).
 *
 * The classes and the SQLSTATE each stands for are the Python client's
 * (ctxwin.errors), name for name, so that code in either language catches
 * the same errors:
 *
 *   CtxwinError                    any error of ctxwin or PostgreSQL
 *     InvalidArgument              22xxx (data exceptions)
 *       NullValueNotAllowed        22004
 *       BudgetTooSmall             22023 "token budget ..."
 *       MessageConversionError     a message the client cannot convert (22023, nothing sent)
 *     SessionNotFound              P0002
 *     MessageNotFound              P0002 "message ..."
 *     IntegrityViolation           23xxx
 *       DuplicateMessage           23505
 *     PermissionDenied             42501
 *     ExtensionNotInstalled        3F000, 42883, 42P01
 *     LockTimeout                  55P03, 57014
 *     SummaryFailed                a summary could not be made
 *     SummaryJobStale              CW001 (a summary job's token is unknown, done, expired or superseded)
 *     ConnectionLost               the connection to the server is lost (08xxx, 57P01-57P03, a socket closed)
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
    /** The SQLSTATE (node-postgres' name for it). */
    readonly code: string | undefined;
    readonly detail: string | undefined;
    readonly hint: string | undefined;
    constructor(message: string, fields?: CtxwinErrorFields);
    /** The SQLSTATE (the Python client's name for it). */
    get sqlstate(): string | undefined;
}
/** A value ctxwin refuses: a message of the wrong shape, a bad usage object, an unknown format (22023 and the other 22xxx). */
export declare class InvalidArgument extends CtxwinError {
    static readonly defaultCode: string;
}
/** A required argument was null (22004). */
export declare class NullValueNotAllowed extends InvalidArgument {
    static readonly defaultCode: string;
}
/** The token budget cannot hold the newest message even cut (22023, "token budget N is too small ..."). */
export declare class BudgetTooSmall extends InvalidArgument {
}
/** A message this client cannot convert to ctxwin's chat shape (22023; raised before anything is sent). */
export declare class MessageConversionError extends InvalidArgument {
}
/** The session does not exist, or the role may not see it (P0002). */
export declare class SessionNotFound extends CtxwinError {
    static readonly defaultCode: string;
}
/** The session has no message of that id (P0002, from Ctxwin.message). */
export declare class MessageNotFound extends CtxwinError {
    static readonly defaultCode: string;
}
/** A change ctxwin refuses to keep its invariants: a message update or delete, a duplicate key (23xxx). */
export declare class IntegrityViolation extends CtxwinError {
}
/** A plain INSERT raced with another of the same key (23505). */
export declare class DuplicateMessage extends IntegrityViolation {
    static readonly defaultCode: string;
}
/** The role lacks a privilege (42501). */
export declare class PermissionDenied extends CtxwinError {
    static readonly defaultCode: string;
}
/** ctxwin (or the version this client needs) is not installed in the database (3F000, 42883, 42P01). */
export declare class ExtensionNotInstalled extends CtxwinError {
}
/** lock_timeout or statement_timeout ran out (55P03, 57014). */
export declare class LockTimeout extends CtxwinError {
}
/** A summary could not be made (an error raised while summarizing). */
export declare class SummaryFailed extends CtxwinError {
}
/** A summary job's token is unknown, already completed, expired or superseded (CW001): nothing was written. */
export declare class SummaryJobStale extends CtxwinError {
    static readonly defaultCode: string;
}
/** The connection to the server was lost (08xxx, 57P01-57P03, or the socket closed under node-postgres). */
export declare class ConnectionLost extends CtxwinError {
}
/** The class of each SQLSTATE that has one of its own (the rest: by class, below). */
export declare const ERROR_CLASS_BY_SQLSTATE: Readonly<Record<string, typeof CtxwinError>>;
/** The class of a SQLSTATE and a message, as the Python client chooses it. */
export declare function errorClassFor(sqlstate: string | undefined, message: string): typeof CtxwinError;
/**
 * The CtxwinError for an error of node-postgres (its DatabaseError carries
 * code, detail and hint; a connection that is gone is ConnectionLost);
 * anything else is returned as it is.
 */
export declare function toCtxwinError(e: unknown): unknown;
