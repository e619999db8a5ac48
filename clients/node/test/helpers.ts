/**
 * What the tests share: a database of their own with ctxwin in it, on the
 * cluster libpq's environment variables name (PGHOST, PGPORT, PGUSER,
 * PGDATABASE), and test/mockllm.py serving the chat model over HTTP; for
 * the tests of ctxwin's background worker, a cluster of their own with
 * ctxwin preloaded (startWorkerCluster).
 */
import { execFileSync, spawn, type ChildProcess } from "node:child_process";
import { appendFileSync, chmodSync, existsSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { createServer } from "node:net";
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
      // pool.end() resolves before its connections are closed: wait for
      // each to be, so that DROP ... FORCE terminates none of them (a
      // terminated idle connection is an error event on the pool, which
      // would be uncaught and fail whichever test runs then)
      pool.on("error", () => { /* a connection closing as the pool ends */ });
      const open = pool.totalCount;
      let closed = 0;
      const allClosed = new Promise<void>((done) => {
        if (open === 0) done();
        pool.on("remove", () => { if (++closed >= open) done(); });
      });
      await pool.end();
      await allClosed;
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

/** Polls pred until it returns a truthy value (returned), or fails after timeoutMs. */
export async function waitFor<T>(pred: () => Promise<T> | T, timeoutMs = 20000, what = "a condition"): Promise<NonNullable<T>> {
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    const v = await pred();
    if (v) return v as NonNullable<T>;
    if (Date.now() > deadline) throw new Error(`timed out after ${timeoutMs} ms waiting for ${what}`);
    await new Promise((r) => setTimeout(r, 100));
  }
}

/** The database the worker of startWorkerCluster serves. */
export const WORKER_DB = "ctxwin_worker";
/** A database of ctxwin.databases with ctxwin 0.1.0: its worker runs and waits for ALTER EXTENSION ctxwin UPDATE. */
export const WAITING_DB = "ctxwin_worker_waiting";

export interface WorkerRow {
  database: string;
  pid: number | null;
  state: string;
  done: number;
  requests: number;
  failed: number;
  last_error: string | null;
}

export interface WorkerCluster {
  /** Its directory (the Unix socket's too). */
  dir: string;
  port: number;
  /** node-postgres settings for one of its databases, as the superuser postgres. */
  config(database?: string): pg.ClientConfig;
  /** The database's row of ctxwin.worker_status, or null. */
  worker(database?: string): Promise<WorkerRow | null>;
  /** Whether the worker of the database runs and is idle or working. */
  serving(database?: string): Promise<boolean>;
  /** Runs statements as the superuser in a database. */
  sql(database: string, ...statements: string[]): Promise<void>;
  log(): string;
  stop(): Promise<void>;
}

/** initdb and pg_ctl refuse root: they run as postgres when the tests are root. */
function asServerUser(cmd: string, args: string[]): [string, string[]] {
  return process.getuid?.() === 0 ? ["runuser", ["-u", "postgres", "--", cmd, ...args]] : [cmd, args];
}

function runAsServerUser(cmd: string, args: string[]): void {
  const [c, a] = asServerUser(cmd, args);
  execFileSync(c, a, { stdio: ["ignore", "pipe", "pipe"] });
}

async function freePort(): Promise<number> {
  return await new Promise((resolve, reject) => {
    const srv = createServer();
    srv.once("error", reject);
    srv.listen(0, "127.0.0.1", () => {
      const addr = srv.address();
      const port = typeof addr === "object" && addr ? addr.port : 0;
      srv.close(() => resolve(port));
    });
  });
}

/**
 * A PostgreSQL of its own (initdb and pg_ctl of pg_config --bindir, in a
 * directory of /tmp the server's OS user owns, its Unix socket there) with
 * shared_preload_libraries = 'ctxwin' and the worker serving WORKER_DB,
 * summaries by the mock LLM; WAITING_DB has ctxwin 0.1.0, whose worker runs
 * and waits.  Resolves once both workers are in those states; stop() stops
 * the server and removes the directory.
 */
