"""keras-transformer serve: the OpenAI-compatible API through the `openai`
client, micro-batching, bad input, and the chat page in a real browser.

The fast tests serve a stand-in engine (answers: the question reversed) over
loopback; the slow ones a trained model, a SavedModel and the page."""

import asyncio
import contextlib
import json
import os
import shutil
import subprocess
import sys
import threading
import time

import httpx
import pytest
from helpers import _free_port, train_small
from hypothesis import given, settings
from hypothesis import strategies as st

openai = pytest.importorskip("openai")
uvicorn = pytest.importorskip("uvicorn")

from keras_transformer.errors import InputError  # noqa: E402
from keras_transformer.serving.batching import MicroBatcher, QueueFull  # noqa: E402
from keras_transformer.serving.engines import Answer, Result  # noqa: E402
from keras_transformer.serving.server import Server, create_app  # noqa: E402


class EchoEngine:
    """Answers each text reversed (answer k of n: with k appended), records its calls."""

    name = "echo"
    max_length = 8

    def __init__(self, delay=0.0):
        self.delay = delay
        self.calls = []

    def options(self, request):
        if request.get("method") == "beam" and request.get("n", 1) > 4:
            raise InputError("Received an invalid value for argument `n`: at most 4 here")
        return request, request.get("n", 1)

    def answer(self, texts, request):
        self.calls.append((len(texts), request))
        time.sleep(self.delay)
        if "boom" in texts:
            raise RuntimeError("a bug")
        n = request.get("n", 1)
        limit = request.get("max_tokens", self.max_length - 1)
        results = []
        for text in texts:
            words = text.split()[::-1]
            answers = [Answer(" ".join(words[:limit]) + (f" {k}" if k else ""),
                              min(len(words), limit),
                              "stop" if len(words) <= limit else "length") for k in range(n)]
            results.append(Result(answers, len(text.split()), 0))
        return results


@contextlib.contextmanager
def running(engine, **options):
    """`engine` served by uvicorn on a free loopback port, in a thread: its base URL."""
    server = Server(lambda: engine, **options)
    port = _free_port()
    config = uvicorn.Config(create_app(server), host="127.0.0.1", port=port,
                            log_level="warning")
    web = uvicorn.Server(config)
    thread = threading.Thread(target=web.run, daemon=True)
    thread.start()
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 120
    while True:
        try:
            if httpx.get(url + "/health").status_code == 200:
                break
        except httpx.TransportError:
            pass
        assert time.monotonic() < deadline, "the server did not get ready"
        time.sleep(0.05)
    try:
        yield url
    finally:
        web.should_exit = True
        thread.join(timeout=30)


@pytest.fixture(scope="module")
def echo():
    engine = EchoEngine()
    with running(engine, max_wait_ms=1) as url:
        yield url, engine


def client(url):
    return openai.OpenAI(base_url=url + "/v1", api_key="unused", max_retries=0)


def test_chat_and_completions_through_the_openai_client(echo):
    url, _ = echo
    chat = client(url).chat.completions.create(
        model="echo", messages=[{"role": "system", "content": "be nice"},
                                {"role": "user", "content": "first question"},
                                {"role": "assistant", "content": "an answer"},
                                {"role": "user", "content": "how are you"}])
    assert chat.object == "chat.completion" and chat.model == "echo"
    assert chat.choices[0].message.content == "you are how"  # the last user message
    assert chat.choices[0].message.role == "assistant"
    assert chat.choices[0].finish_reason == "stop"
    assert (chat.usage.prompt_tokens, chat.usage.completion_tokens) == (3, 3)
    completion = client(url).completions.create(model="echo", prompt=["a b", "c d e"])
    assert [c.text for c in completion.choices] == ["b a", "e d c"]
    assert [c.index for c in completion.choices] == [0, 1]


