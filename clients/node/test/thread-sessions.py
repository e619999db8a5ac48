"""The sessions the Python client gives LangGraph threads, for the Node
client's test of the same mapping (test/mapping.test.ts).

    PYTHONPATH=clients/python/src python3 clients/node/test/thread-sessions.py > clients/node/test/thread-sessions.json

(with a Python that has the Python client's dependencies, e.g. the
virtualenv clients/python/run-tests.sh makes).  With thread ids as
arguments (JSON strings), it prints their sessions only, as the test asks.
"""
import json
import sys

from ctxwin.langgraph import session_for_thread

IDS = [
    "t-1", "thread-42", "", "42", "tråd ø 😀", "user:7/chat:3", " t-1 ", "langgraph:t-1",
    "12345678-1234-5678-1234-567812345678",                  # a uuid: the session itself
    "12345678-1234-5678-1234-56781234567G",                  # not hex
    "12345678-1234-5678-1234-5678123456789",                 # 33 digits
    "ABCDEF01-2345-6789-ABCD-EF0123456789",                  # upper case
    "{abcdef01-2345-6789-abcd-ef0123456789}",                # braces
    "urn:uuid:abcdef01-2345-6789-abcd-ef0123456789",         # a urn
    "abcdef0123456789abcdef0123456789",                      # no hyphens
    "abcd-ef01-2345-6789-abcd-ef01-2345-6789",               # hyphens anywhere
    "0x" + "f" * 30,                                         # what int(x, 16) reads
    " " + "a" * 31, "+" + "b" * 31, "-" + "0" * 31, "-" + "0" * 30 + "1",
    "a_" + "c" * 30, "a__" + "c" * 29, "_" + "c" * 31,
    "{{" + "d" * 32 + "}", "uuid:urn:" + "e" * 32,
]

if __name__ == "__main__":
    ids = [json.loads(a) for a in sys.argv[1:]] or IDS
    json.dump({i: str(session_for_thread(i)) for i in ids}, sys.stdout, ensure_ascii=False, indent=1)
    print()
