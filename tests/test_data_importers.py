"""The papers' released data formats -> Trajectory records -> the SFT pipeline. Each test writes a small
hand-made file in the source's schema (see jaxwebrl/importers/__init__.py for where each schema comes
from), imports it with a real tokenizer, loads the records through `trajectory_files_dataset` and checks the
loss falls exactly on the response (action) tokens; bad files fail naming the file, the line and the field."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from jaxwebrl.importers import FORMATS, FormatError, import_file
from jaxwebrl.data.pipeline import trajectory_files_dataset
from jaxwebrl.data.records import read_jsonl, write_jsonl
from jaxwebrl.data.samples import build_samples
from jaxwebrl.models.tokenizer import train_tokenizer

ROOT = Path(__file__).resolve().parents[1]
VISION = "<|vision_start|><|image_pad|><|vision_end|>"

WEBRL = [  # one step per record with the history in the prompt (process_data.py layout), and a 2-turn chat
    {"conversations": [
        {"from": "human", "value": "Task Instruction: What is the price of the Aurora lamp?\n\nRound 0\n\n"
                                   "<html> <input id=\"3\" placeholder=\"Search\"/> </html>"},
        {"from": "gpt", "value": "# Element: the search box\ndo(action=\"Search\", argument=\"Aurora\", element=\"3\")"}]},
    {"system": "You are a web agent.", "conversations": [
        {"from": "human", "value": "Task Instruction: Open the Books category\n\nRound 0\n\n<html> <a id=\"7\">Books</a> </html>"},
        {"from": "gpt", "value": "do(action=\"Click\", element=\"7\")"},
        {"from": "human", "value": "Round 1\n\n<html> <h1>Books</h1> </html>"},
        {"from": "gpt", "value": "exit(message=\"done\")"}]},
]
WEBRL_TRACES = [  # two traces in one file, steps out of order
    {"trace_id": 11, "index": 1, "target": "Open the Books category", "html": "<h1>Books</h1>",
     "response": "exit(message=\"done\")", "url": "http://shop/books", "score": 1},
    {"trace_id": 11, "index": 0, "target": "Open the Books category", "html": "<a id=\"7\">Books</a>",
     "response": "do(action=\"Click\", element=\"7\")", "url": "http://shop/", "score": 1},
    {"trace_id": 12, "index": 0, "target": "Find the lamp", "html": "<input id=\"3\"/>",
     "fixed_response": "do(action=\"Search\", argument=\"lamp\", element=\"3\")", "score": 0},
]
NNETNAV_SYSTEM = "You are an autonomous intelligent agent tasked with navigating a web browser."


def nnetnav_step(task: str, k: int, action: str) -> dict:
    user = (f"OBSERVATION:\n[1] RootWebArea 'Shop'\n\t[12] link 'Outdoor'\nURL: http://onestopmarket.com\n"
            f"OBJECTIVE: How many outdoor products are there?\nPREVIOUS ACTIONS: {k}: None")
    out = f"Let's think step-by-step. In summary, the next action I will perform is ```{action}```"
    return {"dataset": "webarena_llm", "id": task, "task_name": task, "prompt": "<|begin_of_text|>...", "output": out,
            "n_tokens": 123, "messages": [{"role": "system", "content": NNETNAV_SYSTEM}, {"role": "user", "content": user},
                                          {"role": "assistant", "content": out}]}


NNETNAV = [nnetnav_step("wa_1", 1, "click [12]"), nnetnav_step("wa_1", 2, "stop [3]"), nnetnav_step("wa_2", 1, "click [12]")]


def browseragent_step(q: str, obs: str, out: str) -> dict:
    return {"input_seq": f"Objective: {q}\nObservation: {obs}\nHISTORY_ACTION: \nHISTORY_info: \n", "output_seq": out}


BROWSERAGENT = [
    browseragent_step("Who built Kestrel Lighthouse?", "[4] link 'Kestrel Lighthouse'",
                      "<think>open the article</think>\n```click [4]```"),
    browseragent_step("Who built Kestrel Lighthouse?", "[9] StaticText 'built by Mira Okafor'",
                      "<think>found it</think>\n<conclusion>Built by Mira Okafor.</conclusion>\n```stop [Mira Okafor]```"),
    {"messages": [{"role": "user", "content": "Objective: How long is Glass River?\nObservation: [2] StaticText '212 km'\n"},
                  {"role": "assistant", "content": "<think>read it</think>\n```stop [212 km]```"}]},
]


def openwebrl_rows() -> list[dict]:
    skeleton = [
        {"role": "system", "content": "You are a browser agent. # Tools <tools>\n{}\n</tools>"},
        {"role": "user", "content": f"Task: find the lamp price.\n{VISION}"},
        {"role": "assistant", "content": "<think>click the lamp</think>\n<tool_call>{\"name\": \"click\", "
                                         "\"arguments\": {\"point_2d\": [374, 100]}}</tool_call>"},
        {"role": "tool", "name": "click", "content": f"Succeed: 'click' executed.\n{VISION}"},
        {"role": "assistant", "content": "<think>the price is shown</think>\n<tool_call>{\"name\": \"done\", "
                                         "\"arguments\": {\"response\": \"$34.99\"}}</tool_call>"},
    ]
    row = lambda turn, msgs: {"prompt": "<|im_start|>...", "rollout_idx": 0, "metadata": {  # noqa: E731
        "task_id": "shop-7", "turn_index": turn, "messages": msgs, "images": ["data:image/png;base64,AAAA"],
        "intent": "find the lamp price", "reward": 1.0}}
    return [row(0, skeleton[:3]), row(1, skeleton)]


CASES = {  # format -> (file name, records, trajectories, turns)
    "webrl": ("web_policy_sft.json", WEBRL, 2, 3),
    "webrl_traces": ("traces.jsonl", WEBRL_TRACES, 2, 3),
    "nnetnav": ("train.jsonl", NNETNAV, 2, 3),
    "browseragent": ("sft.jsonl", BROWSERAGENT, 2, 3),
    "openwebrl": ("OpenWebRL_SFT_trajectories.jsonl", openwebrl_rows(), 1, 2),
}


def write(path: Path, records: list) -> Path:
    if path.suffix == ".json":
        path.write_text(json.dumps(records, indent=1))
    else:
        path.write_text("".join(json.dumps(r) + "\n" for r in records))
    return path


@pytest.fixture(scope="module")
def tokenizer(tmp_path_factory):
    corpus = [json.dumps(c[1]) for c in CASES.values()] * 3
    out = tmp_path_factory.mktemp("tok")
    tok = train_tokenizer(corpus, vocab_size=700, out_dir=out)
    tok.save_dir = str(out)
    return tok


@pytest.mark.parametrize("fmt", sorted(CASES))
def test_round_trip_into_the_sft_pipeline(tmp_path, tokenizer, fmt):
    name, records, n_traj, n_turns = CASES[fmt]
    trajs = import_file(fmt, write(tmp_path / name, records), tokenizer)
    assert len(trajs) == n_traj and sum(len(t.turns) for t in trajs) == n_turns
    assert all(t.format_ok and t.action for tr in trajs for t in tr.turns), [(t.action, t.format_ok) for tr in trajs for t in tr.turns]
    out = tmp_path / "imported.jsonl"
    write_jsonl(out, trajs)
    assert [t.to_dict() for t in read_jsonl(out)] == [t.to_dict() for t in trajs]
    samples = list(trajectory_files_dataset([str(out)], per="turn", norm="token_mean"))
    assert len(samples) == n_turns
    eos = tokenizer.decode([tokenizer.convert_tokens_to_ids("<|im_end|>")])
    turns = [t for tr in trajs for t in tr.turns]
    for s, turn in zip(samples, turns):
        assert s.num_trained == len(turn.response_ids) > 1
        trained = tokenizer.decode(s.tokens[s.loss_mask.astype(bool)])
        assert trained.endswith(eos)
        assert turn.action.splitlines()[0][:20] in trained or fmt == "openwebrl"  # the action is among the trained tokens
        prompt = tokenizer.decode(s.tokens[: len(turn.prompt_ids)])
        assert turn.observation.replace(VISION, "[screenshot]")[:40] in prompt
    if fmt in ("webrl", "webrl_traces", "openwebrl"):  # one growing chat per episode: trajectory-level samples too
        whole = build_samples(trajs, per="trajectory", norm="token_mean")
        assert sum(s.num_trained for s in whole) == sum(len(t.response_ids) for t in turns)


def test_openwebrl_calls_are_rewritten_to_our_grammar(tmp_path, tokenizer):
    from jaxwebrl.browser.actions import get_action_space

    (traj,) = import_file("openwebrl", write(tmp_path / "o.jsonl", openwebrl_rows()), tokenizer)
    first, last = (tokenizer.decode(t.response_ids[:-1]) for t in traj.turns)
    (click,) = get_action_space("openwebrl").parse(first)
    (done,) = get_action_space("openwebrl").parse(last)
    assert (click.name, click.args["x"], click.args["y"]) == ("click", 374, 100)
    assert (done.name, done.args["answer"]) == ("done", "$34.99")
    assert "[screenshot]" in tokenizer.decode(traj.turns[1].prompt_ids) and traj.reward == 1.0
    assert traj.turns[0].history_ids is not None and traj.group_id == "openwebrl/shop-7/0"


def test_webrl_traces_keep_order_and_score(tmp_path, tokenizer):
    trajs = import_file("webrl_traces", write(tmp_path / "t.jsonl", WEBRL_TRACES), tokenizer)
    assert [(len(t.turns), t.reward) for t in trajs] == [(2, 1.0), (1, 0.0)]
    second = tokenizer.decode(trajs[0].turns[1].prompt_ids)
    assert "Task Instruction: Open the Books category" in second and second.index("Round 0") < second.index("Round 1")
    assert trajs[0].turns[0].action.startswith("do(") and trajs[0].turns[1].action.startswith("exit(")


def test_browseragent_episodes_end_at_stop(tmp_path, tokenizer):
    trajs = import_file("browseragent", write(tmp_path / "b.jsonl", BROWSERAGENT + BROWSERAGENT[:2]), tokenizer)
    assert [len(t.turns) for t in trajs] == [2, 1, 2]  # the repeated question is a second rollout
    assert trajs[0].task_id == trajs[2].task_id and trajs[0].group_id != trajs[2].group_id


@pytest.mark.parametrize("fmt", sorted(CASES))
def test_truncated_file_names_file_and_line(tmp_path, tokenizer, fmt):
    name, records, _, _ = CASES[fmt]
    path = write(tmp_path / name, records)
    text = path.read_text()
    path.write_text(text[: len(text) - 40])
    with pytest.raises(FormatError) as err:
        import_file(fmt, path, tokenizer)
    last_line = path.read_text().count("\n") + 1
    assert str(path) in str(err.value) and err.value.line == last_line > 0, str(err.value)
    assert "truncated" in str(err.value)


@pytest.mark.parametrize("fmt,field,broken", [
    ("webrl", "conversations", lambda r: {"messages": r["conversations"]}),
    ("webrl", "conversations[1].value", lambda r: {"conversations": [r["conversations"][0], {"from": "gpt"}]}),
    ("webrl_traces", "html", lambda r: {k: v for k, v in r.items() if k != "html"}),
    ("nnetnav", "messages", lambda r: {k: v for k, v in r.items() if k != "messages"}),
    ("nnetnav", "messages[1].content", lambda r: {**r, "messages": [r["messages"][0], {"role": "user"}, r["messages"][2]]}),
    ("browseragent", "input_seq", lambda r: {"question": r["input_seq"]}),
    ("openwebrl", "metadata", lambda r: {k: v for k, v in r.items() if k != "metadata"}),
    ("openwebrl", "metadata.task_id", lambda r: {**r, "metadata": {k: v for k, v in r["metadata"].items() if k != "task_id"}}),
])
def test_wrong_schema_names_file_line_and_field(tmp_path, tokenizer, fmt, field, broken):
    name, records, _, _ = CASES[fmt]
    bad = list(records)
    bad[1] = broken(bad[1]) if len(bad) > 1 else broken(bad[0])
    path = write(tmp_path / name, bad)
    with pytest.raises(FormatError) as err:
        import_file(fmt, path, tokenizer)
    msg = str(err.value)
    assert str(path) in msg and f"'{field}'" in msg, msg
    if path.suffix == ".jsonl":
        assert err.value.line == 2, msg
    else:
        assert err.value.line > 1, msg  # the second array element starts below the first


def test_cli_writes_our_jsonl(tmp_path, tokenizer, capsys):
    src = write(tmp_path / "train.jsonl", NNETNAV)
    out = tmp_path / "out" / "nnetnav.jsonl"
    run = subprocess.run([sys.executable, "-m", "jaxwebrl.importers", "nnetnav", str(src), str(out),
                          "--tokenizer", tokenizer.save_dir], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert run.returncode == 0, run.stderr
    report = json.loads(run.stdout.strip().splitlines()[-1])
    assert report["trajectories"] == 2 and report["turns"] == 3 and report["unparsed_actions"] == 0
    assert len(list(read_jsonl(out))) == 2
    bad = tmp_path / "bad.jsonl"
    bad.write_text(json.dumps({"id": "x"}) + "\n")
    from jaxwebrl.importers.__main__ import main  # the same entry point, in process (a second start costs ~15 s)

    assert main(["nnetnav", str(bad), str(out), "--tokenizer", tokenizer.save_dir]) == 2
    assert f"{bad}:1: missing field 'messages'" in capsys.readouterr().err


def test_every_format_has_a_case():
    assert set(FORMATS) - {"webagent_r1"} == set(CASES)
    assert np.all([len(c[1]) > 0 for c in CASES.values()])
