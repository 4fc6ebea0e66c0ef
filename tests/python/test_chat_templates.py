"""Chat templates: stride's C renderers (src/server/chat_template.c) against the models'
real templates (tests/data/chat_templates/*.jinja) rendered by jinja2 as Hugging Face's
apply_chat_template renders them (a sandboxed environment with trim_blocks and
lstrip_blocks, raise_exception). Every template must be recognised as its family, render
every conversation byte for byte the same, and templates that say something else must not
be recognised."""
import argparse
import json
import os
import subprocess
import sys

import jinja2
import jinja2.sandbox

from harness import Checks

CHECKS = Checks()
check = CHECKS.check
HERE = os.path.dirname(os.path.abspath(__file__))
TEMPLATES = os.path.join(HERE, "..", "data", "chat_templates")

# file, family, bos, eos (the token texts of the family's vocabularies)
FAMILIES = [
    ("llama3.jinja", "llama3", "<|begin_of_text|>", "<|eot_id|>"),
    ("llama-3.2.jinja", "llama3.2", "<|begin_of_text|>", "<|eot_id|>"),
    ("chatml.jinja", "chatml", "", "<|im_end|>"),
    ("qwen3.jinja", "qwen3", "", "<|im_end|>"),
    ("gemma-3.jinja", "gemma3", "<bos>", "<eos>"),
    ("phi-3.5-mini.jinja", "phi3", "<s>", "<|endoftext|>"),
    ("phi-4-mini.jinja", "phi4", "<|endoftext|>", "<|endoftext|>"),
    ("olmoe.jinja", "olmoe", "<|endoftext|>", "<|endoftext|>"),
]

S, U, A = "system", "user", "assistant"


def m(role, content, **kw):
    return {"role": role, "content": content, **kw}


CONVERSATIONS = [
    [m(U, "Hello")],
    [m(S, "You are a helpful assistant"), m(U, "Hello")],
    [m(S, "You are a helpful assistant"), m(U, "Hello"), m(A, "Hi there"), m(U, "Who are you")],
    [m(U, "  padded  \n"), m(A, "   I am an assistant   "), m(U, "\tAnother question\n\n")],
    [m(S, "  sys with spaces  "), m(U, "Ünïcödé ✓ 日本語\u3000"), m(A, "\u00a0nbsp\u2003"), m(U, "x")],
    [m(U, "a"), m(A, "b"), m(U, "c"), m(A, "d"), m(U, "e")],
    [m(S, ""), m(U, "empty system")],
    [m(U, "line one\nline two\n\nline four")],
    [m(U, "Hi"), m(A, "Hello! How can I help?")],  # ends with the assistant (continuation)
]

QWEN3_EXTRA = [
    [m(U, "2+2?"), m(A, "<think>\nadd them\n</think>\n\n4"), m(U, "and 3+3?")],
    [m(U, "2+2?"), m(A, "<think>\nadd\n</think>\n\n4")],
    [m(U, "q"), m(A, "answer", reasoning_content="\nthought\n"), m(U, "q2"), m(A, "a2", reasoning_content="r2")],
    [m(U, "q"), m(A, "no think tags"), m(U, "q2"), m(A, "\n\nlater")],
    [m(U, "<tool_response>x</tool_response>")],
    [m(S, "s1"), m(U, "u"), m(S, "s2"), m(U, "u2")],
    [m(U, "q"), m(A, "<think>a</think>b</think>c")],
]


def jinja_render(src, messages, bos, eos, add_gen, enable_thinking, date):
    env = jinja2.sandbox.ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True)

    def raise_exception(msg):
        raise jinja2.exceptions.TemplateError(msg)

    env.globals["raise_exception"] = raise_exception
    env.globals["strftime_now"] = lambda fmt: date
    kw = {}
    if enable_thinking != -1:
        kw["enable_thinking"] = bool(enable_thinking)
    try:
        return env.from_string(src).render(messages=messages, bos_token=bos, eos_token=eos,
                                           add_generation_prompt=add_gen, **kw), None
    except jinja2.exceptions.TemplateError as e:
        return None, str(e)


