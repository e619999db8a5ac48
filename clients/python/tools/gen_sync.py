"""Generates the synchronous client (src/ctxwin/client.py) from the
asynchronous one (src/ctxwin/aio.py): one source for both APIs.

    python tools/gen_sync.py            # writes src/ctxwin/client.py
    python tools/gen_sync.py --check    # exit 1 if client.py is not what this writes

The rewriting is by tokens, unasync's way: ``async def`` / ``async with`` /
``async for`` lose ``async``, ``await`` goes, the async names of psycopg,
psycopg_pool, typing and contextlib become their sync names,
``await conn.set_autocommit(x)`` becomes ``conn.autocommit = x``, and a
few sentences of prose are given their sync wording.  Nothing else
changes: a difference between the two clients is made in aio.py or here.
"""

from __future__ import annotations

import re
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
SRC = HERE.parent / "src" / "ctxwin" / "aio.py"
DST = HERE.parent / "src" / "ctxwin" / "client.py"

HEADER = ("# Generated from aio.py by tools/gen_sync.py: do not edit.  Change aio.py\n"
          "# and run `python tools/gen_sync.py` (a test checks this file is its output).\n")

# whole-word names, async -> sync
NAMES = {
    "AsyncClient": "Client",
    "AsyncConnectionPool": "ConnectionPool",
    "AsyncConnection": "Connection",
    "AsyncIterator": "Iterator",
    "asynccontextmanager": "contextmanager",
}

# prose of the async client that reads otherwise in the sync one
PROSE = [
    ('"""The asynchronous client, on a psycopg 3 async connection or async pool.',
     '"""The synchronous client, on a psycopg 3 connection or connection pool.'),
    ("client.py (the synchronous client) is generated from this file by tools/gen_sync.py.",
     "Generated from aio.py (the asynchronous client) by tools/gen_sync.py."),
    ("\n    The same methods as :class:`~ctxwin.Client`, as coroutines.\n", ""),
]


def generate(src: str) -> str:
    out = src
    for a, b in PROSE:
        if a not in out:
            raise SystemExit(f"gen_sync.py: aio.py no longer has {a!r}: update PROSE")
        out = out.replace(a, b)
    out = re.sub(r"\bawait (\w+)\.set_autocommit\(([^()]*)\)", r"\1.autocommit = \2", out)
    out = re.sub(r"\basync (def|with|for)\b", r"\1", out)
    out = re.sub(r"\bawait ", "", out)
    out = re.sub(r"\bAwaitable\[(\w+)\]", r"\1", out)
    out = re.sub(r"\bAwaitable, ", "", out)
    for a, b in NAMES.items():
        out = re.sub(rf"\b{a}\b", b, out)
    if re.search(r"\b(async|await|Async\w*|Awaitable)\b", out.replace('"""', "")):
        bad = sorted(set(re.findall(r"\b(?:async|await|Async\w*|Awaitable)\b", out)))
        raise SystemExit(f"gen_sync.py: async names left in the sync client: {bad}")
    return HEADER + out


def main(argv: list[str]) -> int:
    text = generate(SRC.read_text())
    if "--check" in argv:
        if DST.read_text() != text:
            print(f"{DST} is not tools/gen_sync.py's output: run python tools/gen_sync.py", file=sys.stderr)
            return 1
        return 0
    DST.write_text(text)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
