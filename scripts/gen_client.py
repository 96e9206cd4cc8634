"""Writes the Python client of the service from its OpenAPI document, as
``jlpm gen:types`` writes the Lab's TypeScript types from the same file:

    .venv/bin/python scripts/gen_client.py        # or: make client

It writes four modules into gpuspawner/client/ (commit them; tests/test_api_client.py
fails when they are not what the document generates):

* ``schemas.py``: a ``TypedDict`` per schema of ``components.schemas``;
* ``answers.py``: one per request body or answer the document spells out in place;
* ``operations.py``: ``Api``, one method per ``operationId`` (snake_case), each
  building a ``Request`` and handing it to ``self._send``;
* ``aio.py``: ``AsyncApi``, the same methods for an asynchronous ``_send``.

Pure: a dict in (the parsed YAML), source text out; only ``main`` reads and
writes files.
"""
from __future__ import annotations

import keyword
import os
import re
import sys
from dataclasses import dataclass, field
from typing import Optional

import yaml

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
OUT = os.path.join(ROOT, "gpuspawner", "client")
SPEC = os.path.join(ROOT, "gpuspawner", "service", "api", "openapi.yaml")
SPEC_NAME = "gpuspawner/service/api/openapi.yaml"
METHODS = ("get", "put", "post", "delete", "patch")
WIDTH = 99
PRIMITIVES = {"string": "str", "integer": "int", "number": "float", "boolean": "bool"}


class SpecError(ValueError):
    """The document has something this generator does not know how to write."""


def snake(name: str) -> str:
    """``listWorkloadEvents`` → ``list_workload_events``."""
    return re.sub(r"(?<=[a-z0-9])([A-Z])", r"_\1", name).lower()


def pascal(name: str) -> str:
    return name[:1].upper() + name[1:]


def identifier(name: str) -> str:
    """A parameter's name as a Python argument (``from`` → ``from_``)."""
    name = re.sub(r"\W", "_", name)
    return name + "_" if keyword.iskeyword(name) else name


@dataclass
class Param:
    name: str
    where: str  # path | query
    type: str
    required: bool

    @property
    def arg(self) -> str:
        return identifier(self.name)


@dataclass
class Operation:
    op_id: str
    method: str
    path: str
    summary: str
    params: list = field(default_factory=list)
    body: Optional[str] = None  # the body's type
    body_required: bool = False
    answer: str = "Any"


class Types:
    """Python types of schemas; inline objects with properties become named
    TypedDicts (``extra``), in the order met."""

    def __init__(self, schemas: dict):
        self.schemas = schemas
        self.extra: dict[str, dict] = {}

    def of(self, schema: Optional[dict], name_if_object: Optional[str] = None) -> str:
        if not schema:
            return "Any"
        if "$ref" in schema:
            return schema["$ref"].rsplit("/", 1)[1]
        alts = schema.get("oneOf") or schema.get("anyOf")
        if alts and "properties" not in schema:
            return self._optional(schema, "Union[" + ", ".join(self.of(a) for a in alts) + "]")
        kind = schema.get("type")
        if kind in PRIMITIVES:
            return self._optional(schema, PRIMITIVES[kind])
        if kind == "array":
            return self._optional(schema, f"list[{self.of(schema.get('items'))}]")
        if kind == "object" or "properties" in schema:
            if schema.get("properties") and name_if_object:
                self.extra[name_if_object] = schema
                return self._optional(schema, name_if_object)
            values = schema.get("additionalProperties")
            inner = self.of(values) if isinstance(values, dict) else "Any"
            return self._optional(schema, f"dict[str, {inner}]")
        return "Any"

    @staticmethod
    def _optional(schema: dict, text: str) -> str:
        return f"Optional[{text}]" if schema.get("nullable") else text


def _deref(spec: dict, node: dict) -> dict:
    while "$ref" in node:
        parts = node["$ref"].lstrip("#/").split("/")
        target = spec
        for part in parts:
            target = target[part]
        node = target
    return node


