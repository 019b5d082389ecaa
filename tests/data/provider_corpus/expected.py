#!/usr/bin/env python3
"""Writes expected.json: what each recording of the provider corpus means, read independently of
parley (docs/protocols.md, "Conformance corpus").

Each recording is read here by the rules of its provider's API reference, without parley's code:
the text, the reasoning, the client tool calls, the provider-run tool calls, the finish reason,
the usage, the outcome (a reply, a refusal, a provider error, an empty reply) and the assistant
turn the next request must carry. tests/provider_corpus_test.cpp serves each recording's bytes to
the library and to `parley ask` and checks every field against this file.

Run from the repository root: python3 tests/data/provider_corpus/expected.py
"""
import json
import os
import sys

ROOT = os.path.dirname(os.path.abspath(__file__))

# Responses items named *_call that the client runs (the others are run by the provider).
CLIENT_RUN = {"function_call", "custom_tool_call", "local_shell_call", "shell_call",
              "apply_patch_call", "computer_call"}


def server_item(t):
    return t.endswith("_call") and t not in CLIENT_RUN and len(t) > 5


def args_json(text):
    if text is None or text == "":
        return {}
    if isinstance(text, (dict, list)):
        return text
    try:
        return json.loads(text)
    except ValueError:
        return text


def finish(reported, has_calls):
    if has_calls and reported in ("", "stop", None):
        return "tool_calls"
    return reported or ""


# --- Anthropic Messages ----------------------------------------------------------------------

ANTHROPIC_FINISH = {"end_turn": "stop", "stop_sequence": "stop", "tool_use": "tool_calls",
                    "max_tokens": "length"}


def anthropic_expect(message, blocks, stop_reason, stop_details, usage):
    text = "".join(b.get("text", "") for b in blocks if b["type"] == "text")
    calls = [{"name": b["name"], "arguments": b.get("input") or {}} for b in blocks
             if b["type"] == "tool_use"]
    server = [{"name": b["name"], "input": b.get("input") or {}} for b in blocks
              if b["type"] in ("server_tool_use", "mcp_tool_use")]
    modelled = {"text", "tool_use", "thinking", "redacted_thinking"}
    keep = any(b["type"] not in modelled for b in blocks) or \
        any(b["type"] == "tool_use" and len(b) > 4 for b in blocks) or \
        any(b["type"] == "text" and b.get("citations") for b in blocks)
    out = {"protocol": "anthropic", "text": text, "tool_calls": calls, "server_tools": server,
           "reasoning": any(b["type"] == "thinking" and b.get("thinking") for b in blocks)}
    out["usage"] = {"prompt": usage.get("input_tokens", 0) + usage.get("cache_read_input_tokens", 0)
                    + usage.get("cache_creation_input_tokens", 0),
                    "completion": usage.get("output_tokens", 0)}
    reported = stop_reason or ""
    out["finish_reason"] = finish(ANTHROPIC_FINISH.get(reported, reported), bool(calls))
    if reported == "refusal":
        out["outcome"] = "refusal"
        out["refusal"] = (stop_details or {}).get("explanation") or \
            'the model declined to answer (stop_reason "refusal")'
        return out
    if not text and not calls and not keep:
        out["outcome"] = "empty"
        return out
    out["outcome"] = "reply"
    if keep:
        sent = [b for b in blocks if not (b["type"] == "text" and not b.get("text"))]
    else:
        sent = [b for b in blocks if b["type"] in ("thinking", "redacted_thinking")]
        sent = [{"type": "thinking", "thinking": b["thinking"], "signature": b.get("signature", "")}
                if b["type"] == "thinking" else {"type": "redacted_thinking", "data": b["data"]}
                for b in sent]
        if text:
            sent.append({"type": "text", "text": text})
        sent += [{"type": "tool_use", "id": b["id"], "name": b["name"], "input": b.get("input") or {}}
                 for b in blocks if b["type"] == "tool_use"]
    out["next_assistant"] = sent
    return out


