# Property test of build_context: random sessions, random budgets, both
# formats, every output checked against the contract by an independent
# reading of the stored messages.
#
# For each case (a session, a budget from the smallest one build_context
# accepts up to the context window, and a format):
#   1. tokens <= budget, recounted from the output with count_message_tokens
#      (+ 3 for the list); the Anthropic body is first converted back to
#      OpenAI messages (its "system" as one system message);
#   2. the conversation part is a contiguous run of the newest stored
#      messages, in order, each equal to its row except cut contents;
#   3. no tool result without its call, no call without its results;
#   4. the newest message is always there, last, in both formats;
#   5. only the newest unit is cut, and every cut content is its own
#      beginning and end around "[... N tokens omitted ...]";
#   6. a budget below the smallest accepted one fails with the
#      budget-too-small error (22023), never with another one;
#   7. the Anthropic body's prompt-cache breakpoints end the system prompt
#      and the summary and the last block of the last turn, and no other
#      block: never more than 4;
#   8. where the profile clears or cuts tool results (half the sessions,
#      their settings drawn apart from the rest, so a seed names the same
#      sessions as before): a result differs from its row only as its
#      exact placeholder (never one of the newest keep_tool_results, nor of
#      an excluded tool) or cut with the marker (with tool_result_max_tokens,
#      or in the newest unit); a call's arguments only as "{}", with
#      clear_tool_inputs and its result cleared (its Anthropic input {});
#      and another connection builds the same bytes.  Checks 1 to 7 hold
#      there too.
# A third of the sessions have messages retracted (ctxwin.retract), some
# after their summary: the checks read the messages not retracted, so the
# window must hold none of the retracted ones and behave as if they had
# never been.
#
# CTXWIN_PROP_SEED (default 9) and CTXWIN_PROP_CASES (default 2400) choose
# the run; the seed is printed first, and each failure names its seed and
# session so it can be replayed (CTXWIN_PROP_DEBUG=1 shows the outputs of
# the failing cases).  The draws are those of Python's random.Random
# (MT19937, seeded as CPython seeds it; package PyRandom below), so a seed
# names the same sessions, budgets and cases it always has.
# A cluster of its own; everything goes through one database there.
use strict;
use warnings;
use utf8;
use FindBin;
use lib "$FindBin::RealBin/lib";
use CtxwinTest;
use Encode qw(encode_utf8);
use JSON::PP;
use Math::BigInt;
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use Time::HiRes;

