"""Write crates/tf-server/tests/fixtures/chat/*.json from the DeepSeek-V4.1 reference encoder.

The encoder is a git-ignored local copy at tools/chat_fixtures/ref/deepseek_v41_encoding.py
(vLLM's vllm/tokenizers/deepseek_v41_encoding.py, Apache-2.0, adapted from DeepSeek's
encoding/encoding.py). The request wrapper below follows vLLM's deepseek_v41.py
(_normalize_messages + apply_chat_template): tools go on the first system message
(one is inserted when absent), thinking defaults on, reasoning_effort defaults to high
and "none" turns thinking off.

vLLM's copy carries a pre-release reasoning-effort table (low 25 / high 50 / xhigh 75 /
max 100). The script replaces it below with the table of DeepSeek's released encoder
(encoding/encoding.py of deepseek-ai/DeepSeek-V4.1-Flash): low 50 / high 75 / max 100,
default high, anything else (xhigh, medium) rejected.

Run: python3 tools/chat_fixtures/make_fixtures.py
"""

import copy
import json
import pathlib
import sys

HERE = pathlib.Path(__file__).resolve().parent
sys.path.insert(0, str(HERE / "ref"))
import deepseek_v41_encoding as enc  # noqa: E402

# Patched: DeepSeek's released encoder, not vLLM's pre-release table (see the docstring).
enc.REASONING_EFFORT_MAPPINGS = {"low": 50, "high": 75, "max": 100}
enc.DEFAULT_REASONING_EFFORT = "high"

OUT = HERE.parents[1] / "crates" / "tf-server" / "tests" / "fixtures" / "chat"


def normalize(messages):
    result = [dict(m) for m in copy.deepcopy(messages)]
    for m in result:
        if "reasoning" in m:
            m["reasoning_content"] = m["reasoning"]
        content = m.get("content")
        if isinstance(content, list):
            parts = []
            for block in content:
                if block.get("type") == "text":
                    parts.append(block.get("text", ""))
                else:
                    parts.append(enc.IMAGE_PLACEHOLDER)
            m["content"] = "\n\n".join(parts)
    return result


def encode(messages, tools, options):
    conv = normalize(messages)
    if tools:
        system = next((m for m in conv if m["role"] == "system"), None)
        if system is None:
            system = {"role": "system", "content": ""}
            conv.insert(0, system)
        system["tools"] = tools
    thinking = options.get("thinking", True)
    effort = options.get("reasoning_effort")
    if effort == "none":
        thinking, effort = False, None
    if effort is None:
        effort = "high"
    return enc.encode_messages(
        conv,
        thinking_mode="thinking" if thinking else "chat",
        drop_thinking=options.get("drop_thinking", True),
        reasoning_effort=effort,
    )


WEATHER = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "Get the current weather for a city.",
        "parameters": {
            "type": "object",
            "properties": {
                "location": {"type": "string", "description": "City name"},
                "unit": {"type": "string", "enum": ["celsius", "fahrenheit"]},
            },
            "required": ["location"],
        },
    },
}
SEARCH = {
    "type": "function",
    "function": {
        "name": "search",
        "description": "Search the web.",
        "parameters": {
            "type": "object",
            "properties": {"query": {"type": "string"}, "top_k": {"type": "integer"}},
            "required": ["query"],
        },
    },
}


def call(cid, name, args):
    return {"id": cid, "type": "function", "function": {"name": name, "arguments": args}}


U = lambda c: {"role": "user", "content": c}  # noqa: E731
S = lambda c: {"role": "system", "content": c}  # noqa: E731


def A(c, r=None, calls=None):
    m = {"role": "assistant", "content": c}
    if r is not None:
        m["reasoning_content"] = r
    if calls is not None:
        m["tool_calls"] = calls
    return m


def T(cid, c):
    return {"role": "tool", "tool_call_id": cid, "content": c}


MULTI = [
    S("You are terse."),
    U("What is 2+2?"),
    A("4", r="Simple addition."),
    U("And 3+3?"),
]
TOOL_TURN = [
    S("You can check the weather."),
    U("Weather in Beijing?"),
    A("", r="I should call the tool.", calls=[call("call_1", "get_weather", '{"location": "Beijing", "unit": "celsius"}')]),
    T("call_1", '{"temperature": 22, "condition": "sunny"}'),
    A("It is 22 °C and sunny in Beijing.", r="The tool answered."),
    U("Thanks! And tomorrow?"),
]

