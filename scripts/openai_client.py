#!/usr/bin/env python3
"""The official `openai` client against a running `tf serve` (see scripts/openai-client.sh); exit 1 on a failure."""

import argparse
import json
import sys
import time
import traceback
import urllib.request

import openai
from openai.types import Completion
from openai.types.chat import ChatCompletion, ChatCompletionChunk

# DeepSeek-V4.1 markers, as in crates/tf-server/src/chat/dsml.rs.
EOS = "<｜end▁of▁sentence｜>"
THINK_END = "</think>"
CALLS_OPEN = "<｜DSML｜ calls>"
CALLS_CLOSE = "</｜DSML｜ calls>"
INVOKE_OPEN = '<｜DSML｜ invoke name="'
INVOKE_CLOSE = "</｜DSML｜ invoke>"
PARAM_OPEN = '<｜DSML｜ parameter name="'
PARAM_CLOSE = "</｜DSML｜ parameter>"

MESSAGES = [{"role": "user", "content": "Hello! Tell me about the weather."}]
TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "get_weather",
            "description": "Current weather and a forecast for a city.",
            "parameters": {
                "type": "object",
                "properties": {"city": {"type": "string"}, "days": {"type": "integer"}},
                "required": ["city"],
            },
        },
    },
    {
        "type": "function",
        "function": {
            "name": "get_time",
            "description": "Local time in a city.",
            "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]},
        },
    },
]
CALLS = [("get_weather", {"city": "Paris", "days": 3}), ("get_time", {"city": "Tokyo"})]
REASONING = "The user wants the weather."
CONTENT = "Let me look that up."


def extra(obj, name):
    """A field the client's types do not declare (reasoning_content, token_id), or None."""
    return (obj.model_extra or {}).get(name)


def greedy(**kw):
    return dict(model=ARGS.model_id, temperature=0, seed=1, **kw)


def check_models():
    ids = [m.id for m in CLIENT.models.list()]
    assert ARGS.model_id in ids, f"/v1/models lists {ids}, not {ARGS.model_id!r}"


def check_api_key():
    wrong = openai.OpenAI(base_url=ARGS.base_url, api_key=ARGS.api_key + "-wrong", max_retries=0)
    try:
        wrong.chat.completions.create(messages=MESSAGES, max_tokens=1, **greedy())
    except openai.AuthenticationError as e:
        assert e.status_code == 401, f"wrong key gave status {e.status_code}, want 401"
    else:
        raise AssertionError("a wrong API key was accepted; want openai.AuthenticationError")


def check_usage(usage, max_completion):
    assert usage is not None, "response has no usage"
    assert usage.total_tokens == usage.prompt_tokens + usage.completion_tokens, f"usage does not add up: {usage}"
    assert usage.prompt_tokens > 0, f"prompt_tokens is {usage.prompt_tokens}"
    assert 1 <= usage.completion_tokens <= max_completion, (
        f"completion_tokens {usage.completion_tokens} not in 1..={max_completion}"
    )


def chat_plain(**kw):
    r = CLIENT.chat.completions.create(messages=MESSAGES, max_tokens=8, **greedy(**kw))
    assert isinstance(r, ChatCompletion), f"not a ChatCompletion: {type(r)}"
    assert r.object == "chat.completion", f"object is {r.object!r}"
    assert len(r.choices) == 1, f"{len(r.choices)} choices, want 1"
    return r


def check_chat():
    r = chat_plain()
    c = r.choices[0]
    assert c.message.role == "assistant", f"role is {c.message.role!r}"
    assert c.finish_reason in {"stop", "length"}, f"finish_reason is {c.finish_reason!r}"
    assert r.model == ARGS.model_id, f"model is {r.model!r}"
    check_usage(r.usage, 8)
    assert isinstance(extra(c.message, "reasoning_content"), str), "thinking is on by default: want reasoning_content"


