"""kolo.hpo.PBT with a team's rank SIGKILLed while it trains, under plain
kolorun (hpo_study.sh runs it and checks kolorun's exit and lines):

    kolorun -np 4 python3 hpo_pbt_team_fault.py

Population 2, teams of two ranks ([0, 1] and [2, 3]); member 1 scores
higher, so at the first exploit step (step 2) member 0 copies it. At step
3 rank 3 dies (SIGKILL) before its team's gradient allreduce: rank 2 gets
kolo.PeerLostError there, PBT.run catches it and reports member 1 failed;
member 0 trains on alone (later steps have no pair to copy), and every
survivor gets the lineage: member 1 failed naming rank 3, with the
history rank 2 kept. Exit 0 on every survivor (kolorun's is 0).
"""

import os
import signal

import torch

import kolo.hpo as hpo
import kolo.torch as kt

kt.init()
ME = kt.rank()


def train(member, team):
    torch.manual_seed(0)
    model = torch.nn.Linear(8, 2)
    opt = torch.optim.SGD(model.parameters(), lr=member.hyperparams["lr"], momentum=0.9)
    for s in range(1, 7):
        if s == 3 and ME == 3:
            os.kill(os.getpid(), signal.SIGKILL)
        opt.zero_grad()
        model(torch.ones(4, 8)).sum().backward()
        for p in model.parameters():  # data-parallel inside the team
            p.grad = kt.allreduce(p.grad, name="grad", process_set=team.process_set)
        opt.step()
        if member.due(s):
            member.exploit(float(member.index), model, opt, step=s)
    return float(member.index)


pbt = hpo.PBT(population=2, interval_steps=2, hyperparams={"lr": (0.01, 0.5, "log")})
lineage = pbt.run(train)
zero, one = lineage
assert zero["failed"] is None and zero["final_score"] == 0.0, zero
assert [h["parent"] for h in zero["history"]] == [1, None, None], zero["history"]
assert one["failed"] and "rank 3 was lost" in one["failed"], one
assert one["lost_ranks"] == [3] and one["final_score"] is None, one
assert one["ranks"] == [2, 3] and [h["step"] for h in one["history"]] == [2], one
assert one["history"][0]["seconds"] is not None, one  # rank 2's own record
print("hpo_pbt_team_fault: ok (rank %d)" % ME, flush=True)
