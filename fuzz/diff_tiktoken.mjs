// diff_tiktoken.mjs: differential test of ctxwin's tokenizer core against
// tiktoken (the npm package, a WASM build of openai's Rust core).
//
//   node fuzz/diff_tiktoken.mjs --driver fuzz/build/diff_driver \
//        --tiktoken /tmp/fuzzref [--seconds 120] [--count 200000]
//        [--seed N] [--batch 2000] [--report FILE] [--corpus DIR,DIR...]
//        [--huge 0|1]
//
// Generates random strings built to reach the pre-tokenizers' corner cases,
// encodes each with tiktoken's encode_ordinary for cl100k_base and
// o200k_base, and with the core through diff_driver (see diff_driver.c),
// and compares the ids.  Stops after --count strings or --seconds seconds,
// whichever comes first.  Each mismatch is shrunk to a minimal string (by
// removing code points while the two still disagree) and reported with its
// code points, both id lists, both token splits and the core's pieces.
// With --corpus, the files of those directories that are valid UTF-8 (such
// as the fuzzer's corpus, fuzz/build/corpus-*) are compared first; so are a
// few strings of 64 KiB to 300 KiB unless --huge 0.
// Exits 1 if anything differed, 0 otherwise.

import { createRequire } from 'node:module';
import { spawnSync } from 'node:child_process';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';

// ---- arguments -------------------------------------------------------------

const opts = {
	driver: null, tiktoken: '/tmp/fuzzref', seconds: 120, count: 200000,
	seed: Date.now() % 2147483647, batch: 2000, report: null, minimize: 20,
	corpus: '', huge: 1,
};
for (let i = 2; i < process.argv.length; i += 2) {
	const k = process.argv[i].replace(/^--/, '');
	const v = process.argv[i + 1];
	if (!(k in opts) || v === undefined) {
		console.error(`diff_tiktoken.mjs: bad argument ${process.argv[i]}`);
		process.exit(2);
	}
	opts[k] = (typeof opts[k] === 'number') ? Number(v) : v;
}
if (!opts.driver) {
	console.error('diff_tiktoken.mjs: --driver is required');
	process.exit(2);
}

const require = createRequire(path.join(path.resolve(opts.tiktoken), 'package.json'));
const tiktoken = require('tiktoken');
const tkver = JSON.parse(fs.readFileSync(path.join(path.resolve(opts.tiktoken),
	'node_modules', 'tiktoken', 'package.json'), 'utf8')).version;
const ENCS = ['cl100k_base', 'o200k_base'];
const ref = ENCS.map((e) => tiktoken.get_encoding(e));

// ---- random numbers (xorshift32, so a run is reproducible from --seed) -----

let rs = (opts.seed >>> 0) || 1;
const rnd = () => {
	rs ^= rs << 13; rs >>>= 0;
	rs ^= rs >>> 17;
	rs ^= rs << 5; rs >>>= 0;
	return rs / 4294967296;
};
const ri = (lo, hi) => lo + Math.floor(rnd() * (hi - lo + 1));	// [lo, hi]
const pick = (a) => a[Math.floor(rnd() * a.length)];
const cp = (c) => String.fromCodePoint(c);
const rep = (n, f) => { let s = ''; for (let i = 0; i < n; i++) s += f(); return s; };

// ---- code point pools ------------------------------------------------------

// By General_Category, from node's own Unicode tables (which may be a newer
// version than tiktoken's: a code point new there is unassigned, class
// "other", for both tokenizers, which is still a valid test).
const CATS = ['Lu', 'Ll', 'Lt', 'Lm', 'Lo', 'Mn', 'Mc', 'Me', 'Nd', 'Nl', 'No', 'Cc',
	'Pc', 'Pd', 'Ps', 'Pe', 'Pi', 'Pf', 'Po', 'Sm', 'Sc', 'Sk', 'So', 'Cf', 'Co', 'Cn'];
