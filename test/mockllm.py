#!/usr/bin/env python3
"""A mock LLM server for ctxwin's tests (Python standard library only).

Speaks four wire formats: OpenAI Chat Completions (POST
.../chat/completions), OpenAI Responses (POST .../responses), Anthropic
Messages (POST /v1/messages) and Google Gemini generateContent (POST
/v1beta/models/MODEL:generateContent, the model named in the path); checks
the API key header, logs every request as one JSON line (without the key) and injects
faults chosen by the requested model name:

  mock                  a deterministic summary that keeps every identifier
                        of the prompt (paths, URLs, ids, error codes, numbers
                        with units) and says what the previous summary held
                        (a request that offers the tool conversation_search
                        and ends with the user's message: a call of it, its
                        query the words of that message with a digit, else
                        its last word, as a model that looks a detail up)
  fault-500             500 with the provider's error JSON, always
  fault-503-then-ok     503 for the first request of a given body, then ok
  fault-429             429 with Retry-After: 1 for the first request of a
                        given body, then ok (Gemini: no header, but a
                        google.rpc.RetryInfo with "retryDelay": "1.5s" in
                        the error's details, as Gemini says it)
  fault-529             529 overloaded with Retry-After: 1, always
  fault-502-html        502 with an HTML page (a proxy in front), always
  fault-timeout         answers (ok) only after --slow seconds
  fault-drip            headers, then one byte of the body per second
  fault-malformed       200, application/json, not JSON
  fault-truncated-json  200, a JSON body cut in the middle (Content-Length
                        matching the cut body)
  fault-partial         200, Content-Length of the whole body, half sent,
                        then the connection is closed
  fault-empty-choices   OpenAI: "choices": []; Anthropic: "content": [];
                        Responses: "output": []; Gemini: "candidates": []
  fault-empty-content   an empty text
  fault-length          finish_reason "length" / stop_reason "max_tokens"
  fault-stop-REASON     half a summary, ended with finish_reason / stop_reason
                        / finishReason REASON verbatim (Responses: status
                        "incomplete" with incomplete_details.reason REASON;
                        "null": JSON null), such as
                        fault-stop-content_filter, fault-stop-refusal,
                        fault-stop-pause_turn,
                        fault-stop-model_context_window_exceeded
  fault-refusal         the provider's refusal: OpenAI, no content and the
                        message's "refusal" set (finish_reason "stop");
                        Anthropic, stop_reason "refusal" with the refusal text;
                        Responses, a "refusal" content part; Gemini, no
                        candidate and promptFeedback.blockReason "SAFETY"
  fault-content-filter  OpenAI: half a summary, finish_reason
                        "content_filter"; Anthropic: stop_reason "refusal";
                        Responses: incomplete_details.reason
                        "content_filter"; Gemini: finishReason "SAFETY"
  fault-tool-calls      a short text and a tool call instead of a summary
                        (finish_reason "tool_calls" / stop_reason "tool_use")
  fault-tool-calls-stop the same, but ended with "stop" / "end_turn"
  fault-no-finish       a good text without finish_reason / stop_reason
                        (the key missing)
  fault-choices-2       OpenAI: two complete choices; Gemini: two candidates;
                        Anthropic and Responses: a good answer
  fault-html            200 text/html
  fault-huge            a valid JSON answer of more than 2 MB
  fault-close           the connection is closed without an answer
  fault-400             400 with the provider's error JSON
  slow-N                a good answer after N milliseconds
  verbose-N             a good answer of about N tokens (4 characters each),
                        longer than the "Write at most" of the prompt, cut
                        off at the request's max_tokens (finish_reason
                        "length" / stop_reason "max_tokens") when N is more
                        ("mock" and the others heed the prompt's "Write at
                        most N tokens" where it asks less than max_tokens)
  flaky-P               a fault for P % of the requests, at random (500, 503,
                        429 with Retry-After: 1, 502 HTML, connection closed,
                        malformed JSON, half a body), else a good answer;
                        --seed makes the sequence repeatable
  chaos-P               as flaky-P with another mix, for long runs: 500, 429
                        with Retry-After: 1, a timeout (--slow), malformed
                        JSON, the provider's refusal, a content filter stop,
                        a cut-off answer, tool calls, no finish reason
  literal               a summary that does what the summary prompt says and
                        nothing else, each instruction read literally
                        (literal_summary; bench/summaries)
  any other model       404, the provider's "model not found" error

A wrong or missing key gets 401 with the provider's error JSON (OpenAI's
shows the key masked, as the real API does; Gemini answers 400
INVALID_ARGUMENT, as it does).  Each log line holds the path,
the headers but the key's, "auth" (ok, wrong or missing), the JSON body, the
system and user prompt, the model, "max_tokens" (the request's limit, in
any format), "attempt" (of this body), the status and,
for answers with a text, "response_text", "response_model", "usage" and
"finish" (the finish_reason / stop_reason sent; "fault" names the fault of
flaky-P and chaos-P).  A
line is written before the answer is sent, so a test can see a request that
is still being answered.

"The first request of a given body" is counted per (path, body), so a client
that retries the same request sees the fault once.  POST /_mock/reset
forgets those counts.

Usage: mockllm.py --port 0 --key KEY --log requests.jsonl [--port-file F]
                  [--delay-ms N] [--seed S] [--summary-keep N]
With --port 0 the port picked is printed on stdout and written to F.
--delay-ms delays every answer by N milliseconds (a model's latency).
--summary-keep N makes the summarizer lossy (bench/clients): a summary's
identifier list names only the first N identifiers of the prompt, in the
order the prompt shows them, the others dropped (the line quoting the last
user message stays); 0 (the default): every identifier.
"""
import argparse
import hashlib
import json
import os
import random
import re
import socket
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

