// Makes a TypeScript module of each README's ```ts blocks, so that tsc
// type-checks them (strict, against the package's own types: `ctxwin`
// resolves to dist/) and test/readme.test.ts runs them:
//
//   README.md              -> .snippets/readme.ts
//   clients/node/README.md -> .snippets/node-readme.ts
//
// A module holds the file's blocks in order, in one async function, run(after)
// (a block may use what an earlier one declared), after the blocks' own
// imports (moved to the top) and the import of the prelude's names
// (test/snippets-prelude.ts) the blocks do not import themselves.  After each
// block it calls after(block, { the names the block declared }).  It also
// exports every fenced block of the file (language, line, heading, text).
//
//   node test/snippets.mjs      (run-tests.sh runs it before tsc)
import { mkdirSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { dirname, join } from "node:path";
import { fileURLToPath } from "node:url";

const pkg = join(dirname(fileURLToPath(import.meta.url)), "..");
const repo = join(pkg, "..", "..");
const out = join(pkg, ".snippets");
const FILES = [["README.md", "readme"], ["clients/node/README.md", "node-readme"]];

/** The fenced blocks of a Markdown file, as test/docs.pl reads them. */
function codeBlocks(path) {
  const blocks = [];
  let heading = "";
  let fence = null;
  readFileSync(join(repo, path), "utf8").split("\n").forEach((line, i) => {
    if (fence) {
      if (line.trim() === fence.mark) {
        blocks.push({ path, line: fence.line, lang: fence.lang, heading, text: fence.text.join("") });
        fence = null;
      } else {
        fence.text.push(line.replace(new RegExp(`^ {0,${fence.indent}}`), "") + "\n");
      }
      return;
    }
    const m = /^(\s*)(`{3,}|~{3,})\s*([\w.+-]*)\s*$/.exec(line);
    if (m) {
      fence = { mark: m[2], indent: m[1].length, lang: m[3].toLowerCase(), line: i + 2, text: [] };
      return;
    }
    const h = /^#{1,6}\s+(.*?)\s*#*\s*$/.exec(line);
    if (h) heading = h[1];
  });
  if (fence) throw new Error(`${path}: a block opened at line ${fence.line - 1} is never closed`);
  return blocks;
}

/** The names an import statement binds. */
function importedNames(stmt) {
  const names = [];
  const clause = /^import\s+(type\s+)?(.*?)\s+from\s/s.exec(stmt)?.[2] ?? "";
  const braces = /\{([^}]*)\}/.exec(clause);
  for (const part of (braces?.[1] ?? "").split(",")) {
    const n = part.trim().replace(/^type\s+/, "").split(/\s+as\s+/).pop();
    if (n) names.push(n);
  }
  const rest = clause.replace(/\{[^}]*\}/, "").split(",").map((s) => s.trim()).filter(Boolean);
  for (const r of rest) names.push(r.replace(/^\*\s+as\s+/, ""));
  return names;
}

/** The names a block's top-level declarations bind (const x, const { a, b: c }). */
function declaredNames(code) {
  const names = [];
  for (const m of code.matchAll(/^(?:const|let|var)\s+(\{[^}]*\}|\[[^\]]*\]|[A-Za-z_$][\w$]*)/gm)) {
    const d = m[1];
    if (!/^[{[]/.test(d)) { names.push(d); continue; }
    for (const part of d.slice(1, -1).split(",")) {
      const n = part.split("=")[0].split(":").pop().trim().replace(/^\.\.\./, "");
      if (n) names.push(n);
    }
  }
  return names;
}

const preludeSource = readFileSync(join(pkg, "test", "snippets-prelude.ts"), "utf8");
const preludeList = /^\/\/ prelude\b.*\nexport \{([^}]*)\};/m.exec(preludeSource);
if (!preludeList) throw new Error("test/snippets-prelude.ts: no '// prelude' export list");
const prelude = preludeList[1].split(",").map((s) => s.trim().split(/\s+as\s+/).pop()).filter(Boolean);  // "x as y" exports y

rmSync(out, { recursive: true, force: true });
mkdirSync(out);
for (const [path, name] of FILES) {
  const blocks = codeBlocks(path);
  const imports = [];
  const body = [];
  const own = new Set();
  blocks.forEach((b, i) => {
    if (b.lang !== "ts") return;
    const code = [];
    // import statements, possibly over several lines, go to the module's top
    const lines = b.text.split("\n");
    for (let j = 0; j < lines.length; j++) {
      if (/^import\s/.test(lines[j])) {
        let stmt = lines[j];
        while (!/;\s*(\/\/.*)?$/.test(stmt) && j + 1 < lines.length) stmt += "\n" + lines[++j];
        imports.push(`${stmt}   // ${path}:${b.line + j}`);
        importedNames(stmt).forEach((n) => own.add(n));
      } else {
        code.push(lines[j]);
      }
    }
    const made = declaredNames(code.join("\n"));
    body.push([
      `  // ${path}:${b.line} (${b.heading})`,
      ...code.filter((l, k, a) => k < a.length - 1 || l !== "").map((l) => (l ? "  " + l : l)),
      `  await after(blocks[${i}]!, { ${made.join(", ")} });`,
    ].join("\n"));
  });
  const fromPrelude = prelude.filter((n) => !own.has(n));
  const text = [
    `// Made by test/snippets.mjs from ${path}, its ts blocks; do not edit (edit the README).`,
    `import type { AfterBlock, SnippetBlock } from "../test/snippets-prelude.js";`,
    fromPrelude.length ? `import { ${fromPrelude.join(", ")} } from "../test/snippets-prelude.js";` : "",
    ...imports,
    "",
    `export const path = ${JSON.stringify(path)};`,
    `/** Every fenced block of ${path}. */`,
    `export const blocks: readonly SnippetBlock[] = ${JSON.stringify(blocks, null, 2)};`,
    "",
    "export async function run(after: AfterBlock): Promise<void> {",
    body.join("\n\n"),
    "}",
    "",
  ].filter((l, k) => k !== 2 || l !== "").join("\n");
  writeFileSync(join(out, `${name}.ts`), text);
}