const pool = Object.fromEntries(CATS.map((c) => [c, []]));
{
	const re = CATS.map((c) => [c, new RegExp(`^\\p{gc=${c}}$`, 'u')]);
	for (let c = 0; c <= 0x10ffff; c++) {
		if (c >= 0xd800 && c <= 0xdfff)
			continue;
		const s = cp(c);
		for (const [name, r] of re) {
			if (r.test(s)) {
				pool[name].push(c);
				break;
			}
		}
	}
}
const from = (...cats) => cp(pick(cats.map((c) => pool[c]).flat()));
const fromCat = (c) => cp(pick(pool[c]));

// Every White_Space code point, and look-alikes that are not White_Space.
const WS = [0x09, 0x0a, 0x0b, 0x0c, 0x0d, 0x20, 0x85, 0xa0, 0x1680, 0x2000,
	0x2001, 0x2002, 0x2003, 0x2004, 0x2005, 0x2006, 0x2007, 0x2008, 0x2009,
	0x200a, 0x2028, 0x2029, 0x202f, 0x205f, 0x3000].map(cp);
const NOT_WS = [0xfeff, 0x200b, 0x180e, 0x200c, 0x200d, 0x2060, 0xad, 0xfe0f,
	0x1c, 0x1d, 0x1e, 0x1f, 0x00, 0x7f, 0x061c, 0x2800].map(cp);

// Blocks new in Unicode 16.0, which tiktoken's regex tables (regex-syntax
// 0.8.5) and src/tokenizer/unicode_data.h both include.
const U16 = [[0x10d40, 0x10d8f], [0x105c0, 0x105ff], [0x11380, 0x113ff],
	[0x11bc0, 0x11bff], [0x16100, 0x1613f], [0x16d40, 0x16d7f], [0x1e5d0, 0x1e5ff],
	[0x116d0, 0x116ff], [0x13460, 0x143ff], [0x1cc00, 0x1cebf], [0x10ec0, 0x10eff],
	[0x1f8b0, 0x1f8bb], [0x1fadf, 0x1faef]];

const EMOJI = ['😀', '👍', '❤', '☺', '🏳', '👨', '👩', '👧', '👦', '🧑', '🤝', '🌈',
	'🔥', '✨', '🎉', '💻', '🦀', '🐘', '⚧', '✈'];
const SKIN = [0x1f3fb, 0x1f3fc, 0x1f3fd, 0x1f3fe, 0x1f3ff].map(cp);
const emoji = () => {
	switch (ri(0, 5)) {
		case 0: return pick(EMOJI);
		case 1: return pick(EMOJI) + pick(SKIN);
		case 2: return Array.from({ length: ri(2, 4) }, () => pick(EMOJI) +
				(rnd() < 0.3 ? pick(SKIN) : '') + (rnd() < 0.3 ? '\ufe0f' : '')).join('\u200d');
		case 3: return cp(0x1f1e6 + ri(0, 25)) + cp(0x1f1e6 + ri(0, 25));	// flag
		case 4: return pick(['0', '1', '#', '*', '9']) + '\ufe0f\u20e3';	// keycap
		default: return '🏳\ufe0f\u200d🌈';
	}
};

const CONTR = ['s', 'S', '\u017f', 't', 'T', 're', 'RE', 'Re', 'rE', 've', 'VE', 'Ve', 'vE',
	'm', 'M', 'll', 'LL', 'Ll', 'lL', 'd', 'D', 'k', 'K', '\u212a', 'r', 'l', 'v', 'e',
	'\u017ft', 'st', 'x', "'", '\u2019s'];
const APOS = ["'", "'", "'", '\u2019', '\u02bc', '`'];