def render_c(tool, cases):
    p = subprocess.run([tool], input=json.dumps(cases), capture_output=True, encoding="utf-8")
    if p.returncode != 0:
        raise RuntimeError(f"chat_template_render failed: {p.stderr}")
    return json.loads(p.stdout)


def test_families(tool):
    cases, expected = [], []
    for file, family, bos, eos in FAMILIES:
        src = open(os.path.join(TEMPLATES, file), encoding="utf-8").read()
        convs = CONVERSATIONS + (QWEN3_EXTRA if family == "qwen3" else [])
        for conv in convs:
            for add_gen in (True, False):
                for thinking in ((-1, 0, 1) if family == "qwen3" else (-1,)):
                    want, error = jinja_render(src, conv, bos, eos, add_gen, thinking, "03 Mar 2031")
                    cases.append({"template": src, "bos": bos, "eos": eos, "add_generation_prompt": add_gen,
                                  "enable_thinking": thinking, "date": "03 Mar 2031", "messages": conv})
                    expected.append((file, family, conv, add_gen, thinking, want, error))
    results = render_c(tool, cases)
    for (file, family, conv, add_gen, thinking, want, error), got in zip(expected, results):
        what = f"{file} {json.dumps(conv)[:120]} add_generation_prompt={add_gen} enable_thinking={thinking}"
        check(got.get("family") == family, f"{what}: recognised as {got.get('family')}, not {family}")
        if error is not None:
            check("error" in got, f"{what}: jinja2 raised '{error}', stride rendered {got.get('prompt')!r}")
        else:
            check(got.get("prompt") == want, f"{what}:\n  jinja2 {want!r}\n  stride {got.get('prompt')!r} "
                                             f"{got.get('error', '')}")


def test_gemma_alternation(tool):
    src = open(os.path.join(TEMPLATES, "gemma-3.jinja"), encoding="utf-8").read()
    for conv in ([m(U, "a"), m(U, "b")], [m(A, "a")], [m(S, "s"), m(A, "a"), m(U, "b")]):
        want, error = jinja_render(src, conv, "<bos>", "<eos>", True, -1, "")
        got = render_c(tool, [{"template": src, "bos": "<bos>", "eos": "<eos>", "add_generation_prompt": True,
                               "enable_thinking": -1, "messages": conv}])[0]
        check(error is not None and "error" in got and "alternate" in got["error"],
              f"gemma3 refuses {conv}: jinja2 {error!r}, stride {got}")


def test_llama32_today(tool):
    """Without a date, Llama 3.2's block carries today's date (strftime_now)."""
    import time
    src = open(os.path.join(TEMPLATES, "llama-3.2.jinja"), encoding="utf-8").read()
    got = render_c(tool, [{"template": src, "bos": "<|begin_of_text|>", "eos": "", "add_generation_prompt": True,
                           "enable_thinking": -1, "messages": [m(U, "hi")]}])[0]
    check(time.strftime("Today Date: %d %b %Y") in got.get("prompt", ""), f"llama3.2 dates today: {got}")