def stream_chat(**kw):
    """Streams a chat request; returns (reasoning, content, tool calls by index, finish_reason, usage)."""
    stream = CLIENT.chat.completions.create(stream=True, stream_options={"include_usage": True}, **kw)
    reasoning, content, calls, finish, usage, chunks = "", "", {}, None, None, []
    for chunk in stream:
        assert isinstance(chunk, ChatCompletionChunk), f"not a ChatCompletionChunk: {type(chunk)}"
        assert chunk.object == "chat.completion.chunk", f"chunk object is {chunk.object!r}"
        chunks.append(chunk)
        if chunk.usage is not None:
            assert chunk.choices == [], f"the usage chunk has choices: {chunk.choices}"
            usage = chunk.usage
        for choice in chunk.choices:
            d = choice.delta
            reasoning += extra(d, "reasoning_content") or ""
            content += d.content or ""
            for tc in d.tool_calls or []:
                acc = calls.setdefault(tc.index, {"id": "", "name": "", "arguments": ""})
                if tc.id:
                    acc["id"] = tc.id
                if tc.function and tc.function.name:
                    acc["name"] = tc.function.name
                if tc.function and tc.function.arguments:
                    acc["arguments"] += tc.function.arguments
            if choice.finish_reason is not None:
                finish = choice.finish_reason
    assert chunks, "the stream was empty"
    assert chunks[0].choices and chunks[0].choices[0].delta.role == "assistant", "first delta must carry role assistant"
    assert usage is not None, "stream_options.include_usage gave no usage chunk"
    assert chunks[-1].usage is not None, "the usage chunk must come last"
    return reasoning, content, calls, finish, usage


def check_chat_stream():
    plain = chat_plain()
    m = plain.choices[0].message
    reasoning, content, _, finish, usage = stream_chat(messages=MESSAGES, max_tokens=8, **greedy())
    want_r, want_c = extra(m, "reasoning_content") or "", m.content or ""
    assert (reasoning, content) == (want_r, want_c), f"streamed {(reasoning, content)!r} != plain {(want_r, want_c)!r}"
    assert finish == plain.choices[0].finish_reason, (
        f"streamed finish {finish!r} != plain {plain.choices[0].finish_reason!r}"
    )
    assert usage.model_dump() == plain.usage.model_dump(), f"streamed usage {usage} != plain {plain.usage}"


def check_thinking():
    on = chat_plain(extra_body={"chat_template_kwargs": {"thinking": True}}).choices[0].message
    off_r = chat_plain(extra_body={"chat_template_kwargs": {"thinking": False}})
    off = off_r.choices[0].message
    assert isinstance(extra(on, "reasoning_content"), str), "thinking on: want reasoning_content"
    assert extra(off, "reasoning_content") is None, (
        f"thinking off: reasoning_content is {extra(off, 'reasoning_content')!r}"
    )
    assert isinstance(off.content, str), "thinking off: want string content"
    check_usage(off_r.usage, 8)


def check_logprobs():
    r = chat_plain(logprobs=True, top_logprobs=3)
    lp = r.choices[0].logprobs
    assert lp is not None and lp.content, "logprobs=True gave no logprobs.content"
    assert len(lp.content) == r.usage.completion_tokens, (
        f"{len(lp.content)} logprob entries for {r.usage.completion_tokens} tokens"
    )
    for i, t in enumerate(lp.content):
        assert len(t.top_logprobs) == 3, f"token {i}: {len(t.top_logprobs)} alternatives, want 3"
        assert t.logprob <= 0, f"token {i}: logprob {t.logprob} > 0"
        tops = [a.logprob for a in t.top_logprobs]
        assert tops == sorted(tops, reverse=True), f"token {i}: alternatives not in descending order {tops}"
        assert t.logprob <= tops[0] + 1e-6, (
            f"token {i}: greedy token's logprob {t.logprob} is below the best alternative {tops[0]}"
        )
    assert chat_plain().choices[0].logprobs is None, "logprobs not asked for, yet returned"


def check_completions():
    r = CLIENT.completions.create(prompt="Hello", max_tokens=5, **greedy())
    assert isinstance(r, Completion), f"not a Completion: {type(r)}"
    assert r.object == "text_completion", f"object is {r.object!r}"
    c = r.choices[0]
    assert isinstance(c.text, str), f"text is {c.text!r}"
    assert c.finish_reason in {"stop", "length"}, f"finish_reason is {c.finish_reason!r}"
    check_usage(r.usage, 5)
    stream = CLIENT.completions.create(
        prompt="Hello", max_tokens=5, stream=True, stream_options={"include_usage": True}, **greedy()
    )
    text, finish, usage = "", None, None
    for chunk in stream:
        assert isinstance(chunk, Completion), f"streamed chunk is not a Completion: {type(chunk)}"
        usage = chunk.usage or usage
        for ch in chunk.choices:
            text += ch.text
            finish = ch.finish_reason or finish
    assert text == c.text, f"streamed text {text!r} != plain {c.text!r}"
    assert finish == c.finish_reason, f"streamed finish {finish!r} != plain {c.finish_reason!r}"
    assert usage is not None and usage.model_dump() == r.usage.model_dump(), (
        f"streamed usage {usage} != plain {r.usage}"
    )


