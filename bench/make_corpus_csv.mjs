/*
 * make_corpus_csv.mjs
 *		Write the corpus as CSV for psql's \copy: one row "kind,text" per
 *		record of dev.jsonl (kinds from dev.meta.jsonl), leaving out the
 *		records holding NUL, which a text value cannot hold.
 *
 * Usage: node bench/make_corpus_csv.mjs CORPUS_DIR OUT.csv
 */
import { readFileSync, writeFileSync } from 'node:fs';

const [dir, out] = process.argv.slice(2);

if (!dir || !out)
{
	console.error('usage: node make_corpus_csv.mjs CORPUS_DIR OUT.csv');
	process.exit(2);
}

function lines(path)
{
	return readFileSync(path, 'utf8').split('\n').filter((l) => l.length > 0);
}

const texts = lines(`${dir}/dev.jsonl`).map((l) => JSON.parse(l).text);
const kinds = lines(`${dir}/dev.meta.jsonl`).map((l) => JSON.parse(l).kind);
const rows = [];

if (texts.length !== kinds.length)
	throw new Error('dev.jsonl and dev.meta.jsonl differ in length');
for (let i = 0; i < texts.length; i++)
{
	if (texts[i].includes('\0'))
		continue;
	rows.push(`${i},${kinds[i]},"${texts[i].replaceAll('"', '""')}"\n`);
}
writeFileSync(out, rows.join(''));
console.log(`# ${rows.length} of ${texts.length} records written to ${out}`);