def anthropic_stream(lines):
    blocks, usage, stop_reason, stop_details, message = [], {}, None, None, {}
    partial = {}
    for data in lines:
        e = json.loads(data)
        t = e.get("type")
        if t == "error":
            err = e.get("error", e)
            return {"protocol": "anthropic", "outcome": "error", "error": err.get("message", "")}
        if t == "message_start":
            if message:  # the official SDK's stream refuses a second message_start too
                return {"protocol": "anthropic", "outcome": "malformed"}
            message = e["message"]
            usage.update({k: v for k, v in message.get("usage", {}).items() if v is not None})
            for b in message.get("content") or []:
                blocks.append(dict(b))
        elif t == "content_block_start":
            b = dict(e["content_block"])
            if b["type"] in ("tool_use", "server_tool_use", "mcp_tool_use"):
                partial[len(blocks)] = None if not b.get("input") else json.dumps(b["input"])
            if b["type"] == "thinking":
                b = {"type": "thinking", "thinking": b.get("thinking", ""),
                     "signature": b.get("signature", "")}
            blocks.append(b)
        elif t == "content_block_delta":
            b, d = blocks[e["index"]], e["delta"]
            dt = d["type"]
            if dt == "text_delta":
                b["text"] = b.get("text", "") + d["text"]
            elif dt == "input_json_delta":
                i = e["index"]
                partial[i] = (partial.get(i) or "") + d["partial_json"]
            elif dt == "thinking_delta":
                b["thinking"] += d["thinking"]
            elif dt == "signature_delta":
                b["signature"] += d["signature"]
            elif dt == "citations_delta":
                b.setdefault("citations", [])
                if b["citations"] is None:
                    b["citations"] = []
                b["citations"].append(d["citation"])
            else:  # a delta type of tomorrow: its strings join the block's
                for k, v in d.items():
                    if k == "type":
                        continue
                    if isinstance(v, str) and (b.get(k) is None or isinstance(b.get(k), str)):
                        b[k] = (b.get(k) or "") + v
                    else:
                        b[k] = v
        elif t == "content_block_stop":
            i = e["index"]
            if i in partial:
                blocks[i]["input"] = args_json(partial[i])
        elif t == "message_delta":
            d = e.get("delta", {})
            if d.get("stop_reason"):
                stop_reason = d["stop_reason"]
            if d.get("stop_details"):
                stop_details = d["stop_details"]
            usage.update({k: v for k, v in (e.get("usage") or {}).items() if v is not None})
    return anthropic_expect(message, blocks, stop_reason, stop_details, usage)


def anthropic_body(body):
    if body.get("type") == "error" or "content" not in body:
        return {"protocol": "anthropic", "outcome": "error", "error": body["error"]["message"]}
    blocks = [dict(b) for b in body["content"]]
    return anthropic_expect(body, blocks, body.get("stop_reason"), body.get("stop_details"),
                            body.get("usage") or {})


# --- OpenAI Responses -------------------------------------------------------------------------

