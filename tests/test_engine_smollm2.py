"""The JaxEngine on a real 30-layer model (SmolLM2-135M-Instruct, fetched and converted once by
`jaxwebrl.models.pretrained`, then cached): greedy outputs equal transformers' token for token over three
rounds of concurrent chat prompts whose lengths change from round to round (a GRPO-like pair of identical
prompts, second turns that extend the first round's conversations, new questions, the same questions
reworded), with the prefix cache off and on; and the programs the engine compiles, with its default
buckets, stay a fixed set bounded by its buckets however many prompt lengths it sees: a fourth round of
prompt lengths never seen before compiles nothing.

Small on purpose (the model runs at a few tokens per second per request on two shared cores): prompts of
20-120 tokens, 8 new tokens, a 128-position cache, prefill chunks of 32 tokens."""

from __future__ import annotations

import asyncio
import contextlib
from typing import Any, Iterator

import pytest
import torch
import transformers

from jaxwebrl.engines import JaxEngine, SamplingParams

MAX_LEN = 128
NEW = 8
CHUNK = 32  # prefill chunks of 32 tokens: context and capacity buckets 32, 64 and 128 (the engine's default)

QUESTIONS = [
    "What is the capital of France? Answer in one word.",
    "Write one sentence about why the sky looks blue during the day, for a ten year old who likes science.",
    "Name a fruit.",
    "List three things a web browser does when you type a web address and press the enter key; keep each under ten words.",
    "What is two plus two?",
    "Describe, in a single sentence, what a shopping cart on an online store is for, as if to a new shopper.",
]
FOLLOW_UPS = ["And of Italy?", "Now say it in five words."]