ARGS = None
LOCK = threading.Lock()
SEEN = {}                       # digest of (path, body) -> requests so far
RNG = random.Random()

IDENT_RE = re.compile(
    r"https?://[^\s<>()\"']+"                                   # URLs
    r"|(?:~|\.{1,2})?/[\w.\-]+(?:/[\w.\-]+)+"                    # paths
    r"|\b[\w\-]+(?:/[\w.\-]+)+"                                  # dir/file
    r"|\b[\w\-]+\.(?:py|js|ts|go|rs|c|h|sql|md|json|ya?ml|toml|txt|log|sh|conf)\b"
    r"|`[^`\n]{2,80}`"                                           # inline code
    r"|\b[A-Z][A-Z0-9]+-\d+\b"                                   # tickets: BILL-412
    r"|\b[A-Z]\d{3,}\b"                                          # codes: E4242
    r"|\b[A-Z][A-Za-z]*(?:Error|Exception)\b"
    r"|\b\d+(?:\.\d+)?\s?(?:ms|s|min|h|days|KB|kB|MB|GB|TB|%|USD|EUR)(?![A-Za-z])"
    r"|[$€£]\d[\d,]*(?:\.\d+)?"
    r"|\b[a-z]+(?:_[a-z0-9]+)+\b"                                # snake_case
    r"|\b[a-z]+(?:[A-Z][a-z0-9]+)+\b|\b[A-Z][a-z0-9]+(?:[A-Z][a-z0-9]+)+\b"
    r"|\bv?\d+\.\d+\.\d+\b")


def identifiers(text):
    out = []
    for m in IDENT_RE.finditer(text):
        t = m.group(0).rstrip(".,;:)")
        if len(t) > 2 and t not in out:
            out.append(t)
    return out


def blocks_text(x):
    """The text of a system prompt: a string, or Anthropic's list of text
    blocks (a request with cache breakpoints sends that)."""
    if isinstance(x, list):
        return "\n".join(b.get("text", "") for b in x if isinstance(b, dict))
    return x if isinstance(x, str) else ""


def mock_summary(prompt, max_tokens):
    """A summary that keeps facts: every identifier of the prompt, verbatim."""
    prev, sep, new = prompt.partition("New messages:")
    if not sep:
        prev, new = "", prompt
    prev = prev.replace("Previous summary:", "").strip()
    new_msgs = [l for l in new.splitlines() if l.startswith("[")]
    users = [l for l in new_msgs if l.startswith("[user")]
    lines = ["Summary (mock) of %d new messages%s." % (
        len(new_msgs),
        "" if prev in ("", "(none)") else ", merged with the previous summary")]
    ids = identifiers(prompt)
    if ARGS is not None and ARGS.summary_keep > 0:
        ids = ids[:ARGS.summary_keep]       # --summary-keep: the first N it reads, the rest forgotten
    if ids:
        lines.append("Identifiers: " + "; ".join(ids))
    if prev not in ("", "(none)"):
        first = prev.splitlines()[0]
        lines.append("Earlier: " + first[:200])
    if users:
        lines.append("Last request: " + users[-1][:200])
    text = "\n".join(lines)
    # stay well within the token limit asked for (about 3 chars a token)
    limit = max(40, int(max_tokens or 1024) * 3)
    return text[:limit]


CONTENT_STOP = {"about", "also", "been", "could", "does", "from", "have", "into", "just", "know", "like", "more",
                "much", "only", "right", "should", "some", "tell", "than", "that", "their", "them", "then", "there",
                "these", "they", "this", "very", "want", "were", "what", "when", "where", "whether", "which", "will",
                "with", "would", "your"}
LITERAL_FACTS_RE = re.compile(
    r"\b\d{4}-\d{2}-\d{2}\b"                                     # dates
    r"|[$€£]\d[\d,]*(?:\.\d+)?"                                    # amounts
    r"|@?[\w.\-]+(?:/[\w.\-]+)*@\d[\w.\-]*"                           # package@version
    r"|\b[A-Z][A-Z0-9]*(?:-[A-Z0-9]+)+\b|\b[A-Z]{1,5}\d{3,}\w*\b"       # ids and codes
    r"|\b[a-z][\w]*-\d\w*\b"                                       # build-7729
    r"|\b[a-z0-9][a-z0-9\-]*(?:\.[a-z0-9\-]+){2,}\b"                 # host names
    r"|\b[0-9A-F]{12,}\b"                                          # hex
    r"|\b\d[\d,]*(?:\.\d+)? [a-z]{3,}(?: [a-z]+s\b)?")                # numbers and what they count


