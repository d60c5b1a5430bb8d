"""bc_data.py, the data of train_bc.py: our trajectory JSONL, the WebRL/VAB sharegpt format, and the R1-CoT rewrite
against a real local HTTP teacher (including one that fails)."""
import asyncio
import json

import pytest

import compress
import policy
import bc_data
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
    steps = bc_data.records_to_steps([TRAJ], prompt="short")
    assert len(steps) == 2
    last = steps[1].messages
    assert [m["role"] for m in last] == ["system", "user", "assistant", "user", "assistant"]
    assert OBS0 not in last[1]["content"] and compress.PLACEHOLDER in last[1]["content"]   # s'_1
    assert OBS1 in last[3]["content"] and "element 9 is not on the page" in last[3]["content"]
    assert last[-1]["content"] == TRAJ["steps"][1]["response"]


def test_failed_demonstrations_are_not_cloned_unless_asked():
    """train_bc.py's default clones successes only; --no-only-successes (an unfiltered log, demos.py --mistakes)
    clones a failed trajectory's steps like any other's."""
    assert bc_data.records_to_steps([dict(TRAJ, reward=0.0)], prompt="short") == []
    every = bc_data.records_to_steps([dict(TRAJ, reward=0.0)], prompt="short", only_successes=False)
    assert [st.messages for st in every] == [st.messages for st in bc_data.records_to_steps([TRAJ], prompt="short")]


def test_webrl_sharegpt_loader(tmp_path):
    path = tmp_path / "webrl.json"
    path.write_text(json.dumps([WEBRL, dict(WEBRL, system="You are a web agent.")]))
    steps = bc_data.records_to_steps(bc_data.load_records(str(path)), prompt="thinking")
    assert [m["role"] for m in steps[0].messages] == ["user", "assistant"]
    assert [m["role"] for m in steps[1].messages] == ["system", "user", "assistant"]
    tok = policy.build_tokenizer(["REPORTS do(action=\"Click\") Task Instruction"] * 20, vocab_size=400)
    ids, mask = compress.render_sample(tok, steps[0].messages)
    action = tok.decode([i for i, m in zip(ids, mask) if m])
    assert action.startswith("# Element: the 'REPORTS'") and 'element="7")' in action


def test_sharegpt_loader_rejects_bad_records():
    with pytest.raises(ValueError, match="unknown role"):
        bc_data.sharegpt_steps({"conversations": [{"from": "robot", "value": "x"}]})
    with pytest.raises(ValueError, match="must end with"):
        bc_data.sharegpt_steps({"conversations": [{"from": "human", "value": "x"}]})


def test_multi_turn_sharegpt_trains_every_gpt_turn():
    rec = {"conversations": [{"from": "human", "value": "a"}, {"from": "gpt", "value": "b"},
                             {"from": "human", "value": "c"}, {"from": "gpt", "value": "d"}], "system": "s"}
    steps = bc_data.sharegpt_steps(rec)
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
    counts = asyncio.run(bc_data.rewrite_with_cot(records, _teacher(teacher_url), str(cache), concurrency=2))
    assert counts == {"cot/requests": 2, "cot/cached": 0, "cot/failures": 0}
    for new, old in zip(records[0]["steps"], TRAJ["steps"]):
        thought, action = compress.split_response(new["response"])
        assert thought.startswith("I look at the page") and action == compress.split_response(old["response"])[1]
    # a rerun asks nothing twice
    again = [json.loads(json.dumps(TRAJ))]
    counts = asyncio.run(bc_data.rewrite_with_cot(again, _teacher(teacher_url), str(cache), concurrency=2))
    assert counts == {"cot/requests": 0, "cot/cached": 2, "cot/failures": 0} and _Teacher.calls == 2
    assert again == records


def test_cot_rewrite_failing_teacher_keeps_original(tmp_path, teacher_url):
    _Teacher.fail = True
    records = [json.loads(json.dumps(TRAJ))]
    counts = asyncio.run(bc_data.rewrite_with_cot(records, _teacher(teacher_url), str(tmp_path / "c.jsonl"), concurrency=2))
    assert counts["cot/failures"] == 2 and records == [TRAJ]