def test_streaming_n_and_max_tokens(echo):
    url, _ = echo
    stream = client(url).chat.completions.create(
        model="echo", messages=[{"role": "user", "content": "one two three"}], stream=True,
        n=2)
    chunks = list(stream)
    text = {0: "", 1: ""}
    finish = {}
    for chunk in chunks:
        for choice in chunk.choices:
            text[choice.index] += choice.delta.content or ""
            if choice.finish_reason:
                finish[choice.index] = choice.finish_reason
    assert text == {0: "three two one", 1: "three two one 1"}
    assert finish == {0: "stop", 1: "stop"}
    cut = client(url).completions.create(model="echo", prompt="a b c d e", max_tokens=2)
    assert (cut.choices[0].text, cut.choices[0].finish_reason) == ("e d", "length")
    clamped = client(url).completions.create(model="echo", prompt="a b", max_tokens=10_000)
    assert clamped.choices[0].finish_reason == "stop"


def test_raw_stream_ends_with_done(echo):
    url, _ = echo
    with httpx.stream("POST", url + "/v1/completions",
                      json={"prompt": "x y", "stream": True}) as response:
        assert response.headers["content-type"].startswith("text/event-stream")
        lines = [line for line in response.iter_lines() if line]
    assert lines[-1] == "data: [DONE]"
    assert json.loads(lines[0].removeprefix("data: "))["choices"][0]["text"] == "y x"


def test_models_health_translate_and_the_page(echo):
    url, _ = echo
    assert [m.id for m in client(url).models.list()] == ["echo"]
    assert httpx.get(url + "/health").json() == {"status": "ok", "model": "echo"}
    response = httpx.post(url + "/v1/translate", json={"texts": ["a b", "c d"]})
    assert response.json() == {"translations": ["b a", "d c"]}
    page = httpx.get(url + "/")
    assert page.status_code == 200 and "질문을 입력하세요" in page.text
    assert httpx.get(url + "/static/chat.js").status_code == 200


@pytest.mark.parametrize("body, status, named", [
    (b"{not json", 400, "not valid JSON"),
    ({"messages": []}, 400, "messages"),
    ({"messages": [{"role": "user", "content": "  "}]}, 400, "empty"),
    ({"messages": [{"role": "user", "content": "hi"}], "temprature": 1}, 400, "temprature"),
    ({"messages": [{"role": "user", "content": "hi"}], "n": 99}, 400, "n"),
    ({"messages": [{"role": "user", "content": "hi"}], "n": 5, "method": "beam"}, 400, "`n`"),
    ({"messages": [{"role": "user", "content": "hi"}], "max_tokens": "many"}, 400,
     "max_tokens"),
    ({"messages": [{"role": "robot", "content": "hi"}]}, 400, "role"),
    ({"prompt": "x" * (1 << 20)}, 413, "bytes"),
])
def test_bad_requests_get_a_4xx_in_openais_shape(echo, body, status, named):
    url, _ = echo
    path = ("/v1/completions" if isinstance(body, bytes) or "prompt" in body
            else "/v1/chat/completions")
    content = body if isinstance(body, bytes) else json.dumps(body).encode()
    response = httpx.post(url + path, content=content,
                          headers={"content-type": "application/json"})
    assert response.status_code == status, response.text
    error = response.json()["error"]
    assert named in error["message"] and error["type"] == "invalid_request_error"
    with pytest.raises(openai.BadRequestError):
        client(url).chat.completions.create(model="echo", messages=[], n=2)


def test_edge_requests_get_a_4xx_and_a_bug_a_500_in_openais_shape(echo):
    url, _ = echo
    sampled = httpx.post(url + "/v1/translate", json={"texts": ["x y"], "temperature": 1})
    assert sampled.json() == {"translations": ["y x"]}
    cases = [
        ("/v1/chat/completions", {"messages": [{"role": "user", "content": [
            {"type": "text", "text": 5}, {"type": "image_url"}]}]}, 400, "empty"),
        ("/v1/completions", b'{"prompt": "\\ud800"}', 400, "Unicode"),
        ("/v1/completions", {"prompt": "x", "seed": 2**40}, 400, "seed"),
        ("/v1/completions", {"prompt": "x", "n": 16, "temperature": 1}, 200, ""),
        ("/v1/completions", {"prompt": "boom"}, 500, "a bug"),
    ]
    for path, body, status, named in cases:
        content = body if isinstance(body, bytes) else json.dumps(body).encode()
        response = httpx.post(url + path, content=content,
                              headers={"content-type": "application/json"})
        assert response.status_code == status, (body, response.text)
        if status != 200:
            assert named in response.json()["error"]["message"], response.text
    chunked = httpx.post(url + "/v1/completions", content=iter([b'{"prompt": "x"}']),
                         headers={"content-type": "application/json"})
    assert chunked.status_code == 411


