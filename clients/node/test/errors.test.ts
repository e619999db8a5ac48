/**
 * The error classes and the SQLSTATE rules are the Python client's:
 * clients/errors.json (the one source both clients' tests read) against
 * src/errors.ts: the same classes with the same bases, and each rule,
 * first match wins, choosing the class the file names.
 */
import assert from "node:assert/strict";
import { readFileSync } from "node:fs";
import { join } from "node:path";
import { test } from "node:test";
import * as errors from "../src/errors.js";
import * as index from "../src/index.js";
import { CtxwinError, toCtxwinError } from "../src/errors.js";
import { repoRoot } from "./helpers.js";

interface Spec {
  base: string;
  classes: Array<{ name: string; base: string | null }>;
  rules: Array<{ class: string; sqlstate?: string; sqlstate_class?: string; message_starts_with?: string; connection_closed?: boolean }>;
}
const spec = JSON.parse(readFileSync(join(repoRoot(), "clients", "errors.json"), "utf8")) as Spec;

/** A node-postgres DatabaseError as the driver builds it. */
function pgError(code: string, message: string): Error {
  return Object.assign(new Error(message), { code, detail: "Some detail.", hint: "Some hint.", severity: "ERROR" });
}

const classes = Object.fromEntries(Object.entries(errors).filter(([, v]) =>
  typeof v === "function" && (v === CtxwinError || (v as { prototype?: unknown }).prototype instanceof CtxwinError)));

test("the same classes as clients/errors.json, with the same bases, exported by the package", () => {
  assert.deepEqual(Object.keys(classes).sort(), spec.classes.map((c) => c.name).sort());
  for (const c of spec.classes) {
    const cls = classes[c.name] as typeof CtxwinError;
    assert.equal((index as Record<string, unknown>)[c.name], cls, `${c.name} is exported by ctxwin`);
    const parent = Object.getPrototypeOf(cls) as { name: string };
    assert.equal(c.base === null ? cls : parent.name, c.base === null ? CtxwinError : c.base, c.name);
    const e = new cls("x");
    assert.equal(e.name, c.name);
    assert.ok(e instanceof Error);
  }
});

test("each rule of clients/errors.json chooses its class (first match wins)", () => {
  for (const r of spec.rules) {
    let e: unknown;
    if (r.connection_closed) {
      e = toCtxwinError(new Error("Connection terminated unexpectedly"));
    } else {
      const code = r.sqlstate ?? `${r.sqlstate_class}0X9`;
      e = toCtxwinError(pgError(code, (r.message_starts_with ?? "") + " something"));
    }
    assert.ok(e instanceof CtxwinError);
    assert.equal(e.constructor.name, r.class, JSON.stringify(r));
    if (!r.connection_closed) {
      assert.equal(e.sqlstate, r.sqlstate ?? `${r.sqlstate_class}0X9`);
      assert.equal(e.detail, "Some detail.");
      assert.equal(e.hint, "Some hint.");
      assert.ok(e.cause instanceof Error);
    }
  }
  // no rule: the base class, keeping the SQLSTATE; not a database error: as it is
  const other = toCtxwinError(pgError("XX000", "internal"));
  assert.equal((other as CtxwinError).constructor, CtxwinError);
  assert.equal((other as CtxwinError).code, "XX000");
  const plain = new TypeError("not a database error");
  assert.equal(toCtxwinError(plain), plain);
});