def read_operations(spec: dict, types: Types) -> list[Operation]:
    ops, seen = [], set()
    for path, item in spec["paths"].items():
        shared = [_deref(spec, p) for p in item.get("parameters", [])]
        for method in METHODS:
            if method not in item:
                continue
            raw = item[method]
            op_id = raw.get("operationId")
            if not op_id:
                raise SpecError(f"{method.upper()} {path} has no operationId")
            if op_id in seen:
                raise SpecError(f"operationId {op_id} is used twice")
            seen.add(op_id)
            op = Operation(op_id, method.upper(), path, " ".join(raw.get("summary", "").split()))
            params = shared + [_deref(spec, p) for p in raw.get("parameters", [])]
            for p in params:
                if p["in"] not in ("path", "query"):
                    raise SpecError(f"{op_id}: parameter {p['name']} in {p['in']}")
                op.params.append(Param(p["name"], p["in"], types.of(p.get("schema")),
                                       p["in"] == "path" or bool(p.get("required"))))
            body = raw.get("requestBody")
            if body:
                schema = body["content"].get("application/json", {}).get("schema")
                op.body = types.of(schema, pascal(op_id) + "Body")
                op.body_required = bool(body.get("required"))
            op.answer = _answer(raw, types, op_id)
            ops.append(op)
    return ops


def _answer(raw: dict, types: Types, op_id: str) -> str:
    codes = sorted(c for c in raw.get("responses", {}) if str(c).startswith("2"))
    if not codes:
        return "Any"
    content = raw["responses"][codes[0]].get("content")
    if not content:
        return "None"
    if "application/json" in content:
        return types.of(content["application/json"].get("schema"), pascal(op_id) + "Answer")
    return "str"


# ---- writing ------------------------------------------------------------------------

HEADER = '''"""{what}

Generated from {spec} by scripts/gen_client.py
(``make client``): do not edit; change the document and run it again."""
from __future__ import annotations
'''


def render_types(items: dict, types: Types, what: str, imports: str = "") -> str:
    """TypedDicts of ``items`` (name → schema) and of the objects met inside them."""
    body, done, queue = [], set(), list(items.items())
    while queue:
        name, schema = queue.pop(0)
        if name not in done:
            done.add(name)
            body.append(_typed_dict(name, schema, types))
        if not queue:
            queue = [(n, s) for n, s in types.extra.items() if n not in done]
    text = "".join(body)
    out = [HEADER.format(what=what, spec=SPEC_NAME), _typing(text, "TypedDict") + "\n"
           + (f"\n{imports}" if imports else "")]
    return "\n".join(out) + text.rstrip("\n") + "\n"


def _typing(text: str, *always: str) -> str:
    """The import of the names of ``typing`` that ``text`` uses."""
    names = [n for n in ("Any", "Optional", "Sequence", "TypedDict", "Union")
             if n in always or re.search(rf"\b{n}\b", text)]
    return f"from typing import {', '.join(names)}"


def _typed_dict(name: str, schema: dict, types: Types) -> str:
    props = schema.get("properties") or {}
    doc = " ".join((schema.get("description") or "").split())
    fields = [(key, types.of(value, name + pascal(identifier(key))))
              for key, value in props.items()]
    if all(k.isidentifier() and not keyword.iskeyword(k) for k, _ in fields) and fields:
        lines = [f"\n\nclass {name}(TypedDict, total=False):"]
        if doc:
            lines.append(_docstring(doc, 4))
        lines += [f"    {k}: {t}" for k, t in fields]
        return "\n".join(lines) + "\n"
    entries = "".join(f'\n    "{k}": "{t}",' for k, t in fields)  # evaluated: quoted
    return f'\n\n{name} = TypedDict("{name}", {{{entries}\n}}, total=False)\n'


