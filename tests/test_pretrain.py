"""The tiny web base: synthweb.py's synthetic pages, pretrain.py's training loop, and the committed base in
assets/tiny-web-base (that it loads and has the skill it was pretrained for, on pages it never saw).

Run: .venv/bin/python -m pytest -q tests/test_pretrain.py
"""
from __future__ import annotations

import json
import random
import re

import torch

import compress
import policy
import pretrain
import synthweb

BASE = "assets/tiny-web-base"
ELEM = re.compile(r'<(?:\w+) id="(\d+)"[^>]*> ([^<]+?) </')


def _labels():
    return synthweb.Labels(["\u0120alpha", "bet", "gam", "ma", "x", "12"])


def test_click_record_names_exactly_one_element_by_its_text():
    rng, labels = random.Random(0), _labels()
    for _ in range(200):
        intent, history, obs, resp = synthweb.click_record(rng, labels)
        target = re.search(r'element="(\d+)"', resp).group(1)
        texts = {i: t for i, t in ELEM.findall(obs)}
        quoted = re.search(r"'(.+)'", resp).group(1)
        assert texts[target] == quoted and quoted in intent and history == []
        assert sum(t == quoted for t in texts.values()) == 1  # near misses differ (case, a character)


def test_type_and_select_records_follow_the_page():
    rng, labels = random.Random(1), _labels()
    for _ in range(100):
        intent, _, obs, resp = synthweb.type_record(rng, labels)
        field, value, eid = re.search(r"'(\w+)' field.*argument=\"(.+)\", element=\"(\d+)\"", resp).groups()
        assert f'"{value}"' in intent and field in intent
        assert re.search(rf'(<label> {field} </label> <input id="{eid}"|<input id="{eid}" [^>]*placeholder="{field}")',
                         obs)
    for _ in range(100):
        intent, history, obs, resp = synthweb.select_record(rng, labels)
        eid = re.search(r'element="(\d+)"', resp).group(1)
        checked = re.findall(r'id="(\d+)"[^>]*data-status="checked"', obs)
        assert len(checked) == len(history) and eid not in checked  # never clicks a marked one again


def test_easy_pages_are_short_and_plain():
    rng, labels = random.Random(2), _labels()
    obs = [synthweb.record(rng, labels, easy=True)[3] for _ in range(50)]
    assert all("data-bbox" not in o and len(ELEM.findall(o)) <= 4 for o in obs)


def test_pretrain_runs_and_saves_a_loadable_model(tmp_path):
    out = tmp_path / "base"
    pretrain.main(["--model", "tiny:layers=1,hidden=64", "--out", str(out), "--steps", "3", "--batch", "4",
                   "--workers", "0", "--probe-every", "2", "--probe-n", "4", "--easy-frac", "0.5",
                   "--device", "cpu", "--threads", "1"])
    rows = [json.loads(line) for line in open(out / "metrics.jsonl")]
    assert [r["step"] for r in rows] == [1, 2, 3] and rows[-1]["loss"] < rows[0]["loss"] + 1.0
    assert {"click", "click-easy"} <= set(rows[-1]["probe"])
    model, tok = policy.load(str(out / "hf"))
    assert model.config.num_hidden_layers == 1 and len(tok) > 100


def test_committed_base_finds_the_named_element_on_unseen_pages():
    """The base in assets/ was pretrained on synthweb pages drawn from other seeds: on 48 fresh realistic pages
    (system prompt, data-bbox, 2-8 elements, filler) greedy decoding must name the right element most of the
    time. An untrained model of the same size scores 0."""
    torch.manual_seed(0)
    model, tok = policy.load(BASE, dtype=torch.float32)
    rng, labels = random.Random(424242), synthweb.Labels(list(tok.get_vocab()))
    right = 0
    for _ in range(48):
        intent, history, obs, resp = synthweb.click_record(rng, labels)
        prompt = compress.render_prompt(tok, compress.build_messages(intent, [], obs, None, prompt="short"))
        ids = torch.tensor([prompt])
        with torch.no_grad():
            gen = model.generate(ids, max_new_tokens=40, do_sample=False)
        text = tok.decode(gen[0, len(prompt):], skip_special_tokens=True)
        want = re.search(r'element="(\d+)"', resp).group(1)
        got = re.search(r'element="(\d+)"', text)
        right += bool(got and got.group(1) == want)
    assert right >= 36, f"{right}/48"  # measured 0.90 teacher-forced on such pages; chance is about 0.25