@settings(max_examples=60)  # three requests each, over loopback
@given(st.one_of(st.binary(max_size=200),
                 st.recursive(st.none() | st.booleans() | st.integers() | st.floats()
                              | st.text(max_size=20),
                              lambda inner: st.lists(inner, max_size=4)
                              | st.dictionaries(st.sampled_from(
                                  ["messages", "prompt", "n", "role", "content", "stream",
                                   "max_tokens", "temperature", "seed", "texts", "x"]),
                                  inner, max_size=5), max_leaves=12)))
def test_no_body_makes_the_server_fail(echo, body):
    url, _ = echo
    content = body if isinstance(body, bytes) else json.dumps(body).encode()
    for path in ("/v1/chat/completions", "/v1/completions", "/v1/translate"):
        response = httpx.post(url + path, content=content,
                              headers={"content-type": "application/json"})
        assert response.status_code < 500, (path, body, response.text)


def test_concurrent_requests_are_decoded_in_one_call():
    engine = EchoEngine(delay=0.2)
    with running(engine, max_wait_ms=50) as url:
        questions = [f"question number {i}" for i in range(12)]

        def ask(question):
            return httpx.post(url + "/v1/completions", json={"prompt": question},
                              timeout=30).json()["choices"][0]["text"]

        threads, answers = [], {}
        for question in questions:
            thread = threading.Thread(target=lambda q=question: answers.update({q: ask(q)}))
            thread.start()
            threads.append(thread)
        for thread in threads:
            thread.join()
    assert answers == {q: " ".join(q.split()[::-1]) for q in questions}
    assert len(engine.calls) < len(questions) and max(n for n, _ in engine.calls) > 1


def test_different_options_are_batched_apart_and_a_seed_alone():
    async def scenario():
        calls = []
        batcher = MicroBatcher(lambda key, texts: calls.append((key, texts)) or texts,
                               max_batch_size=8, max_wait_ms=30)
        greedy, beam = (("method", "greedy"),), (("method", "beam"),)
        seeded = (("request", "a"), ("seed", 1))
        results = await asyncio.gather(
            batcher.submit(greedy, ["a"]), batcher.submit(beam, ["b"]),
            batcher.submit(greedy, ["c"]), batcher.submit(seeded, ["d"]),
            batcher.submit(greedy, ["e", "f"]))
        return calls, results

    calls, results = asyncio.run(scenario())
    assert results == [["a"], ["b"], ["c"], ["d"], ["e", "f"]]
    assert sorted(texts for _, texts in calls) == [["a", "c", "e", "f"], ["b"], ["d"]]


def test_a_full_queue_answers_503_with_retry_after_and_a_slow_call_504():
    with running(EchoEngine(delay=1.0), max_queue=1, max_batch_size=1, timeout=3) as url:
        with httpx.Client(timeout=30) as http:
            first = threading.Thread(target=http.post, args=(url + "/v1/translate",),
                                     kwargs={"json": {"texts": ["busy"]}})
            first.start()
            time.sleep(0.3)  # the first call runs; this one waits in the queue
            second = threading.Thread(target=http.post, args=(url + "/v1/translate",),
                                      kwargs={"json": {"texts": ["waiting"]}})
            second.start()
            time.sleep(0.3)
            full = http.post(url + "/v1/translate", json={"texts": ["one too many"]})
            first.join()
            second.join()
    assert full.status_code == 503 and full.headers["retry-after"] == "1"
    assert "busy" in full.json()["error"]["message"]
    with running(EchoEngine(delay=2.0), timeout=0.5) as url:
        late = httpx.post(url + "/v1/translate", json={"texts": ["slow"]}, timeout=30)
    assert late.status_code == 504 and late.json()["error"]["type"] == "server_error"