def _words(text):
    return {w for w in re.split(r"[^\w]+", text.lower()) if len(w) >= 4 and w not in CONTENT_STOP}


def literal_summary(system, prompt, max_tokens):
    """A model that does what the summary prompt says and nothing else, each
    instruction read literally (the "literal" model; bench/summaries): it
    writes the sections the system prompt names, in its order, each filled
    by what the words of its description ask for, from the transcript of the
    new messages and the previous summary's lines; a section the prompt does
    not name is not written, an instruction it does not give is not
    followed.  What each description's words make it do:

      "wants" / "goal"   the newest user line that states a wish ("want",
                "need", "please", "first"); with "latest" or "changed", the
                newest that changes one ("instead", "no longer", "change
                of", "new plan", "stop", "pause", "first") if there is one,
                and with "replaced" the first wish before it
      "next step" / "where things stand"  the newest assistant line that
                names a next step
      "decided" / "why"   the lines that say decided, chose or agreed, whole
      "changed" and "how"  the assistant's lines that say what it changed,
                replaced, corrected, updated, moved ..., whole
      "verbatim" with "ids", "names", "numbers", "amounts", "dates" ...
                every token of those kinds, each once
      "questions" / "not yet done"  the user's questions that no later
                assistant line takes up (60 % of their words)
      "message ids" / "search terms"  the range of ids, six search terms
      "keep the newer one"  newest first in each section
    and "Write at most N tokens" (4 characters a token) cuts it."""
    sys_text = blocks_text(system)
    prev, sep, new = prompt.partition("New messages:")
    if not sep:
        prev, new = "", prompt
    prev = prev.replace("Previous summary:", "").strip()
    msgs = [m.strip() for m in re.split(r"\n(?=\[(?:user|assistant|tool|system)[ \]])", "\n" + new) if m.strip()]
    newest_first = "keep the newer" in sys_text.lower()
    sections = re.findall(r'"([A-Z][A-Za-z ]+):"\s*([^;"]*)', sys_text)
    out = []
    for head, desc in sections:
        d = re.split(r";|\.\s", desc)[0].lower()      # its description: up to the end of its sentence
        lines = []
        if "wants" in d or "goal" in d:
            users = [m for m in msgs if m.startswith("[user")]
            wishes = [m for m in users if re.search(r"\b(want|need|please|first)\b", m.lower())]
            changes = [m for m in users if re.search(r"\b(instead|no longer|change of|new plan|stop|pause|first)\b",
                                                      m.lower())]
            if ("latest" in d or "changed" in d) and changes:
                lines.append(changes[-1])
                if "replaced" in d:
                    before = [m for m in wishes if msgs.index(m) < msgs.index(changes[-1])]
                    if before:
                        lines.append("replaced: " + before[0])
            elif wishes:
                lines.append(wishes[-1])
        if "next step" in d or "stand" in d:
            steps = [m for m in msgs if m.startswith("[assistant") and "next step" in m.lower()]
            if steps:
                lines.append(steps[-1])
        if "decided" in d:
            dec = [m for m in msgs if re.search(r"\b(decided|chose|agreed)\b", m.lower())]
            lines.extend(reversed(dec) if newest_first else dec)
        if "changed" in d and "how" in d:
            done = [m for m in msgs if m.startswith("[assistant")
                    and re.search(r"\b(changed|replaced|corrected|updated|moved|renamed|pinned|merged|removed|added)\b",
                                  m.lower())]
            lines.extend(reversed(done) if newest_first else done)
        if "verbatim" in d:
            facts = []
            for m in (reversed(msgs) if newest_first else msgs):
                for t in identifiers(m) + [x.group(0) for x in LITERAL_FACTS_RE.finditer(m)]:
                    if t not in facts:
                        facts.append(t)
            if facts:
                lines.append("; ".join(facts))
        if "questions" in d:
            for i, m in enumerate(msgs):
                if not m.startswith("[user") or not m.rstrip().endswith("?"):
                    continue
                q = _words(re.sub(r"^\[[^\]]*\]", "", m))
                later = [_words(a) for a in msgs[i + 1:] if a.startswith("[assistant")]
                if len(q) >= 2 and any(len(q & a) * 5 >= len(q) * 3 and len(q & a) >= 2 for a in later):
                    continue
                lines.append(m)
        if "message ids" in d:
            ids = [int(x) for x in re.findall(r"^\[[^\]]*#(\d+)\]", new, re.M)]
            if ids:
                lines.append("Messages #%d-#%d" % (min(ids), max(ids)))
        if prev and prev != "(none)":
            for block in re.split(r"\n(?=[A-Z][A-Za-z ]+:)", prev):
                if block.startswith(head + ":"):
                    lines.extend(l[2:] for l in block.splitlines()[1:] if l.startswith("- "))
        if lines:
            out.append(head + ":")
            out.extend("- " + re.sub(r"\s+", " ", l) for l in lines)
    text = "\n".join(out) or "(nothing the prompt asks for)"
    limit = max(40, int(max_tokens or 1024) * 4)
    return text[:limit]


