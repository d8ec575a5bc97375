"""Chat templates: ones that reach past the renderers' sandbox, each citing its source, and
benign twins that transformers' own renderer renders (`render_jinja_template`: jinja2's
ImmutableSandboxedEnvironment with loopcontrols and `{% generation %}`). Every malicious payload,
rendered outside the sandbox, runs `touch /tmp/<MARKER>` or shows what the sandbox hides (a
Python class, the render's context); tests/unit/test_templates.py renders each so."""

from __future__ import annotations

from pathlib import Path

MARKER = "wlock-template-ran"
CMD = f"touch /tmp/{MARKER}"

MALICIOUS = {
    # CVE-2024-34359 (llama-cpp-python, "Llama Drama"): the GGUF metadata's chat template
    # walked to os.popen through `self`'s globals.
    "self-globals": "{{ self.__init__.__globals__.__builtins__.__import__('os').popen('"
                    + CMD + "').read() }}",
    # The same class of payload through the subclasses of object (the CVE's write-up).
    "subclasses": "{% for c in [].__class__.__base__.__subclasses__() %}"
                  "{% if c.__name__ == 'catch_warnings' %}{{ c()._module.__builtins__"
                  "['__import__']('os').popen('" + CMD + "').read() }}{% endif %}{% endfor %}",
    # jinja2's own globals: cycler, joiner, lipsum, namespace reach their module's globals.
    "cycler": "{{ cycler.__init__.__globals__.os.popen('" + CMD + "').read() }}",
    "lipsum": "{{ lipsum.__globals__['os'].popen('" + CMD + "').read() }}",
    # The attr filter and a name built at render time (the sandbox bypass write-ups).
    "attr-built": "{{ (''|attr('__cla' ~ 'ss__')).mro() }}",
    # A format string reaching attributes (CVE-2016-10745, str.format in the sandbox).
    "format-string": "{{ '{0.__class__.__mro__}'.format(messages) }}",
    # map(attribute=...) over a hidden attribute.
    "map-attribute": "{{ messages|map(attribute='__class__')|list }}",
    # A name computed at render time (issue 58): jinja2's getitem falls back to getattr for
    # a string key, so a built key reaches what a constant one would.
    "computed-cycler": "{% set u = '_' ~ '_' %}{{ cycler[u ~ 'init' ~ u][u ~ 'globals' ~ u]"
                       "['os'].popen('" + CMD + "').read() }}",
    "computed-lipsum": "{% set u = '_' * 2 %}{{ lipsum[u ~ 'globals' ~ u]['os'].popen('"
                       + CMD + "').read() }}",
    "dict-keys": "{% set n = dict(__init__=1, __globals__=2)|list %}"
                 "{{ cycler[n[0]][n[1]]['os'].popen('" + CMD + "').read() }}",
    "map-attr-built": "{% set u = '_' ~ '_' %}{% set f = [cycler]|map('attr', u ~ 'init' ~ u)"
                      "|first %}{{ f[u ~ 'globals' ~ u]['os'].popen('" + CMD + "').read() }}",
    "map-attribute-built": "{% set u = '%c%c'|format(95, 95) %}{% set f = [cycler]|map("
                           "attribute=u ~ 'init' ~ u)|first %}{{ f[u ~ 'globals' ~ u]['os']"
                           ".popen('" + CMD + "').read() }}",
    # A single underscore is hidden too (jinja2's is_internal_attribute): `self`'s mangled
    # `__context` hands over the render's whole context, every global in it.
    "single-underscore": "{{ self._TemplateReference__context }}",
    # Each guard of the two shapes of computed key the judge accepts (a mapping read by its
    # own keys, a dict the template writes out): a key taken from one mapping used on another
    # object, the mapping set again inside the loop, the dict's name rebound by a macro's
    # argument, by a later set, by a loop.
    "own-key-elsewhere": "{% set u = '_' ~ '_' %}{% set d = {u ~ 'globals' ~ u: 1} %}"
                         "{% for k in d.keys() %}{{ lipsum[k]['os'].popen('" + CMD
                         + "').read() }}{% endfor %}",
    "own-key-rebound": "{% set u = '_' ~ '_' %}{% set d = {u ~ 'globals' ~ u: 1} %}"
                       "{% for k in d.keys() %}{% set d = lipsum %}{{ d[k]['os'].popen('"
                       + CMD + "').read() }}{% endfor %}",
    "dict-shadowed-by-macro": "{% set u = '_' ~ '_' %}{% set d = {'a': 1} %}{% macro m(d) %}"
                              "{{ d[u ~ 'globals' ~ u]['os'].popen('" + CMD + "').read() }}"
                              "{% endmacro %}{{ m(lipsum) }}",
    "dict-set-again": "{% set u = '_' ~ '_' %}{% set d = {'a': 1} %}{% if true %}"
                      "{% set d = lipsum %}{% endif %}{{ d[u ~ 'globals' ~ u]['os'].popen('"
                      + CMD + "').read() }}",
    "dict-by-loop": "{% set u = '_' ~ '_' %}{% set d = {'a': 1} %}{% for d in [lipsum] %}"
                    "{{ d[u ~ 'globals' ~ u]['os'].popen('" + CMD + "').read() }}{% endfor %}",
    # ... and a global's name, set to a dict on a path not taken: there it is the global.
    "dict-named-as-global": "{% set u = '_' ~ '_' %}{% if false %}{% set lipsum = {'a': 1} %}"
                            "{% endif %}{{ lipsum[u ~ 'globals' ~ u]['os'].popen('" + CMD
                            + "').read() }}",
}

