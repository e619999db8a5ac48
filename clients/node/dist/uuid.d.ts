/** The namespace of the sessions named after a LangGraph thread: uuid5(NAMESPACE_URL, "ctxwin:langgraph:thread"). */
export declare const NAMESPACE_URL = "6ba7b811-9dad-11d1-80b4-00c04fd430c8";
/** RFC 9562 version 5 (SHA-1, name-based) uuid: the same name and namespace always give the same uuid. */
export declare function uuidv5(name: string, namespace: string): string;
