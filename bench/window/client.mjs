// bench/window/client.mjs: the window an app builds for its next LLM call,
// two ways, from the same Node process and connection settings.
//
//   seed     what apps do today: read the session's system prompt and summary
//            point, fetch every message after the summary, count each one
//            with tiktoken's WASM build (o200k_base, 4 + role + content
//            + tool_call_id + tool_calls JSON, as ctxwin counts), then drop
//            the oldest until the list fits the budget.
//   ctxwin   one query: SELECT ctxwin.build_context($1, budget).
//
// Measures throughput: `n` calls after `warm` calls, by each of `clients`
// connections, each in its own worker thread (the seed design's counting is
// CPU work in the client, so two clients in one thread would share a core).
//
//   node client.mjs --mode seed|ctxwin --session UUID [--budget 16384]
//                   [--n 200] [--warm 20] [--clients 1] [--host DIR] [--port P]
//
// Prints one JSON line: calls, seconds, calls_per_s and what the last window
// held (messages, tokens), so the two modes can be checked against each other.
import { Worker, isMainThread, parentPort, workerData } from "node:worker_threads";
import { parseArgs } from "node:util";
import pg from "pg";
import { get_encoding } from "tiktoken";

const MESSAGE_OVERHEAD = 4;
const LIST_OVERHEAD = 3;

function options() {
	const { values } = parseArgs({
		options: {
			mode: { type: "string" },
			session: { type: "string" },
			budget: { type: "string", default: "16384" },
			n: { type: "string", default: "200" },
			warm: { type: "string", default: "20" },
			clients: { type: "string", default: "1" },
			host: { type: "string", default: process.env.PGHOST ?? "/tmp" },
			port: { type: "string", default: process.env.PGPORT ?? "5432" },
			user: { type: "string", default: process.env.PGUSER ?? "postgres" },
			database: { type: "string", default: process.env.PGDATABASE ?? "postgres" },
		},
	});
	if (!["seed", "ctxwin"].includes(values.mode) || !values.session)
		throw new Error("usage: node client.mjs --mode seed|ctxwin --session UUID [...]");
	return {
		...values,
		budget: Number(values.budget),
		n: Number(values.n),
		warm: Number(values.warm),
		clients: Number(values.clients),
		port: Number(values.port),
	};
}

// --- the seed design ------------------------------------------------------

const enc = isMainThread ? null : get_encoding("o200k_base");

function tokens(s) {
	return s == null ? 0 : enc.encode(s).length;
}

function messageTokens(m) {
	return MESSAGE_OVERHEAD + tokens(m.role) + tokens(m.content) + tokens(m.name) +
		tokens(m.tool_call_id) + (m.tool_calls == null ? 0 : tokens(JSON.stringify(m.tool_calls)));
}

function asChatMessage(r) {
	const m = { role: r.role };
	if (r.content != null) m.content = r.content;
	if (r.tool_calls != null) m.tool_calls = r.tool_calls;
	if (r.tool_call_id != null) m.tool_call_id = r.tool_call_id;
	return m;
}

async function seedWindow(client, session, budget) {
	const s = (await client.query(
		"SELECT system_prompt, conversation_summary, summary_through_id FROM ctxwin.sessions WHERE id = $1",
		[session])).rows[0];
	const rows = (await client.query(
		"SELECT role, content, tool_calls, tool_call_id FROM ctxwin.messages " +
		"WHERE session_id = $1 AND id > $2 ORDER BY id",
		[session, s.summary_through_id])).rows;
	const system = [];
	if (s.system_prompt || s.conversation_summary)
		system.push({
			role: "system",
			content: [s.system_prompt, s.conversation_summary &&
				"Summary of earlier conversation:\n" + s.conversation_summary].filter(Boolean).join("\n\n"),
		});
	const msgs = rows.map(asChatMessage);
	const counts = msgs.map(messageTokens);
	let total = LIST_OVERHEAD + system.reduce((t, m) => t + messageTokens(m), 0) +
		counts.reduce((t, c) => t + c, 0);
	let first = 0;
	// drop the oldest until it fits, and never start on an orphan tool result
	while (first < msgs.length && (total > budget || msgs[first].role === "tool"))
		total -= counts[first++];
	return { messages: system.concat(msgs.slice(first)), tokens: total };
}

// --- ctxwin ----------------------------------------------------------------

async function ctxwinWindow(client, session, budget) {
	const w = (await client.query("SELECT ctxwin.build_context($1, $2) AS w", [session, budget])).rows[0].w;
	return { messages: w, tokens: null };
}

// --- one client --------------------------------------------------------------

async function runClient(o) {
	const client = new pg.Client({ host: o.host, port: o.port, user: o.user, database: o.database });
	await client.connect();
	const build = o.mode === "seed" ? seedWindow : ctxwinWindow;
	let w;
	for (let i = 0; i < o.warm; i++)
		w = await build(client, o.session, o.budget);
	parentPort.postMessage({ ready: true });
	await new Promise((resolve) => parentPort.once("message", resolve));
	for (let i = 0; i < o.n; i++)
		w = await build(client, o.session, o.budget);
	parentPort.postMessage({ done: true, messages: w.messages.length, tokens: w.tokens });
	await client.end();
}

// --- main: start the clients together, time them from start to last done ----

async function main() {
	const o = options();
	const workers = Array.from({ length: o.clients },
		() => new Worker(new URL(import.meta.url), { workerData: o }));
	const events = workers.map((wk) => {
		const q = [];
		let wake = null;
		wk.on("message", (m) => { q.push(m); if (wake) { wake(); wake = null; } });
		wk.on("error", (e) => { console.error(e); process.exit(1); });
		return async () => {
			while (q.length === 0) await new Promise((r) => { wake = r; });
			return q.shift();
		};
	});
	await Promise.all(events.map((next) => next()));
	const t0 = process.hrtime.bigint();
	workers.forEach((wk) => wk.postMessage("go"));
	const done = await Promise.all(events.map((next) => next()));
	const seconds = Number(process.hrtime.bigint() - t0) / 1e9;
	const calls = o.n * o.clients;
	console.log(JSON.stringify({
		mode: o.mode, clients: o.clients, calls, seconds,
		calls_per_s: calls / seconds,
		window_messages: done[0].messages, window_tokens: done[0].tokens,
	}));
}

if (isMainThread)
	await main();
else
	await runClient(workerData);
