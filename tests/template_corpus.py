"""Chat templates: ones that reach past the renderers' sandbox, each citing its source, and
benign twins that the renderers' own environment renders (jinja2's ImmutableSandboxedEnvironment
with loopcontrols, as llama-cpp-python's Jinja2ChatFormatter and transformers render them).
Every malicious payload would create /tmp/<MARKER> if it ran outside the sandbox."""

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
    # A single underscore is hidden too (jinja2's is_internal_attribute, and `_module`).
    "single-underscore": "{{ cycler._module }}",
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
}


def render_unsandboxed(template: str) -> str:
    """As a renderer without a sandbox does (jinja2's plain Environment)."""
    from jinja2 import Environment

    return Environment(extensions=["jinja2.ext.loopcontrols"]).from_string(template).render(
        messages=[{"role": "user", "content": "hi"}], add_generation_prompt=True)


def render(template: str) -> str:
    """As the renderers do: ImmutableSandboxedEnvironment with loopcontrols."""
    from jinja2.sandbox import ImmutableSandboxedEnvironment

    env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True,
                                        extensions=["jinja2.ext.loopcontrols"])
    return env.from_string(template).render(
        messages=[{"role": "user", "content": "hi"}, {"role": "assistant", "content": "yo"}],
        add_generation_prompt=True, bos_token="<s>", eos_token="</s>")


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
