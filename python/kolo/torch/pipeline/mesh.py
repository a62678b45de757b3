"""``Mesh(stages=P, replicas=R, order="stages")``: the P x R ranks of the job
as R pipeline replicas of P stages each (pipeline x data parallelism).

``order`` says which neighbours share consecutive ranks, and so a host
(kolorun fills hosts in rank order):

- ``"stages"`` (the default): rank ``r * P + s`` is stage s of replica r. A
  replica's stages are neighbours: activations stay inside a host, and each
  stage's gradients are averaged across hosts.
- ``"replicas"``: rank ``s * R + r`` is stage s of replica r. A stage's
  replicas are neighbours: the gradients are averaged inside a host, and
  only activations cross between hosts. For models whose parameters are
  large against their activations this is the placement that saves link
  traffic (docs/pipeline.md, "Speed: pipeline against data parallelism").

``pipeline_set`` holds the
stages of this rank's replica (the Pipeline's process set), ``replica_set``
the ranks that hold this rank's stage in every replica (the set in which
that stage's gradients are averaged). Construction is collective over every
rank (it adds R + P process sets, in the same order everywhere); the job's
size must be P * R.

``distributed_optimizer(optimizer, pipeline)`` wraps the stage's optimizer
in kolo's DistributedOptimizer over ``replica_set`` with
``backward_passes_per_step = pipeline.chunks``: each parameter's allreduce
starts as soon as its last micro-batch's gradient is in, overlapping the
rest of the pipeline's backward; ``pipeline.step(optimizer)`` waits for them
and applies the update.
"""

import kolo.torch as _kolo


ORDERS = ("stages", "replicas")


class Mesh:
    def __init__(self, stages, replicas, order="stages"):
        if type(stages) is not int or type(replicas) is not int or stages < 1 \
                or replicas < 1:
            raise ValueError("Mesh: stages and replicas must be positive ints, got %r "
                             "and %r" % (stages, replicas))
        if order not in ORDERS:
            raise ValueError("Mesh: order %r (expected one of %s)" % (order, ", ".join(ORDERS)))
        size = _kolo.size()
        if stages * replicas != size:
            raise ValueError("Mesh: %d stages x %d replicas = %d ranks, but the job "
                             "has %d" % (stages, replicas, stages * replicas, size))
        self.stages, self.replicas, self.order = stages, replicas, order
        if order == "stages":
            self.rank_of = lambda stage, replica: replica * stages + stage
        else:
            self.rank_of = lambda stage, replica: stage * replicas + replica
        me = _kolo.rank()
        self.stage, self.replica = next((s, r) for s in range(stages) for r in range(replicas)
                                        if self.rank_of(s, r) == me)
        self.pipeline_set = self.replica_set = None
        for r in range(replicas):
            ps = _kolo.add_process_set([self.rank_of(s, r) for s in range(stages)])
            if r == self.replica:
                self.pipeline_set = ps
        for s in range(stages):
            ps = _kolo.add_process_set([self.rank_of(s, r) for r in range(replicas)])
            if s == self.stage:
                self.replica_set = ps

    def distributed_optimizer(self, optimizer, pipeline, **kwargs):
        return _kolo.DistributedOptimizer(
            optimizer, named_parameters=pipeline.module.named_parameters(),
            backward_passes_per_step=pipeline.chunks, process_set=self.replica_set,
            **kwargs)
