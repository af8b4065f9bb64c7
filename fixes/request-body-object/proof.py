"""request-body-object: a JSON body that is not an object is a client error, not a 500.

Runs vLLM's real code from the given tree on a CPU, in a FastAPI app wired as vLLM's routers wire
theirs: each route depends on the tree's ``validate_json_request``
(vllm/entrypoints/serve/utils/api_utils.py), and the body models carry the tree's real
``mode="before"`` validators of ``CompletionRequest`` and ``ChatCompletionRequest``
(vllm/entrypoints/openai/completion/protocol.py, chat_completion/protocol.py), attached with
pydantic's ``model_validator`` as the files attach them, raising the tree's VLLMValidationError.
A third route takes the raw request and reads the body itself, as /invocations and
/scale_elastic_ep do. Starlette's TestClient sends the bodies; an exception that escapes the app is
the 500 vLLM's server answers.
"""

import ast
import json
import typing
from pathlib import Path
from types import SimpleNamespace
from typing import Any

from fastapi import Depends, FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.testclient import TestClient
from pydantic import BaseModel, ConfigDict, create_model, model_validator

from fixpack.proofkit import Trees, load_function, parse_file

API_UTILS = "vllm/entrypoints/serve/utils/api_utils.py"
PROTOCOLS = {
    "/v1/completions": ("vllm/entrypoints/openai/completion/protocol.py", "CompletionRequest"),
    "/v1/chat/completions": ("vllm/entrypoints/openai/chat_completion/protocol.py", "ChatCompletionRequest"),
}
# JSON that is not an object: what Schemathesis sent (issue 46), and the other kinds of value
NOT_OBJECTS = ["[null, null]", "[]", '"AAA"', "0", "1.5", "false", "true"]
VALID = {
    "/v1/completions": {"model": "m", "prompt": "hello"},
    "/v1/chat/completions": {"model": "m", "messages": [{"role": "user", "content": "hello"}]},
}


def _before_validators(path: Path, cls: str) -> list[str]:
    """The names of the class's ``@model_validator(mode="before")`` methods, in file order."""
    node = next(n for n in parse_file(path).body if isinstance(n, ast.ClassDef) and n.name == cls)
    return [
        item.name
        for item in node.body
        if isinstance(item, ast.FunctionDef)
        and any(
            isinstance(d, ast.Call) and getattr(d.func, "id", "") == "model_validator" and
            any(k.arg == "mode" and getattr(k.value, "value", None) == "before" for k in d.keywords)
            for d in item.decorator_list
        )
    ]  # fmt: skip


def _body_model(root: Path, route: str, error: type) -> type[BaseModel]:
    """A body model with the real class's before-validators. Of its fields only max_tokens, whose
    default normalize_null_max_tokens reads; extra keys are kept, as vLLM's OpenAIBaseModel keeps
    them."""
    path, cls = PROTOCOLS[route]
    names = _before_validators(root / path, cls)
    assert names, f"{cls}: no before-validators found in {path}"
    namespace = {
        "VLLMValidationError": error,
        "Any": Any,
        "envs": SimpleNamespace(VLLM_MAX_COMPLETION_PROMPTS=1024),  # vllm/envs.py's default
        "is_list_of": load_function(
            root / "vllm/utils/collection_utils.py", "is_list_of", {"assert_never": typing.assert_never}
        ),
        "logger": SimpleNamespace(warning_once=lambda *args, **kwargs: None),
    }
    validators = {
        name: model_validator(mode="before")(classmethod(load_function(root / path, f"{cls}.{name}", namespace)))
        for name in names
    }
    return create_model(
        cls, __config__=ConfigDict(extra="allow"), __validators__=validators, max_tokens=(int | None, 16)
    )


def _app(root: Path) -> FastAPI:
    validate_json_request = load_function(
        root / API_UTILS,
        "validate_json_request",
        {"Request": Request, "RequestValidationError": RequestValidationError},
    )
    error = load_function(root / "vllm/exceptions.py", "VLLMValidationError", {"Any": Any})
    app = FastAPI()
    for route in PROTOCOLS:
        model = _body_model(root, route, error)

        async def endpoint(request: model, raw_request: Request) -> dict:  # type: ignore[valid-type]
            return {"served": True}

        app.post(route, dependencies=[Depends(validate_json_request)])(endpoint)

    @app.post("/invocations", dependencies=[Depends(validate_json_request)])
    async def invocations(raw_request: Request) -> dict:
        body = await raw_request.json()
        return {"keys": sorted(body)}

    return app


def _post(client: TestClient, route: str, content: str, content_type: str = "application/json") -> tuple[int, str]:
    answer = client.post(route, content=content, headers={"Content-Type": content_type})
    return answer.status_code, answer.text


def check(trees: Trees) -> None:
    if trees.vllm is None:
        raise RuntimeError("this proof needs the vllm tree")
    client = TestClient(_app(Path(trees.vllm)), raise_server_exceptions=False)

    for route in [*PROTOCOLS, "/invocations"]:
        for body in NOT_OBJECTS:
            status, text = _post(client, route, body)
            assert status != 500, f"POST {route} {body}: HTTP 500 (an exception escaped the request's validation)"
            assert status == 422 and "JSON object" in text, f"POST {route} {body}: HTTP {status} {text}"

    # What the guard must leave as it was: an object body reaches the model's validators and the
    # route; empty, invalid or non-JSON bodies get the answers they got before.
    for route, body in VALID.items():
        status, text = _post(client, route, json.dumps(body))
        assert status == 200, f"POST {route} {body}: HTTP {status} {text}"
        status, text = _post(client, route, json.dumps({**body, "stream_options": {"include_usage": True}}))
        assert status == 422 and "stream=True" in text, f"{route}: a before-validator's own refusal: {status} {text}"
    status, text = _post(client, "/invocations", '{"b": 1, "a": 2}')
    assert (status, json.loads(text)) == (200, {"keys": ["a", "b"]}), f"/invocations reads its body: {status} {text}"
    for route in PROTOCOLS:  # a raw-request route answers an empty or invalid body itself
        for content, content_type, expect in [
            ("", "application/json", None),
            ('{"model": ', "application/json", "json_invalid"),
            ('{"model": "m"}', "text/plain", "Unsupported Media Type"),
        ]:
            status, text = _post(client, route, content, content_type)
            assert status != 500, f"POST {route} {content!r} ({content_type}): HTTP 500"
            if expect is not None:
                assert expect in text, f"POST {route} {content!r} ({content_type}): HTTP {status} {text}"
