"""NNetNav's three judges bound to backends: the state-change summariser, the trajectory labeler and the
outcome reward model (`jaxwebrl.judges.nnetnav` holds their prompts and parsing), called by exploration,
relabeling and best-of-K alike."""

from __future__ import annotations

import dataclasses
from typing import Any, Sequence

from jaxwebrl.data.records import Trajectory, Turn
from jaxwebrl.engines.base import Engine
from jaxwebrl.judges.backends import EngineBackend, JudgeBackend, JudgeOptions
from jaxwebrl.judges.base import Verdict
from jaxwebrl.judges.nnetnav import NNetNavORM, StateChangeSummarizer, TrajectoryLabeler
from jaxwebrl.nnetnav.store import ExploredStep


@dataclasses.dataclass
class NNetNavJudges:
    """Summariser, labeler and ORM; each on its own backend (the same one for the paper's single model)."""

    summarizer: StateChangeSummarizer
    labeler: TrajectoryLabeler
    orm: NNetNavORM

    @classmethod
    def on(cls, backend: JudgeBackend, options: JudgeOptions | None = None, *, action_space: str = "bid",
           pass_score: int = 4, labeler_backend: JudgeBackend | None = None,
           orm_backend: JudgeBackend | None = None) -> "NNetNavJudges":
        kw = {"action_space": action_space}
        return cls(StateChangeSummarizer(backend, options, **kw),
                   TrajectoryLabeler(labeler_backend or backend, options, **kw),
                   NNetNavORM(orm_backend or backend, options, pass_score=pass_score, **kw))

    @classmethod
    def on_engine(cls, engine: Engine, tokenizer: Any, options: JudgeOptions | None = None, **kw: Any) -> "NNetNavJudges":
        """All three on one engine that someone else owns (closing the judges leaves it running)."""
        return cls.on(EngineBackend(engine, tokenizer, owns_engine=False), options, **kw)

    async def summarize(self, before: str, action: str, after: str, task_id: str = "") -> Verdict:
        """Delta(o_t, a_t, o_t+1) as a one-turn judgment (the summary in `extra['summaries'][0]`)."""
        traj = Trajectory(task_id, [Turn([], [], observation=before, action=action)],
                          metadata={"final_observation": after})
        return await self.summarizer.judge(traj)

    async def label_and_score(self, task_id: str, steps: Sequence[ExploredStep], summaries: Sequence[str],
                              final_page: str, last_feedback: str | None = None) -> tuple[Verdict, Verdict | None]:
        """(labeler verdict, ORM verdict or None when the labeler failed). The ORM also gets each action's
        feedback (a step stores the feedback of the action before it; `last_feedback` is the last action's),
        which the verifier trained here reads (`nnetnav.judge.kind='verifier'`)."""
        turns = [Turn([], [], observation=s.observation, action=s.response) for s in steps]
        feedback = [s.feedback or "" for s in steps[1:]] + [last_feedback or ""]
        meta = {"state_changes": list(summaries), "final_observation": final_page, "feedback": feedback}
        label = await self.labeler.judge(Trajectory(task_id, turns, metadata=meta))
        if not label.ok:
            return label, None
        meta = {**meta, "instruction": label.output}
        return label, await self.orm.judge(Trajectory(task_id, turns, metadata=meta))

    async def close(self) -> None:
        seen: set[int] = set()
        for j in (self.summarizer, self.labeler, self.orm):
            if j.backend is not None and id(j.backend) not in seen:
                seen.add(id(j.backend))
                await j.close()
