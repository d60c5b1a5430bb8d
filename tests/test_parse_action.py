"""env.parse_action / format_action: every action form of the paper's system prompt (Table 6), lenient
and strict cases, round trips, and >= 1,000 random and mutated strings (never a crash other than
ActionParseError, never an eval). Pure Python, no browser."""
import ast
import builtins
import random

import pytest

import env
from env import Action, ActionParseError, format_action, parse_action

# ---- the table: every action form, the paper's own examples included ----

VALID = [
    # Table 6 examples, verbatim
    ("<think> # Element: the 'REPORTS' section on the left sidebar </think>\n"
     "<answer> do(action=\"Click\", element=\"7\") </answer>", Action("Click", element=7)),
    ("<think> # Element: the 'Period' dropdown, middle center </think>\n"
     "<answer> do(action=\"Select Dropdown Option\", argument=\"Day\", element=\"20\") </answer>",
     Action("Select Dropdown Option", element=20, argument="Day")),
    # the 11 do() actions
    ('do(action="Click", element="3")', Action("Click", element=3)),
    ('do(action="Right Click", element="3")', Action("Right Click", element=3)),
    ('do(action="Type", argument="hello world", element="12")', Action("Type", element=12, argument="hello world")),
    ('do(action="Search", argument="red shoes", element="1")', Action("Search", element=1, argument="red shoes")),
    ('do(action="Hover", element="0")', Action("Hover", element=0)),
    ('do(action="Scroll Up")', Action("Scroll Up")),
    ('do(action="Scroll Down")', Action("Scroll Down")),
    ('do(action="Scroll Down", element="4")', Action("Scroll Down", element=4)),
    ('do(action="Press Enter")', Action("Press Enter")),
    ('do(action="Press Enter", element="2")', Action("Press Enter", element=2)),
    ('do(action="Switch Tab", argument="1")', Action("Switch Tab", argument="1")),
    ('do(action="Switch Tab", argument=0)', Action("Switch Tab", argument="0")),
    ('do(action="Select Dropdown Option", argument="Day", element="20")',
     Action("Select Dropdown Option", element=20, argument="Day")),
    ('do(action="Wait")', Action("Wait")),
    # exit / navigation
    ('exit(message="42")', Action("exit", message="42")),
    ("exit(message='It\\'s 42')", Action("exit", message="It's 42")),
    ('exit("The answer is 7")', Action("exit", message="The answer is 7")),
    ("exit()", Action("exit")),
    ("exit(message=3)", Action("exit", message="3")),
    ("go_backward()", Action("go_backward")),
    ("go_forward()", Action("go_forward")),
    # lenient: quotes, element int or string, keyword order, missing ')', whitespace, fences, prose
    ("do(action='Click', element='7')", Action("Click", element=7)),
    ('do(action="Click", element=7)', Action("Click", element=7)),
    ('do(element="7", action="Click")', Action("Click", element=7)),
    ('do(element=5, argument="x", action="Type")', Action("Type", element=5, argument="x")),
    ('do(action="Click", element="7"', Action("Click", element=7)),
    ('<answer>do(action="Type", argument="abc", element="2"</answer>', Action("Type", element=2, argument="abc")),
    ("go_backward(", Action("go_backward")),
    ('  \n do ( action = "Click" ,\n element = " 7 " )  \n', Action("Click", element=7)),
    ('```python\ndo(action="Click", element="1")\n```', Action("Click", element=1)),
    ('<answer>\n```\nexit(message="done")\n```\n</answer>', Action("exit", message="done")),
    ('# Element: the Submit button\ndo(action="Click", element="9")', Action("Click", element=9)),
    ('I will click the button. do(action="Click", element="9")', Action("Click", element=9)),
    ('<think>maybe do(action="Click", element="1")?</think><answer>do(action="Click", element="2")</answer>',
     Action("Click", element=2)),
    ('<think>no answer tags here</think> do(action="Wait")', Action("Wait")),
    ('<answer>do(action="Click", element="7")', Action("Click", element=7)),                 # unclosed answer
    ('do(action="click", element="7")', Action("Click", element=7)),                         # case
    ('do(action="scroll_down")', Action("Scroll Down")),
    ('do(action="SELECT DROPDOWN OPTION", argument="b", element=1)', Action("Select Dropdown Option", element=1, argument="b")),
    ('do(action="Click", argument="", element="3")', Action("Click", element=3)),            # unused arg dropped
    ('do(action="Wait", element="3")', Action("Wait")),
    ('do(action="Type", argument="", element="3")', Action("Type", element=3, argument="")),  # clears the field
    ('do(action="Type", argument=None, element="3", )'.replace("None", '"x"'), Action("Type", element=3, argument="x")),
    ('do("Click", None, "4")', Action("Click", element=4)),                                   # positional = signature order
    ('do(action="Type", argument="say \\"hi\\"\\nbye", element="1")', Action("Type", element=1, argument='say "hi"\nbye')),
    ('do(action="Type", argument="do(action=\\"Click\\")", element="1")',
     Action("Type", element=1, argument='do(action="Click")')),                              # a call inside a string
    ("do(action=\"Type\", argument='don\\'t', element=\"1\")", Action("Type", element=1, argument="don't")),
    ('do(action="Type", argument=42, element="1")', Action("Type", element=1, argument="42")),
    ('do(action="Click", element="[7]")', Action("Click", element=7)),
    ('do(action="Type", argument="""multi "quoted" text""", element="1")',
     Action("Type", element=1, argument='multi "quoted" text')),
    ('do(action="Type", argument="caf\\u00e9", element="1")', Action("Type", element=1, argument="café")),
    # the response split is compress.parse_response's: tags in any case, a thought the template opened,
    # an answer to the last </answer>
    ('<THINK> x </THINK> <Answer> do(action="Wait") </Answer>', Action("Wait")),
    ('the Ok button</think> do(action="Click", element="1")', Action("Click", element=1)),
    ('<think> x </think> <answer> do(action="Type", argument="a </answer> b", element="3") </answer>',
     Action("Type", element=3, argument="a </answer> b")),
]