BENIGN = {
    # The shapes real chat templates have (Llama 3, ChatML, one with a system default).
    "llama3": "{% set loop_messages = messages %}{% for message in loop_messages %}"
              "{% set content = '<|start_header_id|>' + message['role'] + "
              "'<|end_header_id|>\\n\\n' + message['content'] | trim + '<|eot_id|>' %}"
              "{% if loop.index0 == 0 %}{% set content = bos_token + content %}{% endif %}"
              "{{ content }}{% endfor %}{% if add_generation_prompt %}"
              "{{ '<|start_header_id|>assistant<|end_header_id|>\\n\\n' }}{% endif %}",
    "chatml": "{% for message in messages %}{{'<|im_start|>' + message['role'] + '\\n' + "
              "message['content'] + '<|im_end|>' + '\\n'}}{% endfor %}"
              "{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}",
    "system-default": "{% if messages[0]['role'] != 'system' %}{{ 'You are helpful.' }}"
                      "{% endif %}{% for m in messages %}{% if m['role'] == 'user' %}"
                      "{{ '[INST] ' + m['content'] + ' [/INST]' }}{% elif loop.last %}"
                      "{{ m['content'] }}{% else %}{{ m['content'] + eos_token }}{% endif %}"
                      "{% if loop.index > 50 %}{% break %}{% endif %}{% endfor %}",
    # Items by an index computed from numbers (the shape of Qwen's and Mistral's templates).
    "computed-index": "{% set ns = namespace(last=-1) %}{% for m in messages %}"
                      "{% if m['role'] == 'user' %}{% set ns.last = loop.index0 %}{% endif %}"
                      "{% endfor %}{% for i in range(messages|length) %}"
                      "{{ messages[i]['content'] }}{% if i == ns.last %}{{ '!' }}{% endif %}"
                      "{% endfor %}{{ messages[ns.last]['role'] }}"
                      "{{ messages[(messages|length) - 1]['content'] }}"
                      "{{ messages|map(attribute='content')|join(' ') }}"
                      "{{ messages|selectattr('role', 'equalto', 'user')|list|length }}",
    # Computed keys real templates use (issue 58's corpus): a tool's parameter fields read
    # by their own keys (Qwen3-Coder), a table the template writes out read by the caller's
    # key (Granite Guardian's risk_bank, Llama Guard's categories), and transformers'
    # `{% generation %}` block (Phi-4-reasoning).
    "own-keys": "{% for m in messages %}{% for key in m.keys()|reject('in', ['role']) %}"
                "{{ m[key] }}{% endfor %}{% for k, v in m|items %}{{ m[k] }}{% endfor %}"
                "{% endfor %}",
    "written-table": "{% set bank = {'harm': {'prompt': 'hi'}} %}{% set risk = 'harm' %}"
                     "{% if guardian_config %}{% set risk = guardian_config['risk_name'] %}"
                     "{% endif %}{{ bank[risk].prompt }}",
    "generation": "{% for m in messages %}{% if m['role'] == 'assistant' %}{% generation %}"
                  "{{ m['content'] }}{% endgeneration %}{% else %}{{ m['content'] }}"
                  "{% endif %}{% endfor %}",
}


def render_unsandboxed(template: str) -> str:
    """As a renderer without a sandbox does (jinja2's plain Environment)."""
    from jinja2 import Environment

    return Environment(extensions=["jinja2.ext.loopcontrols"]).from_string(template).render(
        messages=[{"role": "user", "content": "hi"}], add_generation_prompt=True)


def render(template: str) -> str:
    """As `apply_chat_template` does: transformers' own renderer (its sandboxed environment,
    with loopcontrols and the `{% generation %}` tag)."""
    from transformers.utils.chat_template_utils import render_jinja_template

    rendered, _ = render_jinja_template(
        conversations=[[{"role": "user", "content": "hi"},
                        {"role": "assistant", "content": "yo"}]],
        chat_template=template, add_generation_prompt=True, bos_token="<s>",
        eos_token="</s>")
    return str(rendered[0])


def gguf_with_template(path: Path, template: str | None, vocab: int = 2000,
                       rows: int = 4, big_endian: bool = False) -> Path:
    """A GGUF file as llama.cpp's converter writes one: a vocabulary (a string array) before
    the chat template, and one tensor; in the big-endian byte order gguf-py also writes."""
    import gguf
    import numpy as np

    writer = gguf.GGUFWriter(str(path), "llama", endianess=gguf.GGUFEndian.BIG
                             if big_endian else gguf.GGUFEndian.LITTLE)
    writer.add_block_count(1)
    writer.add_tokenizer_model("gpt2")
    writer.add_token_list([f"tok{i}" for i in range(vocab)])
    writer.add_token_scores([0.0] * vocab)
    if template is not None:
        writer.add_chat_template(template)
    writer.add_tensor("w", np.ones((rows, 1024), dtype=np.float32))
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return path
