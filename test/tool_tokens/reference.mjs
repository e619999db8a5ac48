// The reference counts of test/tool_tokens.pl: what the tools of
// schemas.json cost, by the rules README.md ("Tools in the budget") states,
// counted with OpenAI's tiktoken (the npm package bench/window pins), not
// with ctxwin.  Made by:
//
//   (cd bench/window && npm ci) && node test/tool_tokens/reference.mjs > test/tool_tokens/reference.json
//
// OpenAI's rule is the cookbook's num_tokens_for_tools ("How to count
// tokens with tiktoken"), written out again here with its constants, and
// carried to nested properties as ctxwin documents.  Anthropic's is the
// tool-use system prompt Anthropic publishes plus the JSON text of each
// tool in Anthropic's shape, as PostgreSQL's jsonb prints it.  For the
// cookbook's own example the script also checks the rule against the
// prompt_tokens OpenAI's API reported (schemas.json: api_prompt_tokens),
// counting the messages the cookbook's way (3 per message, 3 for the reply).
import { readFileSync } from 'node:fs';
import { createRequire } from 'node:module';

const here = new URL('.', import.meta.url);
const require = createRequire(new URL('../../bench/window/package.json', here));
const { get_encoding } = require('tiktoken');
const tiktokenVersion = JSON.parse(readFileSync(new URL('../../bench/window/node_modules/tiktoken/package.json', here), 'utf8')).version;

// num_tokens_for_tools' constants: gpt-4o and gpt-4o-mini; gpt-4 and gpt-3.5-turbo
const CONSTANTS = {
  o200k_base: { func_init: 7, prop_init: 3, prop_key: 3, enum_init: -3, enum_item: 3, func_end: 12 },
  cl100k_base: { func_init: 10, prop_init: 3, prop_key: 3, enum_init: -3, enum_item: 3, func_end: 12 },
};

// Anthropic's tool-use system prompt for tool_choice auto, by model
const ANTHROPIC_PROMPT = { 'claude-sonnet-4': 346, 'claude-3-5-haiku': 264 };
// the encoding ctxwin's models table counts Claude with
const CLAUDE_ENCODING = 'cl100k_base';

const isObject = (v) => v !== null && typeof v === 'object' && !Array.isArray(v);

// A value's JSON text as PostgreSQL's jsonb prints it: keys ordered by
// length then bytes, ", " and ": " between items, escape_json's escapes.
function jsonbText(v) {
  if (v === null) return 'null';
  if (typeof v === 'boolean') return String(v);
  if (typeof v === 'number') {
    if (!Number.isInteger(v)) throw new Error(`only integers print alike in JS and jsonb: ${v}`);
    return String(v);
  }
  if (typeof v === 'string') return jsonString(v);
  if (Array.isArray(v)) return '[' + v.map(jsonbText).join(', ') + ']';
  const keys = Object.keys(v).sort((a, b) => {
    const x = Buffer.from(a), y = Buffer.from(b);
    return x.length !== y.length ? x.length - y.length : Buffer.compare(x, y);
  });
  return '{' + keys.map((k) => jsonString(k) + ': ' + jsonbText(v[k])).join(', ') + '}';
}

function jsonString(s) {
  const esc = { '\b': '\\b', '\f': '\\f', '\n': '\\n', '\r': '\\r', '\t': '\\t', '"': '\\"', '\\': '\\\\' };
  let out = '"';
  for (const ch of s) {
    if (esc[ch]) out += esc[ch];
    else if (ch.codePointAt(0) < 0x20) out += '\\u' + ch.codePointAt(0).toString(16).padStart(4, '0');
    else out += ch;
  }
  return out + '"';
}

const dropPeriod = (d) => (d.endsWith('.') ? d.slice(0, -1) : d);

function openaiTools(tools, count, k) {
  if (tools.length === 0) return 0;
  let n = 0;
  for (const tool of tools) {
    const f = tool.function;
    n += k.func_init;
    n += count(f.name + ':' + dropPeriod(f.description ?? ''));
    n += openaiProperties(isObject(f.parameters) ? f.parameters : {}, count, k);
  }
  return n + k.func_end;
}

// The cookbook's loop over parameters.properties, applied again to the
// properties of nested objects and of array items.
function openaiProperties(schema, count, k) {
  const props = schema.properties;
  if (!isObject(props) || Object.keys(props).length === 0) return 0;
  let n = k.prop_init;
  for (const [key, p] of Object.entries(props)) {
    n += k.prop_key;
    let members = p;
    while (isObject(members.items)) members = members.items;
    const e = p.enum ?? (members !== p ? members.enum : null);
    if (e !== null && e !== undefined) {
      n += k.enum_init;
      for (const item of e) n += k.enum_item + count(typeof item === 'string' ? item : jsonbText(item));
    }
    const type = Array.isArray(p.type) ? p.type.join(' | ') : (p.type ?? '');
    n += count(`${key}:${type}:${dropPeriod(p.description ?? '')}`);
    n += openaiProperties(members, count, k);
  }
  return n;
}

function anthropicTool(f) {
  const t = { name: f.name };
  if (typeof f.description === 'string') t.description = f.description;
  t.input_schema = isObject(f.parameters) ? f.parameters : { type: 'object', properties: {} };
  return t;
}

function anthropicTools(tools, count, promptTokens) {
  if (tools.length === 0) return 0;
  return promptTokens + tools.reduce((n, tool) => n + count(jsonbText(anthropicTool(tool.function))), 0);
}

// num_tokens_from_messages of the cookbook for gpt-4o and gpt-4 (0613 on)
function cookbookMessages(messages, count) {
  let n = 3;
  for (const m of messages) {
    n += 3;
    for (const [key, value] of Object.entries(m)) n += count(value) + (key === 'name' ? 1 : 0);
  }
  return n;
}

const schemas = JSON.parse(readFileSync(new URL('schemas.json', here), 'utf8'));
const counters = {};
for (const name of ['o200k_base', 'cl100k_base']) {
  const enc = get_encoding(name);
  counters[name] = (s) => enc.encode_ordinary(s).length;
}

const cases = [];
for (const c of schemas) {
  const r = { name: c.name };
  for (const name of ['o200k_base', 'cl100k_base']) r[name] = openaiTools(c.tools, counters[name], CONSTANTS[name]);
  for (const [model, prompt] of Object.entries(ANTHROPIC_PROMPT))
    r[model] = anthropicTools(c.tools, counters[CLAUDE_ENCODING], prompt);
  if (c.api_prompt_tokens) {
    for (const [name, api] of Object.entries(c.api_prompt_tokens)) {
      const total = r[name] + cookbookMessages(c.messages, counters[name]);
      if (total !== api) throw new Error(`${c.name}: ${total} prompt tokens in ${name}, the API reported ${api}`);
    }
    r.api_prompt_tokens = c.api_prompt_tokens;
  }
  cases.push(r);
}

process.stdout.write(JSON.stringify({
  generated_by: 'node test/tool_tokens/reference.mjs > test/tool_tokens/reference.json',
  tiktoken: tiktokenVersion,
  cases,
}, null, 2) + '\n');
