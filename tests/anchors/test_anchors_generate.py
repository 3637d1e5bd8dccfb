"""LLM generation against a local OpenAI-compatible server (127.0.0.1) with injected faults."""

from __future__ import annotations

import json
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest
from typer.testing import CliRunner

from chexretrieve.anchors import find_anchor_sets, load_anchor_set
from chexretrieve.anchors.config import GenerationConfig
from chexretrieve.anchors.generate import PAPER_PROMPT, GenerationError, generate_and_save

pytestmark = pytest.mark.service

POSITIVE = [
    "Small left pleural effusion.",
    "Moderate right pleural effusion with adjacent atelectasis.",
    "Large right effusion with mediastinal shift.",
    "Blunting of the left costophrenic angle, likely a small effusion.",
    "Bilateral pleural effusions, greater on the right.",
    "Loculated pleural fluid along the right lateral chest wall.",
]
NEGATIVE = [
    "No pleural effusion.",
    "The costophrenic angles are sharp.",
    "Previously seen right effusion has resolved.",
    "No pleural fluid on either side.",
]


def _structured(sentences=None) -> str:
    items = sentences or (
        [{"text": t, "polarity": "positive"} for t in POSITIVE]
        + [{"text": t, "polarity": "negative"} for t in NEGATIVE]
    )
    return json.dumps({"sentences": items})


def _completion(content, finish_reason="stop", refusal=None) -> dict:
    message = {"role": "assistant", "content": content, "refusal": refusal}
    return {
        "id": "chatcmpl-test",
        "object": "chat.completion",
        "created": 0,
        "model": "test-model",
        "choices": [{"index": 0, "message": message, "finish_reason": finish_reason}],
    }


class FakeLLM:
    """A scripted /v1/chat/completions: each request takes the next step of the script."""

    def __init__(self, steps):
        self.steps = list(steps)
        self.requests: list[dict] = []
        self.auth: list[str | None] = []
        fake = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args):  # keep test output quiet
                pass

            def do_POST(self):
                length = int(self.headers.get("Content-Length", 0))
                fake.requests.append(json.loads(self.rfile.read(length)))
                fake.auth.append(self.headers.get("Authorization"))
                if self.path != "/v1/chat/completions":
                    return self._send(404, {"error": {"message": "not found"}})
                step = fake.steps.pop(0) if fake.steps else ("ok", _structured())
                kind, payload = step
                if kind == "sleep":
                    time.sleep(payload)
                    return self._send(200, _completion(_structured()))
                if kind == "status":
                    return self._send(payload, {"error": {"message": f"injected {payload}"}})
                if kind == "raw":
                    return self._send(200, payload, raw=True)
                if kind == "completion":
                    return self._send(200, payload)
                return self._send(200, _completion(payload))

            def _send(self, code, body, raw=False):
                data = body.encode() if raw else json.dumps(body).encode()
                self.send_response(code)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.thread = threading.Thread(
            target=self.server.serve_forever, kwargs={"poll_interval": 0.02}, daemon=True
        )

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.server.server_address[1]}/v1"

    def __enter__(self):
        self.thread.start()
        return self

    def __exit__(self, *exc):
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture(autouse=True)
def _key(monkeypatch):
    monkeypatch.setenv("CHEXRETRIEVE_TEST_KEY", "sk-test-not-a-secret")


def _config(fake, **overrides) -> GenerationConfig:
    values = dict(
        model="test-model",
        base_url=fake.base_url,
        api_key_env="CHEXRETRIEVE_TEST_KEY",
        n=10,
        variants=1,
        timeout_s=5.0,
        max_retries=2,
        backoff_s=0.5,
    )
    values.update(overrides)
    return GenerationConfig(**values)


def _generate(fake, root, sleeps=None, **overrides):
    pauses = sleeps if sleeps is not None else []
    return generate_and_save(
        "Pleural Effusion",
        _config(fake, **overrides),
        root,
        sleep=pauses.append,
        today="2026-11-29",
    )


def test_success_writes_new_variants_with_provenance(tmp_path) -> None:
    with FakeLLM([("ok", _structured()), ("ok", _structured(None)[::1])]) as fake:
        paths = _generate(fake, tmp_path, variants=2)
    assert [p.name for p in paths] == ["v1-a.yaml", "v1-b.yaml"]
    anchor_set = load_anchor_set(paths[0])
    assert anchor_set.sentences == tuple(POSITIVE + NEGATIVE)
    assert anchor_set.polarities.count("negative") == len(NEGATIVE)
    [source] = anchor_set.sources.values()
    assert (source.kind, source.model, source.date) == ("llm", "test-model", "2026-11-29")
    assert source.parameters["endpoint"] == fake.base_url and source.parameters["attempts"] == 1
    assert "CHEXRETRIEVE_TEST_KEY" not in paths[0].read_text()
    assert "sk-test" not in paths[0].read_text()
    # the request: our structured prompt with a JSON-schema answer, the key only in the header
    request = fake.requests[0]
    assert request["model"] == "test-model" and request["temperature"] == 1.0
    assert request["response_format"]["type"] == "json_schema"
    assert '"Pleural Effusion"' in request["messages"][1]["content"]
    assert fake.auth[0] == "Bearer sk-test-not-a-secret"


def test_new_variants_continue_after_existing_ones_and_never_overwrite(tmp_path) -> None:
    with FakeLLM([("ok", _structured())] * 2) as fake:
        first = _generate(fake, tmp_path)
        second = _generate(fake, tmp_path)
    assert (first[0].name, second[0].name) == ("v1-a.yaml", "v1-b.yaml")
    assert [s.variant for s in find_anchor_sets(tmp_path)] == ["a", "b"]