export async function startWorkerCluster(mock: MockLlm): Promise<WorkerCluster> {
  const bindir = execFileSync("pg_config", ["--bindir"], { encoding: "utf8" }).trim();
  const dir = mkdtempSync("/tmp/ctxwin-node-worker-");
  chmodSync(dir, 0o755);
  if (process.getuid?.() === 0) execFileSync("chown", ["postgres:", dir]);
  const port = await freePort();
  const keyfile = join(dir, "llm.key");       // the server's OS user reads it
  writeFileSync(keyfile, mock.key + "\n", { mode: 0o644 });
  const data = join(dir, "data");
  let started = false;
  const stop = async () => {
    if (started) {
      try {
        runAsServerUser(join(bindir, "pg_ctl"), ["-D", data, "-m", "fast", "-w", "stop"]);
      } catch { /* already stopped */ }
      started = false;
    }
    rmSync(dir, { recursive: true, force: true });
  };
  const config = (database = WORKER_DB): pg.ClientConfig => ({ host: dir, port, user: "postgres", database });
  const sql = async (database: string, ...statements: string[]) => {
    const c = new pg.Client(config(database));
    await c.connect();
    try {
      for (const s of statements) await c.query(s);
    } finally {
      await c.end();
    }
  };
  const worker = async (database = WORKER_DB): Promise<WorkerRow | null> => {
    const c = new pg.Client(config(database));
    await c.connect();
    try {
      const r = await c.query(`SELECT database, pid, state, done::int, requests::int, failed::int, last_error
                               FROM ctxwin.worker_status WHERE database = $1`, [database]);
      return (r.rows[0] as WorkerRow | undefined) ?? null;
    } finally {
      await c.end();
    }
  };
  const serving = async (database = WORKER_DB) => {
    const w = await worker(database);
    return w !== null && w.pid !== null && (w.state === "idle" || w.state === "working");
  };
  const log = () => (existsSync(join(dir, "server.log")) ? readFileSync(join(dir, "server.log"), "utf8") : "");
  try {
    runAsServerUser(join(bindir, "initdb"), ["-D", data, "-A", "trust", "-U", "postgres", "-E", "UTF8",
      "--locale=C.UTF-8", "--no-sync"]);
    const conf: Record<string, string> = {
      port: String(port), listen_addresses: "", unix_socket_directories: dir, fsync: "off",
      max_connections: "30", shared_buffers: "32MB",
      shared_preload_libraries: "ctxwin",
      "ctxwin.databases": `${WORKER_DB},${WAITING_DB}`,
      "ctxwin.naptime_ms": "1000",
      "ctxwin.llm_provider": "openai", "ctxwin.llm_base_url": mock.url + "/v1",
      "ctxwin.llm_api_key_file": keyfile, "ctxwin.llm_model": "mock",
      "ctxwin.llm_max_retries": "0", "ctxwin.llm_timeout_ms": "20000",
    };
    appendFileSync(join(data, "postgresql.conf"),
      Object.entries(conf).map(([k, v]) => `${k} = '${v}'\n`).join(""));
    started = true;
    try {
      runAsServerUser(join(bindir, "pg_ctl"), ["-D", data, "-l", join(dir, "server.log"), "-w", "-t", "60", "start"]);
    } catch (e) {
      throw new Error(`pg_ctl start failed: ${String(e)}\n${log()}`);
    }
    await sql("postgres", `CREATE DATABASE ${WORKER_DB}`, `CREATE DATABASE ${WAITING_DB}`);
    await sql(WORKER_DB, "CREATE EXTENSION ctxwin");
    await sql(WAITING_DB, "CREATE EXTENSION ctxwin VERSION '0.1.0'");
    try {
      await waitFor(() => serving(), 30000, "the worker to serve " + WORKER_DB);
      await waitFor(async () => (await worker(WAITING_DB))?.state === "version mismatch", 30000,
        "the worker of " + WAITING_DB + " to wait");
    } catch (e) {
      throw new Error(`${String(e)}: ${JSON.stringify(await worker())}, ${JSON.stringify(await worker(WAITING_DB))}\n${log()}`);
    }
  } catch (e) {
    await stop();
    throw e;
  }
  return { dir, port, config, worker, serving, sql, log, stop };
}

/**
 * A mark in the test cluster's server log (logging_collector writes it,
 * scripts/cluster.sh); read() returns what was logged after it, once the
 * collector has written it (a statement logged last is waited for).
 */
export async function serverLogMark(pool: pg.Pool): Promise<{ read(): Promise<string> }> {
  const size = async (): Promise<{ file: string | null; size: number }> => {
    const r = await pool.query("SELECT f, (pg_stat_file(f, true)).size::bigint AS n FROM pg_current_logfile() f");
    return { file: r.rows[0]?.f ?? null, size: Number(r.rows[0]?.n ?? 0) };
  };
  const start = await size();
  return {
    async read() {
      if (start.file === null) throw new Error("the server logs to no file (logging_collector is off)");
      const probe = `ctxwin log probe ${process.pid} ${Date.now()}`;
      await pool.query("DO $$ BEGIN RAISE LOG '%', $1::text; END $$".replace("$1::text", `'${probe}'`));
      let text = "";
      await waitFor(async () => {
        const now = await size();
        const r = await pool.query("SELECT pg_read_file($1, $2, $3) AS t", [start.file, start.size, now.size - start.size]);
        text = String(r.rows[0]?.t ?? "");
        return text.includes(probe);
      }, 10000, "the server log to show the probe");
      return text;
    },
  };
}