def responses_expect(items, response, streamed_text=None):
    text, refusal = "", ""
    for it in items:
        if it.get("type") == "message":
            for p in it.get("content") or []:
                if p.get("type") == "output_text":
                    text += p.get("text", "")
                elif p.get("type") == "refusal":
                    refusal += p.get("refusal", "")
    if streamed_text is not None:
        text = streamed_text
    calls = [{"name": it["name"], "arguments": args_json(it.get("arguments"))}
             for it in items if it.get("type") == "function_call"]
    server = [{"name": it["type"][:-5]} for it in items if server_item(it.get("type", ""))]
    types = [it.get("type") for it in items]
    modelled = {"message", "function_call", "reasoning"}
    rank = {"reasoning": 0, "message": 1, "function_call": 2}
    ranks = [rank.get(t, 3) for t in types]
    keep = any(t not in modelled for t in types) or types.count("message") > 1 or \
        ranks != sorted(ranks)
    u = response.get("usage") or {}
    out = {"protocol": "responses", "text": text, "tool_calls": calls, "server_tools": server,
           "reasoning": any(t == "reasoning" and (
               any(p.get("text") for p in it.get("summary") or []) or
               any(p.get("text") for p in it.get("content") or []))
               for t, it in zip(types, items)),
           "usage": {"prompt": u.get("input_tokens", 0), "completion": u.get("output_tokens", 0)}
           if u else None}
    status = response.get("status") or "completed"
    if status == "incomplete":
        reason = (response.get("incomplete_details") or {}).get("reason") or "incomplete"
        out["finish_reason"] = "length" if reason == "max_output_tokens" else reason
    else:
        out["finish_reason"] = "tool_calls" if calls else "stop"
    if not text and not calls and not keep:
        if refusal:
            out["outcome"] = "refusal"
            out["refusal"] = refusal
        else:
            out["outcome"] = "empty"
        return out
    out["outcome"] = "reply"
    out["next_assistant_types"] = types if keep else \
        [t for t in types if t == "reasoning"] + (["message"] if text else []) + \
        [t for t in types if t == "function_call"]
    if keep:
        out["next_assistant"] = items
    return out


def responses_stream(lines):
    items, response, deltas = {}, {}, {}
    for data in lines:
        e = json.loads(data)
        t = e.get("type", "")
        if t == "response.output_text.delta":  # the text as streamed is the text shown
            deltas[e["output_index"]] = deltas.get(e["output_index"], "") + e["delta"]
        if t == "error":
            err = e.get("error") if isinstance(e.get("error"), dict) else e
            return {"protocol": "responses", "outcome": "error", "error": err.get("message", "")}
        if t == "response.failed":
            err = (e.get("response") or {}).get("error") or {}
            return {"protocol": "responses", "outcome": "error", "error": err.get("message", "")}
        if t == "response.output_item.done":
            items[e["output_index"]] = e["item"]
        elif t in ("response.completed", "response.incomplete"):
            response = e["response"]
    ordered = [items[i] for i in sorted(items)]
    if not ordered:
        ordered = response.get("output") or []
    return responses_expect(ordered, response,
                            "".join(deltas[i] for i in sorted(deltas)) if deltas else None)


def responses_body(body):
    if isinstance(body.get("error"), dict):
        return {"protocol": "responses", "outcome": "error", "error": body["error"]["message"]}
    return responses_expect(body.get("output") or [], body)


# --- Chat Completions -------------------------------------------------------------------------

def chat_text(value, thinking):
    if isinstance(value, str):
        return value
    out = ""
    for p in value or []:
        if p.get("type") == "text":
            out += p.get("text", "")
        elif p.get("type") == "thinking":
            thinking.append(chat_text(p.get("thinking"), []))
    return out


def chat_expect(text, reasoning, calls, reported, usage, refusal):
    out = {"protocol": "chat", "text": text, "reasoning": bool(reasoning),
           "tool_calls": [{"name": c["name"], "arguments": args_json(c["arguments"])}
                          for c in calls],
           "server_tools": [], "finish_reason": finish(reported, bool(calls)),
           "usage": {"prompt": usage.get("prompt_tokens", 0),
                     "completion": usage.get("completion_tokens", 0)} if usage else None}
    if not text and not calls:
        out["outcome"] = "refusal" if refusal else "empty"
        if refusal:
            out["refusal"] = refusal
        return out
    out["outcome"] = "reply"
    return out


