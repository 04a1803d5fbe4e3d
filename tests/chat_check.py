#!/usr/bin/env python3
"""mt-tokenize --chat against transformers' apply_chat_template, token for token and mask for mask.

usage: chat_check.py MT_TOKENIZE SOURCE_DIR SCRATCH_DIR
Trains a small byte-level BPE tokenizer (Llama-3 style pre-tokenizer) on data/tinyshakespeare.txt
at test time, with the special tokens of the three built-in chat formats. For each format
(chatml, llama3, mistral) a Jinja chat template that renders it, with the assistant turns in
{% generation %} blocks, gives transformers' input_ids and assistant_masks for a set of
conversations (several turns, system messages, leading and trailing whitespace, non-ASCII text,
special-token text inside a message); mt-tokenize --chat-format writes them as one masked shard,
whose tokens and target bits must be the same, conversation after conversation. Then the
format told from tokenizer_config.json: a Qwen2-style ChatML template with a default system
message, against transformers' ids. ShareGPT ("conversations") and Alpaca ("instruction",
"input", "output", "system") lines against apply_chat_template on the messages LlamaFactory
maps them to, in each format, and the lines it cannot map refused by line number. Exits 77
(skipped) without transformers and tokenizers.
"""
import json
import os
import shutil
import struct
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

try:
    from transformers import PreTrainedTokenizerFast
    import tokenize_check  # its tokenizer trainer and check(); exits 77 without tokenizers
except ImportError as e:
    print(f"SKIPPED: {e}")
    sys.exit(77)
check = tokenize_check.check
SPECIAL = ["<|im_start|>", "<|im_end|>", "<|begin_of_text|>", "<|start_header_id|>",
           "<|end_header_id|>", "<|eot_id|>", "<s>", "</s>"]
TEMPLATES = {
    "chatml": "{% for m in messages %}{{ '<|im_start|>' + m['role'] + '\\n' }}"
              "{% if m['role'] == 'assistant' %}{% generation %}{{ m['content'] + '<|im_end|>' }}"
              "{% endgeneration %}{% else %}{{ m['content'] + '<|im_end|>' }}{% endif %}"
              "{{ '\\n' }}{% endfor %}",
    "llama3": "{{ '<|begin_of_text|>' }}{% for m in messages %}"
              "{{ '<|start_header_id|>' + m['role'] + '<|end_header_id|>\\n\\n' }}"
              "{% if m['role'] == 'assistant' %}{% generation %}"
              "{{ m['content'] | trim + '<|eot_id|>' }}{% endgeneration %}"
              "{% else %}{{ m['content'] | trim + '<|eot_id|>' }}{% endif %}{% endfor %}",
    "mistral": "{{ '<s>' }}{% for m in messages %}{% if m['role'] == 'user' %}"
               "{{ '[INST] ' + m['content'] + ' [/INST]' }}{% else %}{% generation %}"
               "{{ m['content'] + '</s>' }}{% endgeneration %}{% endif %}{% endfor %}",
}
# Qwen2's template (its shape): a default system message when the conversation has none.
QWEN2 = ("{% for message in messages %}{% if loop.first and messages[0]['role'] != 'system' %}"
         "{{ '<|im_start|>system\\nYou are a helpful assistant.<|im_end|>\\n' }}{% endif %}"
         "{{'<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>' + '\\n'}}"
         "{% endfor %}")


def conversations(with_system):
    c = [
        [{"role": "user", "content": "What is the hour?"},
         {"role": "assistant", "content": "It is the twelfth hour, my lord."}],
        [{"role": "user", "content": "  Speak,   speak!\n"},
         {"role": "assistant", "content": "\n\nI will speak: naïve café, 東京 ✨ "},
         {"role": "user", "content": "Again <|im_end|> and </s> inside"},
         {"role": "assistant", "content": "Once more, with feeling.\n"}],
        [{"role": "user", "content": "x"}, {"role": "assistant", "content": ""}],
    ]
    if with_system:
        c.append([{"role": "system", "content": "You are Hamlet."},
                  {"role": "user", "content": "To be?"},
                  {"role": "assistant", "content": " Or not to be: that is the question."}])
    return c




def read_shard(path):
    blob = open(path, "rb").read()
    magic, version, width, count = struct.unpack("<8sIIQ", blob[:24])
    flags = struct.unpack("<I", blob[24:28])[0] if version == 2 else 0
    tokens = list(struct.unpack("<%d%s" % (count, "H" if width == 2 else "I"),
                                blob[256:256 + count * width]))
    bits = blob[256 + count * width:] if flags & 1 else None
    mask = [bits[i >> 3] >> (i & 7) & 1 for i in range(count)] if bits else [1] * count
    return tokens, mask


