"""Quick start: a custom environment, registered, made, wrapped and recorded.

The first two blocks are the quick-start code of the knowlyr-agent README, unchanged; the
rest supplies what that code leaves to the reader (an agent, a reward function, a task) and
prints the recorded trajectory as the JSON record the rest of the stack consumes.

    python examples/quickstart.py
"""

from knowlyrcore import AgentEnv, TimeStep, make, register


# --- README: Custom Environments -------------------------------------------------------
class MyEnv(AgentEnv):
    domain = "my_domain"

    def reset(self, *, task=None, seed=None) -> TimeStep:
        return TimeStep(observation="ready")

    def step(self, action: dict) -> TimeStep:
        return TimeStep(observation="result", terminated=(action["tool"] == "submit"))

    @property
    def available_tools(self):
        return ["observe", "act", "submit"]


register("my-project/my-env", MyEnv, domain="my_domain")
env = make("my-project/my-env")


# --- what the README leaves to the reader -------------------------------------------------
def agent(observation: str) -> dict:
    """A scripted policy: look, act, then submit."""
    agent.turn = getattr(agent, "turn", 0) + 1
    plan = ["observe", "act", "submit"]
    tool = plan[min(agent.turn, len(plan)) - 1]
    return {"tool": tool, "params": {"note": f"turn {agent.turn}"}, "thought": f"after {observation!r}, {tool}"}


def my_reward_fn(action, timestep, history) -> float:
    """Reward progress: acting beats observing, submitting ends the task."""
    return {"observe": 0.1, "act": 0.5, "submit": 1.0}.get(action["tool"], 0.0)


my_task = {"id": "quickstart-1", "description": "Observe, act once, then submit.", "domain": "my_domain"}

# --- README: Composable Wrappers ----------------------------------------------------------
from knowlyrcore.wrappers import MaxStepsWrapper, RecorderWrapper, RewardWrapper  # noqa: E402

env = MaxStepsWrapper(env, max_steps=50)  # horizon truncation
env = RewardWrapper(env, reward_fn=my_reward_fn)  # step-level reward injection
env = RecorderWrapper(env, agent_name="my-agent")  # trajectory recording

ts = env.reset(task=my_task)
while not ts.done:
    action = agent(ts.observation)
    ts = env.step(action)

trajectory = env.get_trajectory()

# --- show it --------------------------------------------------------------------------------
if __name__ == "__main__":
    for step in trajectory.steps:
        print(
            f"step {step.index}: {step.tool_call.name}({step.tool_call.parameters}) "
            f"-> {step.observation.output!r} reward={step.reward}"
        )
    print(f"outcome: {trajectory.outcome.exit_status}, total reward {trajectory.reward}\n")
    print(trajectory.model_dump_json(indent=2))
