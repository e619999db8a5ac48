/** The shapes ctxwin stores and returns. */
export {};
