"""train_bc.py data paths: our trajectory JSONL, the WebRL/VAB sharegpt format, and the R1-CoT rewrite
against a real local HTTP teacher (including one that fails)."""
import asyncio
import json

import pytest

import compress
import policy
import train_bc
from fake_openai import ChatHandler, serve

OBS0 = '<html> <input id="0" type="text" placeholder="Username"> </input> <button id="1"> Login </button> </html>'
OBS1 = '<html> <input id="0" type="text" value="bob"> </input> <button id="1"> Login </button> </html>'
TRAJ = {"task": "miniwob/login-user", "seed": 3, "intent": "Log in as bob", "reward": 1.0, "steps": [
    {"observation": OBS0, "error": None, "url": "x",
     "response": compress.format_response("# Element: the Username field", 'do(action="Type", argument="bob", element="0")')},
    {"observation": OBS1, "error": "element 9 is not on the page", "url": "x",
     "response": compress.format_response("# Element: the Login button", 'do(action="Click", element="1")')},
]}

# A hand-written record in the WebRL / VisualAgentBench BC format (LLaMA-Factory sharegpt, one step each).
WEBRL = {"conversations": [
    {"from": "human", "value": "Task Instruction: What is the top-1 best-selling product in 2022?\n\n"
                               "Round 0\n\n<html> <a id=\"7\"> REPORTS </a> </html>"},
    {"from": "gpt", "value": "# Element: the 'REPORTS' section on the left sidebar\ndo(action=\"Click\", element=\"7\")"},
]}


def test_trajectory_steps_compress_history():
    steps = train_bc.records_to_steps([TRAJ], prompt="short")
    assert len(steps) == 2
    last = steps[1].messages
    assert [m["role"] for m in last] == ["system", "user", "assistant", "user", "assistant"]
    assert OBS0 not in last[1]["content"] and compress.PLACEHOLDER in last[1]["content"]   # s'_1
    assert OBS1 in last[3]["content"] and "element 9 is not on the page" in last[3]["content"]
    assert last[-1]["content"] == TRAJ["steps"][1]["response"]


def test_failed_demonstrations_are_not_cloned():
    assert train_bc.records_to_steps([dict(TRAJ, reward=0.0)], prompt="short") == []


def test_webrl_sharegpt_loader(tmp_path):
    path = tmp_path / "webrl.json"
    path.write_text(json.dumps([WEBRL, dict(WEBRL, system="You are a web agent.")]))
    steps = train_bc.records_to_steps(train_bc.load_records(str(path)), prompt="thinking")
    assert [m["role"] for m in steps[0].messages] == ["user", "assistant"]
    assert [m["role"] for m in steps[1].messages] == ["system", "user", "assistant"]
    tok = policy.build_tokenizer(["REPORTS do(action=\"Click\") Task Instruction"] * 20, vocab_size=400)
    ids, mask = compress.render_sample(tok, steps[0].messages)
    action = tok.decode([i for i, m in zip(ids, mask) if m])
    assert action.startswith("# Element: the 'REPORTS'") and 'element="7")' in action


def test_sharegpt_loader_rejects_bad_records():
    with pytest.raises(ValueError, match="unknown role"):
        train_bc.sharegpt_steps({"conversations": [{"from": "robot", "value": "x"}]})
    with pytest.raises(ValueError, match="must end with"):
        train_bc.sharegpt_steps({"conversations": [{"from": "human", "value": "x"}]})


def test_multi_turn_sharegpt_trains_every_gpt_turn():
    rec = {"conversations": [{"from": "human", "value": "a"}, {"from": "gpt", "value": "b"},
                             {"from": "human", "value": "c"}, {"from": "gpt", "value": "d"}], "system": "s"}
    steps = train_bc.sharegpt_steps(rec)
    assert [[m["content"] for m in st.messages] for st in steps] == [["s", "a", "b"], ["s", "a", "b", "c", "d"]]


class _Teacher(ChatHandler):
    """OpenAI-compatible chat completions: echoes a first-person thought, or fails with HTTP 500."""
    fail = False
    calls = 0

    def chat(self, body):
        type(self).calls += 1
        if type(self).fail:
            return self.reply(500)
        action = body["messages"][0]["content"].split("Next action: ")[1].splitlines()[0]
        self.reply_text(f"I look at the page and decide: {action}.")


@pytest.fixture
def teacher_url():
    _Teacher.fail, _Teacher.calls = False, 0
    with serve(_Teacher) as url:
        yield f"{url}/v1"


def _teacher(url):
    return policy.OpenAIBackend(url, "fake-qwq", max_retries=1, backoff_s=0.01, timeout_s=5)


def test_cot_rewrite_keeps_actions_and_caches(tmp_path, teacher_url):
    records = [json.loads(json.dumps(TRAJ))]
    cache = tmp_path / "cot.jsonl"
    counts = asyncio.run(train_bc.rewrite_with_cot(records, _teacher(teacher_url), str(cache), concurrency=2))
    assert counts == {"cot/requests": 2, "cot/cached": 0, "cot/failures": 0}
    for new, old in zip(records[0]["steps"], TRAJ["steps"]):
        thought, action = compress.split_response(new["response"])
        assert thought.startswith("I look at the page") and action == compress.split_response(old["response"])[1]
    # a rerun asks nothing twice
    again = [json.loads(json.dumps(TRAJ))]
    counts = asyncio.run(train_bc.rewrite_with_cot(again, _teacher(teacher_url), str(cache), concurrency=2))
    assert counts == {"cot/requests": 0, "cot/cached": 2, "cot/failures": 0} and _Teacher.calls == 2
    assert again == records


def test_cot_rewrite_failing_teacher_keeps_original(tmp_path, teacher_url):
    _Teacher.fail = True
    records = [json.loads(json.dumps(TRAJ))]
    counts = asyncio.run(train_bc.rewrite_with_cot(records, _teacher(teacher_url), str(tmp_path / "c.jsonl"), concurrency=2))
    assert counts["cot/failures"] == 2 and records == [TRAJ]
