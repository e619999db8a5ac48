# What tools cost, against counts made without ctxwin: count_tool_tokens of
# every tool list of test/tool_tokens/schemas.json equals the reference
# count of test/tool_tokens/reference.json (OpenAI's published formula and
# Anthropic's published tool prompt, counted with OpenAI's tiktoken by
# test/tool_tokens/reference.mjs), for o200k_base and cl100k_base, for the
# models of both OpenAI families and for two Claude models; with the
# cookbook's own example it adds up to the prompt_tokens OpenAI's API
# reported.  And the bodies of build_context and build_request are the
# same bytes from two connections with different session settings.
# On a cluster of its own, with the ctxwin installed for this server.
use strict;
use warnings;
use Digest::MD5 qw(md5_hex);
use FindBin;
use lib "$FindBin::RealBin/lib";
use CtxwinTest;
use PostgreSQL::Test::Utils;
use Test::More;

my $root = ctxwin_root();
my $schemas = slurp_file("$root/test/tool_tokens/schemas.json");
my $reference = slurp_file("$root/test/tool_tokens/reference.json");

my $node = ctxwin_node('tool_tokens');
sql_do($node, 'postgres', 'CREATE EXTENSION ctxwin');
# qv(SQL, NAME => VALUE ...): SQL's output, with psql variables set
sub qv
{
	my ($query, %vars) = @_;
	return sql($node, 'postgres', $query, extra_params => [ map { ('-v', "$_=$vars{$_}") } sort keys %vars ]);
}

# One line per case: its name, then what ctxwin counts and what the
# reference says, for each encoding or model (a model counts by its row of
# ctxwin.models: gpt-4o o200k_base, gpt-4 cl100k_base, Claude by Anthropic's rule).
for (split /\n/, qv(<<'SQL', schemas => $schemas, ref => $reference))
SELECT c ->> 'name',
       concat_ws(' ', ctxwin.count_tool_tokens(c -> 'tools', 'o200k_base'),
                 ctxwin.count_tool_tokens(c -> 'tools', 'gpt-4o'),
                 ctxwin.count_tool_tokens(c -> 'tools', 'cl100k_base'),
                 ctxwin.count_tool_tokens(c -> 'tools', 'gpt-4'),
                 ctxwin.count_tool_tokens(c -> 'tools', 'claude-sonnet-4'),
                 ctxwin.count_tool_tokens(c -> 'tools', 'claude-3-5-haiku')),
       concat_ws(' ', r ->> 'o200k_base', r ->> 'o200k_base', r ->> 'cl100k_base', r ->> 'cl100k_base',
                 r ->> 'claude-sonnet-4', r ->> 'claude-3-5-haiku')
FROM jsonb_array_elements(:'schemas'::jsonb) WITH ORDINALITY s(c, n)
LEFT JOIN jsonb_array_elements(:'ref'::jsonb -> 'cases') r ON r ->> 'name' = c ->> 'name'
ORDER BY n;
SQL
{
	my ($name, $got, $want) = split /\|/, $_, -1;
	is($got, $want,
		"reference counts of \"$name\" (o200k_base, gpt-4o, cl100k_base, gpt-4, claude-sonnet-4, claude-3-5-haiku)");
}

# The cookbook's example, with its messages counted the cookbook's way (3
# per message, 3 for the reply), is what OpenAI's API reported.
is( qv(<<'SQL', schemas => $schemas),
SELECT string_agg(format('%s %s/%s', e.enc,
                         ctxwin.count_tool_tokens(c -> 'tools', e.enc)
                         + 3 + (SELECT sum(3 + ctxwin.count_tokens(m ->> 'role', e.enc) + ctxwin.count_tokens(m ->> 'content', e.enc))
                                FROM jsonb_array_elements(c -> 'messages') m),
                         c -> 'api_prompt_tokens' ->> e.enc), ', ' ORDER BY e.enc)
FROM jsonb_array_elements(:'schemas'::jsonb) c, (VALUES ('o200k_base'), ('cl100k_base')) e(enc)
WHERE c ? 'api_prompt_tokens';
SQL
	'cl100k_base 105/105, o200k_base 101/101',
	"the cookbook's example: tools and messages make the prompt_tokens OpenAI's API reported");

