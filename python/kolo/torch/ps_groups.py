"""Groups of workers for kolo.torch.ps (docs/parameter_server.md, "Groups"):
the hierarchy of masters.

The workers are cut into groups (``group_size=G``: consecutive worker ranks
G at a time; ``group_size="host"``: one host's workers). Each group is a
kolo process set; its lowest worker rank is the leader, the only one that
talks to the servers after the start (every worker still sends the servers
its configuration and pulls once, so all begin from the same parameters).

- sync and downpour: the group averages its gradients (kolo's allreduce on
  the process set), the leader pushes that average and pulls as the mode
  says, then broadcasts the parameters (and its staleness) to the group. In
  sync mode with groups of unequal size the leader scales its push by
  P * n_g / W (P groups, n_g members, W workers) so the servers' mean over
  the P pushes is the mean over all W workers' gradients.
- easgd, two levels: every worker keeps a copy of its group's center c_g,
  all equal. Every easgd_period steps, each worker does d_i = alpha *
  (x_i - c_g), x_i -= d_i; the group sums the d_i (allreduce) and every
  copy does c_g += sum (synchronous EASGD inside the group); then the
  leader exchanges c_g with the global center on the servers (d = alpha *
  (c_g - c), c += d, c_g -= d) and broadcasts c_g to the group.
"""

import torch

from kolo import _native
from kolo.torch import collectives as C
from kolo.torch import differentiable as D
from kolo.torch import functions as F
from kolo.torch.process_sets import ProcessSet, add_process_set, global_process_set


def plan(group_size, workers, host_of_worker):
    """The groups, as lists of worker ranks, for ``group_size`` (an int >= 1
    or "host"); ValueError naming the values when they do not fit."""
    if group_size == "host":
        hosts = {}
        for w, h in enumerate(host_of_worker):
            hosts.setdefault(h, []).append(w)
        return list(hosts.values())
    if isinstance(group_size, bool) or not isinstance(group_size, int) or group_size < 1:
        raise ValueError("group_size=%r (expected an integer >= 1, \"host\" or None)"
                         % (group_size,))
    if workers % group_size != 0:
        raise ValueError("group_size=%d does not divide the %d workers into equal groups"
                         % (group_size, workers))
    return [list(range(g, g + group_size)) for g in range(0, workers, group_size)]


class Group:
    """This worker's group: its process set, leader and the steps above."""

    def __init__(self, group_size, options):
        workers = _native.size()
        hosts = F.allgather_object(_native.cross_rank(), name="ps.groups.hosts")
        self.groups = plan(group_size, workers, hosts)
        me = _native.rank()
        self.members = next(g for g in self.groups if me in g)
        self.leader = self.members[0]
        self.is_leader = me == self.leader
        self.set = None
        for g in self.groups:  # every worker, every group, the same order
            if len(g) == workers:
                s = global_process_set
            elif len(g) > 1:
                s = add_process_set(ProcessSet(g))
            else:
                s = None
            if me in g:
                self.set = s
        self.mode = options["mode"]
        self.alpha = options["easgd_alpha"]
        self.period = options["easgd_period"]
        self.scale = len(self.groups) * len(self.members) / float(workers)
        self.steps = 0
        self.staleness = 0
        self.stop = False  # the leader saw the servers' stop flag
        self.center = None  # easgd: c_g

    def _broadcast(self, tensors, name):
        if self.set is None:
            return
        handles = [C.broadcast_async_(t, root_rank=self.leader, process_set=self.set,
                                      name="%s.%d" % (name, i))
                   for i, t in enumerate(tensors)]
        for h in handles:
            D.synchronize(h)

    def step_push(self, params, grads, lr):
        """sync / downpour: the group's average gradient through the leader."""
        if self.set is not None:
            D.grouped_allreduce_(grads, op=C.Average, process_set=self.set,
                                 name="ps.group.grads")
        stale = torch.zeros(2, dtype=torch.float64)  # staleness, stop requested
        if self.is_leader:
            if self.mode == "sync" and self.scale != 1.0:
                for g in grads:
                    g.mul_(self.scale)
            _native.ps_step([p.data_ptr() for p in params], [g.data_ptr() for g in grads],
                            lr)
            stale[0] = _native.ps_staleness()
            stale[1] = float(_native.ps_stop_requested())
        self._broadcast([p.data for p in params] + [stale], "ps.group.params")
        self.staleness = int(stale[0])
        self.stop = self.stop or bool(stale[1])

    def start(self, params):
        """After the servers' start: every worker holds the center; easgd's
        group center starts there."""
        if self.mode == "easgd":
            self.center = [p.detach().clone() for p in params]

    def step_easgd(self, params):
        """easgd, two levels (the module's documentation)."""
        self.steps += 1
        if self.steps % self.period != 0:
            return
        diffs = []
        for p, c in zip(params, self.center):
            d = self.alpha * (p.data - c)
            p.data.sub_(d)
            diffs.append(d)
        if self.set is not None:
            D.grouped_allreduce_(diffs, op=C.Sum, process_set=self.set,
                                 name="ps.group.easgd")
        for c, d in zip(self.center, diffs):
            c.add_(d)
        stop = torch.zeros(1, dtype=torch.float64)
        if self.is_leader:
            _native.ps_exchange([c.data_ptr() for c in self.center])
            stop[0] = float(_native.ps_stop_requested())
        self._broadcast(self.center + [stop], "ps.group.center")
        self.stop = self.stop or bool(stop[0])
