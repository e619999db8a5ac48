/**
 * What the tests share: a database of their own with ctxwin in it, on the
 * cluster libpq's environment variables name (PGHOST, PGPORT, PGUSER,
 * PGDATABASE), and test/mockllm.py serving the chat model over HTTP.
 */
import { spawn, type ChildProcess } from "node:child_process";
import { existsSync, mkdtempSync, readFileSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { dirname, join, resolve } from "node:path";
import { fileURLToPath } from "node:url";
import pg from "pg";

/** The repository's root: the directory above that has test/mockllm.py. */
export function repoRoot(): string {
  let d = dirname(fileURLToPath(import.meta.url));
  for (;;) {
    if (existsSync(join(d, "test", "mockllm.py")) && existsSync(join(d, "ctxwin.control"))) return d;
    const up = resolve(d, "..");
    if (up === d) throw new Error("test/mockllm.py not found above " + fileURLToPath(import.meta.url));
    d = up;
  }
}

/** The client package's directory (clients/node). */
export function packageDir(): string {
  return join(repoRoot(), "clients", "node");
}

export interface TestDb {
  name: string;
  pool: pg.Pool;
  /** A new pg.Client on the database (the caller ends it). */
  client(): Promise<pg.Client>;
  drop(): Promise<void>;
}

/** A new database with ctxwin installed; drop() removes it. */
export async function createTestDb(prefix: string): Promise<TestDb> {
  const name = `ctxwin_node_${prefix}_${process.pid}_${Date.now() % 100000}`;
  const admin = new pg.Client();
  await admin.connect();
  try {
    await admin.query(`CREATE DATABASE ${name}`);
  } finally {
    await admin.end();
  }
  const pool = new pg.Pool({ database: name, max: 4 });
  await pool.query("CREATE EXTENSION ctxwin");
  return {
    name,
    pool,
    async client() {
      const c = new pg.Client({ database: name });
      await c.connect();
      return c;
    },
    async drop() {
      await pool.end();
      const a = new pg.Client();
      await a.connect();
      try {
        await a.query(`DROP DATABASE IF EXISTS ${name} WITH (FORCE)`);
      } finally {
        await a.end();
      }
    },
  };
}

export interface MockLlm {
  /** http://127.0.0.1:PORT */
  url: string;
  key: string;
  /** Every request the mock got, as it logged them. */
  requests(): MockRequest[];
  stop(): Promise<void>;
}

export interface MockRequest {
  path: string;
  model: string;
  status: number;
  body: { model: string; messages: Array<Record<string, unknown>>; tools?: unknown[]; [k: string]: unknown };
  usage?: Record<string, number>;
  response_text?: string;
}

/** Starts test/mockllm.py on a free loopback port. */
export async function startMockLlm(): Promise<MockLlm> {
  const dir = mkdtempSync(join(tmpdir(), "ctxwin-node-mock-"));
  const key = "sk-ctxwin-node-test-" + process.pid;
  const portFile = join(dir, "port");
  const log = join(dir, "requests.jsonl");
  const proc: ChildProcess = spawn("python3", [join(repoRoot(), "test", "mockllm.py"), "--port", "0", "--key", key,
    "--log", log, "--port-file", portFile], { stdio: ["ignore", "ignore", "inherit"] });
  const deadline = Date.now() + 15000;
  while (!existsSync(portFile)) {
    if (proc.exitCode !== null) throw new Error("mockllm.py exited with " + proc.exitCode);
    if (Date.now() > deadline) { proc.kill(); throw new Error("mockllm.py did not start"); }
    await new Promise((r) => setTimeout(r, 50));
  }
  const port = Number(readFileSync(portFile, "utf8").trim());
  return {
    url: `http://127.0.0.1:${port}`,
    key,
    requests() {
      if (!existsSync(log)) return [];
      return readFileSync(log, "utf8").split("\n").filter(Boolean).map((l) => JSON.parse(l) as MockRequest);
    },
    async stop() {
      if (proc.exitCode === null) {
        const done = new Promise((r) => proc.once("exit", r));
        proc.kill("SIGTERM");
        await done;
      }
      rmSync(dir, { recursive: true, force: true });
    },
  };
}

/** POSTs a body to the mock, as an application would to the provider. */
export async function post(mock: MockLlm, path: string, body: unknown): Promise<Record<string, unknown>> {
  const anthropic = path.startsWith("/v1/messages");
  const r = await fetch(mock.url + path, {
    method: "POST",
    headers: anthropic
      ? { "content-type": "application/json", "x-api-key": mock.key, "anthropic-version": "2023-06-01" }
      : { "content-type": "application/json", authorization: `Bearer ${mock.key}` },
    body: JSON.stringify(body),
  });
  const j = await r.json() as Record<string, unknown>;
  if (!r.ok) throw new Error(`mock answered ${r.status}: ${JSON.stringify(j)}`);
  return j;
}

/** Tokens of an OpenAI-format window as ctxwin counts it (messages_tokens + 3), in an encoding. */
export async function windowTokens(pool: pg.Pool, messages: unknown, encoding: string): Promise<number> {
  const r = await pool.query("SELECT ctxwin.messages_tokens($1::jsonb, $2) + 3 AS n", [JSON.stringify(messages), encoding]);
  return Number(r.rows[0].n);
}
