"""kolo.hpo.PBT with a rank SIGKILLed mid-run, under plain kolorun
(hpo_study.sh runs it and checks kolorun's exit and lines):

    kolorun -np 4 python3 hpo_pbt_fault.py DIR

Population 4, teams of one rank; fixed scores make member 2 the worst and
member 3 the best, so at the first exploit step member 2 copies member 3.
Rank 3 dies (SIGKILL) in that copy, after its weights went to rank 2 and
before its momentum: rank 2 waits for the momentum and must neither hang
nor keep half a copy (it puts its own weights back and records the failed
copy), member 3 must be
marked failed naming rank 3, and the population goes on: at the next
steps member 2 copies member 1, the best left.
After the run rank 0 checks the lineage and the weights (through files in
DIR), prints "hpo_pbt_fault: ok", and rank 1 then exits 3: outside the run
its failure must end the job as any rank's (kolorun exits 3).
"""

import os
import signal
import sys
import time

import torch

import kolo.hpo as hpo
import kolo.torch as kt

DIR = sys.argv[1]
kt.init()
ME = kt.rank()
SPACE = {"lr": (0.01, 0.5, "log"), "momentum": (0.5, 0.95)}
SCORES = {0: 1.0, 1: 2.0, 2: -1.0, 3: 9.0}


def path(name):
    return os.path.join(DIR, name)


def state(model, opt):
    return {"weights": [p.detach().clone() for p in model.parameters()],
            "momentum": [v["momentum_buffer"].clone()
                         for v in opt.state_dict()["state"].values()]}


if ME == 3:  # dies once its weights went to member 2, before its momentum
    kt.broadcast_optimizer_state = lambda *args, **kwargs: os.kill(os.getpid(),
                                                                   signal.SIGKILL)


def train(member, team):
    torch.manual_seed(0)
    model = torch.nn.Linear(8, 2)
    with torch.no_grad():
        for p in model.parameters():
            p.fill_(float(member.index))
    opt = torch.optim.SGD(model.parameters(), lr=member.hyperparams["lr"],
                          momentum=member.hyperparams["momentum"])
    for s in range(1, 7):
        opt.zero_grad()
        model(torch.ones(4, 8)).sum().backward()
        opt.step()
        if member.due(s):
            torch.save(state(model, opt), path("before-%d-%d.pt" % (ME, s)))
            member.exploit(SCORES[member.index], model, opt, step=s)
            torch.save(state(model, opt), path("after-%d-%d.pt" % (ME, s)))
    return SCORES[member.index]


pbt = hpo.PBT(population=4, interval_steps=2, quantile=0.25, hyperparams=SPACE, seed=1,
              lineage_path=path("lineage.json"))
t0 = time.time()
lineage = pbt.run(train)
assert [m["member"] for m in lineage] == [0, 1, 2, 3], lineage
three = lineage[3]
assert three["failed"] and "rank 3 was lost" in three["failed"], three
assert three["lost_ranks"] == [3] and three["final_score"] is None, three
assert [m["failed"] for m in lineage[:3]] == [None, None, None], lineage
assert [m["final_score"] for m in lineage[:3]] == [1.0, 2.0, -1.0], lineage
two = lineage[2]["history"]
assert [h["parent"] for h in two] == [None, 1, 1], two
assert "copy from member 3 failed on rank 2" in two[0]["copy_error"], two[0]
assert [h["parent"] for h in lineage[0]["history"]] == [None, None, None]
# What rank 0 saw of member 3 before it was lost: its first score.
assert [h["score"] for h in three["history"]] == [9.0], three

if ME == 0:
    def load(name):
        return torch.load(path(name))

    def same(a, b):
        return all(torch.equal(x, y) for k in ("weights", "momentum")
                   for x, y in zip(a[k], b[k]))
    # The failed copy left member 2 as it was; the next ones gave it
    # member 1's weights and momentum.
    assert same(load("before-2-2.pt"), load("after-2-2.pt")), "half a copy kept"
    for s in (4, 6):
        assert same(load("after-2-%d.pt" % s), load("before-1-%d.pt" % s)), s
        assert not same(load("before-2-%d.pt" % s), load("after-2-%d.pt" % s)), s
    print("hpo_pbt_fault: ok (the run took %.1f s)" % (time.time() - t0), flush=True)
    open(path("checked"), "w").close()
elif ME == 1:
    for _ in range(600):
        if os.path.exists(path("checked")):
            break
        time.sleep(0.1)
    sys.exit(3)  # outside the run: this ends the job