GEMINI_STATUS = {400: "INVALID_ARGUMENT", 401: "UNAUTHENTICATED", 403: "PERMISSION_DENIED", 404: "NOT_FOUND",
                 429: "RESOURCE_EXHAUSTED", 500: "INTERNAL", 503: "UNAVAILABLE", 504: "DEADLINE_EXCEEDED"}

# each format's words for the stops the faults make
LENGTH = {"openai": "length", "anthropic": "max_tokens", "responses": "max_output_tokens", "gemini": "MAX_TOKENS"}
TOOL_STOP = {"openai": "tool_calls", "anthropic": "tool_use", "responses": None, "gemini": None}
FILTER = {"openai": "content_filter", "anthropic": "refusal", "responses": "content_filter", "gemini": "SAFETY"}


def error_body(provider, status, message, kind=None):
    if provider == "gemini":
        return {"error": {"code": status, "message": message, "status": GEMINI_STATUS.get(status, "UNKNOWN")}}
    if provider == "anthropic":
        kind = kind or {400: "invalid_request_error", 401: "authentication_error",
                        404: "not_found_error", 429: "rate_limit_error",
                        500: "api_error", 529: "overloaded_error"}.get(status, "api_error")
        return {"type": "error", "error": {"type": kind, "message": message}}
    kind = kind or {400: "invalid_request_error", 401: "invalid_request_error",
                    429: "requests"}.get(status, "server_error")
    code = {401: "invalid_api_key", 429: "rate_limit_exceeded"}.get(status)
    return {"error": {"message": message, "type": kind, "param": None, "code": code}}


