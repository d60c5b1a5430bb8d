"""The two rubrics that score a WebArena / WebArena-Lite task, a part of env/webarena.py's family:
VisualAgentBench's and WebArena's evaluators (string_match, url_match, program_html) reproduced with their
quirks, and ``evaluate``, which WebArenaFamily.score_exit calls on the agent's exit():
  async evaluate(task, page, answer, *, judge=None, helpers=None, rubric="vab") -> float in {0.0, 1.0}

It imports tasks.py, sandbox.py and webarena_helpers.py (site URLs, the ``func:`` helpers), never env or
webarena.py; its public names are also ``env.<name>``: ``evaluate``, ``url_matches``, ``word_tokenize``,
``RUBRICS``.

Scoring: ``rubric`` picks VisualAgentBench's WebArena-Lite evaluators ("vab", the paper's) or WebArena's
original ones ("webarena"), each reproduced with its quirks; the rules and their differences are in the
comments below and in docs/webarena.md ("Rubrics"). Common to both:
- program_html: url "last" = the page now; another URL (or `func:helper(...)` returning one) is opened in a
  probe page of a fresh context that holds a copy of the agent's cookies and local storage, so the agent's
  tabs are untouched (the originals navigate the agent's page; a new tab of the agent's own context would
  become the env's active tab); later "last" targets read the probe page, as they read the navigated page
  there. Locators: "" = page.content(), a `document.` / `[...document.` JS expression, a `lambda:` JS
  function (VAB only), or `func:name(args)` calling helpers[name](page, *args) (sync or async). The call
  is parsed, never handed to Python's eval: args are quoted strings, numbers, True/False/None, `__page__`
  (dropped: the page is always the first argument) and `__last_url__` (the page's URL, also replaced inside strings).
- A judge or helper that is needed but missing scores 0 and logs a warning; every failed check leaves a
  reason in `details["reasons"]` when the caller passes a `details` dict. Scores of eval types multiply.
- `func:` helpers: the five that the public configs name are built in (WEBARENA_HELPERS, webarena_helpers.py);
  ``helpers=`` adds others or replaces them by name.
"""
from __future__ import annotations

import asyncio
import contextlib
import html as _html
import inspect
import logging
import re
import urllib.parse
from typing import Any

from playwright.async_api import Error as PlaywrightError
from playwright.async_api import TimeoutError as PlaywrightTimeoutError

from .sandbox import host_entry, new_proxied_context, outside_hosts_re
from .tasks import Task, family_of
from .tasks import first_line as _first_line
from .webarena_helpers import (_LAST_URL_ARG, CHECK_TIMEOUT_S, NAV_TIMEOUT_MS, WEBARENA_HELPERS, _Bare, _short,
                               parse_helper_call, substitute_placeholders)

_wa_log = logging.getLogger("env.webarena")

# program_html required_contents kinds, in the order a target is checked; alternatives in a reference (both
# also read by webarena.py's config check)
_CONTENT_KEYS = ("exact_match", "must_include", "must_exclude", "required_values", "fuzzy_match")
_OR = " |OR| "
SETTLE_TIMEOUT_MS = 2_000      # capped network-idle wait after it loads
JUDGE_TIMEOUT_S = 300.0        # one judge call (an LLM request)


# ---- the evaluators' string rules ----
# Two rubrics, each a re-implementation of one published evaluator, verdict for verdict:
#   "vab": VisualAgentBench's WebArena-Lite evaluators (VAB-WebArena-Lite/new/evaluators.py), the paper's;
#   "webarena": WebArena's original evaluation_harness/evaluators.py.
# Where the original raises (an assert, a type check, an unknown rule), its run loop records no score and
# the task counts as failed: here it scores 0 with the reason in details["reasons"] (_Crash).

RUBRICS = ("vab", "webarena")
_URL_DEFAULT = {"vab": "EXACT", "webarena": "GOLD in PRED"}     # url_match without a url_note


class _Crash(ValueError):
    """The original evaluator raises here; the task scores 0."""


def _clean(text: str, rubric: str) -> str:
    """clean_answer: WebArena strips whitespace first, VAB does not; then one pair of enclosing quotes goes
    and the text is lower-cased, e.g. ``_clean(' "Bob" ', "webarena") == "bob"``, ``_clean(' "Bob" ', "vab")
    == ' "bob" '``, ``_clean("'", "vab") == ""``."""
    if rubric == "webarena":
        text = text.strip()
    if text[:1] in ("'", '"') and text.endswith(text[:1]):
        text = text[1:-1]
    return text.lower()


