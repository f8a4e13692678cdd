"""The main job's sections: `rl` (the online loop), `bc` (behaviour cloning from the suite's scripted solvers)
and `report` (greedy evaluation of the policies on held-out seeds): the stages `jaxwebrl.main_job.stages` runs.
"""

from __future__ import annotations

import dataclasses

from jaxwebrl.fields import FieldError, at_least, comma_list, one_of, positive

# deterministic: what enters training, and in what order, follows the run's logical schedule (seed, iteration,
# group index), never the order in which episodes finish; the JaxEngine runs in its deterministic mode. The
# same config and seed give bit-identical rollouts, batches and weights whatever else runs on the machine.
# async: groups train in completion order as soon as a round has enough (the throughput mode).
SCHEDULES = ("deterministic", "async")


@dataclasses.dataclass(frozen=True)
class RLConfig:
    iterations: int = 10
    eval_every: int = 0  # greedy evaluation on held-out seeds every N iterations (0 = off)
    # Demonstrations mixed into every iteration's batch, each its own group with a fixed advantage: at ratio ~1
    # that is an SFT term on demonstrated tasks beside the policy gradient (0 = off).
    replay_demonstrations: int = 0
    demonstration_advantage: float = 1.0
    demonstrations_file: str = ""  # trajectories to replay ('' = the run's BC demonstrations, when bc.enabled)
    # Instead of a count per batch: this fraction of the demonstrations, a seeded subset spread evenly over the
    # iterations (BrowserAgent's RFT mixes its rollouts with 80% of the SFT data: 0.8).
    demonstration_share: float = 0.0
    save_rollouts: bool = True  # every trajectory played (kept or not), rewarded, in <workdir>/rl/rollouts.jsonl
    # Collect iteration k+1's rollouts while iteration k trains, on the weights before k's update (one update
    # behind, bounded by rollout.max_policy_lag; importance ratios from the sampler's logprobs). Off: strictly
    # on-policy, as every paper's recipe is written.
    overlap: bool = False
    # How a round's groups are chosen and ordered (SCHEDULES above). With overlap, 'deterministic' defines it
    # logically: round k+1 samples on exactly the weights after update k-1, swapped only at round boundaries.
    schedule: str = "async"

    def __post_init__(self) -> None:
        one_of("schedule", self.schedule, SCHEDULES)
        at_least("iterations", self.iterations, 0)
        at_least("eval_every", self.eval_every, 0)
        if self.replay_demonstrations < 0:
            raise FieldError("replay_demonstrations", f"{self.replay_demonstrations} must be >= 0",
                             "set how many demonstrations each RL batch replays, or 0")
        if not 0.0 <= self.demonstration_share <= 1.0:
            raise FieldError("demonstration_share", f"{self.demonstration_share} is not in [0, 1]",
                             "give the fraction of the demonstrations mixed in over the run, e.g. 0.8, or 0")
        if not isinstance(self.overlap, bool):
            raise FieldError("overlap", f"{self.overlap!r} is not a bool", "set True or False")
        if self.demonstration_share and self.replay_demonstrations:
            raise FieldError("demonstration_share", "is set together with rl.replay_demonstrations",
                             "mix demonstrations either as a count per batch (replay_demonstrations) or as a share "
                             "of the file over the run (demonstration_share); set the other to 0")

    @property
    def mixes_demonstrations(self) -> bool:
        return self.replay_demonstrations > 0 or self.demonstration_share > 0


RATIONALE_FORMS = ("element", "name")  # bc.rationale_form: what the think names (demos.collect.rationale_text)


@dataclasses.dataclass(frozen=True)
class BCConfig:
    enabled: bool = False
    demonstration_seeds: int = 40  # training instances per task played by the scripted solver
    # Tasks to demonstrate ('' = every run task with a scripted solver); RL learns the others from reward alone.
    tasks: str = ""
    vocab_size: int = 1024  # tokenizer trained on the demonstrations
    steps: int = 200
    lr: float = 1e-3
    micro_batch: int = 8
    # Also train next-token prediction on the page/prompt tokens, each weighted this much relative to an action
    # token (0 = actions only): a denser signal for a model learning to read pages from scratch.
    context_loss_weight: float = 0.0
    seq_len: int = 0  # packed row length for the demonstrations (0 = train.seq_len); attention costs ~T^2 per row
    # Each demonstrated action on an element is preceded by that element as the page shows it, in <think>
    # (`<think>button 'No' [12]</think>click('12')` with env.ids_after_names): the policy learns to name its
    # target before it writes the id.
    rationale: bool = False
    # What the rationale writes: "element", the whole head as the page shows it (`button 'No' [12]`), or
    # "name", only the name and the id (`'No' [12]`), so its first token is a copy from the goal, not the role
    # every candidate of that kind shares.
    rationale_form: str = "element"

    def __post_init__(self) -> None:
        one_of("rationale_form", self.rationale_form, RATIONALE_FORMS)
        for name in ("demonstration_seeds", "vocab_size", "steps", "micro_batch"):
            at_least(name, getattr(self, name), 1)
        positive("lr", self.lr, "set a positive learning rate")
        at_least("seq_len", self.seq_len, 0)
        if self.context_loss_weight < 0:
            raise FieldError("context_loss_weight", f"{self.context_loss_weight} must be >= 0",
                             "use 0 (actions only) or a positive weight for the page tokens, e.g. 0.1")

    @property
    def task_names(self) -> list[str]:
        return comma_list(self.tasks)


@dataclasses.dataclass(frozen=True)
class ReportConfig:
    enabled: bool = False  # evaluate random / BC / RL and write report.md + plots
    eval_seeds: int = 20
    # Tasks of the suite that are neither demonstrated nor trained on (never tuned on either): every policy is
    # also evaluated on them, on the same test seeds, in a table of their own (generalisation to new tasks).
    held_out_tasks: str = ""

    def __post_init__(self) -> None:
        at_least("eval_seeds", self.eval_seeds, 1)

    @property
    def held_out_task_names(self) -> list[str]:
        return comma_list(self.held_out_tasks)
