"""Run under kolorun --servers 1 -np 4 (3 workers, the server is rank 3):
worker 2 kills itself with SIGKILL at step 5 of 40. MODE (argv[1]) is
downpour, easgd, sync-backup (sync with backup_workers=1) or sync.
In the first three the servers go on without it and workers 0 and 1 print
"worker W: finished 40 steps"; in plain sync their step fails with
kolo.PeerLostError naming the dead worker, printed as "worker W: step S
failed: ..." before the error ends the process. ps_worker_death.sh checks
what kolorun makes of it."""
import os
import signal
import sys
import time

import torch
import kolo
import kolo.torch as hvd
import kolo.torch.ps as ps

MODES = {
    "downpour": dict(mode="downpour", staleness_bound=100),
    "easgd": dict(mode="easgd", easgd_period=2),
    "sync-backup": dict(mode="sync", backup_workers=1),
    "sync": dict(mode="sync"),
}
VICTIM, KILL_AT, STEPS = 2, 5, 40

hvd.init()
me = hvd.rank()
assert hvd.size() == 3, hvd.size()
torch.manual_seed(1)
model = torch.nn.Linear(4, 1)
target = torch.tensor([[1.0, -2.0, 0.5, 3.0]])
opt = ps.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=0.01),
                              named_parameters=model.named_parameters(),
                              **MODES[sys.argv[1]])
for step in range(STEPS):
    if me == VICTIM and step == KILL_AT:
        print("worker %d: killing itself at step %d" % (me, step), flush=True)
        os.kill(os.getpid(), signal.SIGKILL)
    g = torch.Generator().manual_seed(100 * me + step)
    x = torch.randn(8, 4, generator=g)
    opt.zero_grad()
    torch.nn.functional.mse_loss(model(x), x @ target.t()).backward()
    try:
        opt.step()
    except kolo.PeerLostError as e:
        print("worker %d: step %d failed: %s" % (me, step, e), flush=True)
        raise
    time.sleep(0.05)  # the others still train well after the death
print("worker %d: finished %d steps" % (me, STEPS), flush=True)
hvd.shutdown()