def ok_body(provider, model, req_id, text, finish, prompt_chars, refusal=None, tool_calls=False,
            choices=1, no_finish=False, call=None, blocked=None):
    """A 200 answer.  finish: the finish_reason / stop_reason (None: the
    provider's complete stop; no_finish: the key left out); refusal: the
    refusal text (OpenAI's message field, Anthropic's text); tool_calls: a
    tool call after the text; call: (name, input) of a tool call to make
    instead of a text; choices: how many (OpenAI); no_finish:
    "missing" leaves the finish_reason / stop_reason key out, "null" sends
    JSON null; blocked: Gemini's promptFeedback.blockReason, with no
    candidate.  Responses: finish is incomplete_details.reason (status
    "incomplete"); Gemini: the finishReason."""
    pt = max(1, prompt_chars // 4)
    ct = len(text or refusal or "") // 4
    if tool_calls or call:
        call_name, call_args = call or ("search_history", {"query": "billing"})
    if provider == "responses":
        output = []
        if text is not None:
            # a reasoning model's output begins with its reasoning item: never the summary
            output.append({"type": "reasoning", "id": "rs_" + req_id[:12],
                           "summary": [{"type": "summary_text", "text": "Reasoning about the transcript."}]})
        if text is not None or refusal is not None:
            content = [{"type": "output_text", "text": text, "annotations": []}] if text is not None else []
            if refusal is not None:
                content = [{"type": "refusal", "refusal": refusal}]
            output.append({"type": "message", "id": "msg_" + req_id, "status": "completed", "role": "assistant",
                           "content": content})
        if tool_calls or call:
            output.append({"type": "function_call", "id": "fc_" + req_id[:12], "call_id": "call_" + req_id[:12],
                           "name": call_name, "arguments": json.dumps(call_args), "status": "completed"})
        b = {"id": "resp_" + req_id, "object": "response", "created_at": 1700000000,
             "status": "incomplete" if finish else "completed",
             "incomplete_details": {"reason": finish} if finish else None,
             "model": model + "-2025-04-14", "output": output,
             "usage": {"input_tokens": pt, "output_tokens": ct, "total_tokens": pt + ct,
                       "input_tokens_details": {"cached_tokens": 0},
                       "output_tokens_details": {"reasoning_tokens": 0}}}
        if no_finish == "missing":
            del b["status"]
        elif no_finish:
            b["status"], b["incomplete_details"] = "incomplete", {"reason": None}
        return b
    if provider == "gemini":
        b = {"candidates": [], "usageMetadata": {"promptTokenCount": pt, "candidatesTokenCount": ct,
                                                 "totalTokenCount": pt + ct},
             "modelVersion": model + "-001", "responseId": req_id[:20]}
        if blocked:
            del b["candidates"]
            b["promptFeedback"] = {"blockReason": blocked}
            return b
        if text is not None or refusal is not None or call:
            parts = [{"text": refusal if refusal is not None else text}] if (text is not None or refusal is not None) else []
            if text is not None and refusal is None:
                # a thinking model's thought comes first, marked: never the summary
                parts.insert(0, {"text": "Thinking about the transcript.", "thought": True})
            if tool_calls or call:
                parts.append({"functionCall": {"name": call_name, "args": call_args}})
            for i in range(choices):
                c = {"content": {"parts": parts if i == 0 else [{"text": "Alternative: " + (text or "")}],
                                 "role": "model"}, "finishReason": finish or "STOP", "index": i}
                if no_finish == "missing":
                    del c["finishReason"]
                elif no_finish:
                    c["finishReason"] = None
                b["candidates"].append(c)
        return b
    if provider == "anthropic":
        content = [] if text is None else [{"type": "text", "text": text}]
        if refusal is not None:
            content = [{"type": "text", "text": refusal}]
        if tool_calls:
            content.append({"type": "tool_use", "id": "toolu_" + req_id[:12], "name": "search_history",
                            "input": {"query": "billing"}})
        if call:
            content.append({"type": "tool_use", "id": "toolu_" + req_id[:12], "name": call[0], "input": call[1]})
        b = {"id": "msg_" + req_id, "type": "message", "role": "assistant", "model": model,
             "content": content, "stop_reason": finish or "end_turn", "stop_sequence": None,
             "usage": {"input_tokens": pt, "output_tokens": ct,
                       "cache_creation_input_tokens": 0, "cache_read_input_tokens": 0}}
        if no_finish:
            b["stop_reason"] = None
            if no_finish == "missing":
                del b["stop_reason"]
        return b
    out = []
    if text is not None or refusal is not None or call:
        for i in range(choices):
            msg = {"role": "assistant", "content": text if i == 0 or text is None else "Alternative: " + text,
                   "refusal": refusal}
            if tool_calls:
                msg["tool_calls"] = [{"id": "call_" + req_id[:12], "type": "function",
                                      "function": {"name": "search_history",
                                                   "arguments": "{\"query\": \"billing\"}"}}]
            if call:
                msg["tool_calls"] = [{"id": "call_" + req_id[:12], "type": "function",
                                      "function": {"name": call[0], "arguments": json.dumps(call[1])}}]
            c = {"index": i, "message": msg, "logprobs": None, "finish_reason": finish or "stop"}
            if no_finish:
                c["finish_reason"] = None
                if no_finish == "missing":
                    del c["finish_reason"]
            out.append(c)
    return {"id": "chatcmpl-" + req_id, "object": "chat.completion", "created": 1700000000,
            "model": model + "-2024-07-18", "choices": out,
            "usage": {"prompt_tokens": pt, "completion_tokens": ct, "total_tokens": pt + ct},
            "system_fingerprint": "fp_mock"}


def recall_query(provider, body):
    """The query of the conversation_search call "mock" makes: when the
    request offers that tool and its last message is the user's (not tool
    results), the words of that message with a digit, else its last word;
    otherwise None."""
    if provider not in ("openai", "anthropic"):
        return None
    names = [(t.get("function") or {}).get("name") if provider == "openai" else t.get("name")
             for t in body.get("tools") or [] if isinstance(t, dict)]
    last = (body.get("messages") or [None])[-1]
    if "conversation_search" not in names or not isinstance(last, dict) or last.get("role") != "user":
        return None
    content = last.get("content")
    if isinstance(content, list):
        if any(isinstance(b, dict) and b.get("type") == "tool_result" for b in content):
            return None
        content = " ".join(b.get("text", "") for b in content if isinstance(b, dict))
    words = [w.strip(".,;:!?") for w in re.findall(r"[\w./#@:-]+", content or "")]
    words = [w for w in words if w]
    return " ".join(w for w in words if re.search(r"\d", w)) or (words[-1] if words else "conversation")


GEMINI_PATH = re.compile(r"/v1beta/(models|tunedModels)/([^/:]+):generateContent")


def texts(parts):
    """The text of Gemini parts, or of content blocks."""
    return "".join(p.get("text", "") for p in parts or [] if isinstance(p, dict))


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server_version = "mockllm/1"

    def log_message(self, fmt, *args):     # quiet: the JSON log says it all
        pass

    def send(self, status, data, ctype="application/json", headers=(), length=None):
        self.send_response(status)
        self.send_header("Content-Type", ctype)
        self.send_header("Content-Length", str(len(data) if length is None else length))
        for k, v in headers:
            self.send_header(k, v)
        self.end_headers()
        self.wfile.write(data)
        self.wfile.flush()

    def do_POST(self):
        raw = self.rfile.read(int(self.headers.get("Content-Length") or 0))
        if self.path == "/_mock/reset":
            with LOCK:
                SEEN.clear()
            return self.send(200, b'{"reset": true}')
        if self.path.endswith("/chat/completions"):
            provider = "openai"
            got = self.headers.get("Authorization") or ""
            sent_key = got[7:] if got.startswith("Bearer ") else got
            auth_ok = got == "Bearer " + ARGS.key
        elif self.path.endswith("/responses"):
            provider = "responses"
            got = self.headers.get("Authorization") or ""
            sent_key = got[7:] if got.startswith("Bearer ") else got
            auth_ok = got == "Bearer " + ARGS.key
        elif self.path == "/v1/messages":
            provider = "anthropic"
            sent_key = self.headers.get("x-api-key") or ""
            auth_ok = sent_key == ARGS.key
        elif GEMINI_PATH.fullmatch(self.path):
            provider = "gemini"
            sent_key = self.headers.get("x-goog-api-key") or ""
            auth_ok = sent_key == ARGS.key
        else:
            return self.send(404, b'{"error": {"message": "no such route"}}')
        try:
            body = json.loads(raw)
        except ValueError:
            body = None
        digest = hashlib.sha256(self.path.encode() + b"\0" + raw).hexdigest()
        with LOCK:
            SEEN[digest] = attempt = SEEN.get(digest, 0) + 1
        entry = {"time": time.time(), "path": self.path, "provider": provider,
                 "headers": {k.lower(): v for k, v in self.headers.items()
                             if k.lower() not in ("authorization", "x-api-key", "x-goog-api-key")},
                 "auth": "ok" if auth_ok else ("wrong" if sent_key else "missing"),
                 "body": body if body is not None else raw.decode("utf-8", "replace"),
                 "model": (GEMINI_PATH.fullmatch(self.path).group(2) if provider == "gemini" else
                           body.get("model", "") if isinstance(body, dict) else ""),
                 "attempt": attempt}
        a = self.plan(provider, body, entry, digest[:24], auth_ok, sent_key)
        entry["status"] = a["status"]
        for k in ("usage", "response_model", "response_text", "finish"):
            if k in a:
                entry[k] = a[k]
        if len(entry.get("response_text") or "") > 10000:
            entry["response_text"] = "(%d characters)" % len(entry["response_text"])
        # logged before answering, so a test sees a request still being answered
        with LOCK, open(ARGS.log, "a", encoding="utf-8") as f:
            f.write(json.dumps(entry) + "\n")
        self.act(a)

    def plan(self, provider, body, entry, req_id, auth_ok, sent_key):
        """What to answer: status, data, content type, headers, how to send it."""
        def error(status, message, kind=None, headers=()):
            b = error_body(provider, status, message, kind)
            if provider == "gemini" and status == 429:
                # Gemini says how long to wait in the body, not in a header
                wait = dict(headers).get("Retry-After")
                headers = [h for h in headers if h[0] != "Retry-After"]
                if wait:
                    b["error"]["details"] = [{"@type": "type.googleapis.com/google.rpc.RetryInfo",
                                              "retryDelay": "%gs" % (float(wait) * 1.5)}]
            return {"status": status, "data": json.dumps(b).encode(), "headers": headers}

        if not auth_ok:
            if provider == "gemini":
                return error(400, "API key not valid. Please pass a valid API key.")
            if provider == "anthropic":
                return error(401, "invalid x-api-key")
            # OpenAI masks the key it got, as here
            masked = sent_key[:3] + "*" * (len(sent_key) - 7) + sent_key[-4:] if len(sent_key) > 8 else "***"
            return error(401, "Incorrect API key provided: %s. You can find your API key at "
                         "https://platform.openai.com/account/api-keys." % masked)
        if not isinstance(body, dict):
            return error(400, "We could not parse the JSON body of your request.")
        if provider == "anthropic":
            if self.headers.get("anthropic-version") != "2023-06-01":
                return error(400, "anthropic-version: header is required")
            missing = [k for k in ("model", "max_tokens", "messages") if k not in body]
            system = body.get("system") or ""
        elif provider == "responses":
            missing = [k for k in ("model", "input") if k not in body]
            system = body.get("instructions") or ""
        elif provider == "gemini":
            missing = [k for k in ("contents",) if k not in body]
            if "model" in body:
                return error(400, 'Invalid JSON payload received. Unknown name "model": Cannot find field.')
            system = texts((body.get("systemInstruction") or {}).get("parts"))
        else:
            missing = [k for k in ("model", "messages") if k not in body]
            system = "\n".join(m.get("content") or "" for m in body.get("messages") or []
                               if isinstance(m, dict) and m.get("role") == "system")
        if missing:
            return error(400, "%s: Field required" % missing[0])
        if provider == "gemini":
            users = [c for c in body["contents"] if isinstance(c, dict) and c.get("role", "user") == "user"]
            prompt = texts(users[-1].get("parts")) if users else ""
            max_tokens = (body.get("generationConfig") or {}).get("maxOutputTokens")
        elif provider == "responses":
            prompt = body["input"]
            if isinstance(prompt, list):    # input items: the last user message's text
                users = [m for m in prompt if isinstance(m, dict) and m.get("role") == "user"]
                c = users[-1].get("content") if users else ""
                prompt = c if isinstance(c, str) else texts(c)
            max_tokens = body.get("max_output_tokens")
        else:
            users = [m for m in body["messages"] if isinstance(m, dict) and m.get("role") == "user"]
            prompt = users[-1].get("content") if users else ""
            if isinstance(prompt, list):        # content blocks
                prompt = texts(prompt)
            max_tokens = body.get("max_tokens") or body.get("max_completion_tokens")
        entry["system"], entry["prompt"], entry["max_tokens"] = system, prompt, max_tokens
        model, attempt = entry["model"], entry["attempt"]
        # a model that heeds its prompt: a summary prompt's "Write at most N
        # tokens" sizes the answer where it asks for less than max_tokens
        asked = max_tokens
        target = re.search(r"Write at most (\d+) tokens", blocks_text(system))
        if target:
            asked = min(int(target.group(1)), int(max_tokens)) if max_tokens else int(target.group(1))
        text = mock_summary(prompt, asked)

        def ok(text=text, finish=None, how="send", **kw):
            answer = ok_body(provider, model, req_id, text, finish, len(system) + len(prompt), **kw)
            if kw.get("no_finish"):
                sent = None
            elif provider == "anthropic":
                sent = answer["stop_reason"]
            elif provider == "responses":
                sent = (answer["incomplete_details"] or {}).get("reason") or answer["status"]
            elif provider == "gemini":
                sent = answer["candidates"][0]["finishReason"] if answer.get("candidates") else \
                    answer.get("promptFeedback", {}).get("blockReason")
            else:
                sent = answer["choices"][0]["finish_reason"] if answer["choices"] else None
            return {"status": 200, "data": json.dumps(answer).encode(), "how": how,
                    "usage": answer.get("usage", answer.get("usageMetadata")),
                    "response_model": answer.get("model", answer.get("modelVersion")),
                    "response_text": text if text is not None else kw.get("refusal"), "finish": sent}

        if model == "literal":
            return ok(text=literal_summary(system, prompt, asked))
        if model == "mock":
            q = recall_query(provider, body)
            if q is not None:
                return ok(text=None, call=("conversation_search", {"query": q}), finish=TOOL_STOP[provider])
            return ok()
        m = re.fullmatch(r"verbose-(\d+)", model)
        if m:
            # about N tokens (4 characters each) whatever the prompt asks;
            # cut off at max_tokens (finish "length") as a provider does
            want = int(m.group(1))
            long = (text + "\nDetails:" + "".join(" the deploy of step %d went as planned." % i
                                                   for i in range(want)))[:want * 4]
            cap = int(max_tokens or 4096)
            if want > cap:
                return ok(text=long[:cap * 4], finish=LENGTH[provider])
            return ok(text=long)
        m = re.fullmatch(r"slow-(\d+)", model)
        if m:
            a = ok()
            a["delay"] = int(m.group(1)) / 1000.0
            return a
        m = re.fullmatch(r"flaky-(\d+)", model)
        if m:
            with LOCK:
                hit = RNG.random() * 100 < int(m.group(1))
                kind = RNG.choice(["500", "503", "429", "502-html", "close", "malformed", "partial"])
            entry["fault"] = kind if hit else None
            if not hit:
                return ok()
            if kind == "503":
                return error(503, "The engine is currently overloaded, please try again later.")
            if kind == "429":
                return error(429, "Rate limit reached for requests. Please try again in 1s.",
                             headers=[("Retry-After", "1")])
            model = "fault-" + kind         # answered as that fault model is, below
        m = re.fullmatch(r"chaos-(\d+)", model)
        if m:
            with LOCK:
                hit = RNG.random() * 100 < int(m.group(1))
                kind = RNG.choice(["500", "429", "timeout", "malformed", "refusal", "content-filter",
                                   "length", "tool-calls", "no-finish"])
            entry["fault"] = kind if hit else None
            if not hit:
                return ok()
            if kind == "429":
                return error(429, "Rate limit reached for requests. Please try again in 1s.",
                             headers=[("Retry-After", "1")])
            model = "fault-" + kind
        if model == "fault-500":
            return error(500, "The server had an error while processing your request.")
        if model == "fault-503-then-ok":
            return ok() if attempt > 1 else error(503, "The engine is currently overloaded, please try again later.")
        if model == "fault-429":
            return ok() if attempt > 1 else error(429, "Rate limit reached for requests. Please try again in 1s.",
                                                  headers=[("Retry-After", "1")])
        if model == "fault-529":
            return error(529, "Overloaded", "overloaded_error", headers=[("Retry-After", "1")])
        if model == "fault-502-html":
            return {"status": 502, "data": b"<html><body><h1>502 Bad Gateway</h1></body></html>\n",
                    "ctype": "text/html"}
        if model in ("fault-timeout", "fault-drip", "fault-partial"):
            return ok(how=model[6:])
        if model == "fault-malformed":
            return {"status": 200, "data": b'{"id": "chatcmpl-x", "choices": [{"index": 0, message: oops}'}
        if model == "fault-truncated-json":
            a = ok()
            a["data"] = a["data"][:len(a["data"]) // 2]
            return a
        if model == "fault-empty-choices":
            return ok(text=None)
        if model == "fault-empty-content":
            return ok(text="")
        if model == "fault-length":
            return ok(text=text[:len(text) // 2], finish=LENGTH[provider])
        refusal_text = "I'm sorry, but I can't help with that request."
        half = text[:len(text) // 2]
        m = re.fullmatch(r"fault-stop-(\w+)", model)
        if m:
            return ok(text=half, finish=m.group(1)) if m.group(1) != "null" else ok(text=half, no_finish="null")
        if model == "fault-refusal":
            if provider == "anthropic":
                return ok(text=refusal_text, finish="refusal")
            if provider == "gemini":
                return ok(text=None, blocked="SAFETY")
            return ok(text=None, refusal=refusal_text)
        if model == "fault-content-filter":
            return ok(text=half, finish=FILTER[provider])
        if model in ("fault-tool-calls", "fault-tool-calls-stop"):
            return ok(text="Let me look that up first.", tool_calls=True,
                      finish=None if model.endswith("-stop") else TOOL_STOP[provider])
        if model == "fault-no-finish":
            return ok(no_finish="missing")
        if model == "fault-choices-2":
            return ok(choices=2 if provider in ("openai", "gemini") else 1)
        if model == "fault-html":
            return {"status": 200, "data": b"<!DOCTYPE html><html><body>Summary</body></html>\n",
                    "ctype": "text/html"}
        if model == "fault-huge":
            return ok(text="All work and no play makes a dull summary. " * 60000)     # 2.6 MB
        if model == "fault-close":
            return {"status": 0, "how": "close"}
        if model == "fault-400":
            if provider == "gemini":
                return error(400, "The input token count (1200000) exceeds the maximum number of tokens allowed (1048576).")
            return error(400, "prompt is too long: 210000 tokens > 200000 maximum" if provider == "anthropic" else
                         "This model's maximum context length is 128000 tokens. "
                         "However, your messages resulted in 130000 tokens.")
        if provider == "gemini":
            return error(404, "models/%s is not found for API version v1beta, or is not supported for "
                         "generateContent." % model)
        return error(404, "The model `%s` does not exist or you do not have access to it." % model,
                     "not_found_error" if provider == "anthropic" else "invalid_request_error")

    def act(self, a):
        how, data = a.get("how", "send"), a.get("data", b"")
        try:
            delay = a.get("delay", 0) + ARGS.delay_ms / 1000.0
            if delay > 0:
                time.sleep(delay)
            if how == "timeout":
                time.sleep(ARGS.slow)
            if how in ("send", "timeout"):
                return self.send(a["status"], data, a.get("ctype", "application/json"), a.get("headers", ()))
            self.close_connection = True
            if how == "drip":               # headers, then a byte a second
                self.send(200, b"", length=len(data))
                for i in range(len(data)):
                    self.wfile.write(data[i:i + 1])
                    self.wfile.flush()
                    time.sleep(1)
            elif how == "partial":          # half the body, then hang up
                self.send(200, data[:len(data) // 2], length=len(data))
            self.connection.shutdown(socket.SHUT_RDWR)
        except OSError:                     # the client gave up
            self.close_connection = True


class Server(ThreadingHTTPServer):
    request_queue_size = 1024       # many clients connect at once
    def handle_error(self, request, client_address):
        if not isinstance(sys.exc_info()[1], OSError):     # clients hanging up are expected
            super().handle_error(request, client_address)


def main():
    global ARGS
    p = argparse.ArgumentParser(description="mock OpenAI / Anthropic server for ctxwin's tests")
    p.add_argument("--port", type=int, default=0)
    p.add_argument("--key", required=True, help="the API key clients must send")
    p.add_argument("--log", required=True, help="JSON-lines file of every request")
    p.add_argument("--port-file", help="write the port here once listening")
    p.add_argument("--slow", type=float, default=30.0, help="seconds fault-timeout waits")
    p.add_argument("--delay-ms", type=float, default=0, help="delay every answer by this many ms")
    p.add_argument("--seed", type=int, default=None, help="seed of flaky-P's faults")
    p.add_argument("--summary-keep", type=int, default=0,
                   help="a summary names only the first N identifiers of its prompt (0: all)")
    ARGS = p.parse_args()
    RNG.seed(ARGS.seed)
    srv = Server(("127.0.0.1", ARGS.port), Handler)
    srv.daemon_threads = True
    port = srv.server_address[1]
    print(port, flush=True)
    if ARGS.port_file:
        with open(ARGS.port_file + ".tmp", "w") as f:
            f.write("%d\n" % port)
        os.replace(ARGS.port_file + ".tmp", ARGS.port_file)
    try:
        srv.serve_forever()
    except KeyboardInterrupt:
        pass


if __name__ == "__main__":
    sys.exit(main())