def post(path, body):
    req = urllib.request.Request(
        ARGS.base_url.rstrip("/").removesuffix("/v1") + path,
        data=json.dumps(body).encode(),
        headers={"content-type": "application/json", "authorization": f"Bearer {ARGS.api_key}"},
    )
    with urllib.request.urlopen(req, timeout=60) as r:
        return json.loads(r.read())


def dsml_calls(calls):
    """The DSML block DeepSeek-V4.1 writes for `calls` (render_calls in dsml.rs)."""
    invokes = []
    for name, args in calls:
        params = []
        for k, v in args.items():
            text = v if isinstance(v, str) else json.dumps(v, ensure_ascii=False)
            params.append(f'{PARAM_OPEN}{k}" string="{str(isinstance(v, str)).lower()}">{text}{PARAM_CLOSE}')
        invokes.append(f'{INVOKE_OPEN}{name}">\n' + "\n".join(params) + f"\n{INVOKE_CLOSE}")
    return f"\n\n{CALLS_OPEN}\n" + "\n".join(invokes) + f"\n{CALLS_CLOSE}"


def forced_tool_ids():
    """Token ids of a thinking-mode completion that calls CALLS; the prompt already ends inside <think>."""
    text = f"{REASONING}{THINK_END}{CONTENT}{dsml_calls(CALLS)}{EOS}"
    ids = post("/tokenize", {"prompt": text})["tokens"]
    back = post("/detokenize", {"tokens": ids})["prompt"]
    assert back == text, f"/tokenize does not round-trip the DSML text: {back!r}"
    return ids


def check_calls(calls):
    """`calls` as (id, name, arguments JSON) must be CALLS, with unique non-empty ids."""
    got = [(name, json.loads(args)) for _, name, args in calls]
    assert got == CALLS, f"tool calls {got} != {CALLS}"
    ids = [i for i, _, _ in calls]
    assert all(ids) and len(set(ids)) == len(ids), f"tool call ids must be non-empty and unique: {ids}"


def check_tools():
    ids = forced_tool_ids()
    body = dict(messages=MESSAGES, tools=TOOLS, max_tokens=len(ids) + 8, extra_body={"forced_tokens": ids}, **greedy())
    r = CLIENT.chat.completions.create(logprobs=True, top_logprobs=2, **body)
    got = [extra(t, "token_id") for t in (r.choices[0].logprobs.content if r.choices[0].logprobs else [])]
    assert got == ids, (
        f"completion is not the forced tokens (is forced_tokens implemented?): got {got[:12]}…, want {ids[:12]}…"
    )
    assert r.usage.completion_tokens == len(ids), (
        f"completion_tokens {r.usage.completion_tokens}, want {len(ids)} forced"
    )
    c = r.choices[0]
    assert c.finish_reason == "tool_calls", f"finish_reason is {c.finish_reason!r}, want tool_calls"
    m = c.message
    assert m.tool_calls and m.tool_calls[0].function.name == "get_weather", f"tool_calls: {m.tool_calls}"
    assert json.loads(m.tool_calls[0].function.arguments) == CALLS[0][1], (
        f"arguments: {m.tool_calls[0].function.arguments}"
    )
    assert all(tc.type == "function" for tc in m.tool_calls), f"tool call types: {[tc.type for tc in m.tool_calls]}"
    check_calls([(tc.id, tc.function.name, tc.function.arguments) for tc in m.tool_calls])
    assert (extra(m, "reasoning_content"), m.content) == (REASONING, CONTENT), (
        f"reasoning/content: {extra(m, 'reasoning_content')!r} / {m.content!r}"
    )

    reasoning, content, calls, finish, usage = stream_chat(**body)
    assert sorted(calls) == list(range(len(calls))), f"streamed tool call indexes {sorted(calls)}"
    check_calls([(calls[i]["id"], calls[i]["name"], calls[i]["arguments"]) for i in sorted(calls)])
    assert finish == "tool_calls", f"streamed finish_reason is {finish!r}, want tool_calls"
    assert (reasoning, content) == (REASONING, CONTENT), f"streamed reasoning/content: {reasoning!r} / {content!r}"
    assert usage.completion_tokens == len(ids), f"streamed completion_tokens {usage.completion_tokens}, want {len(ids)}"

    assistant = {
        "role": "assistant",
        "content": m.content,
        "reasoning_content": REASONING,
        "tool_calls": [tc.model_dump(exclude_none=True) for tc in m.tool_calls],
    }
    tool_turn(assistant, [tc.id for tc in m.tool_calls], r.usage.prompt_tokens)


