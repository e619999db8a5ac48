import { createHash } from "node:crypto";

/** RFC 9562's namespace for URLs (Python's uuid.NAMESPACE_URL). */
export const NAMESPACE_URL = "6ba7b811-9dad-11d1-80b4-00c04fd430c8";

function bytes(uuid: string): Buffer {
  const hex = uuid.replace(/-/g, "");
  if (!/^[0-9a-fA-F]{32}$/.test(hex)) throw new TypeError(`not a uuid: ${uuid}`);
  return Buffer.from(hex, "hex");
}

/** RFC 9562 version 5 (SHA-1, name-based) uuid: the same name and namespace always give the same uuid. */
export function uuidv5(name: string, namespace: string): string {
  const h = createHash("sha1").update(bytes(namespace)).update(name, "utf8").digest();
  h[6] = (h[6]! & 0x0f) | 0x50;
  h[8] = (h[8]! & 0x3f) | 0x80;
  const x = h.subarray(0, 16).toString("hex");
  return `${x.slice(0, 8)}-${x.slice(8, 12)}-${x.slice(12, 16)}-${x.slice(16, 20)}-${x.slice(20)}`;
}

/**
 * A uuid as Python's uuid.UUID(text) reads it, in canonical form, or null
 * where Python raises ValueError: "urn:" and "uuid:" removed, braces
 * stripped from both ends, hyphens removed, then 32 characters that
 * int(text, 16) reads (spaces around, a sign, a 0x prefix and single
 * underscores between digits are allowed) to a value below 2**128.
 */
export function parseUuidAsPython(text: string): string | null {
  let h = text.split("urn:").join("").split("uuid:").join("");
  h = h.replace(/^[{}]+|[{}]+$/g, "").split("-").join("");
  if ([...h].length !== 32) return null;
  const m = /^\s*([+-]?)(?:0[xX]_?)?([0-9a-fA-F](?:_?[0-9a-fA-F])*)\s*$/.exec(h);
  if (!m) return null;
  const v = BigInt("0x" + m[2]!.replace(/_/g, ""));
  if ((m[1] === "-" && v !== 0n) || v >= 1n << 128n) return null;
  const x = v.toString(16).padStart(32, "0");
  return `${x.slice(0, 8)}-${x.slice(8, 12)}-${x.slice(12, 16)}-${x.slice(16, 20)}-${x.slice(20)}`;
}

/** The namespace of the sessions of LangGraph threads whose id is not a uuid (the Python client's). */
export const THREAD_NAMESPACE = "8e1b9f8c-62a3-4d3e-9a49-5c2b8f0d7a11";

/**
 * The ctxwin session of a LangGraph thread, the same as the Python client's
 * session_for_thread: the thread id itself when it is a uuid (as Python's
 * uuid.UUID reads it), else uuid5(THREAD_NAMESPACE, "langgraph:" + id).
 * Python and Node services of one application share a thread's session.
 */
export function sessionIdForThread(threadId: string | number): string {
  const id = String(threadId);
  return parseUuidAsPython(id) ?? uuidv5(`langgraph:${id}`, THREAD_NAMESPACE);
}