const asciiWord = () => {
	const n = ri(1, 10);
	const low = rep(n, () => String.fromCharCode(97 + ri(0, 25)));
	switch (ri(0, 4)) {
		case 0: return low;
		case 1: return low.toUpperCase();
		case 2: return low[0].toUpperCase() + low.slice(1);
		case 3: return rep(n, () => String.fromCharCode((rnd() < 0.5 ? 65 : 97) + ri(0, 25)));
		default: return low + from('Lu') + low;
	}
};
const letter = () => fromCat(pick(['Lu', 'Ll', 'Lt', 'Lm', 'Lo', 'Lu', 'Ll']));
const mark = () => fromCat(pick(['Mn', 'Mn', 'Mc', 'Me']));
const caseMix = () => rep(ri(1, 6), () => {
	const r = rnd();
	if (r < 0.2) return fromCat('Lu');
	if (r < 0.4) return fromCat('Ll');
	if (r < 0.55) return fromCat('Lt');
	if (r < 0.7) return fromCat('Lm');
	if (r < 0.85) return fromCat('Lo');
	return mark();
});
const digits = () => {
	const r = rnd();
	if (r < 0.3) return rep(ri(1, 8), () => String.fromCharCode(48 + ri(0, 9)));
	if (r < 0.6) {
		// one script's decimal digits: Nd comes in aligned runs of ten
		const d = pick(pool.Nd);
		const zero = d - ((d - 0x30) % 10 + 10) % 10;
		return rep(ri(1, 7), () => cp(zero + ri(0, 9)));
	}
	return rep(ri(1, 5), () => fromCat(pick(['Nd', 'Nl', 'No'])));
};
const space = () => rep(ri(1, 4), () => pick(WS));
const newline = () => pick(['\n', '\r', '\r\n', '\n\r', '\r\r\n', '\n\n', ' \n', '\n ',
	'\t\n', '  \n  ', '\u2028', '\u0085', '\r\n\r\n', ' \r\n\t']);
const slash = () => pick(['/', '//', '/\n', '/\r\n', 'http://', 'a/b', '</', '/>', '.../',
	'!/', ' /', '//\n/', '\\/']);
const punct = () => rep(ri(1, 4), () => pick('!"#$%&()*+,-.:;<=>?@[\\]^_`{|}~\''.split('')));
const symbol = () => fromCat(pick(['Pc', 'Pd', 'Ps', 'Pe', 'Pi', 'Pf', 'Po', 'Sm', 'Sc',
	'Sk', 'So', 'Cf', 'Co', 'Cn']));
const cjk = () => rep(ri(1, 6), () => pick([
	() => cp(ri(0x4e00, 0x9fff)), () => cp(ri(0x3041, 0x3096)), () => cp(ri(0x30a1, 0x30fa)),
	() => '\u30fc', () => '\u3005', () => cp(ri(0xac00, 0xd7a3)), () => cp(ri(0x20000, 0x2a6df)),
	() => pick(['\u3001', '\u3002', '\uff0c', '\uff01', '\u300c', '\u300d']),
])());
const u16 = () => { const [a, b] = pick(U16); return cp(ri(a, b)); };
const anyCp = () => {
	for (;;) {
		const c = rnd() < 0.7 ? ri(0x80, 0xffff) : ri(0x10000, 0x10ffff);
		if (c < 0xd800 || c > 0xdfff)
			return cp(c);
	}
};

// Long runs (over 256 bytes: the core merges those with a heap).
const long = () => {
	const n = ri(100, 1500);
	switch (ri(0, 14)) {
		case 0: return rep(n, () => String.fromCharCode(97 + ri(0, 25)));
		case 1: return rep(n, () => pick(['a', 'b', 'ab', 'ba', 'aa']));
		case 2: return rep(n, () => pick(['0', '1', '9']));
		case 3: return rep(n, () => pick(WS));
		case 4: return rep(n, () => pick(['=', '-', '*', '#', '!', '.', '/', '_']));
		case 5: return rep(ri(100, 600), () => cp(ri(0x4e00, 0x9fff)));
		case 6: return rep(ri(50, 400), emoji);
		case 7: return rep(n, () => pick(['\u0e01', '\u0e32', '\u0e48', '\u0e19', '\u0e35', '\u0e49']));
		case 8: return rep(n, () => (rnd() < 0.6 ? letter() : mark()));
		case 9: return rep(n, () => pick('ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/='.split('')));
		case 10: return rep(ri(100, 700), () => pick(['\u00e9', '\u00c9', 'e\u0301', '\u00df', '\u0153']));
		case 11: return ' '.repeat(ri(1, 300)) + pick(['x', '\n', '1', '!', '', '\t', ' y']);
		case 12: return pick(['\t', '\n', '-', '=', '\u3000']).repeat(ri(100, 300)) + pick(['x', '']);
		case 13: return (rnd() < 0.5 ? anyCp() : pick([from('Cc'), from('So'), fromCat('Lo')])).repeat(ri(90, 300));
		default: return rep(n, () => pick(['\n', ' ', '\r\n', '\t']));
	}
};

