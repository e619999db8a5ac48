import { createHash } from "node:crypto";
/** The namespace of the sessions named after a LangGraph thread: uuid5(NAMESPACE_URL, "ctxwin:langgraph:thread"). */
export const NAMESPACE_URL = "6ba7b811-9dad-11d1-80b4-00c04fd430c8";
function bytes(uuid) {
    const hex = uuid.replace(/-/g, "");
    if (!/^[0-9a-fA-F]{32}$/.test(hex))
        throw new TypeError(`not a uuid: ${uuid}`);
    return Buffer.from(hex, "hex");
}
/** RFC 9562 version 5 (SHA-1, name-based) uuid: the same name and namespace always give the same uuid. */
export function uuidv5(name, namespace) {
    const h = createHash("sha1").update(bytes(namespace)).update(name, "utf8").digest();
    h[6] = (h[6] & 0x0f) | 0x50;
    h[8] = (h[8] & 0x3f) | 0x80;
    const x = h.subarray(0, 16).toString("hex");
    return `${x.slice(0, 8)}-${x.slice(8, 12)}-${x.slice(12, 16)}-${x.slice(16, 20)}-${x.slice(20)}`;
}
