"""A chat template judged as the sandboxed renderers judge it, before anything renders it.

llama.cpp's bindings (llama-cpp-python's `Jinja2ChatFormatter`), transformers'
`apply_chat_template` and the serving stacks render a model's `tokenizer.chat_template` with
jinja2's `ImmutableSandboxedEnvironment`. A template that reaches past the sandbox does so
through names the sandbox is meant to hide: attributes that start with `_`
(`cycler.__init__.__globals__`, `self._TemplateReference__context`, the `__class__.__mro__`
walk of CVE-2024-34359), reached by `.name`, `["name"]`, the `attr` filter, `map(attribute=)`
or a format string (`"{0.__class__}".format(x)`). A real chat template names none of them.

So the template is parsed by jinja2 itself, with the extension the renderers enable
(`loopcontrols`), and every such reach is named; a name built at render time (`attr(x)`,
`attr("__cla" ~ "ss__")`) cannot be judged and is named as well. A template jinja2 cannot
parse is unknown, never clean. Nothing is rendered.
"""

from __future__ import annotations

# What a template may hold: past this, unknown (the largest chat templates on the Hub are
# tens of kB).
MAX_TEMPLATE = 1024 * 1024


def judge_template(text: str) -> tuple[tuple[str, ...], str | None]:
    """(each reach past the sandbox, in words, sorted; why it could not be judged, or None).
    An empty first part and None: a template that names nothing the sandbox hides."""
    from jinja2 import nodes
    from jinja2.exceptions import TemplateError
    from jinja2.sandbox import ImmutableSandboxedEnvironment

    if len(text) > MAX_TEMPLATE:
        return (), f"a template of {len(text):,} characters, past the {MAX_TEMPLATE:,} judged"
    env = ImmutableSandboxedEnvironment(extensions=["jinja2.ext.loopcontrols"])
    try:
        tree = env.parse(text)
        found: set[str] = set()
        for node in tree.find_all((nodes.Getattr, nodes.Getitem, nodes.Const, nodes.Filter,
                                   nodes.Keyword)):
            found.update(_reaches(node))
    except TemplateError as e:
        line = getattr(e, "lineno", None)
        where = f" (line {line})" if line else ""
        return (), f"jinja2 cannot parse it{where}: {e.message or type(e).__name__}"
    except (RecursionError, MemoryError) as e:
        return (), f"jinja2 cannot parse it: {type(e).__name__}"
    return tuple(sorted(found)), None


def _reaches(node: object) -> list[str]:
    """What one node of the parsed template reaches that the sandbox hides."""
    from jinja2 import nodes as n

    if isinstance(node, n.Getattr) and node.attr.startswith("_"):
        return [f"the attribute {node.attr}"]
    if isinstance(node, n.Getitem) and isinstance(node.arg, n.Const) and \
            isinstance(node.arg.value, str) and node.arg.value.startswith("_"):
        return [f"the item {node.arg.value!r}"]
    if isinstance(node, n.Const) and isinstance(node.value, str) and "__" in node.value:
        return [f"a string naming a hidden name ({node.value[:60]!r})"]
    if isinstance(node, n.Filter) and node.name == "attr":
        name = node.args[0] if node.args else None
        if not (isinstance(name, n.Const) and isinstance(name.value, str)):
            return ["the attr filter with a name built at render time"]
        if name.value.startswith("_"):
            return [f"the attribute {name.value} (attr filter)"]
    if isinstance(node, n.Keyword) and node.key == "attribute" and isinstance(
            node.value, n.Const) and isinstance(node.value.value, str) and \
            node.value.value.startswith("_"):
        return [f"the attribute {node.value.value} (map/sort/groupby)"]
    return []
