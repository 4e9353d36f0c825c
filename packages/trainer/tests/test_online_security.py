"""Online RL against a hostile generation endpoint and a hostile policy.

- A generation server is a remote component: token ids outside the vocabulary, negative, huge,
  not integers at all, or non-finite log-probs, are a ``GenerationError`` for the episode that got
  them (masked out of the update and counted), never a crash of the run. The server here is a
  real HTTP server on 127.0.0.1 answering ``/v1/completions`` with crafted JSON.
- An environment that raises on the policy's own text (a lone surrogate in a tool argument) does
  not let the policy dodge its grade: the episode ends as a failure with reward 0 and stays in the
  update. Only infrastructure failures are masked.
"""

import json
import math
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest
from small_online import small_online_config

from agenttrainer.acting.generators import ServerGenerator, TokenSample
from agenttrainer.online import OnlineRLTrainer, collect_rollouts
from knowlyrcore import AgentEnv, TimeStep, register, unregister

SYSTEM = "You are a test agent."
ANSWER = '{"name": "say", "arguments": {"text": "hi"}}'


class Parity(AgentEnv):
    """Two steps; every step rewards the parity of the episode's reset seed, so the episodes of a
    group (seeds s, s+1, ...) score differently whatever is sampled: the update has a signal."""

    domain = "generic"

    def reset(self, *, task=None, seed=None):
        self.reward, self.left = float((seed or 0) % 2), 2
        return TimeStep(observation="Say something.")

    def step(self, action):
        self.left -= 1
        done = self.left <= 0
        return TimeStep(observation="ok", reward=self.reward, terminated=done, info={"success": self.reward > 0})

    @property
    def available_tools(self):
        return ["say"]


class Strict(Parity):
    """Sends the ``say`` argument on as UTF-8, as a real service would: a lone surrogate in it
    raises ``UnicodeEncodeError`` out of ``step``."""

    def step(self, action):
        str(action["params"].get("text", "")).encode("utf-8")
        return super().step(action)


class Echo(Parity):
    """Quotes the ``say`` argument back, as error observations often do."""

    def step(self, action):
        ts = super().step(action)
        return TimeStep(
            observation=f"you said {action['params'].get('text')}",
            reward=ts.reward,
            terminated=ts.terminated,
            info=ts.info,
        )


@pytest.fixture(autouse=True)
def envs():
    register("test/parity", Parity)
    register("test/strict", Strict)
    register("test/echo", Echo)
    yield
    unregister("test/parity")
    unregister("test/strict")
    unregister("test/echo")


class _Handler(BaseHTTPRequestHandler):
    def do_POST(self):
        owner = self.server.owner
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        with owner.lock:
            owner.requests += 1
            first = owner.requests == 1
        choices = []
        for index, _prompt in enumerate(body["prompt"]):
            ids, logprobs = list(owner.good_ids), [-0.5] * len(owner.good_ids)
            if first and index == 0:  # the first episode's first answer is the crafted one
                ids, logprobs = owner.bad(ids, logprobs)
            choices.append(
                {
                    "index": index,
                    "token_ids": ids,
                    "logprobs": {"token_logprobs": logprobs},
                    "finish_reason": "stop",
                    "text": "",
                }
            )
        data = json.dumps({"choices": choices}).encode()  # NaN / Infinity as Python's json writes them
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def log_message(self, format, *args):
        pass


class CraftedCompletions:
    """``/v1/completions`` with token ids: every answer is ``good_ids``, except the first prompt of
    the first request, whose ``(ids, logprobs)`` go through ``bad`` first."""

    def __init__(self, good_ids, bad):
        self.good_ids, self.bad, self.requests, self.lock = good_ids, bad, 0, threading.Lock()

    def __enter__(self):
        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), _Handler)
        self.httpd.daemon_threads = True
        self.httpd.owner = self
        threading.Thread(target=self.httpd.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True).start()
        return self

    def __exit__(self, *exc):
        self.httpd.shutdown()
        self.httpd.server_close()

    @property
    def base_url(self):
        return f"http://127.0.0.1:{self.httpd.server_address[1]}/v1"