# NLTK's word_tokenize (both evaluators tokenize with it), re-implemented without NLTK and its data: the
# Treebank rules of NLTKWordTokenizer, applied per sentence. Punkt's sentence split is approximated: a period
# followed by white space ends a sentence, except after a number or a single letter when the next word starts
# with a lower-case letter or with , ; : . ! ?, and after a single letter before any letter (punkt's
# ordinal/initial heuristic). Punkt's abbreviation list and word statistics are not reproduced ("dr. who":
# NLTK keeps "dr.", here "dr" "."). The evaluators tokenize lower-cased text only.
_TB_FIRST = [(re.compile(p, re.I), r) for p, r in [
    (r"([«“‘„]|`+)", r" \1 "), (r'^"', "``"), (r"(``)", r" \1 "), (r"([ (\[{<])(\"|'')", r"\1 `` "),
    (r"(?<!\w)(')(?!(?:re|ve|ll|m|t|s|d|n)\b)(?=\w)", r"\1 "),
    (r"([^.])(\.)([\])}>\"'»”’ ]*)\s*$", r"\1 \2 \3 "),                  # the sentence's final period
    (r"([:,])([^\d])", r" \1 \2"), (r"([:,])$", r" \1 "), (r"\.{2,}", r" \g<0> "), (r"[;@#$%&]", r" \g<0> "),
    (r"[\u2012-\u2015]", r" \g<0> "), (r"[?!]", r" \g<0> "), (r"([^'])' ", r"\1 ' "), (r"[*]", r" \g<0> "),
    (r"[\][(){}<>]", r" \g<0> "), (r"--", r" -- ")]]
_TB_LAST = [(re.compile(p, re.I), r) for p, r in [
    (r"([»”’])", r" \1 "), (r"''", " '' "), (r'"', " '' "), (r"\s+", " "),
    (r"([^' ])('s|'m|'d|') ", r"\1 \2 "), (r"([^' ])('ll|'re|'ve|n't) ", r"\1 \2 "),
    (r"\b(can)(not)\b", r" \1 \2 "), (r"\b(d)('ye)\b", r" \1 \2 "), (r"\b(gim)(me)\b", r" \1 \2 "),
    (r"\b(gon)(na)\b", r" \1 \2 "), (r"\b(got)(ta)\b", r" \1 \2 "), (r"\b(lem)(me)\b", r" \1 \2 "),
    (r"\b(more)('n)\b", r" \1 \2 "), (r"\b(wan)(na)(?=\s)", r" \1 \2 "), (r" ('t)(is)\b", r" \1 \2 "),
    (r" ('t)(was)\b", r" \1 \2 ")]]
_SENTENCE_END = re.compile(r"(?<=[^\s.])\.\s+(?=(\S?))")
_NUMBER = re.compile(r"-?[.,]?\d[\d,.-]*")


def word_tokenize(text: str) -> list[str]:
    """NLTK's word_tokenize as the evaluators use it, e.g. ``word_tokenize("it costs $25.99, not 10.")
    == ["it", "costs", "$", "25.99", ",", "not", "10", "."]``."""
    sentences, start = [], 0
    for m in _SENTENCE_END.finditer(text):
        words = text[start:m.start()].split()
        word, nxt = words[-1], m.group(1)
        initial = len(word) == 1 and word.isalpha()
        lower_or_punct = nxt.islower() or (nxt != "" and nxt in ",;:.!?")
        if not ((initial and nxt.isalpha()) or ((initial or _NUMBER.fullmatch(word)) and lower_or_punct)):
            sentences.append(text[start:m.end()])
            start = m.end()
    sentences.append(text[start:])
    tokens = []
    for s in sentences:
        for pattern, repl in _TB_FIRST:
            s = pattern.sub(repl, s)
        s = f" {s} "
        for pattern, repl in _TB_LAST:
            s = pattern.sub(repl, s)
        tokens += s.split()
    return tokens