my $SEED = $ENV{CTXWIN_PROP_SEED} // 9;
my $CASES = $ENV{CTXWIN_PROP_CASES} // 2400;
$SEED =~ /\A\s*[0-9]+\s*\z/ or die "CTXWIN_PROP_SEED is not a whole number: $SEED\n";
$CASES =~ /\A\s*[0-9]+\s*\z/ or die "CTXWIN_PROP_CASES is not a whole number: $CASES\n";
$SEED = Math::BigInt->new($SEED =~ s/\s//gr)->bstr;
$CASES += 0;
my $DB = 'props';
my $MARKER = qr/\n\[\.\.\. ([0-9]+) tokens omitted \.\.\.\]\n/;
my $JSON = JSON::PP->new->utf8->allow_nonref;
my $CANON = JSON::PP->new->utf8->canonical->allow_nonref;
my $TEXT = JSON::PP->new->allow_nonref;    # JSON as characters

# ---- Python's random.Random -------------------------------------------------
# MT19937 and the draws the generator uses, as CPython 3 makes them: a seed
# that is a string is its UTF-8 bytes followed by their SHA-512 digest, read
# as one big-endian integer (random.seed, version 2); an integer is cut into
# 32-bit words, least significant first (init_by_array).
package PyRandom;

use Digest::SHA qw(sha512);
use Encode qw(encode_utf8);
use Math::BigInt;

sub new
{
	my ($class, $seed) = @_;
	my @key;
	if ($seed =~ /\A[0-9]+\z/)
	{
		my $n = Math::BigInt->new($seed);
		do { push @key, ($n->copy->bmod(2**32))->numify; $n->bdiv(2**32) } while !$n->is_zero;
	}
	else
	{
		my $bytes = encode_utf8($seed);
		$bytes .= sha512($bytes);
		$bytes = ("\0" x ((4 - length($bytes) % 4) % 4)) . $bytes;
		@key = reverse unpack('N*', $bytes);
		pop @key while @key > 1 && $key[-1] == 0;
	}
	my $self = bless { mt => [], i => 624 }, $class;
	my $mt = $self->{mt};
	$mt->[0] = 19650218;
	for my $i (1 .. 623)
	{
		my $p = $mt->[ $i - 1 ];
		$mt->[$i] = (1812433253 * ($p ^ ($p >> 30)) + $i) & 0xffffffff;
	}
	my ($i, $j) = (1, 0);
	for (my $k = @key > 624 ? @key : 624; $k; $k--)
	{
		my $p = $mt->[ $i - 1 ];
		$mt->[$i] = (($mt->[$i] ^ (($p ^ ($p >> 30)) * 1664525)) + $key[$j] + $j) & 0xffffffff;
		$i++;
		$j++;
		if ($i >= 624) { $mt->[0] = $mt->[623]; $i = 1; }
		$j = 0 if $j >= @key;
	}
	for (my $k = 623; $k; $k--)
	{
		my $p = $mt->[ $i - 1 ];
		$mt->[$i] = (($mt->[$i] ^ (($p ^ ($p >> 30)) * 1566083941)) - $i) & 0xffffffff;
		$i++;
		if ($i >= 624) { $mt->[0] = $mt->[623]; $i = 1; }
	}
	$mt->[0] = 0x80000000;
	return $self;
}

# genrand_uint32
sub u32
{
	my ($self) = @_;
	my $mt = $self->{mt};
	if ($self->{i} >= 624)
	{
		for my $k (0 .. 623)
		{
			my $y = ($mt->[$k] & 0x80000000) | ($mt->[ ($k + 1) % 624 ] & 0x7fffffff);
			$mt->[$k] = $mt->[ ($k + 397) % 624 ] ^ ($y >> 1) ^ ($y & 1 ? 0x9908b0df : 0);
		}
		$self->{i} = 0;
	}
	my $y = $mt->[ $self->{i}++ ];
	$y ^= $y >> 11;
	$y ^= ($y << 7) & 0x9d2c5680;
	$y ^= ($y << 15) & 0xefc60000;
	$y ^= $y >> 18;
	return $y;
}

# random(): 53 random bits in [0, 1)
sub random
{
	my ($self) = @_;
	my $hi = $self->u32 >> 5;
	my $lo = $self->u32 >> 6;
	return ($hi * 67108864.0 + $lo) * (1.0 / 9007199254740992.0);
}

# _randbelow(N), N < 2**32: getrandbits(N.bit_length()) until below N
sub below
{
	my ($self, $n) = @_;
	my $k = length(sprintf('%b', $n));
	while (1)
	{
		my $r = $self->u32 >> (32 - $k);
		return $r if $r < $n;
	}
}

sub randint { my ($self, $lo, $hi) = @_; return $lo + $self->below($hi - $lo + 1); }
sub choice  { my ($self, $list) = @_; return $list->[ $self->below(scalar @$list) ]; }

sub shuffle
{
	my ($self, $list) = @_;
	for (my $i = $#$list; $i >= 1; $i--)
	{
		my $j = $self->below($i + 1);
		@$list[ $i, $j ] = @$list[ $j, $i ];
	}
	return;
}

package main;

# ---- SQL literals -----------------------------------------------------------

sub lit
{
	my ($s) = @_;
	return 'NULL' unless defined $s;
	$s =~ s/'/''/g;
	return "'$s'";
}

# a JSON string as Python's json.dumps(ensure_ascii=False) writes it
sub pystr
{
	my ($s) = @_;
	$s =~ s/([\\"])/\\$1/g;
	$s =~ s/\n/\\n/g;
	$s =~ s/\r/\\r/g;
	$s =~ s/\t/\\t/g;
	$s =~ s/\x08/\\b/g;
	$s =~ s/\f/\\f/g;
	$s =~ s/([\x00-\x1f])/sprintf('\\u%04x', ord $1)/ge;
	return "\"$s\"";
}

# ---- the generator ----------------------------------------------------------

my @LANGS = qw(en de ru zh ja ar emoji code);
my %WORDS = (
	en => [ split ' ', 'the report shows quarterly revenue growth across all regions and the board will review it tomorrow' ],
	de => [ split ' ', 'Die Straße über dem Fluss wurde größer und schöner als erwartet weil die Bürger mitgeholfen haben' ],
	ru => [ split ' ', 'Привет мир это тестовое сообщение для проверки окна контекста и подсчёта токенов' ],
	zh => [ split //, '我们今天讨论季度报告的结果并决定下一步的计划以及预算' ],
	ja => [ split //, '今日はとても良い天気ですねカタカナとひらがなを混ぜて書きます' ],
	ar => [ split ' ', 'مرحبا بالعالم هذا نص تجريبي لاختبار نافذة السياق وعدد الرموز' ],
	emoji => [
		"\x{1F600}", "\x{1F44D}\x{1F3FD}", "\x{1F1EB}\x{1F1F7}", "\x{1F469}\x{200D}\x{1F4BB}",
		"\x{1F389}", "\x{2728}", "\x{2764}\x{FE0F}"
	],
	code => [ 'def', 'f(x):', 'return', 'x', '+', '1', '{', '}', '==', '->', '/*', '*/', "\n", '    ' ],
);

sub words
{
	my ($rng, $n) = @_;
	my $lang = $rng->choice(\@LANGS);
	my $sep = $lang =~ /\A(?:zh|ja|emoji)\z/ ? '' : ' ';
	return join($sep, map { $rng->choice($WORDS{$lang}) } 1 .. $n);
}

sub content
{
	my ($rng, $allow_empty) = @_;
	$allow_empty //= 1;
	my $r = $rng->random;
	return '' if $allow_empty && $r < 0.07;
	return words($rng, $rng->randint(1, 30)) if $r < 0.55;
	if ($r < 0.75)
	{
		my $lines = $rng->randint(2, 8);
		return join("\n", map { words($rng, $rng->randint(3, 20)) } 1 .. $lines);
	}
	if ($r < 0.83)
	{
		# one long piece: a run of letters or one repeated character
		if ($rng->random < 0.5)
		{
			my $c = $rng->choice([ split //, 'ax-=# ' ]);
			return $c x $rng->randint(100, 4000);
		}
		my @letters = ('a' .. 'z');
		return join('', map { $rng->choice(\@letters) } 1 .. $rng->randint(100, 4000));
	}
	return join(' ', map { words($rng, 40) } 1 .. $rng->randint(10, 60)) if $r < 0.92;
	return 'Please summarize the attached quarterly report for the board meeting tomorrow morning.';
}

# K tool calls: [ID, NAME, ARGUMENTS] each
sub tool_calls
{
	my ($rng, $k, $serial) = @_;
	my @calls;
	for my $j (0 .. $k - 1)
	{
		my $args;
		if ($rng->random < 0.2)
		{
			$args = '{"text": ' . pystr(words($rng, $rng->randint(50, 400))) . '}';
		}
		elsif ($rng->random < 0.1)
		{
			$args = 'not json ' . words($rng, 3);
		}
		else
		{
			my $q = words($rng, $rng->randint(1, 6));
			$args = '{"q": ' . pystr($q) . ', "n": ' . $rng->randint(1, 99) . '}';
		}
		my $name = $rng->choice([qw(search read_file run lookup)]);
		push @calls, [ "call_${serial}_$j", $name, $args ];
	}
	return \@calls;
}

# the calls as the JSON of a tool_calls column
sub calls_json
{
	my ($calls) = @_;
	return '[' . join(', ', map {
		sprintf('{"id": %s, "type": "function", "function": {"name": %s, "arguments": %s}}',
			pystr($_->[0]), pystr($_->[1]), pystr($_->[2]))
	} @$calls) . ']';
}

# a list of [KIND, ROW] steps; KIND is 'msg' or 'model' (a model change)
sub gen_messages
{
	my ($rng, $serial) = @_;
	my @steps;
	my $n = $rng->randint(1, 14);
	for my $i (0 .. $n - 1)
	{
		my $r = $rng->random;
		push @steps, [ 'model', undef ] if $r < 0.06 && $i > 0;
		if ($r < 0.38)
		{
			my $row = { role => 'user', content => content($rng) };
			$row->{name} = $rng->choice([ 'alice', 'bob_2', 'Zoë' ]) if $rng->random < 0.1;
			push @steps, [ 'msg', $row ];
		}
		elsif ($r < 0.66)
		{
			push @steps, [ 'msg', { role => 'assistant', content => content($rng) } ];
		}
		elsif ($r < 0.71)
		{
			push @steps, [ 'msg', { role => 'system', content => content($rng, 0) } ];
		}
		else
		{
			my $k = $rng->randint(1, 4);
			my $calls = tool_calls($rng, $k, $serial * 100 + $i);
			my $c = content($rng, 0);
			$c = $rng->choice([ undef, undef, '', $c ]);
			push @steps, [ 'msg', { role => 'assistant', content => $c, tool_calls => calls_json($calls) } ];
			my @order = (0 .. $k - 1);
			$rng->shuffle(\@order);
			push @steps, [ 'msg', { role => 'tool', tool_call_id => $calls->[$_][0], content => content($rng) } ]
			  for @order;
		}
	}
	return \@steps;
}

my @MODELS = qw(gpt-4o gpt-4 claude-sonnet-4 pt-chars4 pt-chars35);

# the SQL that makes session SERIAL: a profile, the session, its messages
sub session_sql
{
	my ($rng, $serial) = @_;
	my $sid = sprintf('00000000-0000-0000-0000-%012d', $serial);
	my $prof = "pt_$serial";
	my @windows = ($rng->randint(60, 600), $rng->randint(600, 4000), $rng->randint(4000, 40000));
	my $window = $rng->choice(\@windows);
	my $model = $rng->choice(\@MODELS);
	my $reserve = $rng->randint(0, int($window / 4));
	my $placement = $rng->choice([qw(system message)]);
	my @sql = ('BEGIN;');
	push @sql, 'INSERT INTO ctxwin.profiles (name, model, context_window, response_reserve, '
	  . 'summary_placement, max_messages_before_summary, max_tokens_before_summary, trigger_ratio) '
	  . sprintf('VALUES (%s, %s, %d, %d, %s, NULL, NULL, NULL);',
		lit($prof), lit($model), $window, $reserve, lit($placement));
	my $sp = content($rng, 0);
	$sp = $rng->choice([ undef, '', 'You are a helpful assistant.', $sp ]);
	push @sql, sprintf('INSERT INTO ctxwin.sessions (id, profile, system_prompt) VALUES (%s, %s, %s);',
		lit($sid), lit($prof), lit($sp));
	# tool results cleared or cut, for half the sessions: drawn from a
	# generator of their own, so the other draws are those of before
	my $crng = PyRandom->new("$SEED/$serial/clearing");
	if ($crng->random < 0.5)
	{
		my $int = sub { my $v = $crng->choice($_[0]); defined $v ? $v : 'NULL' };
		push @sql, sprintf('UPDATE ctxwin.profiles SET keep_tool_results = %s, tool_result_max_tokens = %s, '
			  . 'clear_tool_inputs = %s, exclude_tools = %s, clear_at_least = %s, window_policy = %s WHERE name = %s;',
			$int->([ undef, 0, 0, 1, 1, 2, 5 ]), $int->([ undef, undef, 20, 150 ]),
			$int->([ 'NULL', 'true', 'false' ]), $int->([ 'NULL', q{'{search}'}, q{'{read_file,run}'} ]),
			$int->([ undef, 0, 60, 800 ]), lit($crng->choice([qw(stable sliding sliding)])), lit($prof));
	}
	for my $step (@{ gen_messages($rng, $serial) })
	{
		my ($kind, $row) = @$step;
		if ($kind eq 'model')
		{
			push @sql, sprintf('UPDATE ctxwin.profiles SET model = %s WHERE name = %s;',
				lit($rng->choice(\@MODELS)), lit($prof));
			next;
		}
		push @sql, 'INSERT INTO ctxwin.messages (session_id, role, content, name, tool_call_id, tool_calls) '
		  . sprintf('VALUES (%s, %s, %s, %s, %s, %s);',
			lit($sid), lit($row->{role}), lit($row->{content}), lit($row->{name}),
			lit($row->{tool_call_id}), defined $row->{tool_calls} ? lit($row->{tool_calls}) . '::jsonb' : 'NULL');
	}
	# retracts, for a third of the sessions: from a random message (or past
	# the newest), then a message or two more (the newest message is never
	# retracted: the checks expect one to send); drawn from a generator of
	# their own, so the other draws are those of before
	my $rrng = PyRandom->new("$SEED/$serial/retract");
	my $retract_after = $rrng->random < 0.3;
	if ($rrng->random < 0.33)
	{
		push @sql, sprintf('SELECT ctxwin.retract(%s, %d);', lit($sid), $rrng->randint(1, 16));
		for (1 .. $rrng->randint(1, 2))
		{
			push @sql, sprintf(q{INSERT INTO ctxwin.messages (session_id, role, content) VALUES (%s, %s, %s);},
				lit($sid), lit($rrng->choice([qw(user assistant)])), lit(content($rrng)));
		}
	}
	if ($rng->random < 0.3)
	{
		# a summary through a random unit boundary (never inside a tool group)
		my $summary = content($rng, 0);
		push @sql, sprintf(q{
            UPDATE ctxwin.sessions s SET conversation_summary = %s, summary_through_id = b.id
            FROM (SELECT m.id FROM ctxwin.messages m
                  WHERE m.session_id = %s AND m.tool_calls IS NULL AND m.role <> 'tool'
                    AND m.retracted_at IS NULL
                    AND NOT EXISTS (SELECT 1 FROM ctxwin.messages n
                                    WHERE n.session_id = m.session_id AND n.id = m.id + 1 AND n.role = 'tool')
                    AND m.id < (SELECT message_count FROM ctxwin.sessions WHERE id = %s)
                  ORDER BY m.id LIMIT 1 OFFSET %d) b
            WHERE s.id = %s;}, lit($summary), lit($sid), lit($sid), $rng->randint(0, 6), lit($sid));
	}
	# and a retract that may reach into the summary: it then falls back to none
	# (then a message: the newest is never retracted, as the checks expect)
	push @sql, sprintf('SELECT ctxwin.retract(%s, %d);', lit($sid), $rrng->randint(1, 16)),
	  sprintf(q{INSERT INTO ctxwin.messages (session_id, role, content) VALUES (%s, 'user', %s);},
		lit($sid), lit(content($rrng, 0)))
	  if $retract_after;
	if ($rng->random < 0.15)
	{
		push @sql, sprintf('UPDATE ctxwin.profiles SET model = %s WHERE name = %s;',
			lit($rng->choice(\@MODELS)), lit($prof));
	}
	push @sql, 'COMMIT;';
	return ($sid, join("\n", @sql));
}

my $SETUP = q{
INSERT INTO ctxwin.models (name, encoding, context_window) VALUES
    ('pt-chars4', 'chars4', 100000), ('pt-chars35', 'chars3.5', 100000);

-- build_context, or its error as {"err": sqlstate, "msg": message}
CREATE FUNCTION pt_try(s uuid, b int, f text) RETURNS jsonb LANGUAGE plpgsql AS $$
BEGIN
    RETURN jsonb_build_object('ok', ctxwin.build_context(s, b, f));
EXCEPTION WHEN others THEN
    RETURN jsonb_build_object('err', SQLSTATE, 'msg', SQLERRM);
END $$;

-- the smallest budget build_context accepts, by bisection, or NULL if none up to hi
CREATE FUNCTION pt_min_budget(s uuid, hi int) RETURNS int LANGUAGE plpgsql AS $$
DECLARE
    lo int := 0;
    mid int;
    r jsonb;
BEGIN
    r := pt_try(s, hi, 'openai');
    IF r ? 'err' THEN
        RETURN NULL;
    END IF;
    WHILE hi - lo > 1 LOOP
        mid := (lo + hi) / 2;
        IF pt_try(s, mid, 'openai') ? 'err' THEN lo := mid; ELSE hi := mid; END IF;
    END LOOP;
    RETURN hi;
END $$;
};

# ---- the checks -------------------------------------------------------------

my %stats;    # what the run saw (the checks count some of it)

# Python's truth of a JSON value: null, "", [] and {} are false (the values
# tested here are strings, lists and objects)
sub truthy
{
	my ($v) = @_;
	return 0 unless defined $v;
	return scalar(@$v) > 0 if ref $v eq 'ARRAY';
	return scalar(%$v) > 0 if ref $v eq 'HASH';
	return $v ne '';
}

# equality of two JSON values, null included
sub same
{
	my ($x, $y) = @_;
	return $CANON->encode($x) eq $CANON->encode($y);
}

sub starts_with { my ($s, $p) = @_; return substr($s, 0, length $p) eq $p; }
sub ends_with   { my ($s, $p) = @_; return length($p) <= length($s) && substr($s, length($s) - length($p)) eq $p; }

# the system messages the contract puts first (DESIGN: summary_placement)
sub system_messages
{
	my ($system_prompt, $summary, $placement) = @_;
	my $sp = $system_prompt // '';
	unless (truthy($summary))
	{
		return $sp ne '' ? ({ role => 'system', content => $sp }) : ();
	}
	my $s = "Summary of earlier conversation:\n" . $summary;
	if ($placement eq 'message')
	{
		return (($sp ne '' ? ({ role => 'system', content => $sp }) : ()), { role => 'system', content => $s });
	}
	return ({ role => 'system', content => $sp ne '' ? "$sp\n\n$s" : $s });
}

sub row_json
{
	my ($m) = @_;
	my %out = (role => $m->{role});
	for my $k (qw(content name tool_calls tool_call_id))
	{
		$out{$k} = $m->{$k} if defined $m->{$k};
	}
	return \%out;
}

# whether CUT is ORIG's beginning and end around the omission marker
sub is_cut_of
{
	my ($cut, $orig) = @_;
	return 0 unless defined $cut && defined $orig && !ref $cut && !ref $orig;
	while ($cut =~ /$MARKER/g)
	{
		my ($head, $tail) = (substr($cut, 0, $-[0]), substr($cut, $+[0]));
		return 1
		  if $1 > 0
		  && starts_with($orig, $head)
		  && ends_with($orig, $tail)
		  && length($head) + length($tail) < length($orig);
	}
	return 0;
}

# what a window sends for a cleared tool result (CtxwinClearedText, clear.c)
sub placeholder
{
	my ($tool, $call_id, $id) = @_;
	return '[tool result cleared: ' . (defined $tool ? "$tool, " : '')
	  . (defined $call_id ? "call $call_id, " : '') . "message $id; ctxwin.message(session, $id) returns it]";
}

# the tool of the result ROWS->[I]: the function its call names in the
# message that heads its unit (the nearest older one that is no result)
sub tool_of
{
	my ($rows, $i) = @_;
	my $h = $i;
	$h-- while $h > 0 && $rows->[$h]{role} eq 'tool';
	return undef if $rows->[$h]{role} eq 'tool';
	for my $c (@{ $rows->[$h]{tool_calls} // [] })
	{
		next unless ref $c eq 'HASH' && defined $c->{id} && defined $rows->[$i]{tool_call_id};
		return ref $c->{function} eq 'HASH' && !ref $c->{function}{name} ? $c->{function}{name} : undef
		  if $c->{id} eq $rows->[$i]{tool_call_id};
	}
	return undef;
}

# index in ROWS of the first message of the newest unit
sub unit_start
{
	my ($rows) = @_;
	my $i = $#$rows;
	$i-- while $i > 0 && $rows->[$i]{role} eq 'tool';
	return $i;
}

# checks 2-5 on an OpenAI array; returns its conversation part
sub check_openai
{
	my ($msgs, $meta, $rows, $problems) = @_;
	my @sysm = system_messages($meta->{system_prompt}, $meta->{summary}, $meta->{placement});
	my @conv = @$msgs;
	my @head = splice(@conv, 0, scalar @sysm);
	push @$problems, 'system messages differ from the prompt and summary' unless same(\@head, \@sysm);
	my $through = $meta->{through} // 0;
	my @unsum = grep { $_->{id} > $through } @$rows;
	if (!@conv)
	{
		push @$problems, 'no conversation message: the newest message is missing';
		return \@conv;
	}
	if (@conv > @unsum)
	{
		push @$problems, 'more messages than the unsummarized ones';
		return \@conv;
	}
	my $first = @unsum - @conv;
	my $ustart = unit_start(\@unsum);
	# tool results cleared or cut (check 8): the placeholder each would
	# have, the newest keep_tool_results of the tools not excluded, and the
	# calls whose results this window sends cleared
	my (%holder, %excluded, %kept, %cleared_call, %maybe_call);
	if ($meta->{clearing})
	{
		my %ex = map { $_ => 1 } @{ $meta->{exclude} // [] };
		my $keep = $meta->{keep} // 0;
		for my $j (reverse 0 .. $#unsum)
		{
			next unless $unsum[$j]{role} eq 'tool';
			my $tool = tool_of(\@unsum, $j);
			$holder{$j} = placeholder($tool, $unsum[$j]{tool_call_id}, $unsum[$j]{id});
			$excluded{$j} = defined $tool && $ex{$tool};
			$kept{$j} = 1 if !$excluded{$j} && $keep-- > 0;
		}
		for my $i (0 .. $#conv)
		{
			my $j = $first + $i;
			next unless exists $holder{$j} && defined $unsum[$j]{tool_call_id};
			my $c = $conv[$i]{content};
			if (same($c, $holder{$j}) || ($j >= $ustart && is_cut_of($c, $holder{$j}) && !is_cut_of($c, $unsum[$j]{content})))
			{
				$cleared_call{ $unsum[$j]{tool_call_id} } = 1;
			}
			elsif ($j >= $ustart && is_cut_of($c, $holder{$j}))
			{
				# cut to the marker alone in the newest unit: cleared or not, no telling
				$maybe_call{ $unsum[$j]{tool_call_id} } = 1;
			}
		}
		$stats{cleared}++ if %cleared_call;
	}
	for my $i (0 .. $#conv)
	{
		my $row = $unsum[ $first + $i ];
		my $j = $first + $i;
		my $want = row_json($row);
		my %g = %{ $conv[$i] };
		my ($gc, $wc) = (delete $g{content}, delete $want->{content});
		if ($meta->{inputs} && ref $want->{tool_calls} eq 'ARRAY')
		{
			# clear_tool_inputs: the arguments of the calls cleared here are "{}"
			my $clear = sub {
				my ($calls, $ids) = @_;
				return [
					map {
						ref $_ eq 'HASH' && defined $_->{id} && $ids->{ $_->{id} } && ref $_->{function} eq 'HASH'
						  ? { %$_, function => { %{ $_->{function} }, arguments => '{}' } }
						  : $_
					} @$calls
				];
			};
			$want->{tool_calls} = $clear->($clear->($want->{tool_calls}, \%cleared_call), \%maybe_call);
			$g{tool_calls} = $clear->($g{tool_calls}, \%maybe_call) if ref $g{tool_calls} eq 'ARRAY';
		}
		if (!same(\%g, $want))
		{
			push @$problems, sprintf('message %d is not the stored row %d (or order changed)', $i, $row->{id});
			return \@conv;
		}
		next if same($gc, $wc);
		if (exists $holder{$j} && same($gc, $holder{$j}))
		{
			if (!defined $meta->{keep} || $kept{$j} || $excluded{$j})
			{
				push @$problems, sprintf('message %d was cleared but is %s', $row->{id},
					!defined $meta->{keep} ? 'under no keep_tool_results'
					: $excluded{$j} ? 'of an excluded tool' : 'one of the newest keep_tool_results');
			}
		}
		elsif ($j < $ustart)
		{
			if (!(exists $holder{$j} && defined $meta->{max_tokens} && !$excluded{$j} && is_cut_of($gc, $wc)))
			{
				push @$problems, sprintf('message %d was cut but is older than the newest unit', $row->{id});
			}
		}
		elsif (!is_cut_of($gc, $wc) && !(exists $holder{$j} && is_cut_of($gc, $holder{$j})))
		{
			push @$problems, sprintf('message %d has cut content without the marker: %s',
				$row->{id}, $TEXT->encode(substr($gc // '', 0, 80)));
		}
	}
	push @$problems, 'the window starts with a tool result' if $conv[0]{role} eq 'tool';
	my (%called, @called);
	for my $m (@conv)
	{
		for my $c (@{ $m->{tool_calls} // [] })
		{
			push @called, $c->{id} unless $called{ $c->{id} }++;
		}
		if ($m->{role} eq 'tool' && !$called{ $m->{tool_call_id} // '' })
		{
			push @$problems, sprintf('tool result %s without its call', $m->{tool_call_id} // 'null');
		}
	}
	my %answered = map { $_->{tool_call_id} // '' => 1 } grep { $_->{role} eq 'tool' } @conv;
	my %stored_answers = map { $_->{tool_call_id} => 1 } grep { $_->{role} eq 'tool' } @unsum;
	for my $cid (@called)
	{
		push @$problems, "call $cid without its result" if $stored_answers{$cid} && !$answered{$cid};
	}
	return \@conv;
}

# an Anthropic body's system: its text, or its text blocks' joined by a blank line
sub system_text
{
	my ($body) = @_;
	my $sysv = $body->{system};
	return join("\n\n", map { $_->{text} } @$sysv) if ref $sysv eq 'ARRAY';
	return $sysv;
}

# an Anthropic body back to OpenAI messages; tool calls come back as the
# OpenAI messages CONV of the same window have them (their arguments
# cleared or not), else as stored
sub from_anthropic
{
	my ($body, $rows, $conv) = @_;
	my %by_call;
	for my $m (@$rows, @$conv)
	{
		$by_call{ $_->{id} } = $m for @{ $m->{tool_calls} // [] };
	}
	my @out;
	push @out, { role => 'system', content => system_text($body) } if exists $body->{system};
	for my $turn (@{ $body->{messages} })
	{
		my $cur;    # the assistant message being rebuilt in this turn
		for my $blk (@{ $turn->{content} })
		{
			if ($blk->{type} eq 'text')
			{
				$cur = { role => $turn->{role}, content => $blk->{text} };
				push @out, $cur;
			}
			elsif ($blk->{type} eq 'tool_result')
			{
				$cur = undef;
				push @out, { role => 'tool', content => $blk->{content}, tool_call_id => $blk->{tool_use_id} };
			}
			elsif ($blk->{type} eq 'tool_use')
			{
				my $src = $by_call{ $blk->{id} } // die "a tool_use block names no stored call: $blk->{id}\n";
				next if defined $cur && exists $cur->{tool_calls} && $cur->{_src} == $src;
				if (   defined $cur
					&& !exists $cur->{tool_calls}
					&& $turn->{role} eq 'assistant'
					&& defined $src->{content}
					&& (same($cur->{content}, $src->{content}) || is_cut_of($cur->{content}, $src->{content})))
				{
					$cur->{tool_calls} = $src->{tool_calls};
				}
				else
				{
					$cur = { role => 'assistant', tool_calls => $src->{tool_calls} };
					$cur->{content} = '' if defined $src->{content};    # "", or text cut to nothing: no block
					push @out, $cur;
				}
				$cur->{_src} = $src;
			}
		}
	}
	delete $_->{_src} for @out;
	return \@out;
}

sub sendable
{
	my ($m) = @_;
	return truthy($m->{content}) || truthy($m->{tool_calls}) || $m->{role} eq 'tool';
}

sub check_anthropic
{
	my ($body, $openai_sys, $openai_conv, $rows, $problems) = @_;
	unless (ref $body eq 'HASH' && ref $body->{messages} eq 'ARRAY')
	{
		push @$problems, 'not an Anthropic body';
		return undef;
	}
	my $turns = $body->{messages};
	for my $i (0 .. $#$turns - 1)
	{
		push @$problems, 'two consecutive turns of one role' if $turns->[$i]{role} eq $turns->[ $i + 1 ]{role};
	}
	my $back = from_anthropic($body, $rows, $openai_conv);
	# a call's arguments "{}" (cleared) are the tool_use input {}
	my %args = map { ref $_ eq 'HASH' && ref $_->{function} eq 'HASH' ? ($_->{id} => $_->{function}{arguments}) : () }
	  map { @{ $_->{tool_calls} // [] } } @$openai_conv;
	for my $blk (map { @{ $_->{content} // [] } } @$turns)
	{
		push @$problems, "anthropic tool_use $blk->{id}: arguments \"{}\" but input is not {}"
		  if $blk->{type} eq 'tool_use' && same($args{ $blk->{id} }, '{}') && !same($blk->{input}, {});
	}
	my @got = @$back;
	shift @got if exists $body->{system};
	# the same messages as the OpenAI form, system ones joined in "system",
	# less those with nothing to send
	# (a text block each, but for empty ones; prompt-cache breakpoints end
	# the session's own: prompt and summary, and the last block of the last turn)
	my @sys_texts = map { $_->{content} }
	  grep { $_->{role} eq 'system' && truthy($_->{content}) } @$openai_sys, @$openai_conv;
	my $own = grep { truthy($_->{content}) } @$openai_sys;
	my $sysv = $body->{system};
	if (@sys_texts && ref $sysv ne 'ARRAY' || !@sys_texts && defined $sysv)
	{
		push @$problems, 'anthropic body system is not the system messages as text blocks';
	}
	elsif (@sys_texts)
	{
		if (!same([ map { $_->{text} } @$sysv ], \@sys_texts) || grep { !same($_->{type}, 'text') } @$sysv)
		{
			push @$problems, 'anthropic body system is not the system messages as text blocks';
		}
		if (join(',', map { exists $sysv->[$_]{cache_control} ? 1 : 0 } 0 .. $#$sysv) ne
			join(',', map { $_ < $own ? 1 : 0 } 0 .. $#$sysv))
		{
			push @$problems, 'anthropic body system: the breakpoints do not end the prompt and the summary';
		}
	}
	my @marks;
	for my $i (0 .. $#$turns)
	{
		my $blocks = $turns->[$i]{content};
		push @marks, map { "$i/$_" } grep { exists $blocks->[$_]{cache_control} } 0 .. $#$blocks;
	}
	if (@$turns && join(' ', @marks) ne $#$turns . '/' . $#{ $turns->[-1]{content} })
	{
		push @$problems, 'anthropic body: the only breakpoint of the messages is not their last block';
	}
	my $nmarks = () = $JSON->encode($body) =~ /"cache_control"/g;
	push @$problems, 'anthropic body: more than 4 breakpoints' if $nmarks > 4;
	my @want = grep { sendable($_) && $_->{role} ne 'system' } @$openai_conv;
	# Anthropic has no per-message name
	my $norm = sub {
		return [
			map {
				my $m = $_;
				+{
					map { ($_ => $m->{$_}) }
					  grep { !($_ eq 'content' && same($m->{content}, '')) && $_ ne 'name' } keys %$m
				}
			} @_
		];
	};
	push @$problems, 'the Anthropic body is not the OpenAI messages converted'
	  unless same($norm->(@got), $norm->(@want));
	my $newest = $rows->[-1];
	if ($newest->{role} eq 'system')
	{
		my $text = system_text($body);
		my $last = @$openai_conv ? $openai_conv->[-1]{content} : undef;
		if (!@$openai_conv || !ends_with(truthy($text) ? $text : '', truthy($last) ? $last : ''))
		{
			push @$problems,
			  'anthropic body system text: the newest (system) message does not end the system text';
		}
	}
	elsif (sendable($newest))
	{
		if (!@$turns)
		{
			push @$problems, 'anthropic body has no message at all, the newest message is missing';
		}
		else
		{
			my $last = $turns->[-1];
			my $blk = truthy($last->{content}) ? $last->{content}[-1] : undef;
			my $good = truthy($blk);
			if ($newest->{role} eq 'tool')
			{
				$good &&= $last->{role} eq 'user'
				  && same($blk->{type}, 'tool_result')
				  && same($blk->{tool_use_id}, $newest->{tool_call_id});
			}
			elsif (truthy($newest->{tool_calls}))
			{
				$good &&= $last->{role} eq 'assistant'
				  && same($blk->{type}, 'tool_use')
				  && same($blk->{id}, $newest->{tool_calls}[-1]{id});
			}
			else
			{
				$good &&= $last->{role} eq ($newest->{role} eq 'assistant' ? 'assistant' : 'user')
				  && same($blk->{type}, 'text');
			}
			push @$problems, 'anthropic body does not end with the newest message' unless $good;
		}
	}
	return $back;
}

# ---- the run ----------------------------------------------------------------

my $node = ctxwin_node('props');
sql_do($node, 'postgres', "CREATE DATABASE $DB");
sql_do($node, $DB, encode_utf8("CREATE EXTENSION ctxwin;" . $SETUP));

# SQL (characters) in the database; its output decoded as JSON
sub run_sql { return sql_do($node, $DB, encode_utf8($_[0])); }
sub query_json { return $JSON->decode(run_sql($_[0])); }

# diagnostics quote generated text: as UTF-8
sub diag_text { diag(encode_utf8($_[0])); return; }

diag("seed $SEED, cases $CASES");
my $started = Time::HiRes::time();
%stats = (cases => 0, sessions => 0, skipped => 0, cut => 0, errors_checked => 0, cleared => 0, same_bytes => 0);
my (%fails, @examples, %failing_cases);

sub fail_case
{
	my ($kind, $info) = @_;
	$failing_cases{ (split /:/, $info)[0] } = 1;
	push @examples, "$kind: $info" if ++$fails{$kind} <= 2;
	return;
}

my $rng = PyRandom->new($SEED);
my $serial = 0;
while ($stats{cases} < $CASES)
{
	$serial++;
	my $srng = PyRandom->new("$SEED/$serial");
	my ($sid, $session_sql) = session_sql($srng, $serial);
	run_sql($session_sql);
	$stats{sessions}++;
	my $meta = query_json(sprintf(q{
		SELECT jsonb_build_object(
			'encoding', st.encoding, 'window', st.context_window, 'reserve', st.response_reserve,
			'placement', st.summary_placement, 'system_prompt', s.system_prompt,
			'summary', s.conversation_summary, 'through', s.summary_through_id,
			'bmin', pt_min_budget(s.id, st.context_window),
			'keep', st.keep_tool_results, 'max_tokens', st.tool_result_max_tokens,
			'inputs', st.clear_tool_inputs, 'exclude', st.exclude_tools,
			'clearing', st.keep_tool_results IS NOT NULL OR st.tool_result_max_tokens IS NOT NULL,
			'rows', (SELECT coalesce(jsonb_agg(jsonb_build_object('id', m.id, 'role', m.role, 'content', m.content,
			                  'name', m.name, 'tool_call_id', m.tool_call_id, 'tool_calls', m.tool_calls)
			                  ORDER BY m.id), '[]')
			         FROM ctxwin.messages m WHERE m.session_id = s.id AND m.retracted_at IS NULL))
		FROM ctxwin.sessions s JOIN ctxwin.session_settings st ON st.session_id = s.id
		WHERE s.id = %s}, lit($sid)));
	my $rows = $meta->{rows};
	my $window = $meta->{window};
	my $bmin = $meta->{bmin};
	my $tag = "seed $SEED session $serial";
	if (!defined $bmin)
	{
		$stats{skipped}++;
		next;
	}
	my %budgets = map { $_ => 1 } $bmin, $bmin + 1, $bmin + 2, $bmin + 3, $bmin + 5, $bmin + 8, $bmin + 13, $window;
	for (1 .. 6)
	{
		my $budget = $rng->random < 0.5 ? $rng->randint($bmin, $window) : $bmin + $rng->randint(0, 60);
		$budget = $window if $budget > $window;
		$budgets{$budget} = 1;
	}
	my @budgets = sort { $a <=> $b } grep { $_ <= $window } keys %budgets;
	my $default_budget = $window - $meta->{reserve};
	my @calls = map { my $budget = $_; map { [ $budget, $_ ] } qw(openai anthropic) } @budgets;
	push @calls, [ undef, 'openai' ], [ undef, 'anthropic' ] if $default_budget >= $bmin;
	my $values = join(",\n", map {
		sprintf('(%s, %s, %d)', $calls[$_][0] // 'NULL::int', lit($calls[$_][1]), $_)
	} 0 .. $#calls);
	my $res = query_json(sprintf(q{
		SELECT jsonb_build_object('below', CASE WHEN %d > 1 THEN pt_try(%s, %d, 'openai') END,
		       'runs', jsonb_agg(jsonb_build_object('b', v.b, 'f', v.f, 'r', r.r,
		           'tokens', CASE WHEN v.f = 'openai' AND r.r ? 'ok' THEN
		               (SELECT sum(ctxwin.count_message_tokens(m, %s)) + 3
		                FROM jsonb_array_elements(r.r -> 'ok') m) END) ORDER BY v.ord))
		FROM (VALUES %s) v(b, f, ord), LATERAL (SELECT pt_try(%s, v.b, v.f) AS r) r
		}, $bmin, lit($sid), $bmin - 1, lit($meta->{encoding}), $values, lit($sid)));
	my $below = $res->{below};
	if (defined $below)
	{
		$stats{errors_checked}++;
		if (exists $below->{ok} || !same($below->{err}, '22023') || index($below->{msg} // '', 'too small') < 0)
		{
			fail_case('budget below the smallest accepted one: not the budget-too-small error',
				sprintf('%s budget %d: %s', $tag, $bmin - 1, substr($TEXT->encode($below), 0, 200)));
		}
	}
	if ($meta->{clearing} && @calls)
	{
		# another connection, the same rows: the same bytes
		my @again = @calls[ 0, -1 ];
		my $v = join(",\n", map { sprintf('(%s, %s, %d)', $again[$_][0] // 'NULL::int', lit($again[$_][1]), $_) } 0 .. $#again);
		my $res2 = query_json(sprintf(q{SELECT jsonb_agg(pt_try(%s, v.b, v.f) ORDER BY v.ord) FROM (VALUES %s) v(b, f, ord)},
			lit($sid), $v));
		my @first = map { $res->{runs}[$_]{r} } 0, $#calls;
		$stats{same_bytes}++;
		fail_case('another connection builds other bytes', "$tag: " . substr($TEXT->encode($res2), 0, 200))
		  unless $CANON->encode($res2) eq $CANON->encode(\@first);
	}
	my (@backs, %openai_by_budget);
	for my $run (@{ $res->{runs} })
	{
		$openai_by_budget{ $run->{b} // 'default' } = $run->{r}{ok}
		  if $run->{f} eq 'openai' && exists $run->{r}{ok};
	}
	for my $run (@{ $res->{runs} })
	{
		my ($budget, $f, $r) = @$run{qw(b f r)};
		$stats{cases}++;
		my $where = sprintf('%s budget %s %s', $tag, $budget // 'None', $f);
		if (exists $r->{err})
		{
			fail_case('error at a budget >= the smallest accepted one',
				"$where: $r->{err} " . substr($r->{msg}, 0, 200));
			next;
		}
		my $limit = $budget // $default_budget;
		my @problems;
		if ($f eq 'openai')
		{
			my $conv = check_openai($r->{ok}, $meta, $rows, \@problems);
			if (!defined $run->{tokens} || $run->{tokens} > $limit)
			{
				push @problems, sprintf('over budget: %s tokens for %d', $run->{tokens} // 'None', $limit);
			}
			# as Python's rows[len(rows) - len(conv):]
			my $from = @$rows - @$conv;
			$from += @$rows if $from < 0;
			$from = 0 if $from < 0;
			my @stored = @$rows[ $from .. $#$rows ];
			my $n = @$conv < @stored ? @$conv : @stored;
			$stats{cut}++ if @$conv && grep { !same($conv->[$_]{content}, $stored[$_]{content}) } 0 .. $n - 1;
		}
		else
		{
			my $oa = $openai_by_budget{ $budget // 'default' };
			if (!defined $oa)
			{
				push @problems, 'no OpenAI output to compare with';
			}
			else
			{
				my $nsys = () = system_messages($meta->{system_prompt}, $meta->{summary}, $meta->{placement});
				my @oa_sys = @$oa;
				my @oa_conv = $nsys < @oa_sys ? splice(@oa_sys, $nsys) : ();
				my $back = check_anthropic($r->{ok}, \@oa_sys, \@oa_conv, $rows, \@problems);
				push @backs, [ scalar @backs, $limit, $where, $back ] if defined $back;
			}
		}
		if (@problems && $ENV{CTXWIN_PROP_DEBUG})
		{
			diag_text(sprintf("%s: %s\n  output: %s\n  openai: %s", $where, join('; ', @problems),
				substr($TEXT->encode($r->{ok}), 0, 400),
				substr($TEXT->encode($openai_by_budget{ $budget // 'default' }), 0, 400)));
		}
		for my $p (@problems)
		{
			(my $kind = (split /:/, $p)[0]) =~ s/[0-9]+/N/g;
			fail_case($kind, "$where: $p");
		}
	}
	if (@backs)
	{
		my $v = join(",\n", map { sprintf('(%d, %s::jsonb)', $_->[0], lit($TEXT->encode($_->[3]))) } @backs);
		my $counts = query_json(sprintf(q{
			SELECT jsonb_object_agg(v.i, (SELECT coalesce(sum(ctxwin.count_message_tokens(m, %s)), 0) + 3
			                              FROM jsonb_array_elements(v.msgs) m))
			FROM (VALUES %s) v(i, msgs)}, lit($meta->{encoding}), $v));
		for my $bk (@backs)
		{
			my ($i, $limit, $where, $back) = @$bk;
			if ($counts->{$i} > $limit)
			{
				fail_case('anthropic over budget', sprintf('%s: %s tokens for %d; as OpenAI messages: %s',
					$where, $counts->{$i}, $limit, substr($TEXT->encode($back), 0, 300)));
			}
		}
	}
}

my $elapsed = Time::HiRes::time() - $started;
diag(sprintf('%d cases on %d sessions (%d skipped: no budget up to the window fits), %d with a cut, in %.1f s',
	@stats{qw(cases sessions skipped cut)}, $elapsed));
my $total_fail = 0;
$total_fail += $_ for values %fails;
diag(sprintf('%d of %d cases failed', scalar keys %failing_cases, $stats{cases}));
diag(sprintf('%6d  %s', $fails{$_}, $_)) for sort keys %fails;
diag_text("example: $_") for @examples;
ok($stats{cases} >= $CASES, "ran at least $CASES cases");
ok($stats{cut} > 0, 'some cases cut the newest unit');
ok($stats{errors_checked} > 0, 'some budgets below the smallest accepted one were tried');
ok($stats{cleared} > 0 && $stats{same_bytes} > 0,
	"some cases clear tool results ($stats{cleared}), and their bytes were built again ($stats{same_bytes} sessions)");
for my $kind ('over budget', 'anthropic over budget')
{
	ok(!$fails{$kind}, "never over budget ($kind)");
}
ok($total_fail == 0, "every property holds in every case ($total_fail failures)");

done_testing();
