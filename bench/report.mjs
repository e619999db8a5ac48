/*
 * report.mjs
 *		Tabulate the RESULT lines of bench_core, tiktoken_baseline.mjs and
 *		sql_bench.sh (files named on the command line; missing ones are
 *		skipped) as Markdown tables.  When several files hold the same
 *		measurement (rounds of bench/run), the median of their times is
 *		used.
 *
 * RESULT IMPL ENCODING INPUT BYTES TOKENS SECONDS
 */
import { existsSync, readFileSync } from 'node:fs';

const runs = new Map();

for (const f of process.argv.slice(2))
{
	if (!existsSync(f))
		continue;
	for (const line of readFileSync(f, 'utf8').split('\n'))
	{
		const w = line.trim().split(/\s+/);
		const key = `${w[1]} ${w[2]} ${w[3]}`;

		if (w[0] !== 'RESULT' || w.length !== 7)
			continue;
		if (!runs.has(key))
			runs.set(key, []);
		runs.get(key).push({
			bytes: Number(w[4]), tokens: Number(w[5]), seconds: Number(w[6]),
		});
	}
}

/* A key measured in several rounds (files) gets the median of their times. */
const results = new Map();

for (const [key, list] of runs)
{
	const s = list.map((r) => r.seconds).sort((a, b) => a - b);
	const m = s.length >> 1;

	results.set(key, { ...list[0], seconds: s.length % 2 ? s[m] : (s[m - 1] + s[m]) / 2 });
	if (list.some((r) => r.tokens !== list[0].tokens))
		console.log(`warning: ${key}: token totals differ between rounds`);
}

const get = (impl, enc, input) => results.get(`${impl} ${enc} ${input}`);
const encs = ['cl100k_base', 'o200k_base'];
const inputs = ['prose', 'code', 'all'];
const impls = [
	['ctxwin_core', 'ctxwin core'],
	['ctxwin_sql', 'ctxwin SQL'],
	['tiktoken_native', 'tiktoken native'],
	['tiktoken_node', 'tiktoken-node'],
	['tiktoken_wasm', 'tiktoken wasm'],
];

function fmt(x, digits)
{
	return x === undefined || !isFinite(x) ? 'n/a' : x.toFixed(digits);
}

function ratio(a, b)
{
	return a && b ? `${(b.seconds / a.seconds).toFixed(1)}x` : 'n/a';
}

function table(title, value, digits)
{
	const head = ['input', 'encoding', ...impls.map((i) => i[1]),
				  'core / native', 'SQL / native'];

	console.log(`\n${title}\n`);
	console.log(`| ${head.join(' | ')} |`);
	console.log(`|${head.map((h, i) => (i < 2 ? ' --- ' : ' ---: ')).join('|')}|`);
	for (const input of inputs)
		for (const enc of encs)
		{
			const row = [input, enc];
			const native = get('tiktoken_native', enc, input);

			for (const [impl] of impls)
			{
				const r = get(impl, enc, input);

				row.push(r ? fmt(value(r), digits) : 'n/a');
			}
			row.push(ratio(get('ctxwin_core', enc, input), native));
			row.push(ratio(get('ctxwin_sql', enc, input), native));
			console.log(`| ${row.join(' | ')} |`);
		}
}

table('Throughput, MB/s (UTF-8 bytes per second; single thread; higher is better)',
	  (r) => r.bytes / r.seconds / 1e6, 2);
table('Tokens per second, millions',
	  (r) => r.tokens / r.seconds / 1e6, 2);
console.log('\nThe ratios are tiktoken native\'s time over ctxwin\'s (how many times faster ctxwin is).');

/* one long word */
{
	const words = ['word16k', 'word256k', 'word1m', 'word4m'];

	console.log('\nOne word of pseudo-random letters (a single pre-tokenizer piece), seconds\n');
	console.log('| input | encoding | bytes | tokens | ctxwin core | tiktoken native | tiktoken wasm |');
	console.log('| --- | --- | ---: | ---: | ---: | ---: | ---: |');
	for (const w of words)
		for (const enc of encs)
		{
			const c = get('ctxwin_core', enc, w);

			if (!c)
				continue;
			const n = get('tiktoken_native', enc, w);
			const m = get('tiktoken_wasm', enc, w);

			console.log(`| ${w} | ${enc} | ${c.bytes} | ${c.tokens} | ${fmt(c.seconds, 4)} | ` +
						`${n ? fmt(n.seconds, 4) : 'not run'} | ${m ? fmt(m.seconds, 4) : 'not run'} |`);
		}
}

/* SQL side information */
{
	const scan = inputs.map((i) => get('pg_scan', '-', i));

	if (scan.some((s) => s))
	{
		console.log('\nSQL path: the query alone, and reading and detoasting the same texts (SELECT sum(length(t))), seconds\n');
		console.log('| input | encoding | sum(ctxwin.count_tokens(t, encoding)) | sum(length(t)) |');
		console.log('| --- | --- | ---: | ---: |');
		inputs.forEach((input, k) =>
		{
			for (const enc of encs)
			{
				const a = get('ctxwin_sql', enc, input);

				console.log(`| ${input} | ${enc} | ${a ? fmt(a.seconds, 4) : 'n/a'} | ` +
							`${scan[k] ? fmt(scan[k].seconds, 4) : 'n/a'} |`);
			}
		});
	}
}

/* token totals must agree where the semantics are the same */
{
	const notes = [];

	for (const enc of encs)
		for (const input of [...inputs, 'word16k'])
		{
			const c = get('ctxwin_core', enc, input);

			if (!c)
				continue;
			for (const impl of ['ctxwin_sql', 'tiktoken_wasm', 'tiktoken_native', 'tiktoken_node'])
			{
				const r = get(impl, enc, input);

				if (!r)
					continue;
				if (r.bytes !== c.bytes)
					notes.push(`${impl} ${enc} ${input}: ${r.bytes} bytes, ctxwin core ${c.bytes}`);
				if (r.tokens !== c.tokens)
					notes.push(`${impl} ${enc} ${input}: ${r.tokens} tokens, ctxwin core ${c.tokens}`);
			}
		}
	console.log('\nToken totals against ctxwin core (the native addons map special-token text to special ids; tiktoken wasm\'s encode_ordinary and the SQL path must agree exactly):');
	if (notes.length === 0)
		console.log('all agree');
	for (const n of notes)
		console.log(`  ${n}`);
}