def _answer_ids(tokenizer, text=ANSWER):
    return tokenizer(text, add_special_tokens=False)["input_ids"] + [tokenizer.convert_tokens_to_ids("<|im_end|>")]


def _config(tmp_path, env_id, **overrides):
    tasks = tmp_path / "tasks.jsonl"
    tasks.write_text("".join(json.dumps({"id": f"t{i}"}) + "\n" for i in range(2)))
    group = {"group_size": 3, "tasks_per_iteration": 2, "num_iterations": 1, "batch_size": 8, "kl_coef": 0.0}
    episode = {"system_prompt": SYSTEM, "max_steps": 2, "max_new_tokens": 24, "max_episode_tokens": 1024}
    return small_online_config(tmp_path, tasks, env_id=env_id, **{**group, **episode, **overrides})


def _replace(position, value):
    def bad(ids, logprobs):
        ids = list(ids)
        ids[position] = value
        return ids, logprobs

    return bad


def _nan_logprob(ids, logprobs):
    return ids, [*logprobs[:-1], float("nan")]


VOCAB = 49152  # the tiny model's (SmolLM2's) vocabulary
BAD_ANSWERS = {
    "negative": (_replace(1, -1), "-1"),
    "vocab_size": (_replace(1, VOCAB), str(VOCAB)),
    "huge": (_replace(1, 2**70), "integer"),
    "bool": (_replace(1, True), "True"),
    "float": (_replace(1, 7.0), "7.0"),
    "string": (_replace(1, "7"), "'7'"),
    "infinite": (_replace(1, float("inf")), "inf"),
    "null": (_replace(1, None), "None"),
    "nan_logprob": (_nan_logprob, "log-prob"),
}


@pytest.mark.parametrize("case", list(BAD_ANSWERS))
def test_security_bad_token_ids_from_the_endpoint_mask_that_episode_and_the_step_completes(tiny, tmp_path, case):
    model, tokenizer = tiny
    assert model.get_input_embeddings().num_embeddings == VOCAB
    bad, shown = BAD_ANSWERS[case]
    with CraftedCompletions(_answer_ids(tokenizer), bad) as server:
        c = _config(tmp_path, "test/parity", generation_url=server.base_url, push_weights="none")
        trainer = OnlineRLTrainer(c, model=model, tokenizer=tokenizer)
        assert isinstance(trainer.generator, ServerGenerator)
        rollouts = trainer.rollout(0)
        assert [r.valid for r in rollouts] == [False, True, True, True, True, True]
        assert rollouts[0].infra_error.startswith("GenerationError: ") and shown in rollouts[0].infra_error
        assert "\n" not in rollouts[0].infra_error
        assert all(len(r.step_spans) == 2 for r in rollouts[1:])  # the others played on

        server.requests = 0  # the run's own first request gets the crafted answer again
        result = trainer.train()
    assert result["masked_episodes"] == 1 and result["optimizer_steps"] == 1
    metrics = json.loads((tmp_path / "out" / "metrics.jsonl").read_text().splitlines()[0])
    assert metrics["rollout/masked_episodes"] == 1 and metrics["rollout/episodes"] == 6
    # The update ran on the five valid episodes. (Their answers are the server's, all the same ids,
    # and a group's advantages sum to zero, so the exact policy gradient is zero: with their shared
    # tokens computed once (share_prefix) no parameter moves, and only float noise moved them before.)
    assert metrics["train/seconds"] > 0 and math.isfinite(metrics["loss/train"])


def test_security_a_generator_returning_a_wrong_number_of_answers_masks_the_turn(tokenizer):
    class Short:
        def generate(self, prompts, **kw):
            ids = _answer_ids(tokenizer)
            return [TokenSample(ids, [-0.5] * len(ids), "stop")] * (len(prompts) - 1)

        def weights_updated(self, model=None, path=None):
            pass

    rollouts = collect_rollouts(
        "test/parity", [{"id": "t"}], Short(), tokenizer, group_size=2, system_prompt=SYSTEM, max_new_tokens=24
    )
    assert not any(r.valid for r in rollouts)
    assert all(r.infra_error.startswith("GenerationError: ") for r in rollouts)