def _docstring(text: str, indent: int) -> str:
    pad = " " * indent
    text = text.replace('"""', "'''").replace("\\", "\\\\")
    words, lines, line = text.split(), [], ""
    for word in words:
        if line and len(pad) + 3 + len(line) + 1 + len(word) > WIDTH - 3:
            lines.append(line)
            line = word
        else:
            line = f"{line} {word}".strip()
    lines.append(line)
    if len(lines) == 1:
        return f'{pad}"""{lines[0]}"""'
    return f'{pad}"""' + f"\n{pad}".join(lines) + f'"""'


def _signature(op: Operation, asynchronous: bool) -> str:
    path_args = [p for p in op.params if p.where == "path"]
    query_args = [p for p in op.params if p.where == "query"]
    args = ["self"] + [f"{p.arg}: {_arg_type(p)}" for p in path_args]
    if op.body is not None:
        args.append(f"body: {op.body}" if op.body_required
                    else f"body: Optional[{op.body}] = None")
    if query_args:
        args.append("*")
        args += [f"{p.arg}: {_arg_type(p)}" + ("" if p.required else " = None")
                 for p in query_args]
    prefix = "async def" if asynchronous else "def"
    name = snake(op.op_id)
    one = f"    {prefix} {name}({', '.join(args)}) -> {op.answer}:"
    if len(one) <= WIDTH:
        return one
    lead = f"    {prefix} {name}("
    lines, line = [], lead
    for i, arg in enumerate(args):
        piece = arg + ("," if i < len(args) - 1 else f") -> {op.answer}:")
        if line != lead and len(line) + 1 + len(piece) > WIDTH:
            lines.append(line.rstrip())
            line = " " * len(lead) + piece
        else:
            line = line + ("" if line == lead else " ") + piece
    lines.append(line)
    return "\n".join(lines)


def _arg_type(p: Param) -> str:
    kind = "str" if p.where == "path" and p.type == "str" else p.type
    if kind.startswith("list["):
        kind = "Sequence[" + kind[5:]  # any sequence: a list, a tuple
    return kind if p.required else f"Optional[{kind}]"


def _request_parts(op: Operation, params: Optional[str] = None) -> list[str]:
    """The arguments of ``Request(...)``; ``params``: a name holding the query."""
    path = op.path
    for p in op.params:
        if p.where == "path":
            path = path.replace("{" + p.name + "}", "{segment(" + p.arg + ")}")
    parts = [f'"{op.method}"', f'f"{path}"' if "{" in path else f'"{path}"']
    if _query(op):
        parts.append(params or _query(op))
    elif op.body is not None:
        parts.append("()")
    if op.body is not None:
        parts.append("body")
    return parts


def _query(op: Operation) -> str:
    pairs = [f'("{p.name}", {p.arg})' for p in op.params if p.where == "query"]
    return "query(" + ", ".join(pairs) + ")" if pairs else ""


def _method(op: Operation, asynchronous: bool) -> str:
    """The method: one line when it fits, else the query, the path, then the call."""
    send = "await self._send" if asynchronous else "self._send"
    ret = f"        return {send}(Request({', '.join(_request_parts(op))}))"
    if len(ret) > WIDTH:
        parts = _request_parts(op, "params" if _query(op) else None)
        lines = [_wrap("        params = ", _query(op))] if _query(op) else []
        last = f"        return {send}(Request({', '.join(parts)}))"
        if len(last) > WIDTH:
            lines.append(f"        path = {parts[1]}")
            last = f"        return {send}(Request({', '.join([parts[0], 'path'] + parts[2:])}))"
        ret = "\n".join(lines + [last])
    doc = _docstring(f"{op.method} {op.path}: {op.summary}".rstrip(": "), 8)
    return f"{_signature(op, asynchronous)}\n{doc}\n{ret}\n"


def _wrap(lead: str, call: str) -> str:
    """``lead + call`` with the call's arguments wrapped under its parenthesis."""
    head, _, inner = call.partition("(")
    items = re.findall(r'\("[^"]+", \w+\)', inner)
    first = lead + head + "("
    lines, line = [], first
    for i, item in enumerate(items):
        piece = item + ("," if i < len(items) - 1 else ")")
        if line != first and len(line) + 1 + len(piece) > WIDTH:
            lines.append(line)
            line = " " * len(first) + piece
        else:
            line += ("" if line == first else " ") + piece
    return "\n".join(lines + [line])


