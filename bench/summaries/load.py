#!/usr/bin/env python3
"""The SQL of a bench/summaries run (standard library only): a profile per
configuration, a session per conversation and configuration with its
messages (ctxwin.append_messages, OpenAI's shape), then the summaries.

    python3 load.py corpus.json CONFIG... > load.sql

CONFIG: extractive (summary_strategy 'extractive', every other setting the
profile's default: a stable window, max_summary_tokens 1024, of which a
first summary takes at most half), extractive-sliding (the same with
window_policy 'sliding': a summary takes all 1024), llm-request (strategy
'llm', the profile's other defaults, against the server's LLM: the run
scores the request the model is given, not its answer), llm-literal (the
same with summary_model 'literal': test/mockllm.py's model that does what
the prompt says and nothing else, each instruction read literally; its
answers are scored).  The last statement summarizes
every session (summarize_session(id, force => true)) and prints one JSON
line per session: config, conv, covered (messages the summary covers),
tokens, summary.
"""
import json
import sys

PROFILES = {
    "extractive": "INSERT INTO ctxwin.profiles (name, summary_strategy) VALUES ('bench-extractive', 'extractive');",
    "extractive-sliding": "INSERT INTO ctxwin.profiles (name, summary_strategy, window_policy) "
                          "VALUES ('bench-extractive-sliding', 'extractive', 'sliding');",
    "llm-request": "INSERT INTO ctxwin.profiles (name, summary_strategy) VALUES ('bench-llm-request', 'llm');",
    "llm-literal": "INSERT INTO ctxwin.profiles (name, summary_strategy, summary_model) "
                   "VALUES ('bench-llm-literal', 'llm', 'literal');",
}
TAG = "$ctxwin_bench$"


def main():
    corpus = json.load(open(sys.argv[1]))
    configs = sys.argv[2:]
    out = ["\\set ON_ERROR_STOP 1", "SET client_min_messages = warning;"]
    for k, cfg in enumerate(configs):
        out.append(PROFILES[cfg])
        for i, conv in enumerate(corpus):
            sid = "00000000-0000-4000-8%03d-%012d" % (k, i + 1)
            meta = json.dumps({"bench": conv["id"], "config": cfg})
            msgs = json.dumps(conv["messages"], sort_keys=True)
            assert TAG not in msgs
            out.append("INSERT INTO ctxwin.sessions (id, profile, metadata) VALUES ('%s', 'bench-%s', %s%s%s);"
                       % (sid, cfg, TAG, meta, TAG))
            out.append("SELECT cardinality(ctxwin.append_messages('%s', %s%s%s)) AS appended \\g /dev/null" % (sid, TAG, msgs, TAG))
    # every session summarized, one statement each (a failure is printed, not
    # fatal), then the summaries read back from the sessions
    out.append("CREATE TEMP TABLE bench_runs (session uuid, through_id bigint, tokens int, ms numeric);")
    out.append("\\set ON_ERROR_STOP 0")
    for k, cfg in enumerate(configs):
        for i, conv in enumerate(corpus):
            sid = "00000000-0000-4000-8%03d-%012d" % (k, i + 1)
            out.append("INSERT INTO bench_runs SELECT r.session_id, r.through_id, r.token_count, "
                       "round(extract(epoch FROM clock_timestamp() - t.t0) * 1000) "
                       "FROM (SELECT clock_timestamp() AS t0) t, "
                       "LATERAL ctxwin.summarize_session('%s', force => true) r;" % sid)
    out.append("\\set ON_ERROR_STOP 1")
    out.append("SELECT json_build_object('config', s.metadata ->> 'config', 'conv', s.metadata ->> 'bench', "
               "'covered', (SELECT count(*) FROM ctxwin.messages m WHERE m.session_id = s.id AND m.id <= b.through_id), "
               "'tokens', b.tokens, 'ms', b.ms, 'summary', s.conversation_summary) "
               "FROM ctxwin.sessions s LEFT JOIN bench_runs b ON b.session = s.id "
               "WHERE s.metadata ? 'bench' ORDER BY s.id;")
    print("\n".join(out))


if __name__ == "__main__":
    main()
