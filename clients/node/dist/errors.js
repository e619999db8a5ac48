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
/** An error ctxwin or PostgreSQL raised, with its SQLSTATE, detail and hint. */
export class CtxwinError extends Error {
    /** The SQLSTATE (node-postgres' name for it). */
    code;
    detail;
    hint;
    constructor(message, fields = {}) {
        super(message, fields.cause === undefined ? undefined : { cause: fields.cause });
        this.name = new.target.name;
        this.code = fields.code ?? new.target.defaultCode;
        this.detail = fields.detail;
        this.hint = fields.hint;
    }
    /** The SQLSTATE (the Python client's name for it). */
    get sqlstate() {
        return this.code;
    }
}
/** A value ctxwin refuses: a message of the wrong shape, a bad usage object, an unknown format (22023 and the other 22xxx). */
export class InvalidArgument extends CtxwinError {
    static defaultCode = "22023";
}
/** A required argument was null (22004). */
export class NullValueNotAllowed extends InvalidArgument {
    static defaultCode = "22004";
}
/** The token budget cannot hold the newest message even cut (22023, "token budget N is too small ..."). */
export class BudgetTooSmall extends InvalidArgument {
}
/** A message this client cannot convert to ctxwin's chat shape (22023; raised before anything is sent). */
export class MessageConversionError extends InvalidArgument {
}
/** The session does not exist, or the role may not see it (P0002). */
export class SessionNotFound extends CtxwinError {
    static defaultCode = "P0002";
}
/** The session has no message of that id (P0002, from Ctxwin.message). */
export class MessageNotFound extends CtxwinError {
    static defaultCode = "P0002";
}
/** A change ctxwin refuses to keep its invariants: a message update or delete, a duplicate key (23xxx). */
export class IntegrityViolation extends CtxwinError {
}
/** A plain INSERT raced with another of the same key (23505). */
export class DuplicateMessage extends IntegrityViolation {
    static defaultCode = "23505";
}
/** The role lacks a privilege (42501). */
export class PermissionDenied extends CtxwinError {
    static defaultCode = "42501";
}
/** ctxwin (or the version this client needs) is not installed in the database (3F000, 42883, 42P01). */
export class ExtensionNotInstalled extends CtxwinError {
}
/** lock_timeout or statement_timeout ran out (55P03, 57014). */
export class LockTimeout extends CtxwinError {
}
/** A summary could not be made (an error raised while summarizing). */
export class SummaryFailed extends CtxwinError {
}
/** A summary job's token is unknown, already completed, expired or superseded (CW001): nothing was written. */
export class SummaryJobStale extends CtxwinError {
    static defaultCode = "CW001";
}
/** The connection to the server was lost (08xxx, 57P01-57P03, or the socket closed under node-postgres). */
export class ConnectionLost extends CtxwinError {
}
/** The class of each SQLSTATE that has one of its own (the rest: by class, below). */
export const ERROR_CLASS_BY_SQLSTATE = {
    "22004": NullValueNotAllowed,
    "P0002": SessionNotFound,
    "23505": DuplicateMessage,
    "42501": PermissionDenied,
    "3F000": ExtensionNotInstalled,
    "42883": ExtensionNotInstalled,
    "42P01": ExtensionNotInstalled,
    "55P03": LockTimeout,
    "57014": LockTimeout,
    "CW001": SummaryJobStale,
    "57P01": ConnectionLost,
    "57P02": ConnectionLost,
    "57P03": ConnectionLost,
};
/** The class of a SQLSTATE and a message, as the Python client chooses it. */
export function errorClassFor(sqlstate, message) {
    if (sqlstate === undefined)
        return CtxwinError;
    if (sqlstate === "P0002" && message.startsWith("message "))
        return MessageNotFound;
    const own = ERROR_CLASS_BY_SQLSTATE[sqlstate];
    if (own)
        return own;
    if (sqlstate === "22023" && message.startsWith("token budget"))
        return BudgetTooSmall;
    if (sqlstate.startsWith("22"))
        return InvalidArgument;
    if (sqlstate.startsWith("23"))
        return IntegrityViolation;
    if (sqlstate.startsWith("08"))
        return ConnectionLost;
    return CtxwinError;
}
function isPgError(e) {
    return e instanceof Error && typeof e.code === "string" &&
        /^[0-9A-Z]{5}$/.test(e.code);
}
/** node-postgres' errors of a connection that is gone (no SQLSTATE). */
function isConnectionGone(e) {
    if (!(e instanceof Error))
        return false;
    const code = e.code;
    return code === "ECONNRESET" || code === "EPIPE" ||
        /^Connection terminated|^Client has encountered a connection error and is not queryable|^Client was closed and is not queryable/
            .test(e.message);
}
function str(v) {
    return typeof v === "string" && v !== "" ? v : undefined;
}
/**
 * The CtxwinError for an error of node-postgres (its DatabaseError carries
 * code, detail and hint; a connection that is gone is ConnectionLost);
 * anything else is returned as it is.
 */
export function toCtxwinError(e) {
    if (e instanceof CtxwinError)
        return e;
    if (isPgError(e)) {
        const code = e.code;
        const cls = errorClassFor(code, e.message);
        return new cls(e.message, { code, detail: str(e.detail), hint: str(e.hint), cause: e });
    }
    if (isConnectionGone(e))
        return new ConnectionLost(e.message, { cause: e });
    return e;
}