def test_health_is_503_until_the_model_has_loaded():
    ready = threading.Event()

    def load():
        ready.wait(30)
        return EchoEngine()

    server = Server(load)
    port = _free_port()
    web = uvicorn.Server(uvicorn.Config(create_app(server), host="127.0.0.1", port=port,
                                        log_level="warning"))
    thread = threading.Thread(target=web.run, daemon=True)
    thread.start()
    url = f"http://127.0.0.1:{port}"
    try:
        for _ in range(200):
            with contextlib.suppress(httpx.TransportError):
                loading = httpx.get(url + "/health")
                break
            time.sleep(0.05)
        assert loading.status_code == 503
        early = httpx.post(url + "/v1/translate", json={"texts": ["x"]})
        assert early.status_code == 503 and early.headers["retry-after"] == "1"
        ready.set()
        for _ in range(200):
            if httpx.get(url + "/health").status_code == 200:
                break
            time.sleep(0.05)
        assert httpx.post(url + "/v1/translate", json={"texts": ["x y"]}).json() == {
            "translations": ["y x"]}
    finally:
        ready.set()
        web.should_exit = True
        thread.join(timeout=30)


def test_the_queue_refuses_beyond_its_size():
    async def scenario():
        batcher = MicroBatcher(lambda key, texts: texts, max_batch_size=4, max_wait_ms=50,
                               max_queue=3)
        first = asyncio.ensure_future(batcher.submit((), ["a", "b"]))
        await asyncio.sleep(0)
        with pytest.raises(QueueFull):
            await batcher.submit((), ["c", "d"])
        return await first

    assert asyncio.run(scenario()) == ["a", "b"]


def test_a_saved_model_is_called_in_padded_buckets_and_warmed_up():
    """Its XLA decoding compiles per batch size: 3 texts go as 4 (the first
    copied, never an empty text), 6 as two calls of 4, warm-up compiles 1, 2, 4."""
    import tensorflow as tf

    from keras_transformer.serving.engines import SavedModelEngine

    class Module:  # the exported signature: echoes each text, then <END>
        def __init__(self):
            self.calls = []

        def translate(self, texts):
            self.calls.append([text.decode() for text in texts.numpy()])
            return {"text": texts, "token_ids": tf.constant([[5, 2]] * len(self.calls[-1]))}

    engine = SavedModelEngine.__new__(SavedModelEngine)
    engine.module, engine.max_batch_size, engine.end_id, engine.pad_id = Module(), 4, 2, 0
    results = engine.answer(["a", "b", "c"], {"n": 2})
    assert [[answer.text for answer in result.answers] for result in results] == [
        ["a", "a"], ["b", "b"], ["c", "c"]]
    assert engine.module.calls == [["a", "b", "c", "a"]]
    assert len(engine.answer([str(i) for i in range(6)], {})) == 6
    assert engine.module.calls[1:] == [["0", "1", "2", "3"], ["4", "5", "0", "0"]]
    engine.module.calls.clear()
    engine.warm_up()
    assert [len(call) for call in engine.module.calls] == [1, 2, 4]
    assert (results[0].answers[0].tokens, results[0].answers[0].finish_reason) == (1, "stop")


# The slow tests: a trained model, its SavedModel, the page in a browser.

@pytest.fixture(scope="module")
def chatbot(tmp_path_factory):
    out = tmp_path_factory.mktemp("served")
    result, corpus = train_small(out, tokenizer="word", max_length=12)
    return str(out), result.translator, [source for source, _ in corpus["valid"]]