# ShareGPT and Alpaca lines, and the messages LlamaFactory's converters make of them
# (data/converter.py): a ShareGPT system turn first if at all, human -> user, gpt -> assistant;
# Alpaca's user turn is instruction + "\n" + input, either alone when the other is empty. An empty
# system message is none.
SHAREGPT = [
    {"conversations": [{"from": "human", "value": "What is the hour?"},
                       {"from": "gpt", "value": "It is the twelfth hour, my lord."}]},
    {"conversations": [{"from": "system", "value": "You are Hamlet."},
                       {"from": "human", "value": "  To be?\n"},
                       {"from": "gpt", "value": " Or not to be."},
                       {"from": "human", "value": "naïve café, 東京 ✨"},
                       {"from": "gpt", "value": "That is the question.\n"}]},
    {"conversations": [{"from": "system", "value": ""}, {"from": "human", "value": "x"},
                       {"from": "gpt", "value": ""}]},
]
ALPACA = [
    {"instruction": "Speak the speech.", "input": "I pray you", "output": "Trippingly on the tongue."},
    {"instruction": "Say the hour.", "input": "", "output": "Twelve."},
    {"instruction": "Say the hour.", "output": "Twelve.", "system": "You are Horatio."},
    {"instruction": "", "input": "Only the input", "output": " and the output\n", "system": ""},
]
# Lines LlamaFactory skips (or cannot read) and mt-tokenize refuses, naming the line.
REFUSED = [
    ({"conversations": [{"from": "gpt", "value": "a"}, {"from": "human", "value": "b"}]},
     "from \"gpt\" where \"human\" is due"),
    ({"conversations": [{"from": "human", "value": "a"}]}, "does not end with a \"gpt\" turn"),
    ({"conversations": [{"from": "human", "value": 3}, {"from": "gpt", "value": "b"}]},
     "no string \"value\""),
    ({"instruction": "a"}, "no string \"output\""),
    ({"instruction": ["a"], "output": "b"}, "\"instruction\": not a string"),
    ({"instruction": "a", "output": "b", "history": [["c", "d"]]}, "\"history\": not read"),
    ({"prompt": "a", "completion": "b"}, "no \"messages\", \"conversations\""),
]


def mapped(line):
    if "conversations" in line:
        turns, out = line["conversations"], []
        if turns and turns[0]["from"] == "system":
            out += [{"role": "system", "content": turns[0]["value"]}] if turns[0]["value"] else []
            turns = turns[1:]
        role = {"human": "user", "gpt": "assistant"}
        return out + [{"role": role[t["from"]], "content": t["value"]} for t in turns]
    query = [x for x in (line.get("instruction"), line.get("input")) if x]
    system = [{"role": "system", "content": line["system"]}] if line.get("system") else []
    return system + [{"role": "user", "content": "\n".join(query)},
                     {"role": "assistant", "content": line["output"]}]


def ours(mt, tok_json, convs, work, name, extra, lines=None):
    src = os.path.join(work, name + ".jsonl")
    with open(src, "w") as f:
        for line in lines or [{"messages": c} for c in convs]:
            f.write(json.dumps(line, ensure_ascii=False) + "\n")
    prefix = os.path.join(work, name)
    p = subprocess.run([mt, "-q", "-t", tok_json, "-o", prefix, *extra, src],
                       capture_output=True, text=True)
    check(p.returncode == 0, f"{name}: mt-tokenize exited {p.returncode}: {p.stderr.strip()}")
    return read_shard(prefix + "_000000.bin") if p.returncode == 0 else ([], [])


def hub_formats(mt, tok_json, work, hf, fmt, tpl):
    """ShareGPT and Alpaca lines against apply_chat_template on the messages they map to."""
    for name, lines in (("sharegpt", SHAREGPT), ("alpaca", ALPACA)):
        if fmt == "mistral":  # no system turn there
            lines = [l for l in lines if not any(m["role"] == "system" for m in mapped(l))]
        want_ids, want_mask = [], []
        for line in lines:
            r = hf.apply_chat_template(mapped(line), chat_template=tpl, tokenize=True,
                                       return_dict=True, return_assistant_tokens_mask=True)
            want_ids += r["input_ids"]
            want_mask += r["assistant_masks"]
        got_ids, got_mask = ours(mt, tok_json, None, work, f"{fmt}-{name}",
                                 ["--chat-format", fmt], lines)
        same = got_ids == want_ids and got_mask == want_mask
        check(same, f"{fmt} {name}: ids or masks differ\n  ours {got_ids} {got_mask}\n"
                    f"  hf   {want_ids} {want_mask}")
        print(f"{'ok  ' if same else 'FAIL'} {fmt}, {name} lines: {len(lines)} conversations, "
              f"{len(want_ids)} tokens, {sum(want_mask)} targets")