INVALID = [
    ("", "empty"),
    ("   \n  ", "empty"),
    ("<think>only thinking</think>", "no action"),
    ('<think>cut off while thinking: do(action="Click", element="1")', "no action"),
    ("click(3)", "unknown function"),
    ('do(action="Jump", element="1")', "unknown action"),
    ("do(element=\"1\")", "needs action"),
    ("do(action=Click, element=1)", "quotes"),
    ('do(action="Click")', "needs element"),
    ('do(action="Right Click")', "needs element"),
    ('do(action="Type", argument="x")', "needs element"),
    ('do(action="Search", argument="x")', "needs element"),
    ('do(action="Select Dropdown Option", argument="x")', "needs element"),
    ('do(action="Hover")', "needs element"),
    ('do(action="Type", element="1")', "needs argument"),
    ('do(action="Search", element="1")', "needs argument"),
    ('do(action="Switch Tab")', "needs argument"),
    ('do(action="Select Dropdown Option", element="1")', "needs argument"),
    ('do(action="Switch Tab", argument="next")', "tab index"),
    ('do(action="Click", element="7") do(action="Click", element="8")', "more than one action"),
    ('do(action="Click", element="7")\nexit(message="x")', "more than one action"),
    ('<answer>go_backward()</answer><answer>go_forward()</answer>', "more than one <answer>"),
    ('do(action="Click", element="seven")', "integer id"),
    ('do(action="Click", element=-1)', "non-negative"),
    ('do(action="Click", element=2.5)', "non-negative"),
    ('do(action="Click", elment="7")', "unknown argument"),
    ('do(action="Click", element="7", element="8")', "given twice"),
    ('do(action="Click", "7")', "positional argument follows"),
    ('do(action="Type", argument="unclosed, element=1)', "not closed"),
    ('do(action="Click" element="7")', "expected ','"),
    ("go_backward(1)", "takes 0"),
    ('exit(message="a", foo=1)', "unknown argument"),
    ('do(action="Click", element=)', "unexpected character"),
    ('do(action="Click", element="1", "x", "y")', "positional argument follows"),
    ('do("Click", "a", "1", "extra")', "takes 3"),
]


@pytest.mark.parametrize("text,expected", VALID)
def test_valid_forms(text, expected):
    assert parse_action(text) == expected


@pytest.mark.parametrize("text,fragment", INVALID)
def test_invalid_forms_have_readable_errors(text, fragment):
    with pytest.raises(ActionParseError) as ei:
        parse_action(text)
    assert fragment.lower() in str(ei.value).lower(), str(ei.value)


def test_every_action_name_covered():
    names = {a.name for _, a in VALID}
    assert set(env.ACTION_NAMES) | {"exit", "go_backward", "go_forward"} <= names
    assert len(env.ACTION_NAMES) == 11


