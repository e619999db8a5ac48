"""client.py is generated from aio.py (tools/gen_sync.py): the committed
file is the generator's output byte for byte, and both clients have the
same methods with the same signatures."""

from __future__ import annotations

import importlib.util
import inspect
from pathlib import Path

import ctxwin

TOOLS = Path(__file__).resolve().parents[1] / "tools" / "gen_sync.py"
SRC = Path(__file__).resolve().parents[1] / "src" / "ctxwin"


def _gen() -> object:
    spec = importlib.util.spec_from_file_location("gen_sync", TOOLS)
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_client_py_is_generated_from_aio_py() -> None:
    gen = _gen()
    text = gen.generate((SRC / "aio.py").read_text())  # type: ignore[attr-defined]
    assert text == (SRC / "client.py").read_text()
    assert text.startswith("# Generated from aio.py by tools/gen_sync.py")
    assert gen.main(["--check"]) == 0  # type: ignore[attr-defined]


def test_the_installed_package_is_this_source() -> None:
    # what the tests import is the package installed from this tree
    assert Path(inspect.getfile(ctxwin.Client)).read_text() == (SRC / "client.py").read_text()


def test_same_methods_same_signatures() -> None:
    def api(cls: type) -> dict[str, str]:
        return {n: str(inspect.signature(f)).replace("AsyncConnection", "Connection")
                for n, f in vars(cls).items() if callable(f) and not n.startswith("_") and n != "connection"}
    sync, asyn = api(ctxwin.Client), api(ctxwin.AsyncClient)
    assert sync == asyn and len(sync) > 20
    for n, f in vars(ctxwin.AsyncClient).items():
        if callable(f) and not n.startswith("_") and n != "connection":
            assert inspect.iscoroutinefunction(f), n
            assert not inspect.iscoroutinefunction(getattr(ctxwin.Client, n)), n
