"""A chat template judged on jinja2's own parse tree, failing closed, before anything renders it.

Reader: jinja2 (3.1), the parser every renderer uses: llama-cpp-python's
`Jinja2ChatFormatter`, transformers' `apply_chat_template` and the serving stacks parse a
model's template with it and render it in `ImmutableSandboxedEnvironment`, but some
renderers run it without a sandbox. A template reaches past the sandbox through names the
sandbox hides: attributes that start with `_` (`cycler.__init__.__globals__`, the
`__class__.__mro__` walk of CVE-2024-34359). jinja2 reaches an attribute by `.name`, by
`["name"]` (its `getitem` falls back to `getattr` for a string key), by the `attr` filter, by
the filters that take an attribute name (`map`, `selectattr`, `rejectattr`, `sort`,
`groupby`, `sum`, `unique`, `min`, `max`) and by a format string (`"{0.__class__}".format`).

So each of those is judged on the parsed tree, and only a name the judge can read as a
constant is accepted: a constant that is no hidden name. A name computed at render time
(`cycler[u ~ 'init' ~ u]` with `u = '_' ~ '_'`, `'%c%c'|format(95, 95)`, names taken from
`dict(__init__=1)|list`) cannot be judged and is refused as unknown, with one exception real
templates need: an item index whose expression can only be a number (`messages[loop.index0
- 1]`, `messages[ns.last]` where `ns.last` is only ever set to numbers). Any name of the
template's own that starts with `_` is refused. A template jinja2 cannot parse is unknown,
never clean. Nothing is rendered.
"""

from __future__ import annotations

import functools
from collections.abc import Iterator
from typing import Any

# What a template may hold: past this, unknown (the largest chat templates on the Hub are
# tens of kB).
MAX_TEMPLATE = 1024 * 1024

# jinja2's filters that reach an attribute by a name given as an argument (filters.py:
# `make_attrgetter` / `make_multi_attrgetter`); map's first argument may instead name a
# filter, `attr` among them.
ATTRIBUTE_FILTERS = frozenset({"map", "selectattr", "rejectattr", "sort", "groupby", "sum",
                               "unique", "min", "max", "dictsort"})
# Filters whose result is a number, whatever they are given (an index built with them is
# no name).
NUMERIC_FILTERS = frozenset({"length", "count", "int", "float", "abs", "round", "wordcount"})
# Filters that keep some of what they are given, unchanged: a key that passes through them
# is still one of the mapping's own.
SUBSET_FILTERS = frozenset({"reject", "select", "list", "sort", "unique", "reverse"})
# The names a renderer fills from the tokenizer's files, so from the repo's author:
# transformers' `special_tokens_map` (strings; 4.x adds the list `additional_special_tokens`)
# and llama-cpp-python's bos_token/eos_token. Every other name the template reads without
# setting it is the caller's (messages, tools, documents, keyword arguments).
TOKEN_NAMES = frozenset({"bos_token", "eos_token", "unk_token", "sep_token", "pad_token",
                         "cls_token", "mask_token", "additional_special_tokens"})
# The functions renderers put beside jinja2's own globals (`range`, `lipsum`, `cycler`, ...):
# transformers' and llama-cpp-python's. A name set only on some paths is one of these where
# the template does not set it, and a function's attributes lead to its module's globals.
RENDERER_GLOBALS = frozenset({"raise_exception", "strftime_now"})


def judge_template(text: str) -> tuple[tuple[str, ...], str | None]:
    """(each reach past the sandbox, or name that could not be judged, in words, sorted; why
    the template could not be parsed, or None). An empty first part and None: a template
    that names nothing the sandbox hides."""
    from jinja2.exceptions import TemplateError

    if len(text) > MAX_TEMPLATE:
        return (), f"a template of {len(text):,} characters, past the {MAX_TEMPLATE:,} judged"
    try:
        tree = _environment().parse(text)
        found = set(_Judge(tree).reaches())
    except TemplateError as e:
        line = getattr(e, "lineno", None)
        where = f" (line {line})" if line else ""
        return (), f"jinja2 cannot parse it{where}: {e.message or type(e).__name__}"
    except (RecursionError, MemoryError) as e:
        return (), f"jinja2 cannot parse it: {type(e).__name__}"
    return tuple(sorted(found)), None


@functools.cache
def _environment() -> Any:
    """The environment transformers' `apply_chat_template` parses with (trim and lstrip
    blocks, loop controls), built once: jinja2 is imported when a template is first judged,
    not when wlock starts. transformers' `{% generation %}...{% endgeneration %}`
    (AssistantTracker in chat_template_utils.py) is parsed as the template's own statements,
    and judged as they are."""
    from jinja2.ext import Extension
    from jinja2.sandbox import ImmutableSandboxedEnvironment

    class Generation(Extension):
        tags = {"generation"}  # noqa: RUF012 - jinja2 reads it from the class

        def parse(self, parser: Any) -> Any:
            next(parser.stream)
            return parser.parse_statements(("name:endgeneration",), drop_needle=True)

    return ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True,
                                         extensions=[Generation, "jinja2.ext.loopcontrols"])