const ATOMS = [
	[12, () => pick(APOS) + pick(CONTR)],
	[6, () => pick([asciiWord, caseMix, letter, mark, digits])() + pick(APOS) + pick(CONTR) +
		(rnd() < 0.5 ? pick([asciiWord, caseMix, mark, letter])() : '')],
	[10, asciiWord],
	[6, letter],
	[8, caseMix],
	[6, mark],
	[7, digits],
	[10, space],
	[4, () => pick(NOT_WS)],
	[6, newline],
	[4, slash],
	[6, punct],
	[4, symbol],
	[4, emoji],
	[4, cjk],
	[2, u16],
	[2, anyCp],
	[3, () => ' '],
];
const ATOM_TOTAL = ATOMS.reduce((a, [w]) => a + w, 0);
const atom = () => {
	let r = rnd() * ATOM_TOTAL;
	for (const [w, f] of ATOMS) {
		if ((r -= w) < 0)
			return f();
	}
	return ATOMS[0][1]();
};
const genString = () => {
	let s = '';
	const n = ri(1, rnd() < 0.8 ? 12 : 40);
	for (let i = 0; i < n; i++)
		s += (rnd() < 0.015) ? long() : atom();
	return s;
};

// ---- running both tokenizers -----------------------------------------------

const tmp = fs.mkdtempSync(path.join(os.tmpdir(), 'ctxwin-diff-'));
let runNo = 0;

// The core's ids (and, with pieces, its piece ends) for each string.
// Runs diff_driver over the strings; returns null if it crashed.
function runDriver(strings, pieces) {
	const bufs = [];
	for (const s of strings) {
		const b = Buffer.from(s, 'utf8');
		const h = Buffer.alloc(4);
		h.writeUInt32LE(b.length);
		bufs.push(h, b);
	}
	const file = path.join(tmp, `in-${runNo++}.bin`);
	fs.writeFileSync(file, Buffer.concat(bufs));
	const r = spawnSync(opts.driver, pieces ? ['-p', file] : [file],
		{ maxBuffer: 1 << 30, encoding: 'utf8' });
	fs.unlinkSync(file);
	if (r.status !== 0) {
		lastCrash = `status ${r.status}, signal ${r.signal}: ` +
			(r.stderr.split('\n').find((l) => /ERROR|SUMMARY|runtime error/.test(l)) || r.stderr.slice(0, 300));
		return null;
	}
	return r;
}
let lastCrash = '';

// The shortest string that still crashes the driver, from one that does.
function shrinkCrash(s) {
	let a = Array.from(s);
	let chunk = Math.max(1, a.length >> 1);
	for (;;) {
		let found = false;
		for (let i = 0; i < a.length && !found; i += chunk) {
			const c = a.slice(0, i).concat(a.slice(i + chunk));
			if (c.length > 0 && runDriver([c.join('')], false) === null) {
				a = c;
				found = true;
			}
		}
		if (found)
			chunk = Math.min(chunk, Math.max(1, a.length >> 1));
		else if (chunk > 1)
			chunk >>= 1;
		else
			break;
	}
	return a.join('');
}