def test_format_is_canonical_and_round_trips():
    assert format_action(Action("Click", element=7)) == 'do(action="Click", element="7")'
    assert format_action(Action("Type", element=3, argument="hi")) == 'do(action="Type", argument="hi", element="3")'
    assert format_action(Action("exit", message="42")) == 'exit(message="42")'
    assert format_action(Action("go_backward")) == "go_backward()"
    for _, action in VALID:
        assert parse_action(format_action(action)) == action
    rng = random.Random(1)
    alphabet = "ab \"'\\\n\t()=,#<>é中"
    for _ in range(300):
        name = rng.choice(env.ACTION_NAMES)
        arg = "".join(rng.choice(alphabet) for _ in range(rng.randint(0, 12)))
        a = Action(name,
                   element=rng.randint(0, 999) if name in env.NEEDS_ELEMENT else None,
                   argument=(str(rng.randint(0, 5)) if name == "Switch Tab" else arg) if name in env.NEEDS_ARGUMENT else None)
        assert parse_action(format_action(a)) == a
        m = Action("exit", message=arg)
        assert parse_action(format_action(m)) == m


# ---- fuzz: random and mutated strings ----

def _valid_action(a: Action) -> bool:
    if a.name in ("exit", "go_backward", "go_forward"):
        return a.element is None and a.argument is None
    if a.name not in env.ACTION_NAMES:
        return False
    if a.name in env.NEEDS_ELEMENT and (a.element is None or a.element < 0):
        return False
    if a.name in env.NEEDS_ARGUMENT and a.argument is None:
        return False
    return True


def _mutate(rng: random.Random, s: str) -> str:
    pieces = ['"', "'", "(", ")", ",", "=", "\\", "do(", "exit(", "<answer>", "</answer>", "<think>", "\n",
              "element=", "argument=", "action=", "None", "7", "-", " ", "```", "#", "go_forward()"]
    s = list(s)
    for _ in range(rng.randint(1, 4)):
        op = rng.random()
        i = rng.randint(0, len(s))
        if op < 0.35 and s:
            del s[min(i, len(s) - 1)]
        elif op < 0.7:
            s[i:i] = list(rng.choice(pieces))
        elif s:
            j = rng.randint(0, len(s) - 1)
            k = min(i, len(s) - 1)
            s[j], s[k] = s[k], s[j]
    return "".join(s)


def test_fuzz_never_crashes_never_evals(monkeypatch):
    def forbidden(*a, **k):
        raise AssertionError("parse_action must never evaluate model text")
    monkeypatch.setattr(builtins, "eval", forbidden)
    monkeypatch.setattr(builtins, "exec", forbidden)
    monkeypatch.setattr(ast, "literal_eval", forbidden)
    rng = random.Random(1234)
    seeds = [t for t, _ in VALID] + [t for t, _ in INVALID]
    printable = [chr(c) for c in range(32, 127)] + ["\n", "\t", "é", "中", "\u200b"]
    n_ok = n_err = 0
    for i in range(3000):
        if i % 3 == 0:
            text = "".join(rng.choice(printable) for _ in range(rng.randint(0, 80)))
        else:
            text = _mutate(rng, rng.choice(seeds))
        try:
            a = parse_action(text)
        except ActionParseError as e:
            assert str(e)                      # a message the agent can read
            n_err += 1
        else:
            assert _valid_action(a), (text, a)
            assert parse_action(format_action(a)) == a
            n_ok += 1
    assert n_ok + n_err == 3000
    assert n_ok > 100 and n_err > 100          # the mutations exercise both outcomes


def test_non_text_input():
    with pytest.raises(ActionParseError):
        parse_action(None)  # type: ignore[arg-type]


@pytest.mark.parametrize("text", [
    'do(action="Click", element="' + "9" * 5000 + '")',           # past Python's int() digit limit
    'do(action="Click", element=' + "9" * 5000 + ")",
    'do(action="Switch Tab", argument="' + "9" * 5000 + '")',     # every number goes through one conversion
    'do(action="Switch Tab", argument=' + "9" * 5000 + ")",
    'do(action="Switch Tab", argument=-' + "9" * 5000 + ")",
    'do(action="Switch Tab", argument="١")',                  # a non-ASCII digit (Arabic-Indic one)
    "\n" * 1_000_000, "<think>" * 150_000, "do(" * 330_000, "a(" * 500_000, "#\n" * 500_000,
    "<answer>" * 125_000, 'do(action="Type", element="1", argument="' + "x\\" * 400_000,
])
def test_hostile_responses_fail_fast_with_a_message(text):
    """A sampling model can emit megabytes of junk; parsing runs on the event loop every env shares, so it
    must stay linear (these took 36 s to minutes when quadratic) and end in an ActionParseError, never another
    exception. The bound is a stall guard, far above the ~0.1 s each takes."""
    import time
    t0 = time.perf_counter()
    with pytest.raises(ActionParseError) as err:
        parse_action(text)
    assert time.perf_counter() - t0 < 10 and len(str(err.value)) < 300


def test_long_typed_text_parses_whole():
    text = "line one\nline two " * 50_000
    a = parse_action(f'do(action="Type", element="3", argument="""{text}""")')
    assert a == Action("Type", element=3, argument=text)