@pytest.mark.slow
def test_a_trained_model_answers_as_its_translator(chatbot):
    from keras_transformer.serving.engines import load_engine

    directory, translator, questions = chatbot
    engine = load_engine(directory, {"method": "mmi"})
    with running(engine) as url:
        api = client(url)
        answers = [api.chat.completions.create(
            model=engine.name, messages=[{"role": "user", "content": q}]
        ).choices[0].message.content for q in questions[:4]]
        assert answers == translator.translate(questions[:4], method="mmi")
        best = api.chat.completions.create(
            model=engine.name, messages=[{"role": "user", "content": questions[0]}],
            n=3, extra_body={"method": "beam"})
        assert [c.message.content for c in best.choices] == translator.translate(
            [questions[0]], method="beam", num_return_sequences=3)[0]
        sampled = [api.completions.create(model=engine.name, prompt=questions[1],
                                          temperature=1.0, seed=7, n=2) for _ in range(2)]
        assert [c.text for c in sampled[0].choices] == [c.text for c in sampled[1].choices]
        short = api.completions.create(model=engine.name, prompt=questions[:4], max_tokens=1)
        assert short.usage.completion_tokens <= 4
        for choice, full in zip(short.choices, translator.translate(questions[:4],
                                                                    method="mmi")):
            assert full.startswith(choice.text)
            assert choice.finish_reason == ("stop" if choice.text == full else "length")
        long = api.completions.create(model=engine.name, prompt=" ".join(["the cat"] * 20))
        assert "cut" in long.model_extra["warnings"][0]
        assert long.usage.prompt_tokens == translator.max_length


@pytest.mark.slow
def test_an_exported_saved_model_is_served(chatbot, tmp_path):
    from keras_transformer import export_saved_model
    from keras_transformer.serving.engines import load_engine

    _, translator, questions = chatbot
    path = str(tmp_path / "saved")
    export_saved_model(translator.model, translator.source_tokenizer,
                       translator.target_tokenizer, path)
    # Warmed up at batch sizes 1, 2, 4: three questions go as four (the first copied).
    with running(load_engine(path, max_batch_size=4, warm_up=True)) as url:
        answer = client(url).completions.create(model="saved", prompt=questions[:3])
        refused = httpx.post(url + "/v1/completions",
                             json={"prompt": "x", "temperature": 0.5})
    assert [c.text for c in answer.choices] == translator.translate(questions[:3])
    assert refused.status_code == 400 and "does not sample" in refused.text


def chromium():
    """The path of Debian's chromium, or None."""
    for name in ("chromium", "chromium-browser"):
        if shutil.which(name):
            return shutil.which(name)
    return None


@pytest.mark.slow
def test_the_chat_page_in_a_real_browser(chatbot, tmp_path):
    playwright = pytest.importorskip("playwright.sync_api", reason="pip install playwright")
    browser_path = chromium()
    if browser_path is None:
        pytest.skip("Debian's chromium is not installed (apt-get install chromium)")
    from keras_transformer.serving.engines import load_engine

    directory, translator, questions = chatbot
    engine = load_engine(directory, {"method": "mmi"})
    expected = translator.translate(questions[2], method="mmi")
    with running(engine) as url, playwright.sync_playwright() as p:
        browser = p.chromium.launch(executable_path=browser_path, headless=True)
        page = browser.new_page()
        page.goto(url + "/")
        page.wait_for_selector("#status:has-text('모델')")
        page.fill("#question", questions[2])
        page.click("#send")
        answer = page.wait_for_selector("#messages li.assistant", timeout=60_000)
        text = answer.inner_text()
        page.screenshot(path=str(tmp_path / "chat.png"))
        browser.close()
    assert text == expected
    assert (tmp_path / "chat.png").stat().st_size > 1000
    screenshots = os.environ.get("KT_SCREENSHOTS")
    if screenshots:
        shutil.copy(tmp_path / "chat.png", screenshots)