# ---- WebRL's own BC format: the history inside ONE human turn, Llama-3 control tokens written as text ----
# Layout of THUDM/WebRL scripts/process_data.py (format_prompt) and VAB's WebRLPromptConstructor; WebRL trained
# it with LLaMA-Factory's "llama3_web" template: bos, the human text verbatim (its control-token strings parsed
# as the special tokens), then the gpt text and <|eot_id|>, each piece tokenized on its own; loss on the gpt
# text and its <|eot_id|> only. The texts below are ours; the structure is WebRL's.
EOT, SH, EH = "<|eot_id|>", "<|start_header_id|>", "<|end_header_id|>"
W_INTENT = "Open the REPORTS page"
W_OBS1 = '<html> <a id="7"> REPORTS </a> <a id="8"> Sales </a> </html>'
W_RESP0 = '# Element: the Sales link\ndo(action="Click", element="8")'
W_RESP1 = "# Element: the 'REPORTS' section on the left sidebar\ndo(action=\"Click\", element=\"7\")"
W_SYSTEM = "You are a web agent."


def _webrl_human(history_obs: str = compress.PLACEHOLDER) -> str:
    """Round 0 (observation shown as WebRL's history shows it, then its response), Round 1 pending."""
    return (f"Task Instruction: {W_INTENT}\n\n"
            f"Round 0\n\n{EOT}{SH}user{EH}\n{history_obs}\n\n{EOT}{SH}assistant{EH}\n{W_RESP0}\n\n"
            f"Round 1\n\n{EOT}{SH}user{EH}\n{W_OBS1}\n\n{EOT}{SH}assistant{EH}\n")


W_REC = {"conversations": [{"from": "human", "value": _webrl_human()}, {"from": "gpt", "value": W_RESP1}]}


@pytest.fixture(scope="module")
def llama3_tok():
    corpus = [_webrl_human(), W_RESP1, W_SYSTEM, compress.PLACEHOLDER] * 10
    return policy.build_tokenizer(corpus, vocab_size=500, template="llama3")


def _webrl_expected(tok, system: str | None = None) -> tuple[list[int], list[int]]:
    """WebRL's sample built from the pieces, token by token: each text between control tokens encoded alone,
    each control token its id; the response encoded on its own after the human turn (LLaMA-Factory's slots)."""
    def enc(text):
        assert not any(t in text for t in (EOT, SH, EH))
        return tok.encode(text, add_special_tokens=False)
    eot, sh, eh = (tok.convert_tokens_to_ids(t) for t in (EOT, SH, EH))
    prompt = [tok.convert_tokens_to_ids("<|begin_of_text|>")]
    if system:   # llama3_web's system slot
        prompt += [sh] + enc("system") + [eh] + enc("\n\n" + system) + [eot]
    prompt += enc(f"Task Instruction: {W_INTENT}\n\nRound 0\n\n")
    prompt += [eot, sh] + enc("user") + [eh] + enc(f"\n{compress.PLACEHOLDER}\n\n")
    prompt += [eot, sh] + enc("assistant") + [eh] + enc(f"\n{W_RESP0}\n\nRound 1\n\n")
    prompt += [eot, sh] + enc("user") + [eh] + enc(f"\n{W_OBS1}\n\n")
    prompt += [eot, sh] + enc("assistant") + [eh] + enc("\n")
    target = enc(W_RESP1) + [eot]
    return prompt + target, [0] * len(prompt) + [1] * len(target)