# the reference file is the one its script makes of schemas.json: every case is in both
is( qv(<<'SQL', schemas => $schemas, ref => $reference),
SELECT (SELECT string_agg(c ->> 'name', '|' ORDER BY c ->> 'name') FROM jsonb_array_elements(:'schemas'::jsonb) c)
       = (SELECT string_agg(r ->> 'name', '|' ORDER BY r ->> 'name') FROM jsonb_array_elements(:'ref'::jsonb -> 'cases') r);
SQL
	't', 'reference.json has a count for every case of schemas.json, and no other');

# ---- the same bytes from two connections -----------------------------------
sql_do($node, 'postgres', <<'SQL');
INSERT INTO ctxwin.profiles (name, model, summary_placement) VALUES ('tt_claude', 'claude-sonnet-4', 'message');
INSERT INTO ctxwin.sessions (id, system_prompt, profile) VALUES
  ('70000000-0000-4000-8000-000000000001', 'You answer questions about orders.', 'default'),
  ('70000000-0000-4000-8000-000000000002', 'You answer questions about orders.', 'tt_claude');
INSERT INTO ctxwin.messages (session_id, role, content)
SELECT s, r, format('%s message %s: the order ORD-%s ships from Zürich, 3.5 kg, €%s.', r, i, 1000 + i, i * 7)
FROM unnest(ARRAY['70000000-0000-4000-8000-000000000001', '70000000-0000-4000-8000-000000000002']::uuid[]) s,
     generate_series(1, 9) i, LATERAL (SELECT CASE WHEN i % 2 = 1 THEN 'user' ELSE 'assistant' END) x(r);
UPDATE ctxwin.sessions SET conversation_summary = 'The user asked about orders ORD-1001 to ORD-1004.', summary_through_id = 4;
INSERT INTO ctxwin.messages (session_id, role, tool_calls)
SELECT id, 'assistant', '[{"id": "call_1", "type": "function", "function": {"name": "track", "arguments": "{\"order\": \"ORD-1009\", \"detail\": 1.50}"}}]'
FROM ctxwin.sessions;
INSERT INTO ctxwin.messages (session_id, role, content, tool_call_id)
SELECT id, 'tool', '{"status": "in transit", "eta": "2025-06-02"}', 'call_1' FROM ctxwin.sessions;
SQL
my $bodies_sql = <<'SQL';
SELECT ctxwin.build_request(s, 1900, f, :'tools')::text || E'\n' || ctxwin.build_context(s, 1400, f, :'tools')::text
       || E'\n' || ctxwin.build_request(s, NULL, f, :'tools', cache => false)::text
FROM unnest(ARRAY['70000000-0000-4000-8000-000000000001', '70000000-0000-4000-8000-000000000002']::uuid[]) s,
     unnest(ARRAY['openai', 'anthropic']) f
ORDER BY s, f;
SQL
my $tools = qv(<<'SQL', schemas => $schemas);
SELECT jsonb_agg(t) FROM jsonb_array_elements(:'schemas'::jsonb) c, jsonb_array_elements(c -> 'tools') t
WHERE c ->> 'name' IN ('several tools', 'arrays');
SQL
my $one = qv($bodies_sql, tools => $tools);
my $two;
{
	local $ENV{PGOPTIONS} = '-c search_path=ctxwin,public -c extra_float_digits=3 -c DateStyle=SQL,DMY '
	  . '-c lc_numeric=C -c TimeZone=Asia/Tokyo -c bytea_output=escape';
	$two = qv($bodies_sql, tools => $tools);
}
is(scalar(grep { /^[[{]/ } split /\n/, $one), 12,
	'the bodies were made (2 sessions, 2 formats, build_request and build_context)');
like($one, qr/\Q"cache_control": {"type": "ephemeral"}\E/, '... with cache breakpoints in the anthropic ones');
like($one, qr/"detail\\": 1\.50/, "... and a tool call's arguments as stored");
is(md5_hex($two), md5_hex($one), 'the same bytes from a second connection with other settings');
my $three = qv($bodies_sql, tools => $tools);
is(md5_hex($three), md5_hex($one), '... and from a third, after the other');
is( sql($node, 'postgres', "SELECT ctxwin.count_tool_tokens('[]', 'gpt-4o') || ' ' || ctxwin.count_tool_tokens('[]', 'claude-sonnet-4')"),
	'0 0', 'no tools cost nothing (no func_end, no tool-use system prompt)');

done_testing();
