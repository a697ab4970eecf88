"""Regenerate opscope's ``python_api.json``: which Python function runs each ``aten::`` op (and TF's op list).

Run ``python tools/gen_python_api.py`` from the repository root where torch (and, optionally, tensorflow)
is installed; it writes ``src/opscope/analyses/data/python_api.json`` (an offline tool, not part of the
package). The table is derived from torch's own metadata, so that ``opscope ops`` can name the
Python API without torch installed:

* the op names come from torch's registered schemas (``torch._C._jit_get_all_schemas()``);
* an op is mapped to the first of these namespaces that exposes a public callable of the same name:
  ``torch.Tensor`` for in-place ops (``add_``), ``torch.nn.functional``, ``torch.linalg``/``torch.special``/
  ``torch.fft`` for ``linalg_*``/``special_*``/``fft_*`` ops, ``torch``, ``torch.Tensor``;
* ops that ``torch.nn.functional`` reaches under another name (``F.cross_entropy`` calls
  ``torch._C._nn.cross_entropy_loss``) are found in the functions' source, where exactly one
  public, non-deprecated function calls them;
* internal ops that torch still exposes (``torch._foreach_add_``) keep that name.

With tensorflow installed, the names of ``tf.raw_ops`` are stored too (TensorFlow's op types, e.g.
``Conv2DBackpropInput``: a TF trace's op maps to ``tf.raw_ops.<Name>`` only when it is one), and for the
ops that have one, the public function (see :func:`tf_table`). torch and tensorflow need not be in the
same environment: each run keeps the other framework's part of the existing file, e.g.::

    python tools/gen_python_api.py                       # in a venv with torch
    /path/to/tf-venv/bin/python tools/gen_python_api.py
"""

from __future__ import annotations

import inspect
import json
import re
import sys
from pathlib import Path

OUTPUT = Path(__file__).resolve().parent.parent / "src" / "opscope" / "analyses" / "data" / "python_api.json"
_CALL = re.compile(r"(?:torch\._C\._nn|_VF|torch\._C\._VariableFunctions|torch)\.(\w+)\(")
_SUBMODULES = (("linalg_", "linalg"), ("special_", "special"), ("fft_", "fft"))


def _public(namespace, name: str) -> bool:
    if name.startswith("_"):
        return False
    try:
        return callable(getattr(namespace, name))
    except Exception:
        return False


def _deprecated(name: str, fn) -> bool:
    """``F.upsample`` and friends warn that they are deprecated; their replacement is the API to show."""
    try:
        source = inspect.getsource(fn)
    except (OSError, TypeError):
        return False
    return f"nn.functional.{name}` is deprecated" in source or f"nn.functional.{name} is deprecated" in source


def aten_table() -> dict[str, str]:
    """``{op name without "aten::": dotted Python API}`` for every op torch exposes to Python."""
    import torch
    import torch.nn.functional as F  # noqa: N812 - torch's own convention

    names = sorted({s.name[len("aten::"):].split(".")[0] for s in torch._C._jit_get_all_schemas()
                    if s.name.startswith("aten::")})
    functional = {n for n in dir(F) if _public(F, n) and not _deprecated(n, getattr(F, n))}
    table: dict[str, str] = {}
    for name in names:
        api = _direct(torch, functional, name)
        if api:
            table[name] = api
    # F functions that call an op under another name: cross_entropy -> cross_entropy_loss.
    callers: dict[str, set[str]] = {}
    for fn_name in sorted(functional):
        try:
            source = inspect.getsource(getattr(F, fn_name))
        except (OSError, TypeError):
            continue
        for callee in _CALL.findall(source):
            callers.setdefault(callee, set()).add(fn_name)
    for callee, fns in callers.items():
        if callee in table or callee not in names or len(fns) != 1:
            continue
        table[callee] = f"torch.nn.functional.{next(iter(fns))}"
    # Internal ops torch still exposes (optimizers call torch._foreach_*): the name is callable.
    for name in names:
        if name not in table and name.startswith("_") and not name.startswith("__") and \
                callable(getattr(torch, name, None)):
            table[name] = f"torch.{name}"
    return dict(sorted(table.items()))


def _direct(torch, functional: set[str], name: str) -> str | None:
    if name.endswith("_") and not name.startswith("_") and _public(torch.Tensor, name):
        return f"torch.Tensor.{name}"
    if name in functional:
        return f"torch.nn.functional.{name}"
    for prefix, module in _SUBMODULES:
        rest = name[len(prefix):]
        if name.startswith(prefix) and _public(getattr(torch, module), rest):
            return f"torch.{module}.{rest}"
    if _public(torch, name):
        return f"torch.{name}"
    if _public(torch.Tensor, name):
        return f"torch.Tensor.{name}"
    return None