def chat_stream(lines):
    text, reasoning, calls, reported, usage, refusal = "", [], [], "", None, ""
    for data in lines:
        if data == "[DONE]":
            break
        e = json.loads(data)
        if isinstance(e.get("error"), dict):
            return {"protocol": "chat", "outcome": "error", "error": e["error"].get("message", "")}
        if e.get("usage"):
            usage = e["usage"]
        for ch in e.get("choices") or []:
            if ch.get("index", 0) != 0:
                continue
            d = ch.get("delta") or {}
            if d.get("content") is not None:
                text += chat_text(d["content"], reasoning)
            for k in ("reasoning_content", "reasoning"):
                if d.get(k):
                    reasoning.append(chat_text(d[k], []))
            if d.get("refusal"):
                refusal += d["refusal"]
            for tc in d.get("tool_calls") or []:
                i = tc.get("index", len(calls) - 1 if not tc.get("id") else len(calls))
                while len(calls) <= i:
                    calls.append({"name": "", "arguments": ""})
                fn = tc.get("function") or {}
                if fn.get("name") and not calls[i]["name"]:
                    calls[i]["name"] = fn["name"]
                a = fn.get("arguments")
                if a is not None:
                    calls[i]["arguments"] += a if isinstance(a, str) else json.dumps(a)
            if ch.get("finish_reason"):
                reported = ch["finish_reason"]
    return chat_expect(text, reasoning, calls, reported, usage, refusal)


def chat_body(body):
    if isinstance(body.get("error"), dict):
        return {"protocol": "chat", "outcome": "error", "error": body["error"].get("message", "")}
    m = body["choices"][0]["message"]
    reasoning = []
    text = chat_text(m.get("content"), reasoning) if m.get("content") is not None else ""
    if m.get("reasoning_content") or m.get("reasoning"):
        reasoning.append("x")
    calls = [{"name": c["function"]["name"], "arguments": c["function"].get("arguments") or ""}
             for c in m.get("tool_calls") or []]
    return chat_expect(text, reasoning, calls, body["choices"][0].get("finish_reason") or "",
                       body.get("usage"), m.get("refusal") or "")


# --- Gemini ----------------------------------------------------------------------------------

# The FinishReason values that mean the reply was blocked (the API reference's enum).
GEMINI_BLOCKED = {"SAFETY", "RECITATION", "BLOCKLIST", "PROHIBITED_CONTENT", "SPII",
                  "IMAGE_SAFETY", "IMAGE_PROHIBITED_CONTENT", "IMAGE_RECITATION", "LANGUAGE"}


def gemini_expect(chunks):
    """A GenerateContentResponse, or a stream's chunks in order: candidate 0's parts joined."""
    parts, reason, usage, block = [], "", None, ""
    for c in chunks:
        if isinstance(c.get("error"), dict):
            return {"protocol": "gemini", "outcome": "error", "error": c["error"].get("message", "")}
        if c.get("usageMetadata"):
            usage = c["usageMetadata"]
        if (c.get("promptFeedback") or {}).get("blockReason"):
            block = c["promptFeedback"]["blockReason"]
        for cand in c.get("candidates") or []:
            if cand.get("index", 0) != 0:
                continue
            parts += (cand.get("content") or {}).get("parts") or []
            if cand.get("finishReason"):
                reason = cand["finishReason"]
    text = "".join(p["text"] for p in parts if "text" in p and not p.get("thought"))
    calls = [{"name": p["functionCall"]["name"], "arguments": p["functionCall"].get("args") or {}}
             for p in parts if "functionCall" in p]
    out = {"protocol": "gemini", "text": text, "tool_calls": calls,
           "server_tools": [{"name": "code_execution"} for p in parts if "executableCode" in p],
           "reasoning": any(p.get("thought") and p.get("text") for p in parts),
           "signatures": [p["thoughtSignature"] for p in parts if p.get("thoughtSignature")]}
    if usage:
        out["usage"] = {
            "prompt": usage.get("promptTokenCount", 0) + usage.get("toolUsePromptTokenCount", 0),
            "completion": usage.get("candidatesTokenCount", 0) + usage.get("thoughtsTokenCount", 0)}
    else:
        out["usage"] = None
    if block:
        out.update(outcome="refusal", finish_reason="content_filter")
        return out
    if not reason:
        out["outcome"] = "malformed"  # cut short: no finishReason
        return out
    mapped = {"STOP": "stop", "MAX_TOKENS": "length"}.get(
        reason, "content_filter" if reason in GEMINI_BLOCKED else reason.lower())
    out["finish_reason"] = finish(mapped, bool(calls)) if mapped == "stop" else mapped
    out["outcome"] = "reply" if text or calls else "empty"
    return out