@pytest.mark.slow
def test_the_serve_command_starts_and_answers(chatbot):
    directory, translator, questions = chatbot
    port = _free_port()
    process = subprocess.Popen(
        [sys.executable, "-m", "keras_transformer", "serve", "--model", directory, "--port",
         str(port), "--method", "greedy", "--max-batch-size", "2"],
        stderr=subprocess.DEVNULL)
    url = f"http://127.0.0.1:{port}"
    try:
        for _ in range(1200):
            with contextlib.suppress(httpx.TransportError):
                if httpx.get(url + "/health").status_code == 200:
                    break
            time.sleep(0.1)
        answer = httpx.post(url + "/v1/translate", json={"texts": questions[:2]}).json()
    finally:
        process.terminate()
        process.wait(timeout=30)
    assert answer == {"translations": translator.translate(questions[:2])}


def random_translator(**options):
    """An untrained Translator over a word vocabulary, with `options` for its model."""
    import keras

    import keras_transformer as kt
    from keras_transformer.text import WordTokenizer

    texts = ["the cat sat on the mat", "a dog ran in the park", "고양이 가 앉았다",
             "개 가 공원 에서 뛰었다"]
    tokenizer = WordTokenizer.from_texts(texts, verbose=0)
    keras.utils.set_random_seed(3)
    model = kt.Transformer(num_layers=2, d_model=16, num_heads=2, dff=32,
                           input_vocab_size=tokenizer.vocab_size,
                           target_vocab_size=tokenizer.vocab_size,
                           maximum_position_encoding=10, **options)
    translator = kt.Translator(model, tokenizer, tokenizer)
    translator.translate(texts[:1])  # builds the weights
    return translator, texts


@pytest.mark.slow
@pytest.mark.parametrize("options", [
    {}, {"norm_first": True, "activation": "gelu", "position_encoding": "learned",
         "share_embeddings": True},
])
def test_a_ctranslate2_export_decodes_our_tokens(options, tmp_path):
    pytest.importorskip("ctranslate2")
    from keras_transformer.serving.ctranslate2 import CTranslate2Translator, export_ctranslate2

    translator, texts = random_translator(**options)
    export_ctranslate2(translator, str(tmp_path / "ct2"))
    exported = CTranslate2Translator(str(tmp_path / "ct2"))
    for method in ("greedy", "beam"):
        ours = translator.generate_ids(texts, method=method, length_penalty=0.0)
        theirs = exported.generate_ids(texts, method=method, length_penalty=0.0)
        width = max(ours.shape[1], theirs.shape[1])
        ours, theirs = padded_to(width, ours, theirs)
        assert (ours == theirs).all(), (method, ours, theirs)
    assert exported.translate(texts[:2]) == translator.translate(texts[:2])


def padded_to(width, *arrays):
    import numpy as np

    return [np.pad(a, ((0, 0), (0, width - a.shape[1]))) for a in arrays]


@pytest.mark.slow
def test_the_trained_model_through_ctranslate2_and_its_server(chatbot, tmp_path):
    pytest.importorskip("ctranslate2")
    from keras_transformer import cli
    from keras_transformer.serving.ctranslate2 import CTranslate2Translator
    from keras_transformer.serving.engines import load_engine

    directory, translator, questions = chatbot
    out = str(tmp_path / "ct2")
    assert cli.main(["export", "--format", "ctranslate2", "--model", directory, "--out",
                     out]) == 0
    exported = CTranslate2Translator(out)
    for method in ("greedy", "beam"):
        assert exported.translate(questions, method=method, length_penalty=0.0) == \
            translator.translate(questions, method=method, length_penalty=0.0)
    assert cli.main(["export", "--format", "ctranslate2", "--model", directory, "--out",
                     str(tmp_path / "int8"), "--quantization", "int8"]) == 0
    int8 = CTranslate2Translator(str(tmp_path / "int8")).translate(questions)
    assert len(int8) == len(questions) and all(isinstance(a, str) for a in int8)
    with running(load_engine(out, {"method": "greedy"})) as url:
        answer = client(url).completions.create(model="ct2", prompt=questions[:3])
        refused = httpx.post(url + "/v1/completions", json={"prompt": "x", "temperature": 1})
    assert [c.text for c in answer.choices] == translator.translate(questions[:3])
    assert refused.status_code == 400 and "greedy or beam" in refused.text