def tf_table() -> tuple[str | None, list[str], dict[str, str]]:
    """TensorFlow's version, its op types (``tf.raw_ops``), and the public function of those that have one.

    A public function (``tf.nn.relu``) counts for an op when it *is* the op's generated wrapper, or when
    it calls that wrapper in its source and its name is the op's snake_case name (``MatMul`` ->
    ``mat_mul`` ~ ``tf.matmul``; ``AddV2`` -> ``add`` ~ ``tf.math.add``), so that a helper that merely uses
    the op (``tf.reduce_logsumexp`` calls ``Shape``) is not taken for it. Empty without tensorflow.
    """
    try:
        import tensorflow as tf
        from tensorflow.python.util import tf_decorator
    except ImportError:
        return None, [], {}
    raw = sorted(n for n in dir(tf.raw_ops) if not n.startswith("_"))
    exported: dict[int, list[str]] = {}
    functions: dict[int, object] = {}
    for prefix, module in [("tf.", tf)] + [(f"tf.{m}.", getattr(tf, m)) for m in _TF_MODULES]:
        for name in dir(module):
            if name.startswith("_"):
                continue
            obj = getattr(module, name, None)
            if not callable(obj) or isinstance(obj, type) or inspect.ismodule(obj):
                continue
            target = tf_decorator.unwrap(obj)[1]
            exported.setdefault(id(target), []).append(prefix + name)
            functions[id(target)] = target
    callers: dict[str, set[int]] = {}
    for key, fn in functions.items():
        try:
            source = inspect.getsource(fn)
        except (OSError, TypeError):
            continue
        for callee in set(_TF_CALL.findall(source)):
            callers.setdefault(callee, set()).add(key)
    table: dict[str, str] = {}
    for op in raw:
        wrapper_name = getattr(tf.raw_ops, op).__name__  # the generated wrapper's snake_case name
        module = sys.modules[getattr(tf.raw_ops, op).__module__]
        wrapper = getattr(module, wrapper_name, None)
        direct = exported.get(id(tf_decorator.unwrap(wrapper)[1])) if wrapper is not None else None
        if direct:
            table[op] = _tf_pick(direct)
            continue
        matches = {k for k in callers.get(wrapper_name, ()) if any(
            _tf_same(wrapper_name, n.rsplit(".", 1)[1]) for n in exported[k])}
        if len(matches) == 1:
            table[op] = _tf_pick(exported[matches.pop()])
    return tf.__version__, raw, table


_TF_MODULES = ("nn", "math", "linalg", "image", "signal", "random", "bitwise", "strings")
_TF_CALL = re.compile(r"\bgen_\w+_ops\.(\w+)\(")


def _tf_same(op_snake: str, public: str) -> bool:
    """``mat_mul`` ~ ``matmul``, ``add_v2`` ~ ``add``, ``mean`` ~ ``reduce_mean``, ``mul`` ~ ``multiply``."""
    a = re.sub(r"_v\d+$", "", op_snake).replace("_", "")
    b = public.replace("_", "")
    return a in b or b in a


def _tf_pick(names: list[str]) -> str:
    return min(names, key=lambda n: (n.count("."), len(n), n))


def generate(previous: dict | None = None) -> dict:
    """The table; a framework that is not installed keeps its part of ``previous`` (torch and
    tensorflow need not share an environment: run the script once in each)."""
    previous = previous or {}
    try:
        import torch
    except ImportError:
        torch_version, aten = previous.get("torch_version"), previous.get("aten", {})
    else:
        torch_version, aten = torch.__version__, aten_table()
    tf_version, raw_ops, tf_public = tf_table()
    if not raw_ops:
        tf_version = previous.get("tensorflow_version")
        raw_ops, tf_public = previous.get("tf_raw_ops", []), previous.get("tf", {})
    return {
        "generated_by": "python tools/gen_python_api.py",
        "torch_version": torch_version,
        "tensorflow_version": tf_version,
        "aten": aten,
        "tf": tf_public,
        "tf_raw_ops": raw_ops,
    }


def main(argv: list[str] | None = None) -> int:
    target = Path((argv or sys.argv[1:] or [str(OUTPUT)])[0])
    previous = json.loads(target.read_text()) if target.is_file() else None
    data = generate(previous)
    target.parent.mkdir(parents=True, exist_ok=True)
    target.write_text(json.dumps(data, indent=0, sort_keys=False) + "\n")
    print(f"{target}: {len(data['aten'])} aten ops (torch {data['torch_version']}), "
          f"{len(data['tf_raw_ops'])} TF raw ops (tensorflow {data['tensorflow_version']})")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
