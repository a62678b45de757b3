"""kolo.torch.zero: data parallelism with the training state sharded across
the ranks (ZeRO's stages 1, 2 and 3). See docs/zero.md.

    import kolo.torch as hvd
    from kolo.torch import zero
    hvd.init()
    hvd.broadcast_parameters(model.state_dict(), root_rank=0)
    model = zero.wrap(model)                 # stage 3 only
    opt = zero.DistributedOptimizer(torch.optim.Adam(model.parameters()),
                                    named_parameters=model.named_parameters(),
                                    stage=3)
    ...
    zero.save("ckpt", model, opt)            # one shard per rank + index
"""

from kolo.torch.zero.optimizer import DistributedOptimizer  # noqa: F401
from kolo.torch.zero.wrap import full_parameters, wrap  # noqa: F401
from kolo.torch.zero.checkpoint import consolidate, load, save  # noqa: F401
