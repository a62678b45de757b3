"""kolo.hpo.PBT on 4 ranks (kolorun -np 4 python3 hpo_pbt.py DIR):

1. Bad input: a population that does not divide 4, a bad range.
2. Population 2, teams of 2: member 1 always scores higher, so at every
   exploit step member 0 copies member 1's weights and optimizer state
   (momentum buffers) in memory and explores from member 1's
   hyper-parameters: checked on every rank of member 0, and in the lineage.
3. Population 4, teams of 1, quantile 0.25: exactly the worst member
   copies the best at each step; the lineage JSON is written.
Exit status 0 on success (pytest is not used: every rank must take part
in every step).
"""

import json
import os
import sys

import torch

import kolo.hpo as hpo
import kolo.torch as kt

DIR = sys.argv[1]
kt.init()
ME = kt.rank()
SPACE = {"lr": (0.01, 0.5, "log"), "momentum": (0.5, 0.95), "width": (4, 64, "int"),
         "act": ["relu", "tanh", "gelu"]}

for bad, fragment in (({"population": 3}, "population=3 does not divide the job's 4 ranks"),
                      ({"hyperparams": {"lr": (0.0, 1.0, "log")}}, "hyperparams['lr']"),
                      ({"hyperparams": {"lr": (2.0, 1.0)}}, "hyperparams['lr']")):
    args = dict(population=2, interval_steps=2, hyperparams=SPACE)
    args.update(bad)
    try:
        hpo.PBT(**args)
    except ValueError as e:
        assert fragment in str(e), (fragment, str(e))
    else:
        raise AssertionError("no error for %r" % (bad,))


def make(member):
    torch.manual_seed(0)
    model = torch.nn.Linear(8, 2)
    with torch.no_grad():
        for p in model.parameters():
            p.fill_(float(member.index))  # each member's weights tell who it is
    opt = torch.optim.SGD(model.parameters(), lr=member.hyperparams["lr"],
                          momentum=member.hyperparams["momentum"])
    return model, opt


def step(model, opt, team):
    opt.zero_grad()
    loss = model(torch.ones(4, 8)).sum()
    loss.backward()
    for p in model.parameters():  # data-parallel inside the team
        p.grad = kt.allreduce(p.grad, name="grad", process_set=team.process_set)
    opt.step()


def train_pair(member, team):
    model, opt = make(member)
    for s in range(1, 7):
        step(model, opt, team)
        if member.due(s):
            before_hp = dict(member.hyperparams)
            winner_weights = [p.detach().clone() for p in model.parameters()]
            copied = member.exploit(score=member.index, model=model, optimizer=opt, step=s)
            assert copied == (member.index == 0), (member.index, copied)
            if member.index == 1:  # the winner is unchanged
                assert member.hyperparams == before_hp
                for p, w in zip(model.parameters(), winner_weights):
                    assert torch.equal(p, w)
            # The loser now holds the winner's weights and momentum: both
            # members' ranks compare theirs through one allgather.
            flat = torch.cat([p.detach().flatten() for p in model.parameters()] +
                             [v["momentum_buffer"].flatten()
                              for v in opt.state_dict()["state"].values()])
            every = kt.allgather(flat[None, :], name="check")
            assert torch.equal(every[0], every[-1]), "weights or momentum differ after copy"
            assert opt.param_groups[0]["lr"] == member.hyperparams["lr"]
    return float(member.index)


pbt = hpo.PBT(population=2, interval_steps=2, hyperparams=SPACE, seed=5,
              lineage_path=os.path.join(DIR, "pair.json"))
lineage = pbt.run(train_pair)
assert [m["member"] for m in lineage] == [0, 1]
zero, one = lineage
assert [h["parent"] for h in zero["history"]] == [1, 1, 1], zero["history"]
assert [h["parent"] for h in one["history"]] == [None, None, None], one["history"]
assert zero["ranks"] == [0, 1] and one["ranks"] == [2, 3]
for h, w in zip(zero["history"], one["history"]):
    for name, spec in SPACE.items():
        v = h["hyperparams"][name]
        if isinstance(spec, list):
            assert v in spec
        else:
            assert spec[0] <= v <= spec[1], (name, v)
    lr0, lr1 = h["hyperparams"]["lr"], w["hyperparams"]["lr"]
    # perturbed (x0.8 or x1.2, clipped) or resampled from the range
    assert lr0 in (min(0.5, lr1 * 0.8), min(0.5, lr1 * 1.2)) or 0.01 <= lr0 <= 0.5
    assert h["seconds"] >= 0


def train_four(member, team):
    model, opt = make(member)
    for s in range(1, 5):
        step(model, opt, team)
        if member.due(s):
            # Scores: member 2 best, member 3 worst.
            member.exploit(score={0: 1.0, 1: 2.0, 2: 9.0, 3: -1.0}[member.index],
                           model=model, optimizer=opt, step=s)
    return 0.0


pbt = hpo.PBT(population=4, interval_steps=2, quantile=0.25, hyperparams=SPACE,
              lineage_path=os.path.join(DIR, "four.json"))
lineage = pbt.run(train_four)
parents = {m["member"]: [h["parent"] for h in m["history"]] for m in lineage}
assert parents == {0: [None, None], 1: [None, None], 2: [None, None], 3: [2, 2]}, parents
if ME == 0:
    with open(os.path.join(DIR, "four.json")) as f:
        saved = json.load(f)
    assert [m["member"] for m in saved["members"]] == [0, 1, 2, 3]
    assert saved["members"][3]["history"][0]["parent"] == 2
    print("hpo_pbt: ok", flush=True)