def refuse(mt, tok_json, work, name, bad):
    """bad as the second line of a file: the exit code and what mt-tokenize said."""
    src = os.path.join(work, name + ".jsonl")
    with open(src, "w") as f:
        f.write(json.dumps(ALPACA[0]) + "\n" + json.dumps(bad) + "\n")
    p = subprocess.run([mt, "-q", "-t", tok_json, "-o", os.path.join(work, name),
                        "--chat-format", "chatml", src], capture_output=True, text=True)
    return p.returncode, p.stderr.strip(), src


def refusals(mt, tok_json, work):
    """Each bad line refused as a bad "messages" line is: the same exit code, one line naming
    FILE:2 and the fault."""
    code, err, _ = refuse(mt, tok_json, work, "refused-messages", {"messages": [{"role": "x"}]})
    check(code != 0 and len(err.splitlines()) == 1, f"a bad messages line: exit {code}, {err!r}")
    bad = 0
    for i, (line, why) in enumerate(REFUSED):
        got, err, src = refuse(mt, tok_json, work, f"refused{i}", line)
        ok = got == code and f"{src}:2:" in err and why in err and len(err.splitlines()) == 1
        check(ok, f"refused line {i}: exit {got}, {err!r}; expected {code} and {why!r}")
        bad += not ok
    print(f"{'ok  ' if not bad else 'FAIL'} {len(REFUSED)} ShareGPT and Alpaca lines refused by "
          f"line number, exit {code} as a bad \"messages\" line")


def main():
    if len(sys.argv) != 4:
        sys.exit(__doc__)
    mt, src, work = sys.argv[1:]
    shutil.rmtree(work, ignore_errors=True)
    os.makedirs(work)
    tok_json = os.path.join(work, "tokenizer.json")
    tokenize_check.train("llama3", os.path.join(src, "data", "tinyshakespeare.txt"), 1500,
                         SPECIAL).save(tok_json)
    hf = PreTrainedTokenizerFast(tokenizer_file=tok_json)
    for fmt, tpl in TEMPLATES.items():
        convs = conversations(with_system=(fmt != "mistral"))
        want_ids, want_mask = [], []
        for c in convs:
            r = hf.apply_chat_template(c, chat_template=tpl, tokenize=True, return_dict=True,
                                       return_assistant_tokens_mask=True)
            want_ids += r["input_ids"]
            want_mask += r["assistant_masks"]
        got_ids, got_mask = ours(mt, tok_json, convs, work, fmt, ["--chat-format", fmt])
        check(got_ids == want_ids, f"{fmt}: ids differ\n  ours {got_ids}\n  hf   {want_ids}")
        check(got_mask == want_mask, f"{fmt}: masks differ\n  ours {got_mask}\n  hf   {want_mask}")
        print(f"{'ok  ' if got_ids == want_ids and got_mask == want_mask else 'FAIL'} {fmt}: "
              f"{len(convs)} conversations, {len(want_ids)} tokens, {sum(want_mask)} targets")
        hub_formats(mt, tok_json, work, hf, fmt, tpl)
    # The format from tokenizer_config.json: Qwen2's ChatML with its default system message.
    with open(os.path.join(work, "tokenizer_config.json"), "w") as f:
        json.dump({"chat_template": QWEN2}, f)
    convs = conversations(with_system=True)
    want = [i for c in convs for i in hf.apply_chat_template(c, chat_template=QWEN2, tokenize=True,
                                                             return_dict=True)["input_ids"]]
    got, mask = ours(mt, tok_json, convs, work, "detected", ["--chat"])
    check(got == want, f"qwen2 template: ids differ\n  ours {got}\n  hf   {want}")
    check(0 < sum(mask) < len(mask), "qwen2 template: no targets or no context")
    print(f"{'ok  ' if got == want else 'FAIL'} --chat with Qwen2's template (a default system "
          f"message): {len(want)} tokens")
    refusals(mt, tok_json, work)
    if tokenize_check.failures:
        sys.exit(1)


if __name__ == "__main__":
    main()