@contextlib.contextmanager
def _one_torch_thread() -> Iterator[None]:
    """torch on one thread for the references: its two spinning threads slow down badly on a machine that
    other jobs share (the values are the same up to float rounding)."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        yield
    finally:
        torch.set_num_threads(threads)


@pytest.fixture(scope="module")
def smollm2() -> dict[str, Any]:
    """The checkpoint, transformers' model and tokenizer on it, and the three rounds of prompts with
    transformers' greedy continuation of each (the second round extends the first round's references)."""
    from jaxwebrl.models.pretrained import fetch_pretrained

    path = fetch_pretrained("smollm2")
    tok = transformers.AutoTokenizer.from_pretrained(path)
    model = transformers.AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32).eval()
    gen_eos = transformers.GenerationConfig.from_pretrained(path).eos_token_id  # what the engine stops at too
    eos = sorted({tok.eos_token_id, *([gen_eos] if isinstance(gen_eos, int) else gen_eos)})

    def chat(text: str) -> list[int]:
        return list(tok.apply_chat_template([{"role": "user", "content": text}], add_generation_prompt=True,
                                            tokenize=True, return_dict=False))

    def reference(prompt: list[int]) -> list[int]:
        with torch.no_grad(), _one_torch_thread():
            out = model.generate(torch.tensor([prompt]), attention_mask=torch.ones(1, len(prompt), dtype=torch.long),
                                 do_sample=False, max_new_tokens=NEW, eos_token_id=eos, pad_token_id=eos[0])
        return out[0, len(prompt):].tolist()

    def turn(user: str) -> list[int]:
        return tok.encode(f"<|im_end|>\n<|im_start|>user\n{user}<|im_end|>\n<|im_start|>assistant\n",
                          add_special_tokens=False)

    first = [chat(QUESTIONS[0]), chat(QUESTIONS[1]), chat(QUESTIONS[1])]  # the last two: a group of two
    refs = {tuple(p): reference(p) for p in first}
    second = [first[0] + refs[tuple(first[0])] + turn(FOLLOW_UPS[0]), chat(QUESTIONS[2]),
              first[1] + refs[tuple(first[1])] + turn(FOLLOW_UPS[1])]
    third = [chat(q) for q in QUESTIONS[3:]]
    fourth = [chat(q.replace("?", ", please?").replace(".", ", please.", 1)) for q in QUESTIONS[3:]]
    rounds = [first, second, third, fourth]
    for prompts in rounds[1:]:
        refs.update({tuple(p): reference(p) for p in prompts})
    lengths = [len(p) for r in rounds for p in r]
    # Twelve prompts (the group's two identical): eleven lengths, and no round repeats an earlier round's.
    assert max(lengths) + NEW <= MAX_LEN and len(set(lengths)) == 11, lengths
    seen: set[int] = set()
    for prompts in rounds:
        assert not {len(p) for p in prompts} & seen, lengths
        seen |= {len(p) for p in prompts}
    return {"path": path, "rounds": rounds, "refs": refs, "lengths": lengths}


def _rounds(smollm2: dict[str, Any], prefix_cache: bool) -> tuple[JaxEngine, list[list[Any]], list[dict[str, int]]]:
    """The three rounds through one engine, each round's requests concurrent; the outputs and the engine's
    compile counts after each round."""
    sp = SamplingParams(greedy=True, max_new_tokens=NEW)

    async def main() -> tuple[JaxEngine, list[list[Any]], list[dict[str, int]]]:
        engine = JaxEngine.from_checkpoint(smollm2["path"], num_slots=4, max_len=MAX_LEN, prefix_cache=prefix_cache,
                                           prefill_chunk=CHUNK)
        outs, counts = [], []
        try:
            for prompts in smollm2["rounds"]:
                outs.append(list(await asyncio.gather(*(engine.generate(p, sp) for p in prompts))))
                counts.append(engine.compile_counts())
        finally:
            await engine.close()
        return engine, outs, counts

    return asyncio.run(main())


def _check(smollm2: dict[str, Any], engine: JaxEngine, outs: list[list[Any]], counts: list[dict[str, int]]) -> None:
    for prompts, gens in zip(smollm2["rounds"], outs):
        for prompt, gen in zip(prompts, gens):
            assert gen.token_ids == smollm2["refs"][tuple(prompt)], (len(prompt), gen.token_ids)
    assert sum(len(g.token_ids) for r in outs for g in r) >= 5 * NEW  # most requests ran their 8 tokens
    # A set of programs fixed by the buckets (b = 3 of them), whatever the prompt lengths: a chunk is CHUNK
    # wide, or a prompt's last one 16 (the engine's fixed widths, w = 2 of them), so one prefill program per
    # (width, context bucket) pair; the chunk's row copied out and back per (capacity, context <= capacity)
    # pair; one decode program per capacity, one resize per pair of capacities. With chunks of every width up
    # to the step's budget (the engine before 2026-11-27), a new prompt length could be a new program.
    final, b, w = counts[-1], 3, 2
    assert engine.buckets == (32, 64, 128) and engine.prefill_widths == (16, CHUNK), engine.buckets
    assert 1 <= final["prefill"] <= b * w and 1 <= final["decode"] <= b, counts
    assert final["row"] <= b * (b + 1) and final["resize"] <= b * (b - 1), counts
    # The fourth round's prompt lengths are new, in the range the earlier rounds covered: nothing compiles.
    assert counts[3] == counts[2], counts
    print(f"programs compiled: after each round {counts}; lengths {smollm2['lengths']}")


def test_greedy_equals_transformers_over_rounds_of_changing_lengths(smollm2: dict[str, Any],
                                                                   without_compilation_cache: None) -> None:
    engine, outs, counts = _rounds(smollm2, prefix_cache=False)
    _check(smollm2, engine, outs, counts)
    assert engine.cached_tokens == 0


def test_greedy_equals_transformers_with_the_prefix_cache(smollm2: dict[str, Any],
                                                          without_compilation_cache: None) -> None:
    """The group's second member and both second turns take their prefixes from the cache, and still give
    transformers' tokens."""
    engine, outs, counts = _rounds(smollm2, prefix_cache=True)
    _check(smollm2, engine, outs, counts)
    first, second = smollm2["rounds"][:2]
    reused = {e.request_id: e.cached for e in engine.events if e.kind == "prefill" and e.cached}
    ids = [[g.request_id for g in r] for r in outs]
    assert reused.get(ids[0][2], 0) >= (len(first[2]) - 1) // 16 * 16  # the group's second member
    assert reused.get(ids[1][0], 0) >= len(first[0]) // 16 * 16  # second turns: the first turn's blocks
    assert reused.get(ids[1][2], 0) >= len(first[1]) // 16 * 16
    final = counts[-1]
    assert final["store"] <= 4 and final["load"] <= 4  # page-count buckets 1, 2, 4, 8 at the one capacity