def test_paper_prompt_dictionary_answer(tmp_path) -> None:
    answer = (
        "Here you go:\n```python\n"
        + repr({"Pleural Effusion": POSITIVE + NEGATIVE, "Cardiomegaly": ["Cardiomegaly."]})
        + "\n```"
    )
    with FakeLLM([("ok", answer)]) as fake:
        [path] = _generate(fake, tmp_path, prompt_style="paper")
    assert fake.requests[0]["messages"] == [{"role": "user", "content": PAPER_PROMPT}]
    assert "response_format" not in fake.requests[0]
    anchor_set = load_anchor_set(path)
    # polarities come from the negation rule: the four negative notes are recognised
    assert anchor_set.polarities == ("positive",) * len(POSITIVE) + ("negative",) * len(NEGATIVE)
    assert "Have each list be of size around 50" in PAPER_PROMPT


def test_server_error_then_success_is_retried_with_backoff(tmp_path) -> None:
    sleeps: list[float] = []
    with FakeLLM([("status", 500), ("status", 503), ("ok", _structured())]) as fake:
        [path] = _generate(fake, tmp_path, sleeps=sleeps)
    assert len(fake.requests) == 3 and sleeps == [0.5, 1.0]
    assert load_anchor_set(path).sources["main"].parameters["attempts"] == 3


def test_retries_are_bounded(tmp_path) -> None:
    sleeps: list[float] = []
    with FakeLLM([("status", 500)] * 5) as fake:
        with pytest.raises(GenerationError, match=r"failed after 3 attempt\(s\)"):
            _generate(fake, tmp_path, sleeps=sleeps)
    assert len(fake.requests) == 3 and sleeps == [0.5, 1.0]
    assert not any(tmp_path.iterdir())


def test_a_slow_server_times_out_and_writes_nothing(tmp_path) -> None:
    with FakeLLM([("sleep", 1.5)] * 2) as fake:
        with pytest.raises(GenerationError, match=r"timed out after 2 attempt"):
            _generate(fake, tmp_path, timeout_s=0.3, max_retries=1)
    assert not any(tmp_path.iterdir())


def test_client_errors_are_not_retried(tmp_path) -> None:
    with FakeLLM([("status", 401)]) as fake:
        with pytest.raises(GenerationError, match="HTTP 401.*not retried"):
            _generate(fake, tmp_path)
    assert len(fake.requests) == 1


@pytest.mark.parametrize(
    ("step", "message"),
    [
        (("ok", "{'sentences': [oops"), "not valid JSON"),
        (("completion", _completion(_structured()[:200], "length")), "cut off at the token limit"),
        (("completion", _completion(None, refusal="I can't help with that.")), "model refused"),
        (("ok", "I'm sorry, but I cannot provide medical text."), "model refused"),
        (
            (
                "ok",
                _structured(
                    [
                        {"text": f"The weather is nice {i}.", "polarity": "positive"}
                        for i in range(8)
                    ]
                    + [{"text": "No rain.", "polarity": "negative"}] * 2
                ),
            ),
            "off-topic answer",
        ),
        (
            (
                "ok",
                _structured(
                    [{"text": t, "polarity": "positive"} for t in POSITIVE[:3] * 3]
                    + [{"text": NEGATIVE[0], "polarity": "negative"}]
                ),
            ),
            "only 4 usable sentences",
        ),
        (("ok", json.dumps({"items": []})), "no 'sentences' list"),
        (
            ("ok", _structured([{"text": "Effusion.", "polarity": "maybe"}] * 10)),
            "polarity 'maybe'",
        ),
        (("raw", "<html>gateway</html>"), "unreadable response"),
        (("ok", ""), "empty answer"),
    ],
    ids=[
        "malformed",
        "partial",
        "refusal",
        "refusal-text",
        "off-topic",
        "duplicates",
        "wrong-shape",
        "bad-polarity",
        "not-json-body",
        "empty",
    ],
)
def test_bad_answers_give_clear_errors_and_write_nothing(tmp_path, step, message) -> None:
    # the second variant fails: the first, already generated, must not be written either
    with FakeLLM([("ok", _structured()), step]) as fake:
        with pytest.raises(GenerationError, match=message):
            _generate(fake, tmp_path, variants=2)
    assert list(tmp_path.rglob("*.yaml")) == []


def test_missing_key_is_reported_before_any_request(tmp_path, monkeypatch) -> None:
    monkeypatch.delenv("CHEXRETRIEVE_TEST_KEY")
    with FakeLLM([]) as fake:
        with pytest.raises(GenerationError, match="set the environment variable CHEXRETRIEVE_TEST"):
            _generate(fake, tmp_path)
    assert fake.requests == []


def test_cli_generate(tmp_path) -> None:
    from chexretrieve.cli import app

    with FakeLLM([("ok", _structured())]) as fake:
        args = [
            "anchors",
            "generate",
            "--finding",
            "pleural effusion",
            "--n",
            "10",
            "--model",
            "test-model",
            "--base-url",
            fake.base_url,
            "--api-key-env",
            "CHEXRETRIEVE_TEST_KEY",
            "--root",
            str(tmp_path),
        ]
        result = CliRunner().invoke(app, args)
        assert result.exit_code == 0, result.output
        assert "v1-a.yaml" in result.output
        failing = CliRunner().invoke(app, [*args, "--prompt", "poem"])
    assert failing.exit_code == 2 and "prompt style 'poem' is unknown" in failing.output