def tool_turn(assistant, call_ids, first_prompt_tokens):
    """Sends the tool results back for `call_ids`; the server must encode them and answer."""
    results = [
        {"role": "tool", "tool_call_id": i, "content": json.dumps({"result": f"ok {n}"})}
        for n, i in enumerate(call_ids)
    ]
    r = CLIENT.chat.completions.create(messages=MESSAGES + [assistant] + results, tools=TOOLS, max_tokens=4, **greedy())
    c = r.choices[0]
    assert c.message.role == "assistant", f"second turn role {c.message.role!r}"
    assert c.finish_reason in {"stop", "length", "tool_calls"}, f"second turn finish_reason {c.finish_reason!r}"
    check_usage(r.usage, 4)
    assert r.usage.prompt_tokens > first_prompt_tokens, (
        f"second turn prompt {r.usage.prompt_tokens} tokens, not longer than the first ({first_prompt_tokens})"
    )


def check_tool_result_turn():
    first = CLIENT.chat.completions.create(messages=MESSAGES, tools=TOOLS, max_tokens=1, **greedy())
    calls = [
        {"id": f"call_{n}", "type": "function", "function": {"name": name, "arguments": json.dumps(args)}}
        for n, (name, args) in enumerate(CALLS)
    ]
    assistant = {"role": "assistant", "content": CONTENT, "reasoning_content": REASONING, "tool_calls": calls}
    tool_turn(assistant, [c["id"] for c in calls], first.usage.prompt_tokens)
    try:
        CLIENT.chat.completions.create(
            messages=MESSAGES + [{"role": "tool", "tool_call_id": "x", "content": "1"}], max_tokens=1, **greedy()
        )
    except openai.BadRequestError as e:
        assert e.status_code == 400, f"status {e.status_code}"
    else:
        raise AssertionError("a tool message without a preceding tool call was accepted; want openai.BadRequestError")


def check_logit_bias_and_refusals():
    first = chat_plain(logprobs=True).choices[0].logprobs.content[0]
    pick = 100 if extra(first, "token_id") != 100 else 101
    r = chat_plain(logprobs=True, logit_bias={str(pick): 100})
    ids = [extra(t, "token_id") for t in r.choices[0].logprobs.content]
    assert ids and all(i == pick for i in ids), f"logit_bias +100 on {pick} gave {ids}"
    bad = [
        dict(tools=TOOLS, tool_choice={"type": "function", "function": {"name": "no_such_tool"}}),
        dict(tool_choice="required"),
        dict(logit_bias={"abc": 1}),
        dict(stream_options={"include_usage": True}),
    ]
    for kw in bad:
        try:
            chat_plain(**kw)
        except openai.BadRequestError as e:
            assert e.status_code == 400 and len(str(e)) > len("Error code: 400 - "), f"{kw}: {e}"
        else:
            raise AssertionError(f"{kw} was accepted; OpenAI answers 400")


CHECKS = [
    ("models.list", check_models),
    ("wrong API key", check_api_key),
    ("chat", check_chat),
    ("chat streamed", check_chat_stream),
    ("thinking on/off", check_thinking),
    ("logprobs", check_logprobs),
    ("completions", check_completions),
    ("logit_bias and 400s", check_logit_bias_and_refusals),
    ("tool result turn", check_tool_result_turn),
    ("tool calls (forced_tokens)", check_tools),
]


def main():
    global ARGS, CLIENT
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--base-url", required=True, help="e.g. http://127.0.0.1:8000/v1")
    p.add_argument("--api-key", required=True)
    p.add_argument("--model-id", required=True)
    p.add_argument("--skip-tools", action="store_true", help="skip the check that needs the forced_tokens field")
    ARGS = p.parse_args()
    CLIENT = openai.OpenAI(base_url=ARGS.base_url, api_key=ARGS.api_key, max_retries=0, timeout=120)
    print(f"openai {openai.__version__} against {ARGS.base_url} ({ARGS.model_id})")
    failed = []
    for name, check in CHECKS:
        if ARGS.skip_tools and "forced_tokens" in name:
            print(f"SKIP {name}")
            continue
        t = time.monotonic()
        try:
            check()
            print(f"PASS {name} ({time.monotonic() - t:.1f} s)")
        except Exception as e:  # noqa: BLE001 - one failing check must not hide the others
            failed.append(name)
            print(f"FAIL {name}: {type(e).__name__}: {e}")
            if not isinstance(e, AssertionError):
                traceback.print_exc()
    print(f"{len(failed)} of {len(CHECKS)} checks failed: {', '.join(failed)}" if failed else "all checks passed")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