# --- the corpus -------------------------------------------------------------------------------

def classify_stream(first):
    t = first.get("type", "")
    if t in ("message_start", "ping") or t.startswith("content_block"):
        return "anthropic"
    if t.startswith("response.") or t == "error":
        return "responses"
    if "choices" in first or first.get("object") == "chat.completion.chunk":
        return "chat"
    return None


def classify_body(body, rel):
    if isinstance(body.get("error"), dict) and "choices" not in body and "output" not in body:
        # An HTTP error body (served with status 400): the protocol its directory is for.
        if "/anthropic/" in rel:
            return "anthropic"
        return "responses" if "/responses/" in rel else "chat"
    if body.get("type") == "message" or (body.get("type") == "error" and "error" in body and
                                         body["error"].get("type")):
        return "anthropic"
    if body.get("object") == "response":
        return "responses"
    if "choices" in body:
        return "chat"
    return None


def main():
    cases = []
    base = os.path.join(ROOT, "vercel-ai")
    for dirpath, _, files in sorted(os.walk(base)):
        for name in sorted(files):
            path = os.path.join(dirpath, name)
            rel = os.path.relpath(path, ROOT)
            raw = open(path, encoding="utf-8").read()
            try:
                if name.endswith(".chunks.txt"):
                    lines = [l for l in raw.split("\n") if l.strip()]
                    protocol = classify_stream(json.loads(lines[0]))
                    if protocol is None:
                        continue
                    # Some files hold the streams of several steps one after the other: each
                    # starts with response.created and is a recording of its own.
                    segments = [[]]
                    for l in lines:
                        if protocol == "responses" and segments[-1] and \
                                json.loads(l).get("type") == "response.created":
                            segments.append([])
                        segments[-1].append(l)
                    for k, segment in enumerate(segments):
                        expect = {"anthropic": anthropic_stream, "responses": responses_stream,
                                  "chat": chat_stream}[protocol](segment)
                        expect["file"] = rel
                        expect["stream"] = True
                        if len(segments) > 1:
                            expect["segment"] = k
                        cases.append(expect)
                    continue
                else:
                    body = json.loads(raw)
                    if not isinstance(body, dict):
                        continue
                    protocol = classify_body(body, rel)
                    if protocol is None:
                        continue
                    expect = {"anthropic": anthropic_body, "responses": responses_body,
                              "chat": chat_body}[protocol](body)
                    stream = False
            except (ValueError, KeyError, TypeError, IndexError) as e:
                print(f"skipped {rel}: {e!r}", file=sys.stderr)
                continue
            expect["file"] = rel
            expect["stream"] = stream
            cases.append(expect)
    # Gemini: the official SDK's recorded system-test responses (js-genai), one file per exchange.
    base = os.path.join(ROOT, "js-genai")
    for dirpath, _, files in sorted(os.walk(base)):
        for name in sorted(files):
            path = os.path.join(dirpath, name)
            raw = open(path, encoding="utf-8").read()
            stream = name.endswith(".chunks.txt")
            chunks = [json.loads(l) for l in raw.split("\n") if l.strip()] if stream \
                else [json.loads(raw)]
            expect = gemini_expect(chunks)
            expect["file"] = os.path.relpath(path, ROOT)
            expect["stream"] = stream
            cases.append(expect)
    with open(os.path.join(ROOT, "expected.json"), "w", encoding="utf-8") as out:
        json.dump(cases, out, indent=1, ensure_ascii=False, sort_keys=True)
        out.write("\n")
    counts = {}
    for c in cases:
        counts[c["protocol"]] = counts.get(c["protocol"], 0) + 1
    print(len(cases), counts)


if __name__ == "__main__":
    main()