// The core's ids (and, with pieces, its piece ends) for each string.  If the
// driver crashes, finds the first string that crashes it on its own, shrinks
// it, reports it and exits with status 3.
function core(strings, pieces = false) {
	const r = runDriver(strings, pieces);
	if (r === null) {
		const why = lastCrash;
		let lo = 0, hi = strings.length;	// a prefix of length hi crashes
		while (hi - lo > 1) {
			const mid = (lo + hi) >> 1;
			if (runDriver(strings.slice(0, mid), false) === null)
				hi = mid;
			else
				lo = mid;
		}
		const bad = strings[hi - 1];
		const alone = runDriver([bad], false) === null;
		const small = alone ? shrinkCrash(bad) : bad;
		const msg = [
			`diff_driver CRASHED (${why})`,
			alone ? `on this string alone (shrunk from ${Array.from(bad).length} code points):` :
				'on a batch (the string below does not crash it alone):',
			`  "${esc(small).slice(0, 2000)}"`,
			`  UTF-8 bytes: ${Buffer.byteLength(small, 'utf8')}; code points: ${cps(small).slice(0, 600)}`,
			`  crash of the shrunk string: ${runDriver([small], false) === null ? lastCrash : 'none'}`,
		].join('\n') + '\n';
		process.stdout.write(msg);
		if (opts.report)
			fs.writeFileSync(opts.report, msg);
		process.exit(3);
	}
	const lines = r.stdout.split('\n');
	const out = [];
	let errors = [];
	let li = 0;
	for (let i = 0; i < strings.length; i++) {
		const row = [];
		for (let e = 0; e < ENCS.length; e++) {
			while (lines[li].startsWith('ERROR'))
				errors.push(lines[li++]);
			const [ids, pc] = lines[li++].split(' |');
			row.push({
				ids: ids === '' ? [] : ids.split(' ').map(Number),
				pieces: pc === undefined ? null : pc.trim().split(' ').filter((x) => x).map(Number),
			});
		}
		out.push(row);
	}
	return { out, errors };
}

const refIds = (e, s) => Array.from(ref[e].encode_ordinary(s));
const same = (a, b) => a.length === b.length && a.every((x, i) => x === b[i]);

// ---- shrinking -------------------------------------------------------------

// Remove code points from s while the core and tiktoken still disagree on
// encoding e: chunks of halving size, each round tested in one batch.
function shrink(e, s) {
	let a = Array.from(s);
	let chunk = Math.max(1, a.length >> 1);
	for (;;) {
		const cands = [];
		for (let i = 0; i < a.length; i += chunk)
			cands.push(a.slice(0, i).concat(a.slice(i + chunk)));
		const strs = cands.map((c) => c.join('')).filter((x) => x.length > 0);
		const { out } = core(strs);
		const k = strs.findIndex((x, i) => !same(out[i][e].ids, refIds(e, x)));
		if (k >= 0) {
			a = Array.from(strs[k]);
			chunk = Math.min(chunk, Math.max(1, a.length >> 1));
		}
		else if (chunk > 1)
			chunk >>= 1;
		else
			break;
	}
	return a.join('');
}

// ---- reporting -------------------------------------------------------------

const esc = (s) => Array.from(s).map((c) => {
	const n = c.codePointAt(0);
	return (n >= 0x21 && n < 0x7f && c !== '\\' && c !== '"') ? c :
		'\\u{' + n.toString(16).toUpperCase().padStart(4, '0') + '}';
}).join('');
const cps = (s) => Array.from(s).map((c) => 'U+' + c.codePointAt(0).toString(16).toUpperCase().padStart(4, '0')).join(' ');
const escBytes = (u8) => {
	let o = '';
	for (const b of u8)
		o += (b >= 0x21 && b < 0x7f && b !== 0x5c && b !== 0x22) ? String.fromCharCode(b) :
			'\\x' + b.toString(16).toUpperCase().padStart(2, '0');
	return '"' + o + '"';
};
const tokens = (e, ids) => ids.map((id) => escBytes(ref[e].decode_single_token_bytes(id))).join(' ');
const piecesOf = (s, ends) => {
	const b = Buffer.from(s, 'utf8');
	let p = 0;
	return ends.map((x) => { const r = escBytes(b.subarray(p, x)); p = x; return r; }).join(' ');
};

function describe(e, s) {
	const ours = core([s], true).out[0][e];
	const theirs = refIds(e, s);
	return [
		`${ENCS[e]}: "${esc(s)}"`,
		`  code points: ${cps(s)}`,
		`  ctxwin   ids: [${ours.ids.join(', ')}]`,
		`  tiktoken ids: [${theirs.join(', ')}]`,
		`  ctxwin   tokens: ${tokens(e, ours.ids)}`,
		`  tiktoken tokens: ${tokens(e, theirs)}`,
		`  ctxwin   pieces: ${piecesOf(s, ours.pieces)}`,
	].join('\n');
}

