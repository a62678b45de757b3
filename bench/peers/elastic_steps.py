"""An elastic training job for bench/vs_horovod.sh, written once against
Horovod's elastic API and run by either library:

    horovodrun --min-np 2 -np 4 ... python elastic_steps.py --lib horovod
    kolorun    --min-np 2 -np 4 ... python elastic_steps.py --lib kolo

Each rank trains a small MLP (--width hidden units) on synthetic data under
`hvd.elastic.run`, committing the state every step. Rank 1 of a world of
--world ranks SIGKILLs itself at step --at (once: it leaves
--marker behind) and prints the time;
every process prints the time of each step it completes afterwards:

    victim kills itself at <unix time>
    step <n> done by pid <pid> (rank r of s) at <unix time>

Recovery, as bench/vs_horovod.sh computes it: the latest of the survivors'
first step completions after the kill, minus the kill's time (one machine,
one clock).
"""

import argparse
import os
import signal
import time

import torch

p = argparse.ArgumentParser()
p.add_argument("--lib", choices=("horovod", "kolo"), required=True)
p.add_argument("--world", type=int, default=4)
p.add_argument("--at", type=int, default=5)
p.add_argument("--steps", type=int, default=30)
p.add_argument("--width", type=int, default=256)
p.add_argument("--marker", required=True,
               help="a file the victim creates before it dies: only one kill per job")
args = p.parse_args()
if args.lib == "horovod":
    import horovod.torch as hvd
else:
    import kolo.torch as hvd

torch.set_num_threads(1)
hvd.init()
torch.manual_seed(0)
data = torch.randn(256, 32)
labels = (data.sum(1) > 0).long()
model = torch.nn.Sequential(torch.nn.Linear(32, args.width), torch.nn.ReLU(),
                            torch.nn.Linear(args.width, 2))
opt = hvd.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=0.01),
                               named_parameters=model.named_parameters())
state = hvd.elastic.TorchState(model=model, optimizer=opt, step=0)


@hvd.elastic.run
def train(state):
    while state.step < args.steps:
        if (hvd.size() == args.world and hvd.rank() == 1 and state.step == args.at
                and not os.path.exists(args.marker)):
            open(args.marker, "w").close()
            print("victim kills itself at %.6f" % time.time(), flush=True)
            os.kill(os.getpid(), signal.SIGKILL)
        i = (state.step * 16) % len(data)
        opt.zero_grad()
        loss = torch.nn.functional.cross_entropy(model(data[i:i + 16]), labels[i:i + 16])
        loss.backward()
        opt.step()
        state.step += 1
        state.commit()
        print("step %d done by pid %d (rank %d of %d) at %.6f" %
              (state.step, os.getpid(), hvd.rank(), hvd.size(), time.time()), flush=True)
        time.sleep(0.05)


hvd.broadcast_parameters(model.state_dict(), root_rank=0)
train(state)
print("pid %d finished at step %d" % (os.getpid(), state.step), flush=True)
