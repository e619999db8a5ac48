/*
 * tiktoken_baseline.mjs
 *		The baselines for bench/bench_core.c, measured the same way: tiktoken's
 *		Rust core through two native Node addons built on tiktoken-rs, and,
 *		for information, tiktoken's WASM build.
 *
 * Usage: node bench/tiktoken_baseline.mjs CORPUS_DIR [REPEATS]
 *
 * Same inputs as bench_core (records of dev.jsonl, by kind of dev.meta.jsonl,
 * those holding NUL left out; the pseudo-random 16 KiB word), each record
 * encoded by its own call, one untimed warm-up pass, the median of REPEATS
 * (default 5) timed passes.  Bytes are UTF-8 bytes, as for the C core.
 *
 *	tiktoken_native	tiktoken-rs-node-linux-x64-gnu: getEncoding(name).encode(s),
 *					cl100k_base and o200k_base
 *	tiktoken_node	tiktoken-node: getEncoding(name).encode(s), cl100k_base
 *					only (it knows no o200k_base)
 *	tiktoken_wasm	tiktoken: get_encoding(name).encode_ordinary(s)
 *
 * The native addons encode special-token text ("<|endoftext|>") as the
 * special token, unlike encode_ordinary; their counts differ from ctxwin's on
 * the few records holding such text, so they serve for speed only.  The
 * WASM build's encode_ordinary has ctxwin's semantics: its totals are
 * compared with bench_core's by bench/run.
 *
 * The 1 MiB word is not run here: tiktoken's merge is quadratic in the length
 * of a piece, and would take hours on it.
 *
 * Output: RESULT IMPL ENCODING INPUT BYTES TOKENS SECONDS lines, # comments.
 */
import { readFileSync } from 'node:fs';
import { createRequire } from 'node:module';

const require = createRequire(import.meta.url);

const dir = process.argv[2];
const repeats = process.argv[3] ? parseInt(process.argv[3], 10) : 5;

if (!dir || !(repeats >= 1))
{
	console.error('usage: node tiktoken_baseline.mjs CORPUS_DIR [REPEATS]');
	process.exit(2);
}

function lines(path)
{
	return readFileSync(path, 'utf8').split('\n').filter((l) => l.length > 0);
}

const texts = lines(`${dir}/dev.jsonl`).map((l) => JSON.parse(l).text);
const kinds = lines(`${dir}/dev.meta.jsonl`).map((l) => JSON.parse(l).kind);

if (texts.length !== kinds.length)
	throw new Error('dev.jsonl and dev.meta.jsonl differ in length');

function select(name, want)
{
	const t = [];
	let bytes = 0;

	for (let i = 0; i < texts.length; i++)
	{
		if ((want !== '*' && !want.includes(kinds[i])) || texts[i].includes('\0'))
			continue;
		t.push(texts[i]);
		bytes += Buffer.byteLength(texts[i], 'utf8');
	}
	return { name, texts: t, bytes };
}

/* bench_core's make_word: the same LCG, in 32-bit unsigned arithmetic. */
function word(name, len)
{
	const b = Buffer.alloc(len);
	let x = 12345;

	for (let i = 0; i < len; i++)
	{
		x = (Math.imul(x, 1103515245) + 12345) >>> 0;
		b[i] = 97 + ((x >>> 16) % 26);
	}
	return { name, texts: [b.toString('latin1')], bytes: len };
}

const inputs = [
	select('prose', ['prose_en']),
	select('code', ['code_c', 'code_py', 'code_js', 'code_sql']),
	select('all', '*'),
	word('word16k', 16 << 10),
];

function pass(encode, input)
{
	let tokens = 0;

	for (const t of input.texts)
		tokens += encode(t).length;
	return tokens;
}

function median(a)
{
	const s = [...a].sort((x, y) => x - y);
	const m = s.length >> 1;

	return s.length % 2 ? s[m] : (s[m - 1] + s[m]) / 2;
}

function measure(impl, encName, encode, input)
{
	const tokens = pass(encode, input);
	const times = [];

	for (let r = 0; r < repeats; r++)
	{
		const t0 = process.hrtime.bigint();
		const got = pass(encode, input);

		times.push(Number(process.hrtime.bigint() - t0) / 1e9);
		if (got !== tokens)
			throw new Error(`${impl} ${encName} ${input.name}: ${tokens} then ${got} tokens`);
	}
	const med = median(times);

	console.log(`RESULT ${impl} ${encName} ${input.name} ${input.bytes} ${tokens} ${med.toFixed(6)}`);
	console.log(`# ${impl.padEnd(15)} ${encName.padEnd(11)} ${input.name.padEnd(8)} ` +
				`${String(input.texts.length).padStart(5)} texts ${String(input.bytes).padStart(9)} bytes ` +
				`${String(tokens).padStart(8)} tokens ${med.toFixed(4).padStart(9)} s ` +
				`${(input.bytes / med / 1e6).toFixed(2).padStart(8)} MB/s ` +
				`${(tokens / med / 1e6).toFixed(2).padStart(6)} Mtokens/s`);
}

const native = require('tiktoken-rs-node-linux-x64-gnu');
const tnode = require('tiktoken-node');
const wasm = require('tiktoken');

console.log(`# tiktoken baselines, ${repeats} timed passes after one warm-up, median`);
for (const encName of ['cl100k_base', 'o200k_base'])
{
	const n = native.getEncoding(encName);

	for (const input of inputs)
		measure('tiktoken_native', encName, (s) => n.encode(s), input);
}
{
	const n = tnode.getEncoding('cl100k_base');

	for (const input of inputs)
		measure('tiktoken_node', 'cl100k_base', (s) => n.encode(s), input);
}
for (const encName of ['cl100k_base', 'o200k_base'])
{
	const w = wasm.get_encoding(encName);

	for (const input of inputs)
		measure('tiktoken_wasm', encName, (s) => w.encode_ordinary(s), input);
	w.free();
}
