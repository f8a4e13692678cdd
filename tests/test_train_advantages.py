"""Group advantages, dynamic sampling, WebGym / BrowserAgent / OpenWebRL filters, worked by hand."""

import math

import numpy as np
import pytest

from jaxwebrl.data.records import Trajectory, Turn
from jaxwebrl.recipes.browseragent import rft_select
from jaxwebrl.recipes.openwebrl import openwebrl_reward
from jaxwebrl.recipes.webgym import webgym_filter
from jaxwebrl.train.advantages import (
    DynamicSamplingCollector, assign_group_advantages, drop_zero_variance_groups, group_advantages, mask_failed,
)


def test_group_advantages_mean_std():
    a = group_advantages([1, 0, 0, 0, 1, 1], ["a", "a", "a", "a", "b", "b"], eps=0.0)
    # group a: mean .25, std sqrt(.1875)=.4330 -> (.75/.433, -.25/.433 x3); group b: all equal -> 0
    s = math.sqrt(0.1875)
    np.testing.assert_allclose(a[:4], [0.75 / s, -0.25 / s, -0.25 / s, -0.25 / s], rtol=1e-6)
    np.testing.assert_allclose(a[4:], [0, 0])
    b = group_advantages([1, 0, 0, 0], ["a"] * 4, scale_by_std=False)
    np.testing.assert_allclose(b, [0.75, -0.25, -0.25, -0.25], rtol=1e-6)


def _traj(task, r, group=None, n=1, **kw):
    return Trajectory(task, [Turn([1, 2], [3, 4], observation=f"o{i}") for i in range(n)], reward=r,
                      group_id=group or task, **kw)


def test_dynamic_sampling():
    ts = [_traj("a", 1), _traj("a", 0), _traj("b", 1), _traj("b", 1)]
    assert [t.task_id for t in drop_zero_variance_groups(ts)] == ["a", "a"]
    c = DynamicSamplingCollector(target_groups=2, group_size=2)
    assert not c.add(ts[2:])  # zero variance
    assert c.add(ts[:2]) and not c.done and c.needed == 1
    assert c.add([_traj("c", 0), _traj("c", 1)]) and c.done
    assert not c.add([_traj("d", 0), _traj("d", 1)])  # already full
    batch = c.take()
    assert len(batch) == 4 and not c.groups
    adv = assign_group_advantages(batch, eps=0.0)
    assert [t.advantage for t in adv] == [1.0, -1.0, -1.0, 1.0]


def test_webgym_filter():
    ok = Trajectory("a", [Turn([1], [2], observation="x"), Turn([1], [3], observation="x"),
                          Turn([1], [4], observation="y")], reward=1.0)
    bad = Trajectory("b", [Turn([1], [2])], reward=0.0)
    (t,) = webgym_filter([ok, bad])
    assert t.advantage == 1.0
    # step 0's next observation equals its own -> dropped; steps 1 and 2 kept
    assert [turn.mask for turn in t.turns] == [[0], [1], [1]]


def test_rft_select():
    k = 4
    ts = [_traj("easy", 1, n=2), _traj("easy", 1, n=3), _traj("easy", 1), _traj("easy", 1),  # 4/4 correct: drop
          _traj("mid", 1, n=2), _traj("mid", 1, n=5), _traj("mid", 0, n=7), _traj("mid", 0),
          _traj("hard", 0), _traj("hard", 0), _traj("hard", 0), _traj("hard", 0)]
    ts[5].turns[1].format_ok = False  # the longest correct one is malformed -> next longest
    out = rft_select(ts, k)
    assert [(t.task_id, len(t.turns)) for t in out] == [("mid", 2)]


def test_openwebrl_reward_and_failures():
    assert openwebrl_reward(_traj("a", 0, termination="done"), True) == 1.0
    assert openwebrl_reward(_traj("a", 0, termination="done"), False) == 0.0
    assert openwebrl_reward(_traj("a", 0, termination="format_error"), None) == -1.0
    assert openwebrl_reward(_traj("a", 0, termination="max_steps"), None) == 0.0
    (t,) = mask_failed([_traj("a", 0, termination="judge_error")])
    assert t.turns[0].mask == [0, 0]
