"""The untrusted side: runs the model's code and answers calls from the trusted harness.

Everything in this process is under the model's control once its code has run, so nothing here is
relied on for the verdict. It only has to be useful to honest code: it executes the code as module
``solution``, lists what the code defined, and serves calls with plain data in and out.
"""

from __future__ import annotations

import operator
import sys
import types

from . import wire

BINARY_OPS = {
    "add", "sub", "mul", "truediv", "floordiv", "mod", "pow", "and_", "or_", "xor", "lshift", "rshift",
    "lt", "le", "gt", "ge", "eq", "ne", "matmul",
}


class Handles:
    def __init__(self):
        self.objects: dict[int, object] = {}
        self.ids: dict[int, int] = {}

    def add(self, obj) -> int:
        key = id(obj)
        existing = self.ids.get(key)
        if existing is not None and self.objects.get(existing) is obj:
            return existing
        handle = len(self.objects) + 1
        self.objects[handle] = obj
        self.ids[key] = handle
        return handle

    def get(self, handle):
        if type(handle) is not int or handle not in self.objects:
            raise LookupError(f"unknown handle {handle!r}")
        return self.objects[handle]


def _builtin_base(cls) -> str:
    for klass in cls.__mro__:
        if klass.__module__ == "builtins" and issubclass(klass, Exception):
            return klass.__name__
    return "Exception"


def describe_exception(exc: BaseException) -> dict:
    cls = type(exc)
    try:
        message = str(exc)
    except BaseException:  # noqa: BLE001 - the model's __str__ may do anything
        message = "<unprintable>"
    return {
        "type": cls.__name__,
        "module": str(getattr(cls, "__module__", "")),
        "base": _builtin_base(cls) if isinstance(exc, Exception) else "",
        "msg": message[:2000],
    }


def describe_exports(namespace: dict, handles: Handles) -> dict:
    exports = {}
    for name, value in list(namespace.items()):
        if name.startswith("__"):
            continue
        if isinstance(value, types.ModuleType):
            exports[name] = {"kind": "module", "name": value.__name__}
        elif isinstance(value, type) and issubclass(value, BaseException):
            exports[name] = {"kind": "exception", "base": _builtin_base(value), "h": handles.add(value)}
        elif callable(value):
            exports[name] = {"kind": "callable", "h": handles.add(value)}
        else:
            # Fetched only if the tests use the name: a module with a large table stays cheap.
            exports[name] = {"kind": "value", "h": handles.add(value)}
    return exports


class Server:
    def __init__(self, rfd: int, wfd: int):
        self.rfd = rfd
        self.wfd = wfd
        self.handles = Handles()
        self.module = types.ModuleType("solution")

    def load(self, code: str) -> None:
        sys.modules["solution"] = self.module
        load_error = None
        try:
            exec(compile(code, "<model code>", "exec"), self.module.__dict__)
        except BaseException as exc:  # noqa: BLE001 - SystemExit at import is a model failure too
            load_error = describe_exception(exc)
        wire.send_json(self.wfd, {"ready": True, "load_error": load_error,
                                  "exports": describe_exports(self.module.__dict__, self.handles)})

    def serve_forever(self) -> None:
        while True:
            try:
                request = wire.recv_json(self.rfd)
            except wire.PeerClosed:
                return
            try:
                reply = self.handle(request)
            except BaseException as exc:  # noqa: BLE001 - report, never die on the model's behalf
                reply = {"exc": describe_exception(exc)}
            try:
                wire.send_json(self.wfd, reply)
            except (ValueError, RecursionError) as exc:
                wire.send_json(self.wfd, {"exc": describe_exception(exc)})

    def _decode(self, tree):
        return wire.decode(tree, self.handles.get)

    def _encode(self, value):
        return wire.encode(value, self.handles.add)

    def handle(self, request: dict) -> dict:
        op = request.get("op")
        if op == "inprocess":
            return self.run_inprocess(request)
        target = self.handles.get(request.get("h"))
        if op == "call":
            raw_args = request.get("args", [])
            raw_kwargs = request.get("kwargs", [])
            args = [self._decode(item) for item in raw_args]
            kwargs = {str(key): self._decode(value) for key, value in raw_kwargs}
            result = target(*args, **kwargs)
            reply = {"ok": self._encode(result)}
            write_back = []
            for index, (before, value) in enumerate(zip(raw_args, args)):
                if type(value) in (list, dict, set, bytearray):
                    after = self._encode(value)
                    if after != before:
                        write_back.append([index, after])
            for (key, before), value in zip(raw_kwargs, kwargs.values()):
                if type(value) in (list, dict, set, bytearray):
                    after = self._encode(value)
                    if after != before:
                        write_back.append([str(key), after])
            if write_back:
                reply["wb"] = write_back
            return reply
        if op == "get":
            return {"ok": self._encode(target)}
        if op == "getattr":
            return {"ok": self._encode(getattr(target, str(request["name"])))}
        if op == "setattr":
            setattr(target, str(request["name"]), self._decode(request["value"]))
            return {"ok": None}
        if op == "getitem":
            return {"ok": self._encode(target[self._decode(request["key"])])}
        if op == "setitem":
            target[self._decode(request["key"])] = self._decode(request["value"])
            return {"ok": None}
        if op == "delitem":
            del target[self._decode(request["key"])]
            return {"ok": None}
        if op == "len":
            return {"ok": len(target)}
        if op == "iter":
            return {"ok": {"h": self.handles.add(iter(target))}}
        if op == "next":
            try:
                return {"ok": self._encode(next(target))}
            except StopIteration:
                return {"stop": True}
        if op == "bool":
            return {"ok": bool(target)}
        if op == "str":
            return {"ok": str(target)}
        if op == "repr":
            return {"ok": repr(target)}
        if op == "hash":
            return {"ok": hash(target)}
        if op == "binop":
            name = request.get("name")
            if name not in BINARY_OPS:
                raise ValueError(f"unsupported operator {name!r}")
            other = self.handles.get(request.get("other"))
            result = getattr(operator, name)(other, target) if request.get("reflected") else getattr(operator, name)(target, other)
            return {"ok": self._encode(result)}
        if op == "unary":
            name = request.get("name")
            functions = {"neg": operator.neg, "pos": operator.pos, "abs": abs, "invert": operator.invert,
                         "int": int, "float": float, "index": operator.index}
            if name not in functions:
                raise ValueError(f"unsupported operator {name!r}")
            return {"ok": self._encode(functions[name](target))}
        if op == "isinstance":
            return {"ok": isinstance(target, self.handles.get(request.get("cls")))}
        raise ValueError(f"unknown operation {op!r}")

    def run_inprocess(self, request: dict) -> dict:
        """The documented fallback: tests run here, beside the model's code. Forgeable by design; the
        trusted side screens the code statically and cross-checks the counts."""
        from . import harness

        namespace = self.module.__dict__
        exec(compile(str(request["tests"]), "<hidden tests>", "exec"), namespace)
        suite = harness.build_suite(namespace, self.module, str(request["format"]), str(request["entry_point"]))
        return {"ok": wire.encode(harness.summarize(harness.run_suite(suite, self.module)))}


def serve(code: str, rfd: int, wfd: int) -> None:
    wire.send_json(wfd, {"hardened": True})
    server = Server(rfd, wfd)
    server.load(code)
    server.serve_forever()