def _contains(ref: str, pred: str, rubric: str, *, tokenize: bool = True, slashes: bool = True) -> bool:
    """must_include of one reference: a substring test, except for a reference that is one word token, which
    must be a whole token of the answer (VAB: any such reference, and the parts of a token with '/' count as
    tokens; WebArena: only a one-character reference, and only when ``tokenize``, i.e. the config lists one
    reference). E.g. VAB ``"0"`` is not in ``"10 items"``; WebArena ``"cat"`` is in ``"concatenate"``."""
    ref, pred = _clean(ref, rubric), _clean(pred, rubric)
    if rubric == "vab":
        one_token = len(word_tokenize(ref)) == 1
    else:
        one_token = tokenize and len(ref) == 1 and len(word_tokenize(ref)) == 1
    if not one_token:
        return ref in pred
    tokens = word_tokenize(pred)
    if rubric == "vab" and slashes:
        tokens += [part for t in tokens if "/" in t for part in t.split("/")]
    return ref in tokens


def _to_int(value: Any) -> int | None:
    """NumericEvaluator.str_2_int (VAB): strip, drop commas, int(); None if that fails ("3.5", "five")."""
    try:
        return int(value.strip().replace(",", ""))
    except ValueError:
        return None


_VAB_OPS = (("<=", lambda x, y: x <= y + 1e-8), (">=", lambda x, y: x >= y - 1e-8),
            ("==", lambda x, y: abs(x - y) <= 1e-8),
            ("<", lambda x, y: x < y + 1e-8), (">", lambda x, y: x > y - 1e-8))   # strict ones include y