class Scripted:
    """Answers every prompt with ``texts[k]`` at turn k (the policy's text, tokenized)."""

    def __init__(self, tokenizer, texts):
        self.tokenizer, self.texts, self.calls = tokenizer, list(texts), 0

    def generate(self, prompts, **kw):
        ids = _answer_ids(self.tokenizer, self.texts[min(self.calls, len(self.texts) - 1)])
        self.calls += 1
        return [TokenSample(ids, [-0.5] * len(ids), "stop") for _ in prompts]

    def weights_updated(self, model=None, path=None):
        pass


# The policy writes a JSON escape of a lone surrogate; parsing it yields '\ud800', not UTF-8 encodable.
SURROGATE = '{"name": "say", "arguments": {"text": "\\ud800"}}'


def test_security_an_environment_raising_on_the_policys_text_is_the_policys_failure_not_masked(tiny, tmp_path):
    model, tokenizer = tiny
    (r,) = collect_rollouts(
        "test/strict",
        [{"id": "t"}],
        Scripted(tokenizer, [ANSWER, SURROGATE]),
        tokenizer,
        system_prompt=SYSTEM,
        max_steps=4,
        max_new_tokens=24,
        seed=1,
    )
    # the first step earned 1 (odd seed); the step the environment could not take ends the episode at 0
    assert r.valid and r.infra_error is None
    assert r.finish == "action_error" and r.env_reward == 0.0 and r.success is False
    assert r.format_errors == [False, True] and len(r.step_spans) == 2
    assert r.trajectory.steps[0].reward == 1.0  # what the episode had earned before it broke the environment
    refused = r.trajectory.steps[1]
    assert refused.observation.error.startswith("UnicodeEncodeError: ")
    assert refused.tool_call.parameters["text"] == "\\ud800"  # recorded as the policy wrote it, writable as UTF-8

    # in a run: every episode of the group fails this way, is scored 0 and counted, none is masked
    scripted = Scripted(tokenizer, [SURROGATE])
    trainer = OnlineRLTrainer(
        _config(tmp_path, "test/strict", format_penalty=0.1), model=model, tokenizer=tokenizer, generator=scripted
    )
    result = trainer.train()
    metrics = json.loads((tmp_path / "out" / "metrics.jsonl").read_text().splitlines()[0])
    assert result["masked_episodes"] == 0 and metrics["rollout/episodes"] == 6
    assert metrics["rollout/env_reward_mean"] == 0.0 and metrics["rollout/success_rate"] == 0.0
    assert metrics["rollout/format_errors"] == 6 and metrics["rollout/reward_mean"] == pytest.approx(-0.1)
    written = (tmp_path / "out" / "rollouts" / "iteration-00001.jsonl").read_text(encoding="utf-8").splitlines()
    assert len(written) == 6


def test_security_a_lone_surrogate_echoed_by_the_environment_goes_on_as_its_escape(tokenizer, tmp_path):
    """Tokenizers refuse a lone surrogate and UTF-8 files cannot hold one: the chat and the
    recorded trajectory carry its escape (what the policy wrote), and the run goes on."""
    from knowlyrcore import read_trajectories, write_trajectories

    (r,) = collect_rollouts(
        "test/echo",
        [{"id": "t"}],
        Scripted(tokenizer, [SURROGATE, ANSWER]),
        tokenizer,
        system_prompt=SYSTEM,
        max_steps=4,
        max_new_tokens=24,
    )
    assert r.valid and r.finish == "terminated" and len(r.step_spans) == 2
    observation = r.trajectory.steps[0].metadata["observation_token_ids"]
    assert "you said \\ud800" in tokenizer.decode(observation)
    write_trajectories(tmp_path / "r.jsonl", [r.trajectory])
    (back,) = read_trajectories(tmp_path / "r.jsonl")
    assert back.steps[0].tool_call.parameters == {"text": "\\ud800"}
