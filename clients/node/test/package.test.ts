/**
 * The package as users get it: the committed dist/ is what the sources
 * build to, npm pack ships it with the types, the exports resolve, and
 * `npm install ./clients/node` works from a clean clone (no build there).
 */
import assert from "node:assert/strict";
import { execFileSync } from "node:child_process";
import { cpSync, existsSync, mkdirSync, mkdtempSync, readdirSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join, relative } from "node:path";
import { test } from "node:test";
import { packageDir, repoRoot } from "./helpers.js";

function files(dir: string): string[] {
  return readdirSync(dir, { withFileTypes: true, recursive: true })
    .filter((d) => d.isFile()).map((d) => relative(dir, join(d.parentPath ?? d.path, d.name))).sort();
}

test("the committed dist/ is what the sources build to", () => {
  const out = mkdtempSync(join(tmpdir(), "ctxwin-node-dist-"));
  try {
    execFileSync(join(packageDir(), "node_modules", ".bin", "tsc"), ["-p", "tsconfig.build.json", "--outDir", out],
      { cwd: packageDir(), stdio: "inherit" });
    const dist = join(packageDir(), "dist");
    assert.deepEqual(files(dist), files(out), "the same files (run npm run build and commit dist/)");
    for (const f of files(out)) {
      assert.equal(readFileSync(join(dist, f), "utf8"), readFileSync(join(out, f), "utf8"), `dist/${f} is up to date (npm run build)`);
    }
  } finally {
    rmSync(out, { recursive: true, force: true });
  }
});

test("npm pack ships dist with its types, the README and the CHANGELOG, and nothing else", () => {
  const j = JSON.parse(execFileSync("npm", ["pack", "--dry-run", "--json", "--ignore-scripts"],
    { cwd: packageDir(), encoding: "utf8" })) as Array<{ name: string; version: string; files: Array<{ path: string }> }>;
  const paths = j[0]!.files.map((f) => f.path).sort();
  assert.equal(j[0]!.name, "ctxwin");
  for (const p of ["package.json", "README.md", "CHANGELOG.md", "dist/index.js", "dist/index.d.ts", "dist/ai.js", "dist/ai.d.ts",
    "dist/langgraph.js", "dist/langgraph.d.ts"]) assert.ok(paths.includes(p), p);
  assert.ok(paths.every((p) => p === "package.json" || p === "README.md" || p === "CHANGELOG.md" || p === "LICENSE" || p.startsWith("dist/")), paths.join());
});

test("the version is the extension's (ctxwin.control)", () => {
  const control = readFileSync(join(repoRoot(), "ctxwin.control"), "utf8");
  const v = /default_version\s*=\s*'([^']+)'/.exec(control)![1]!;
  const pkg = JSON.parse(readFileSync(join(packageDir(), "package.json"), "utf8")) as { version: string };
  assert.equal(pkg.version, v);
  assert.match(readFileSync(join(packageDir(), "CHANGELOG.md"), "utf8"), new RegExp(`## ${v.replace(/\./g, "\\.")}`));
});

test("the package's exports resolve to dist", async () => {
  const core = await import("ctxwin") as Record<string, unknown>;
  for (const k of ["Ctxwin", "CtxwinSession", "CtxwinError", "SessionNotFound", "InvalidArgument", "toChatMessages", "uuidv5"])
    assert.equal(typeof core[k], "function", k);
  const ai = await import("ctxwin/ai") as Record<string, unknown>;
  assert.equal(typeof ai["CtxwinChat"], "function");
  assert.equal(typeof ai["toModelMessages"], "function");
  const lg = await import("ctxwin/langgraph") as Record<string, unknown>;
  assert.equal(typeof lg["SummarizationNode"], "function");
  assert.equal(typeof lg["sessionIdForThread"], "function");
});

test("npm install ./clients/node works in a clean clone, and from another project", () => {
  const root = repoRoot();
  const tmp = mkdtempSync(join(tmpdir(), "ctxwin-node-clone-"));
  try {
    // the package's files as a clone has them: what git tracks (no node_modules, no build output but dist/)
    const tracked = execFileSync("git", ["ls-files", "--", "clients/node"], { cwd: root, encoding: "utf8" })
      .split("\n").filter(Boolean);
    assert.ok(tracked.includes("clients/node/dist/index.js"), "dist/ is committed");
    const clone = join(tmp, "clone");
    for (const f of tracked) {
      mkdirSync(join(clone, f, ".."), { recursive: true });
      cpSync(join(root, f), join(clone, f));
    }
    assert.ok(!existsSync(join(clone, "clients/node/node_modules")));
    const env = { ...process.env, npm_config_audit: "false", npm_config_fund: "false", npm_config_update_notifier: "false" };
    writeFileSync(join(clone, "package.json"), JSON.stringify({ name: "app", version: "1.0.0", type: "module", private: true }));
    execFileSync("npm", ["install", "--prefer-offline", "./clients/node"], { cwd: clone, env, stdio: "pipe" });
    const probe = "import('ctxwin').then(async (m) => { const a = await import('ctxwin/ai'); " +
      "console.log(typeof m.Ctxwin, typeof a.toModelMessages, m.uuidv5('x', m.NAMESPACE_URL)); })";
    assert.equal(execFileSync("node", ["-e", probe], { cwd: clone, encoding: "utf8" }).trim(),
      "function function " + execFileSync("python3", ["-c", "import uuid; print(uuid.uuid5(uuid.NAMESPACE_URL, 'x'))"], { encoding: "utf8" }).trim());
    const app = join(tmp, "app");
    mkdirSync(app);
    writeFileSync(join(app, "package.json"), JSON.stringify({ name: "app2", version: "1.0.0", type: "module", private: true }));
    execFileSync("npm", ["install", "--prefer-offline", "--install-links", join(clone, "clients/node")], { cwd: app, env, stdio: "pipe" });
    assert.equal(execFileSync("node", ["-e", "import('ctxwin').then((m) => console.log(typeof m.Ctxwin))"], { cwd: app, encoding: "utf8" }).trim(),
      "function");
  } finally {
    rmSync(tmp, { recursive: true, force: true });
  }
});