def _hidden(name: str) -> bool:
    """A name the sandbox hides, or a dotted path (`a.__b`, as `make_attrgetter` splits it)
    through one."""
    return any(part.startswith("_") for part in name.split("."))


class _Judge:
    def __init__(self, tree: Any) -> None:
        from jinja2 import nodes as n

        self.n, self.tree = n, tree
        # Every value a name (or a namespace's attribute) is set to anywhere in the template:
        # an index built from it is a number only if every one of them is.
        self.sets: dict[str, list[Any]] = {}
        for node in tree.find_all((n.Assign, n.For)):
            targets = [node.target]
            while targets:
                target = targets.pop()
                if isinstance(target, n.Tuple):
                    targets += target.items
                elif isinstance(target, n.Name):
                    value = node.node if isinstance(node, n.Assign) else (
                        node.iter if self._range(node.iter) else None)
                    self.sets.setdefault(target.name, []).append(value)
                elif isinstance(target, n.NSRef):
                    self.sets.setdefault(f"{target.name}.{target.attr}", []).append(
                        node.node if isinstance(node, n.Assign) else None)
        for node in tree.find_all(n.Assign):  # namespace(x=0): ns.x starts as 0
            if isinstance(node.target, n.Name) and isinstance(node.node, n.Call) and \
                    isinstance(node.node.node, n.Name) and node.node.node.name == "namespace":
                for kw in node.node.kwargs:
                    self.sets.setdefault(f"{node.target.name}.{kw.key}", []).append(kw.value)

        # Items read by one of their mapping's own keys (below).
        self.own_keys = {id(item) for loop in tree.find_all(n.For)
                         for item in self._own_key_items(loop)}
        self.literal_dicts = {name for name in self.sets if self._literal_dict(name)}

    def _own_key_items(self, loop: Any) -> Iterator[Any]:
        """The items `X[k]` in `loop`'s body where `loop` walks X's own keys: `for k in
        X.keys()`, `for k, v in X.items()`, `X|items`, `X|dictsort`, through filters that
        only drop keys. Each works on a mapping only, and a mapping's own key is found by
        its `__getitem__`, so jinja2 never falls back to reading an attribute. Neither k nor
        X is set again inside the loop."""
        n = self.n
        walked, target = loop.iter, loop.target
        while isinstance(walked, n.Filter) and walked.name in SUBSET_FILTERS:
            walked = walked.node
        if isinstance(walked, n.Call) and isinstance(walked.node, n.Getattr) and \
                not walked.args and not walked.kwargs and walked.node.attr in ("keys", "items"):
            mapping, pairs = walked.node.node, walked.node.attr == "items"
        elif isinstance(walked, n.Filter) and walked.name in ("items", "dictsort"):
            mapping, pairs = walked.node, True
        else:
            return
        if pairs:
            if not (isinstance(target, n.Tuple) and target.items):
                return
            target = target.items[0]
        root = mapping
        while isinstance(root, (n.Getattr, n.Getitem)):
            if isinstance(root, n.Getitem) and not isinstance(root.arg, n.Const):
                return
            root = root.node
        if not (isinstance(target, n.Name) and isinstance(root, n.Name)):
            return
        body = loop.body + loop.else_
        rebound = {name.name for node in body for name in node.find_all(n.Name)
                   if name.ctx in ("store", "param")}
        if target.name in rebound or root.name in rebound:
            return
        for node in body:
            for item in node.find_all(n.Getitem):
                if item.node == mapping and isinstance(item.arg, n.Name) and \
                        item.arg.name == target.name:
                    yield item

    def _literal_dict(self, name: str) -> bool:
        """Whether `name` is only ever a dict the template writes out with constant keys
        none of which is hidden (set nowhere else: no loop, macro argument or block binds
        it), and no token name. Reading such a dict by any key gives one of its values or,
        for a key it lacks, an attribute of a dict: a method or a dunder of `dict`, from
        which only a further computed name (refused) goes on. Where the template does not
        set it, the name is the caller's (a token's or a global's name is refused: there the
        renderer fills it with a string or a function)."""
        from jinja2.defaults import DEFAULT_NAMESPACE

        n = self.n
        if name in TOKEN_NAMES or name in RENDERER_GLOBALS or name in DEFAULT_NAMESPACE:
            return False
        stores = [node for node in self.tree.find_all(n.Name)
                  if node.name == name and node.ctx in ("store", "param")]
        assigns = [node for node in self.tree.find_all(n.Assign)
                   if isinstance(node.target, n.Name) and node.target.name == name]
        return bool(assigns) and len(stores) == len(assigns) and all(
            isinstance(node.node, n.Dict) and all(
                isinstance(pair.key, n.Const) and isinstance(pair.key.value, str)
                and not _hidden(pair.key.value) for pair in node.node.items)
            for node in assigns)

    def _range(self, node: Any) -> bool:
        n = self.n
        return isinstance(node, n.Call) and isinstance(node.node, n.Name) and \
            node.node.name == "range"

    def reaches(self) -> Iterator[str]:
        n = self.n
        for node in self.tree.find_all(n.Node):
            if isinstance(node, n.Getattr):
                if node.attr.startswith("_"):
                    yield f"the attribute {node.attr}"
                elif node.attr in ("format", "format_map") and not self._plain_format(
                        node.node):
                    yield f"str.{node.attr} on a string the judge cannot read"
            elif isinstance(node, n.Getitem):
                if id(node) in self.own_keys or (
                        isinstance(node.node, n.Name) and node.node.name in self.literal_dicts):
                    continue
                yield from self._item(node.arg)
            elif isinstance(node, n.Const) and isinstance(node.value, str) and \
                    "__" in node.value:
                yield f"a string naming a hidden name ({node.value[:60]!r})"
            elif isinstance(node, (n.Name, n.NSRef)) and node.name.startswith("_"):
                yield f"the name {node.name}"
            elif isinstance(node, n.Keyword) and node.key.startswith("_"):
                yield f"the keyword {node.key}"
            elif isinstance(node, n.Filter):
                yield from self._filter(node)

    def _item(self, arg: Any) -> Iterator[str]:
        n = self.n
        if isinstance(arg, n.Const):
            if isinstance(arg.value, str) and _hidden(arg.value):
                yield f"the item {arg.value!r}"
            return
        if isinstance(arg, n.Slice) or self._numeric(arg, 0):
            return
        yield "an item whose name is built at render time (jinja2 reads it as an attribute)"

    def _filter(self, node: Any) -> Iterator[str]:
        n = self.n
        if node.name == "attr":
            yield from self._named(node.args[0] if node.args else None, "attr filter")
        elif node.name == "map" and node.args:
            first = node.args[0]
            if not (isinstance(first, n.Const) and isinstance(first.value, str)):
                yield "map with a filter named at render time"
            elif first.value == "attr":
                yield from self._named(node.args[1] if len(node.args) > 1 else None,
                                       "map('attr')")
        elif node.name in ATTRIBUTE_FILTERS:
            named = [kw.value for kw in node.kwargs if kw.key == "attribute"]
            if node.name in ("selectattr", "rejectattr", "groupby", "sum") and node.args:
                named.append(node.args[0])  # their first argument is the attribute
            for value in named:
                yield from self._named(value, node.name)
        if node.dyn_args is not None or node.dyn_kwargs is not None:
            yield f"the {node.name} filter with arguments unpacked at render time"

    def _named(self, value: Any, where: str) -> Iterator[str]:
        n = self.n
        if value is None:
            return
        if not (isinstance(value, n.Const) and isinstance(value.value, (str, int))):
            yield f"an attribute named at render time ({where})"
        elif isinstance(value.value, str) and _hidden(value.value):
            yield f"the attribute {value.value} ({where})"

    def _plain_format(self, node: Any) -> bool:
        """A constant format string whose fields name no attribute or item."""
        import re

        n = self.n
        return isinstance(node, n.Const) and isinstance(node.value, str) and not re.search(
            r"\{[^{}]*[.\[][^{}]*\}", node.value)

    def _numeric(self, node: Any, depth: int) -> bool:
        """Whether `node` can only be a number (or a bool, or none)."""
        n = self.n
        if depth > 32:
            return False
        if isinstance(node, n.Const):
            return node.value is None or isinstance(node.value, (int, float))
        if isinstance(node, (n.Neg, n.Pos)):
            return self._numeric(node.node, depth + 1)
        if isinstance(node, (n.Add, n.Sub, n.Mul, n.Div, n.FloorDiv, n.Mod, n.Pow)):
            return self._numeric(node.left, depth + 1) and self._numeric(node.right, depth + 1)
        if isinstance(node, n.CondExpr):
            return self._numeric(node.expr1, depth + 1) and (
                node.expr2 is None or self._numeric(node.expr2, depth + 1))
        if isinstance(node, (n.Compare, n.Not, n.And, n.Or, n.Test)):
            return isinstance(node, (n.Compare, n.Not, n.Test))  # bools; and/or pass values
        if isinstance(node, n.Filter):
            return node.name in NUMERIC_FILTERS
        if isinstance(node, n.Getattr) and isinstance(node.node, n.Name):
            if node.node.name == "loop":
                return node.attr in ("index", "index0", "revindex", "revindex0", "length",
                                     "depth", "depth0", "first", "last")
            return self._set_to_numbers(f"{node.node.name}.{node.attr}", depth)
        if isinstance(node, n.Name):
            return self._set_to_numbers(node.name, depth)
        return False

    def _set_to_numbers(self, name: str, depth: int) -> bool:
        values = self.sets.get(name) or []
        return bool(values) and all(
            v is not None and (self._range(v) or self._numeric(v, depth + 1)) for v in values)
