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
export class CtxwinError extends Error {
  readonly code: string | undefined;
  readonly detail: string | undefined;
  readonly hint: string | undefined;

  constructor(message: string, fields: CtxwinErrorFields = {}) {
    super(message, fields.cause === undefined ? undefined : { cause: fields.cause });
    this.name = "CtxwinError";
    this.code = fields.code;
    this.detail = fields.detail;
    this.hint = fields.hint;
  }
}

/** P0002: the session does not exist, or the role may not see it. */
export class SessionNotFoundError extends CtxwinError {
  constructor(message: string, fields: CtxwinErrorFields = {}) {
    super(message, { ...fields, code: fields.code ?? "P0002" });
    this.name = "SessionNotFoundError";
  }
}

/** P0002 from Ctxwin.message: the session has no message of that id. */
export class MessageNotFoundError extends CtxwinError {
  constructor(message: string, fields: CtxwinErrorFields = {}) {
    super(message, { ...fields, code: fields.code ?? "P0002" });
    this.name = "MessageNotFoundError";
  }
}

/** 22023 (invalid_parameter_value) and 22004 (null_value_not_allowed): a value ctxwin refuses. */
export class InvalidValueError extends CtxwinError {
  constructor(message: string, fields: CtxwinErrorFields = {}) {
    super(message, { ...fields, code: fields.code ?? "22023" });
    this.name = "InvalidValueError";
  }
}

interface PgErrorLike {
  message: string;
  code?: unknown;
  detail?: unknown;
  hint?: unknown;
  severity?: unknown;
}

function isPgError(e: unknown): e is PgErrorLike {
  return e instanceof Error && typeof (e as PgErrorLike).code === "string" &&
    /^[0-9A-Z]{5}$/.test((e as PgErrorLike).code as string);
}

function str(v: unknown): string | undefined {
  return typeof v === "string" && v !== "" ? v : undefined;
}

/**
 * The CtxwinError for an error of node-postgres (its DatabaseError carries
 * code, detail and hint); anything else is returned as it is.
 */
export function toCtxwinError(e: unknown): unknown {
  if (e instanceof CtxwinError || !isPgError(e)) return e;
  const fields: CtxwinErrorFields = {
    code: e.code as string, detail: str(e.detail), hint: str(e.hint), cause: e,
  };
  if (e.code === "P0002" && e.message.startsWith("message ")) return new MessageNotFoundError(e.message, fields);
  if (e.code === "P0002") return new SessionNotFoundError(e.message, fields);
  if (e.code === "22023" || e.code === "22004") return new InvalidValueError(e.message, fields);
  return new CtxwinError(e.message, fields);
}