CASES = {
    "plain_chat": ([U("Hello!")], None, {}),
    "plain_chat_thinking_off": ([U("Hello!")], None, {"thinking": False}),
    "effort_none_turns_thinking_off": ([U("Hello!")], None, {"reasoning_effort": "none"}),
    "system_prompt": ([S("You are a helpful assistant."), U("Hi")], None, {}),
    "system_prompt_thinking_off": ([S("You are a helpful assistant."), U("Hi")], None, {"thinking": False}),
    "system_only": ([S("Be brief.")], None, {}),
    "effort_low": ([U("q")], None, {"reasoning_effort": "low"}),
    "effort_max": ([U("q")], None, {"reasoning_effort": "max"}),
    "effort_numeric": ([U("q")], None, {"reasoning_effort": 37}),
    "multi_turn_reasoning_dropped": (MULTI, None, {}),
    "multi_turn_reasoning_kept": (MULTI, None, {"drop_thinking": False}),
    "multi_turn_thinking_off": (MULTI, None, {"thinking": False}),
    "reasoning_alias_field": ([U("a"), {"role": "assistant", "content": "b", "reasoning": "r"}, U("c")], None, {"drop_thinking": False}),
    "ends_with_assistant": ([U("a"), A("b", r="r")], None, {}),
    "tools_defined_no_system": ([U("Weather in Paris?")], [WEATHER, SEARCH], {}),
    "tools_defined_with_system": ([S("Use tools wisely."), U("Weather in Paris?")], [WEATHER], {}),
    "tools_thinking_off": ([U("Weather in Paris?")], [WEATHER], {"thinking": False}),
    "tool_call_roundtrip": (TOOL_TURN, [WEATHER], {}),
    "tool_call_roundtrip_thinking_off": (TOOL_TURN, [WEATHER], {"thinking": False}),
    "tool_call_no_tools_listed": (TOOL_TURN, None, {}),
    "tool_call_pending_result": (TOOL_TURN[:4], [WEATHER], {}),
    "parallel_calls_results_reordered": (
        [
            U("Weather in Oslo and news about Oslo?"),
            A("", r="Two calls.", calls=[
                call("c_a", "get_weather", '{"location": "Oslo"}'),
                call("c_b", "search", '{"query": "Oslo news", "top_k": 3}'),
            ]),
            T("c_b", "Nothing new."),
            T("c_a", "-3 C"),
        ],
        [WEATHER, SEARCH],
        {},
    ),
    "tool_args_typed_and_invalid": (
        [
            U("go"),
            A("", calls=[
                call("x1", "f", '{"n": 3, "ok": true, "xs": [1, "two", null], "obj": {"k": "v", "é": 1.5}, "s": "a\\nb"}'),
                call("x2", "g", "not json {"),
                call("x3", "h", '"{\\"inner\\": 1}"'),
                call("x4", "k", "[1, 2]"),
            ]),
            T("x1", "r1"), T("x2", "r2"), T("x3", "r3"), T("x4", "r4"),
        ],
        [SEARCH],
        {"thinking": False},
    ),
    "tool_args_float_spelling": (
        [U("go"), A("ok", r="r", calls=[call("f1", "search", '{"query": "x", "eps": 1e-7, "big": 1e16, "mid": 123456.789, "neg": -0.0, "int": 12345678901234567}')]), T("f1", "done")],
        [SEARCH],
        {"reasoning_effort": 90},
    ),
    "tool_result_then_user_text_merge": (
        [U("go"), A("", calls=[call("x1", "search", '{"query": "q"}')]), T("x1", "res"), U("also this")],
        None,
        {},
    ),
    "consecutive_users_merge": ([U("first"), U("second")], None, {}),
    "non_ascii": (
        [S("Réponds en français 🙂"), U("日本語で答えて: ¿qué tal? Ω≈ç√"), A("はい、元気です。", r="考え中…"), U("Ещё раз?")],
        [{"type": "function", "function": {"name": "traduire", "description": "Traduit un texte — vite.", "parameters": {"type": "object", "properties": {"texte": {"type": "string"}}}}}],
        {},
    ),
    "mid_conversation_system": ([U("a"), A("b", r="r1"), S("Now answer in French."), U("c")], None, {}),
    "trailing_mid_system": ([U("a"), A("b", r="r1"), S("Summarise.")], None, {}),
    "developer_role": ([S("sys"), {"role": "developer", "content": "Prefer lists."}, U("x")], None, {}),
    "developer_dropped_before_last_user": ([{"role": "developer", "content": "dev"}, U("x"), A("y", r="r"), U("z")], None, {}),
    "image_parts": (
        [{"role": "user", "content": [{"type": "text", "text": "What is this?"}, {"type": "image_url", "image_url": {"url": "data:image/png;base64,AA=="}}]}],
        None,
        {"thinking": False},
    ),
    "empty_assistant_content": ([U("a"), A(""), U("b")], None, {"drop_thinking": False}),
}


def main():
    for bad in ("xhigh", "medium"):
        try:
            encode([U("q")], None, {"reasoning_effort": bad})
        except AssertionError:
            pass
        else:
            raise SystemExit(f"reference encoder accepted reasoning_effort={bad!r}; is the mapping patch in place?")
    OUT.mkdir(parents=True, exist_ok=True)
    for name, (messages, tools, options) in CASES.items():
        expected = encode(messages, tools, options)
        fixture = {"name": name, "messages": messages, "tools": tools, "options": options, "expected": expected}
        path = OUT / f"{name}.json"
        path.write_text(json.dumps(fixture, ensure_ascii=False, indent=1) + "\n", encoding="utf-8")
    print(f"wrote {len(CASES)} fixtures to {OUT}")


if __name__ == "__main__":
    main()