def test_webrl_inline_record_renders_as_webrl_trained(tmp_path, llama3_tok):
    tok = llama3_tok
    path = tmp_path / "webrl.json"
    path.write_text(json.dumps([W_REC, dict(W_REC, system=W_SYSTEM)]))
    names = []
    steps = bc_data.records_to_steps(bc_data.load_records(str(path), names), prompt="thinking", names=names)
    assert [st.render for st in steps] == ["llama3_web", "llama3_web"]
    for st, system in zip(steps, [None, W_SYSTEM]):
        ids, mask = bc_data.render_step(tok, st)
        want_ids, want_mask = _webrl_expected(tok, system)
        assert ids == want_ids
        assert mask == want_mask
    # the loss covers only the record's gpt turn: the inline Round-0 response is prompt
    ids, mask = bc_data.render_step(tok, steps[0])
    assert tok.decode([i for i, m in zip(ids, mask) if m], skip_special_tokens=False) == W_RESP1 + EOT
    # mutation guard: the markers treated as plain text (the old rendering: a user turn of the Llama-3 chat
    # template, control strings sanitized; or the verbatim text with special tokens split) are other ids
    old_ids, _ = compress.render_sample(tok, steps[0].messages)
    assert old_ids != want_ids
    plain = tok(_webrl_human(), add_special_tokens=False, split_special_tokens=True)["input_ids"]
    assert [tok.bos_token_id] + plain + tok.encode(W_RESP1, add_special_tokens=False) + [
        tok.convert_tokens_to_ids(EOT)] != _webrl_expected(tok)[0]
    # --no-think-in-loss on a thinking response: the thought leaves the loss, the answer and <|eot_id|> stay
    think = compress.format_response("# Element: the REPORTS link", 'do(action="Click", element="7")')
    ids, mask = bc_data.render_llama3_web(tok, steps[0].messages[:-1] + [{"role": "assistant", "content": think}],
                                           think_in_loss=False)
    kept = tok.decode([i for i, m in zip(ids, mask) if m], skip_special_tokens=False)
    assert "REPORTS link" not in kept and kept.strip().endswith(EOT) and 'element="7"' in kept


def test_webrl_inline_record_needs_llama3_special_tokens(tmp_path):
    """A tokenizer without Llama-3's control tokens would train the markers as plain text: refused, naming the
    record and the way out (--webrl-render split)."""
    chatml = policy.build_tokenizer([_webrl_human(), W_RESP1] * 10, vocab_size=400, template="chatml")
    path = tmp_path / "webrl.jsonl"
    path.write_text(json.dumps(WEBRL) + "\n" + json.dumps(W_REC) + "\n")
    names = []
    steps = bc_data.records_to_steps(bc_data.load_records(str(path), names), prompt="short", names=names)
    assert [st.render for st in steps] == ["chat", "llama3_web"]
    bc_data.render_step(chatml, steps[0])                 # a plain sharegpt record is unaffected
    with pytest.raises(bc_data.WebRLFormatError, match=r"webrl\.jsonl line 2.*<\|eot_id\|>.*--webrl-render split"):
        bc_data.render_step(chatml, steps[1])


def test_webrl_split_render_rebuilds_the_paper_turns(llama3_tok):
    """--webrl-render split: the human turn becomes the messages it embeds (the project's own prompt turns),
    rendered by the model's chat template; only the record's gpt turn is trained."""
    steps = bc_data.records_to_steps([W_REC], prompt="short", webrl_render="split")
    assert len(steps) == 1 and steps[0].render == "chat"
    want = compress.build_messages(W_INTENT, [compress.Turn("<html> round 0 </html>", W_RESP0)], W_OBS1,
                                   prompt=None) + [{"role": "assistant", "content": W_RESP1}]
    assert steps[0].messages == want
    ids, mask = bc_data.render_step(llama3_tok, steps[0])
    assert ids == llama3_tok.apply_chat_template(want, tokenize=True, return_dict=True)["input_ids"]
    assert llama3_tok.decode([i for i, m in zip(ids, mask) if m], skip_special_tokens=False) == W_RESP1 + EOT
    # a human turn with markers that is not WebRL's layout is refused in split mode, named
    bad = {"id": "x7", "conversations": [{"from": "human", "value": f"hi {EOT} there"}, {"from": "gpt", "value": "ok"}]}
    with pytest.raises(ValueError, match="record 0 .id 'x7'.*does not end with"):
        bc_data.records_to_steps([bad], prompt="short", webrl_render="split")
