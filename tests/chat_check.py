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
message, against transformers' ids. Exits 77 (skipped) without transformers and tokenizers.
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


def ours(mt, tok_json, convs, work, name, extra):
    src = os.path.join(work, name + ".jsonl")
    with open(src, "w") as f:
        for c in convs:
            f.write(json.dumps({"messages": c}, ensure_ascii=False) + "\n")
    prefix = os.path.join(work, name)
    p = subprocess.run([mt, "-q", "-t", tok_json, "-o", prefix, *extra, src],
                       capture_output=True, text=True)
    check(p.returncode == 0, f"{name}: mt-tokenize exited {p.returncode}: {p.stderr.strip()}")
    return read_shard(prefix + "_000000.bin") if p.returncode == 0 else ([], [])


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
    # The format from tokenizer_config.json: Qwen2's ChatML with its default system message.
    with open(os.path.join(work, "tokenizer_config.json"), "w") as f:
        json.dump({"chat_template": QWEN2}, f)
    convs = conversations(with_system=True)
    want = [i for c in convs for i in hf.apply_chat_template(c, chat_template=QWEN2, tokenize=True)]
    got, mask = ours(mt, tok_json, convs, work, "detected", ["--chat"])
    check(got == want, f"qwen2 template: ids differ\n  ours {got}\n  hf   {want}")
    check(0 < sum(mask) < len(mask), "qwen2 template: no targets or no context")
    print(f"{'ok  ' if got == want else 'FAIL'} --chat with Qwen2's template (a default system "
          f"message): {len(want)} tokens")
    if tokenize_check.failures:
        sys.exit(1)


if __name__ == "__main__":
    main()