def test_not_recognised(tool):
    chatml = open(os.path.join(TEMPLATES, "chatml.jinja"), encoding="utf-8").read()
    llama3 = open(os.path.join(TEMPLATES, "llama3.jinja"), encoding="utf-8").read()
    qwen3 = open(os.path.join(TEMPLATES, "qwen3.jinja"), encoding="utf-8").read()
    gemma3 = open(os.path.join(TEMPLATES, "gemma-3.jinja"), encoding="utf-8").read()
    others = {
        # Qwen2.5: ChatML with a default system prompt stride would not write
        "qwen2.5 default system": "{%- if messages[0]['role'] != 'system' %}{{- '<|im_start|>system\\nYou are Qwen, "
                                  "created by Alibaba Cloud. You are a helpful assistant.<|im_end|>\\n' }}{%- endif %}"
                                  + chatml,
        # Gemma 1/2: no system turn
        "gemma-7b-it": "{% if messages[0]['role'] == 'system' %}{{ raise_exception('System role not supported') }}"
                       "{% endif %}{% for message in messages %}{{ '<start_of_turn>' + message['role'] + '\\n' + "
                       "message['content'] | trim + '<end_of_turn>\\n' }}{% endfor %}{% if add_generation_prompt %}"
                       "{{'<start_of_turn>model\\n'}}{% endif %}",
        # the first Phi-3-mini: the assistant header after every user turn
        "phi-3-mini first": "{{ bos_token }}{% for message in messages %}{% if (message['role'] == 'user') %}"
                            "{{'<|user|>' + '\\n' + message['content'] + '<|end|>' + '\\n' + '<|assistant|>' + '\\n'}}"
                            "{% elif (message['role'] == 'assistant') %}{{message['content'] + '<|end|>' + '\\n'}}"
                            "{% endif %}{% endfor %}",
        "llama3 plus text": llama3 + "Always answer in French.",
        "llama3 other literal": llama3.replace("'<|eot_id|>' %}", "'<|eot_id|>' + 'x' %}"),
        "qwen3 without enable_thinking": qwen3.replace("enable_thinking", "thinking_mode"),
        "gemma3 renamed turn": gemma3.replace('set role = "model"', 'set role = "bot"'),
        "mistral": "{{ bos_token }}{% for message in messages %}{% if message['role'] == 'user' %}{{ '[INST] ' + "
                   "message['content'] + ' [/INST]' }}{% else %}{{ message['content'] + eos_token}}{% endif %}"
                   "{% endfor %}",
        "empty": "",
        "unterminated": "{{ '<|im_start|>' + ",
    }
    cases = [{"template": t, "bos": "<s>", "eos": "</s>", "add_generation_prompt": True, "enable_thinking": -1,
              "messages": [m(U, "hi")]} for t in others.values()]
    for name, got in zip(others, render_c(tool, cases)):
        check("error" in got and "--chat-template" in got["error"],
              f"'{name}' is not recognised, and the error names --chat-template: {got}")


def test_names(tool):
    names = ["llama3", "llama3.1", "llama3.2", "chatml", "qwen3", "gemma3", "phi3", "phi4", "olmoe"]
    cases = [{"template": None, "name": n, "bos": "<s>", "eos": "</s>", "add_generation_prompt": True,
              "enable_thinking": -1, "date": "01 Jan 2030", "messages": [m(U, "hi")]} for n in names]
    cases.append({"template": None, "name": "jinja", "messages": [m(U, "hi")]})
    cases.append({"template": None, "name": None, "messages": [m(U, "hi")]})
    got = render_c(tool, cases)
    for n, g in zip(names, got):
        check(g.get("family") == n and "hi" in g.get("prompt", ""), f"--chat-template {n}: {g}")
    check("error" in got[-2] and "--chat-template" in got[-2]["error"], f"an unknown name is an error: {got[-2]}")
    check("error" in got[-1] and "--chat-template" in got[-1]["error"], f"no template is an error: {got[-1]}")
    llama31 = [g for n, g in zip(names, got) if n == "llama3.1"][0]
    check("Today Date: 01 Jan 2030" in llama31.get("prompt", ""), f"llama3.1 takes the given date: {llama31}")
    bad = render_c(tool, [{"template": None, "name": "chatml", "add_generation_prompt": True, "enable_thinking": -1,
                           "messages": [m("tool", "x")]}])[0]
    check("error" in bad and "role" in bad["error"], f"a role other than system/user/assistant is refused: {bad}")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--stride", required=True)
    ap.add_argument("--work", required=True)
    args = ap.parse_args()
    tool = os.environ.get("STRIDE_CHAT_TEMPLATE_RENDER") or os.path.join(os.path.dirname(args.stride),
                                                                        "tests", "chat_template_render")
    if not os.path.exists(tool):
        print(f"chat_template_render not found at {tool} (set STRIDE_CHAT_TEMPLATE_RENDER)")
        return 1
    test_families(tool)
    test_gemma_alternation(tool)
    test_llama32_today(tool)
    test_not_recognised(tool)
    test_names(tool)
    return CHECKS.exit_code()


if __name__ == "__main__":
    sys.exit(main())
