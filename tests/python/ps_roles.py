"""Run under kolorun --servers 1 -np 3: the workers see a world of 2 and
allreduce among themselves; the server rank never returns from init()."""
import torch
import kolo.torch as hvd

hvd.init()
assert hvd.size() == 2, hvd.size()
t = torch.tensor([float(hvd.rank() + 1)])
s = hvd.allreduce(t, op=hvd.Sum)
assert s.item() == 3.0, s
print("worker %d of %d: sum %g" % (hvd.rank(), hvd.size(), s.item()), flush=True)
hvd.shutdown()