// ---- main loop -------------------------------------------------------------

// Files given with --corpus that are valid UTF-8.
const files = [];
let nfiles = 0;
for (const dir of opts.corpus.split(',').filter((d) => d && fs.existsSync(d))) {
	const dec = new TextDecoder('utf-8', { fatal: true });
	for (const f of fs.readdirSync(dir)) {
		nfiles++;
		try {
			files.push(dec.decode(fs.readFileSync(path.join(dir, f))));
		}
		catch {
			/* not valid UTF-8: tiktoken cannot take it */
		}
	}
}

// A few huge strings first: pieces and texts over 64 KiB go through the
// core's interrupt checks and long heap merges (tiktoken takes seconds on
// these: its merge is quadratic).
if (opts.huge) {
	const letters = (n) => rep(n, () => String.fromCharCode(97 + ri(0, 25)));
	files.unshift(
		letters(70000),
		rep(70000, () => pick(['a', 'b', 'ab'])) + ' tail',
		' '.repeat(100000) + 'x',
		'\n'.repeat(20000) + ' \r\n'.repeat(20000),
		rep(2000, genString),
		rep(20000, () => cp(ri(0x4e00, 0x9fff))),
	);
}

const t0 = Date.now();
let nstr = 0, nbytes = 0, nlong = 0, ntok = [0, 0];
const mismatches = [];		// {e, s}
const driverErrors = [];
let nfromfiles = 0;
while (files.length > 0 || (nstr < opts.count && (Date.now() - t0) / 1000 < opts.seconds)) {
	const batch = files.length > 0 ? files.splice(0, opts.batch) : [];
	nfromfiles += batch.length;
	const n = batch.length > 0 ? 0 : Math.min(opts.batch, opts.count - nstr);
	for (let i = 0; i < n; i++)
		batch.push(genString());
	const { out, errors } = core(batch);
	driverErrors.push(...errors.slice(0, 20));
	for (let i = 0; i < batch.length; i++) {
		const s = batch[i];
		const len = Buffer.byteLength(s, 'utf8');
		nbytes += len;
		if (len > 256)
			nlong++;
		for (let e = 0; e < ENCS.length; e++) {
			const theirs = refIds(e, s);
			ntok[e] += theirs.length;
			if (!same(out[i][e].ids, theirs))
				mismatches.push({ e, s });
		}
	}
	nstr += batch.length;
}
const secs = (Date.now() - t0) / 1000;

const lines = [];
lines.push(`tiktoken ${tkver} (npm) vs ctxwin core: seed ${opts.seed}, ${nstr} strings, ` +
	`${nbytes} bytes (${nlong} strings over 256 bytes), ${secs.toFixed(1)} s`);
if (nfromfiles > 0)
	lines.push(`of which ${nfromfiles} from --corpus (the valid UTF-8 ones of ${nfiles} files) and --huge`);
lines.push(`tokens (tiktoken): cl100k_base ${ntok[0]}, o200k_base ${ntok[1]}`);
lines.push(`mismatches: cl100k_base ${mismatches.filter((m) => m.e === 0).length}, ` +
	`o200k_base ${mismatches.filter((m) => m.e === 1).length}; driver errors: ${driverErrors.length}`);
for (const d of driverErrors)
	lines.push('  ' + d);

// Shrink the first few mismatches; report each distinct minimal string once.
const seen = new Set();
for (const m of mismatches.slice(0, opts.minimize)) {
	const small = shrink(m.e, m.s);
	const key = m.e + ':' + small;
	if (seen.has(key))
		continue;
	seen.add(key);
	lines.push('');
	lines.push(describe(m.e, small));
	lines.push(`  (shrunk from a string of ${Array.from(m.s).length} code points: "${esc(m.s).slice(0, 300)}")`);
}
const text = lines.join('\n') + '\n';
process.stdout.write(text);
if (opts.report)
	fs.writeFileSync(opts.report, text);
fs.rmSync(tmp, { recursive: true, force: true });
for (const r of ref)
	r.free();
process.exit(mismatches.length || driverErrors.length ? 1 : 0);