def _inequality(value: int | float, inequality: str) -> bool:
    """NumericEvaluator.compare_inequality (VAB), e.g. ``_inequality(700, "< 700") is True`` (the tolerance
    makes "<" and ">" inclusive)."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise _Crash(f"required_values compares numbers, got {value!r}")
    for op, holds in _VAB_OPS:
        if op in inequality:
            return holds(value, float(inequality.split(op)[1].strip()))
    raise _Crash(f"invalid inequality {inequality!r}")


def _required_values(value: Any, refs: Any, where: str, reasons: list[str]) -> float:
    if not isinstance(refs, list):
        raise _Crash(f"{where}: VAB asserts a list, got {refs!r}")
    if isinstance(value, str):
        value = _to_int(value)
    if value is None:
        reasons.append(f"{where}: not an integer")
        return 0.0
    failed = [r for r in refs if not any(_inequality(value, alt) for alt in r.split(_OR))]
    if failed:
        reasons.append(f"{where}: {value!r} does not satisfy {failed!r}")
    return 0.0 if failed else 1.0


def _need_str(value: Any, where: str) -> str:
    if not isinstance(value, str):
        raise _Crash(f"{where}: the evaluator needs a string here, got {value!r}")
    return value


def _need_list(value: Any, where: str) -> list:
    if not isinstance(value, list):
        raise _Crash(f"{where}: the evaluator asserts a list, got {value!r}")
    return value


async def _ask_judge(judge: Any, question: str, reference: str, answer: str, where: str,
                     reasons: list[str]) -> float:
    """judge(question, reference, answer) -> score (sync or async); 1.0 at >= 0.5, else 0.0."""
    if judge is None:
        msg = f"{where}: needs a judge (fuzzy_match / N/A) but none was given; scored 0"
        _wa_log.warning(msg)
        reasons.append(msg)
        return 0.0
    result = judge(question, reference, answer)
    if inspect.isawaitable(result):
        result = await asyncio.wait_for(result, JUDGE_TIMEOUT_S)
    if float(result) < 0.5:
        reasons.append(f"{where}: the judge scored {float(result):g} for answer {answer!r} vs {reference!r}")
        return 0.0
    return 1.0


async def _string_match(task: Task, answer: str, rubric: str, judge: Any, reasons: list[str]) -> float:
    """StringEvaluator: every reference kind in config order, scores multiplied. The answer is cleaned once
    here and again by each check (as in both originals). VAB: required_values turns the answer into an int
    for the kinds after it; one_of, must_exclude and required_values exist only there (WebArena ignores
    them); fuzzy_match joins its references with ", " for one judge call (WebArena: a call per reference)."""
    pred: Any = _clean(answer, rubric)
    score = 1.0
    for key, value in task.eval["reference_answers"].items():
        where = f"string_match.{key}"
        if key == "exact_match":
            if pred is None:
                raise _Crash(f"{where}: the answer is not an integer (None after required_values)")
            ok = _clean(str(pred), rubric) == _clean(value, rubric)
            score *= ok
            if not ok:
                reasons.append(f"{where}: {_short(answer)!r} != {value!r}")
        elif key == "must_include":
            for item in _need_list(value, where):
                alts = item.split(_OR) if rubric == "vab" else [item]     # WebArena: |OR| is literal text
                ok = any(_contains(alt, _need_str(pred, where), rubric, tokenize=len(value) == 1) for alt in alts)
                score *= ok
                if not ok:
                    reasons.append(f"{where}: missing {item!r} in {_short(answer)!r}")
        elif key == "fuzzy_match" and value == "N/A":
            score *= _clean(_need_str(pred, where), rubric) == "n/a"
            if score != 1:      # the reason is judged; a score of earlier kinds is replaced, as in both originals
                note = task.eval.get("string_note")
                score = await _ask_judge(judge, task.intent, _need_str(note, "eval.string_note"), pred,
                                         f"{where} (N/A)", reasons)
        elif key == "fuzzy_match":
            refs = _need_list(value, where)
            for ref in ([", ".join(refs)] if rubric == "vab" else refs):
                score *= await _ask_judge(judge, task.intent, ref, _need_str(pred, where), where, reasons)
        elif rubric == "webarena":
            continue            # no such case in WebArena's StringEvaluator: the key is ignored
        elif key == "required_values":
            score *= _required_values(_need_str(pred, where), value, where, reasons)
            pred = _to_int(pred)
        elif key == "must_exclude":
            present = [item for item in _need_list(value, where)
                       if _contains(item, _need_str(pred, where), rubric, slashes=False)]
            score *= not present
            if present:
                reasons.append(f"{where}: must not contain {present!r}: {_short(answer)!r}")
        elif key == "one_of":
            ok = any(_clean(v, rubric) in _need_str(pred, where) for v in _need_list(value, where))
            score *= ok
            if not ok:
                reasons.append(f"{where}: none of {value!r} in {_short(answer)!r}")
    return float(score)


# ---- url_match ----

def url_matches(page_url: str, reference_url: str, rule: str | None = None, rubric: str = "vab") -> bool:
    """url_match of the agent's page URL; ``reference_url`` may hold alternatives joined by `` |OR| ``;
    ``rule`` is the config's url_note, None when it has none (VAB then uses EXACT, WebArena GOLD in PRED).

    VAB: "localhost" becomes "127.0.0.1" and one trailing "/" goes; EXACT = equal to an alternative,
    GOLD in PRED = an alternative is a substring of the whole URL, query included:
    ``url_matches("http://h/a/b?q=1&x=2", "http://h/a/b?q=1", "GOLD in PRED")`` is True, with the query
    parameters swapped it is False. WebArena: every trailing "/" goes; only GOLD in PRED exists: an
    alternative's host+path is a substring of the page's host+path, and each query parameter of ANY
    alternative (pooled) has one of its values in the page's query. A rule the evaluator lacks raises
    ``_Crash`` (a ValueError)."""
    refs = reference_url.split(_OR)
    if rubric == "vab":
        def clean(u: str) -> str:
            u = u.replace("localhost", "127.0.0.1")
            return u[:-1] if u.endswith("/") else u
        pred, refs = clean(page_url), [clean(r) for r in refs]
        rule = _URL_DEFAULT["vab"] if rule is None else rule
        if rule == "EXACT":
            return pred in refs
        if rule == "GOLD in PRED":
            return any(r in pred for r in refs)
        raise _Crash(f"url_match: VAB has no url_note {rule!r}")
    rule = _URL_DEFAULT["webarena"] if rule is None else rule
    if rule != "GOLD in PRED":
        raise _Crash(f"url_match: WebArena has no url_note {rule!r} (only 'GOLD in PRED')")
    pred = urllib.parse.urlparse(page_url.rstrip("/"))
    pred_query = urllib.parse.parse_qs(pred.query)
    wanted: dict[str, set[str]] = {}
    bases = []
    for r in refs:
        parts = urllib.parse.urlparse(r.rstrip("/"))
        bases.append(parts.netloc + parts.path)
        for k, vals in urllib.parse.parse_qs(parts.query).items():
            wanted.setdefault(k, set()).update(vals)
    return (any(b in pred.netloc + pred.path for b in bases)
            and all(any(v in pred_query.get(k, []) for v in vals) for k, vals in wanted.items()))


# ---- program_html ----

async def _call_helper(spec: str, page: Any, helpers: dict, where: str, reasons: list[str]) -> Any:
    """Run ``func:name(args)`` as helpers[name](page, *args) with __last_url__ = ``page.url``; None (with a
    reason) if it is not supplied. A helper that raises crashes the original evaluator: _Crash."""
    name, args = parse_helper_call(spec)
    fn = helpers.get(name)
    if fn is None:
        msg = f"{where}: helper {name!r} was not supplied (pass helpers={{{name!r}: fn}}); scored 0"
        _wa_log.warning(msg)
        reasons.append(msg)
        return None
    call_args = []
    for a in args:
        if isinstance(a, _Bare):
            if a == _LAST_URL_ARG:
                call_args.append(page.url)
            # a bare __page__ is dropped: the page is always the first argument
        elif isinstance(a, str):
            call_args.append(a.replace(_LAST_URL_ARG, page.url))
        else:
            call_args.append(a)
    try:
        result = fn(page, *call_args)
        if inspect.isawaitable(result):
            result = await asyncio.wait_for(result, CHECK_TIMEOUT_S)
    except Exception as e:  # noqa: BLE001  (any error of a helper is the original's crash)
        raise _Crash(f"{where}: helper {name!r} raised {type(e).__name__}: {_first_line(e)}") from None
    return result


async def _select(page: Any, target: dict, rubric: str, helpers: dict, where: str, reasons: list[str]) -> Any:
    """What a locator selects: "" = page.content(); a ``document.`` JS expression = str() of its value after
    the prep_actions (the first failing one ends them; a throwing locator selects ""; null selects "None");
    ``lambda:`` (VAB only) = the JS function's value as it is, so a number stays a number for
    required_values (a falsy value or a throw selects None: "the page is wrong"); ``func:`` = the helper's
    value as it is. WebArena then HTML-unescapes the selection; VAB does not."""
    locator = target.get("locator", "")
    if not locator.strip():
        selected: Any = await page.content()
    elif locator.startswith("func:"):
        selected = await _call_helper(locator[5:], page, helpers, f"{where}.locator", reasons)
    elif locator.startswith("lambda:"):
        if rubric == "webarena":
            raise _Crash(f"{where}: WebArena's program_html has no 'lambda:' locator")
        try:       # VAB strips the prefix with lstrip("lambda:"), which takes those letters, not the word
            selected = await asyncio.wait_for(page.evaluate(locator.lstrip("lambda:")), CHECK_TIMEOUT_S)
        except (PlaywrightError, asyncio.TimeoutError) as e:
            reasons.append(f"{where}.locator: {locator!r} failed on {page.url}: {_first_line(e) or 'timeout'}")
            selected = None
        selected = selected or None
    else:
        try:
            for prep in target.get("prep_actions", []):
                await asyncio.wait_for(page.evaluate(f"() => {prep}"), CHECK_TIMEOUT_S)
        except (PlaywrightError, asyncio.TimeoutError) as e:
            reasons.append(f"{where}.prep_actions failed: {_first_line(e)}")
        try:
            selected = str(await asyncio.wait_for(page.evaluate(f"() => {locator}"), CHECK_TIMEOUT_S))
        except (PlaywrightError, asyncio.TimeoutError) as e:    # the original's rule: the page is wrong -> ""
            reasons.append(f"{where}.locator: {locator!r} failed on {page.url}: {_first_line(e) or 'timeout'}")
            selected = ""
    if rubric == "webarena":
        if not isinstance(selected, str):
            raise _Crash(f"{where}: WebArena HTML-unescapes the selection, which is {selected!r}")
        selected = _html.unescape(selected)
    return selected


async def _required_contents(task: Task, target: dict, selected: Any, rubric: str, judge: Any, where: str,
                             reasons: list[str]) -> float:
    """One target's required_contents, the first kind present of exact_match, must_include, must_exclude,
    required_values, fuzzy_match (WebArena: only the first two; the others raise). The selection is not
    cleaned first (exact_match and must_include clean it, WebArena's strip included)."""
    contents = target["required_contents"]
    key = next(k for k in _CONTENT_KEYS if k in contents)
    ref, where = contents[key], f"{where}.required_contents.{key}"
    if rubric == "webarena" and key not in ("exact_match", "must_include"):
        raise _Crash(f"{where}: WebArena's program_html has no {key!r}")
    if key == "exact_match":
        if isinstance(selected, bool) or not isinstance(selected, (str, int)):
            raise _Crash(f"{where}: exact_match takes a string or an int, got {selected!r}")
        ok = _clean(str(selected), rubric) == _clean(ref, rubric)
        if not ok:
            reasons.append(f"{where}: {_short(selected)!r} != {ref!r}")
        return float(ok)
    if key == "required_values":
        return _required_values(selected, ref, where, reasons)
    if key == "fuzzy_match":
        return await _ask_judge(judge, task.intent, ", ".join(_need_list(ref, where)), _need_str(selected, where),
                                where, reasons)
    selected = _need_str(selected, where)
    if key == "must_include":
        missing = [item for item in _need_list(ref, where)
                   if not any(_contains(alt, selected, rubric, tokenize=False) for alt in item.split(_OR))]
        if missing:
            reasons.append(f"{where}: missing {missing!r} in {_short(selected)!r}")
        return 0.0 if missing else 1.0
    present = []                                            # must_exclude
    for item in _need_list(ref, where):
        if _OR in item:
            raise _Crash(f"{where}: VAB asserts no '|OR|' in {item!r}")
        if _contains(item, selected, rubric, slashes=False):
            present.append(item)
    if present:
        reasons.append(f"{where}: must not contain {present!r}: {_short(selected)!r}")
    return 0.0 if present else 1.0


async def _open_probe(page: Any, allowed: set[str]) -> tuple[Any, Any]:
    """(context, page) for checking a program_html URL: a fresh context holding the agent's cookies and
    local storage (its storage_state), so the agent's tabs and history are untouched and the env, which
    makes any new tab of the agent's context the active one, sees nothing. It reaches only the hosts in
    ``allowed`` (read at each request: the caller adds each target's host), like the agent's own context.
    (None, page) for a persistent context, which cannot have a sibling: then it is a new tab of the agent's
    context, under that context's allow-list."""
    browser = page.context.browser
    if browser is None:
        return None, await asyncio.wait_for(page.context.new_page(), CHECK_TIMEOUT_S)
    state = await asyncio.wait_for(page.context.storage_state(), CHECK_TIMEOUT_S)
    # its connections go through the sandbox proxy too (redirect hops included), checked against ``allowed``
    ctx = await new_proxied_context(browser, allowed, timeout=CHECK_TIMEOUT_S, storage_state=state,
                                    accept_downloads=False, service_workers="block")

    async def only_allowed(route: Any) -> None:
        with contextlib.suppress(PlaywrightError):        # the probe may close meanwhile
            if outside_hosts_re(tuple(sorted(allowed))).match(route.request.url):
                await route.abort("blockedbyclient")
            else:
                await route.continue_()
    try:
        await asyncio.wait_for(ctx.route("**/*", only_allowed), CHECK_TIMEOUT_S)
        ctx.set_default_timeout(NAV_TIMEOUT_MS)
        return ctx, await asyncio.wait_for(ctx.new_page(), CHECK_TIMEOUT_S)
    except BaseException:
        await ctx.close()
        raise


async def _program_html(task: Task, page: Any, rubric: str, judge: Any, helpers: dict,
                        reasons: list[str]) -> float:
    """HTMLContent(Exact)Evaluator: the targets in order, scores multiplied. The originals navigate the agent's
    page to a target's URL, so a later "last" target (and __last_url__) sees that page: here the navigation
    happens in one probe page holding the agent's cookies, which then stands for "last"."""
    current, probe_ctx, probe = page, None, None
    allowed = set(family_of(task).hosts(task))   # the probe reaches the task's hosts and the targets' own
    try:
        for i, target in enumerate(task.eval["program_html"]):
            where = f"program_html[{i}]"
            url = substitute_placeholders(target["url"].strip())
            if url.startswith("func:"):
                url = await _call_helper(url[5:], current, helpers, f"{where}.url", reasons)
                if url is None:
                    return 0.0
                url = str(url)
            if url != "last":
                allowed.add(host_entry(url))
                if probe is None:
                    probe_ctx, probe = await _open_probe(page, allowed)
                try:
                    await probe.goto(url, wait_until="load", timeout=NAV_TIMEOUT_MS)
                except PlaywrightError as e:  # includes Playwright's TimeoutError
                    raise _Crash(f"{where}.url: cannot open {url}: {_first_line(e)}") from None
                with contextlib.suppress(PlaywrightTimeoutError):   # a page that keeps polling is read as it is
                    await probe.wait_for_load_state("networkidle", timeout=SETTLE_TIMEOUT_MS)
                current = probe
            selected = await _select(current, target, rubric, helpers, where, reasons)
            if selected is None:        # VAB: "the page is wrong"; WebArena crashed on it in _select
                reasons.append(f"{where}: the locator selected nothing (None)")
                return 0.0
            if not await _required_contents(task, target, selected, rubric, judge, where, reasons):
                return 0.0
        return 1.0
    finally:
        if probe is not None:
            with contextlib.suppress(PlaywrightError, asyncio.TimeoutError):
                await asyncio.wait_for((probe_ctx or probe).close(), CHECK_TIMEOUT_S)


# ---- evaluate ----

async def evaluate(task: Task, page: Any, answer: str | None, *, judge: Any = None, helpers: Any = None,
                   rubric: str = "vab", details: dict | None = None) -> float:
    """A WebArena task's binary score: its eval types (string_match / url_match / program_html) in config
    order, scores multiplied; 0.0 or 1.0. ``rubric``: "vab" (default; VisualAgentBench's WebArena-Lite
    evaluators, which scored the paper) or "webarena" (WebArena's original ones); docs/webarena.md: "Rubrics".

    ``answer`` is the exit() message as the agent wrote it (None = ""). ``judge(question, reference, answer)
    -> float`` (sync or async) scores fuzzy_match and N/A; ``helpers`` maps ``func:`` names to
    ``fn(page, *args)`` (sync or async), on top of the built-in WEBARENA_HELPERS. Where the original evaluator
    raises on the config or a value, the task scores 0 and the reason says so. Pass ``details={}`` to get
    ``{"rubric": ..., "scores": {eval_type: 0/1, or None when skipped after a 0}, "reasons": [...]}``, e.g. ``await evaluate(task, env.page, "Alice", details=d)`` -> 0.0
    with d["reasons"] == ["string_match.exact_match: 'Alice' != 'Bob'"]."""
    if rubric not in RUBRICS:
        raise ValueError(f"unknown rubric {rubric!r} (expected one of {list(RUBRICS)})")
    details = {} if details is None else details
    details["rubric"] = rubric
    reasons: list[str] = details.setdefault("reasons", [])
    scores: dict[str, float | None] = details.setdefault("scores", {})
    types = (task.eval or {}).get("eval_types") or []
    if not types:
        raise ValueError(f"task {task.task_id}: eval.eval_types: no rubric to evaluate")
    total = 1.0
    for kind in types:
        if total == 0.0:  # scores multiply: skip the rest (judge calls and page loads cost)
            scores[kind] = None
            continue
        try:
            if kind == "string_match":
                score = await _string_match(task, answer or "", rubric, judge, reasons)
            elif kind == "url_match":
                ev = task.eval
                if "url_note" in ev and ev["url_note"] is None:
                    raise _Crash("url_match: url_note is null (both originals raise; WebAgent-R1's own copy of "
                                 "the VAB evaluator reads it as EXACT)")
                ref = substitute_placeholders(ev["reference_url"])
                score = float(url_matches(page.url, ref, ev.get("url_note"), rubric))
                if not score:
                    reasons.append(f"url_match ({ev.get('url_note', _URL_DEFAULT[rubric])}): {page.url} vs {ref}")
            elif kind == "program_html":
                score = await _program_html(task, page, rubric, judge, {**WEBARENA_HELPERS, **(helpers or {})},
                                             reasons)
            else:
                raise ValueError(f"task {task.task_id}: eval.eval_types: unknown type {kind!r}")
        except _Crash as e:
            reasons.append(f"{e} -- the {rubric} evaluator raises here; scored 0")
            score = 0.0
        scores[kind] = score
        total *= score
    if total == 0.0 and reasons:
        _wa_log.info("task %s scored 0 (%s): %s", task.task_id, rubric, "; ".join(reasons))
    return 1.0 if total > 0 else 0.0