UNSENT = '''

class Unsent(Api):
    """The ``Request`` each method would send, unsent: for a transport that
    streams the answer (``Unsent().get_workload_logs(wid, follow=True)``)."""

    def _send(self, request: Request) -> Any:
        return request
'''


def render_api(ops: list, asynchronous: bool, components: dict) -> str:
    what = ("The service's REST API for asyncio: ``AsyncApi``, one coroutine per operation."
            if asynchronous else "The service's REST API: ``Api``, one method per operation.")
    cls = "AsyncApi" if asynchronous else "Api"
    send_doc = ("it sends ``request`` and returns the parsed JSON answer (text for text, "
                "None for no content), or raises ``ApiError``.")
    out = [HEADER.format(what=what, spec=SPEC_NAME),
           "from typing import Any, Optional, Sequence, Union\n",
           "from .request import Request, query, segment",
           _import("answers", [n for n in _named_types(ops) if n not in components]),
           _import("schemas", [n for n in _named_types(ops) if n in components]) + "\n\n",
           f"class {cls}:",
           _docstring(f"Every operation of the service. A subclass gives ``_send``: "
                      f"{send_doc}", 4), ""]
    if asynchronous:
        out.append("    async def _send(self, request: Request) -> Any:")
    else:
        out.append("    def _send(self, request: Request) -> Any:")
    out.append("        raise NotImplementedError\n")
    for op in ops:
        out.append(_method(op, asynchronous))
    if not asynchronous:
        out.append(UNSENT)
    return "\n".join(out).rstrip("\n") + "\n"


def _named_types(ops: list) -> list[str]:
    text = " ".join(f"{op.body} {op.answer} " + " ".join(p.type for p in op.params)
                    for op in ops)
    builtin = {"Any", "Optional", "Union", "list", "dict", "str", "int", "float", "bool", "None"}
    return sorted(set(re.findall(r"[A-Za-z_]\w*", text)) - builtin)


def _import(module: str, names: list) -> str:
    one = f"from .{module} import {', '.join(names)}"
    if len(one) <= WIDTH:
        return one
    line, lines = f"from .{module} import (", []
    for i, name in enumerate(names):
        piece = name + ("," if i < len(names) - 1 else ")")
        if len(line) + 1 + len(piece) > WIDTH and not line.endswith("("):
            lines.append(line)
            line = " " * (len(module) + 15) + piece
        else:
            line += ("" if line.endswith("(") else " ") + piece
    return "\n".join(lines + [line])


def render(spec: dict) -> dict[str, str]:
    """File name → source text."""
    components = spec["components"]["schemas"]
    in_place = Types(components)
    ops = read_operations(spec, in_place)
    answers = render_types(dict(in_place.extra), in_place, ANSWERS)
    used = sorted(n for n in components if re.search(rf"\b{n}\b", answers.split("\n\n\n", 1)[-1]))
    answers = render_types(dict(in_place.extra), in_place, ANSWERS,
                           _import("schemas", used) + "\n" if used else "")
    return {"schemas.py": render_types(components, Types(components), SCHEMAS),
            "answers.py": answers,
            "operations.py": render_api(ops, False, components),
            "aio.py": render_api(ops, True, components)}


SCHEMAS = ("The service's objects, as the OpenAPI document's components describe them\n"
           "(every key optional: answers leave out what does not apply).")
ANSWERS = "The request bodies and answers the OpenAPI document spells out in place."


def main(argv: Optional[list] = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    source = argv[0] if argv else SPEC
    with open(source) as f:
        spec = yaml.safe_load(f)
    for name, text in render(spec).items():
        with open(os.path.join(OUT, name), "w") as f:
            f.write(text)
        print(f"wrote gpuspawner/client/{name} ({text.count(chr(10))} lines)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
