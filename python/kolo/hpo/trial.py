"""What an objective sees on each rank: the team and an Optuna-style trial.

``Team``: the ranks that run one trial together, data-parallel.
``process_set`` is a kolo process set (pass it to kolo.torch's
collectives, DistributedOptimizer, broadcast_parameters); ``rank`` and
``size`` are this rank's place in it; ``index`` names the team; ``ranks``
are its global ranks; ``leader`` is its first rank, the one that talks to
the study's owner.

``TeamTrial``: the subset of ``optuna.trial.Trial`` an objective uses.
Every suggestion is made once, by the owner's sampler, for the leader; the
leader broadcasts it to the team, so every rank of the team gets the same
value (and the same error, a bad range say). ``report`` sends the leader's
value (report a value averaged over the team); ``should_prune`` is the
owner's answer, the same on every rank. Every rank of the team must make
the same calls in the same order, as with any kolo collective.
"""

from kolo.hpo import channel


class Team:
    """A team of ranks (see the module docstring)."""

    def __init__(self, index, process_set, ranks, rank):
        self.index = index
        self.process_set = process_set
        self.ranks = list(ranks)
        self.rank = rank
        self.size = len(self.ranks)
        self.leader = self.ranks[0]

    def broadcast_object(self, obj, name):
        """The leader's ``obj`` on every rank of the team."""
        if self.size == 1:
            return obj
        return channel.broadcast_object(obj, self.rank == 0, self.process_set,
                                        "kolo.hpo.team.%s" % name)

    def __repr__(self):
        return "Team(index=%d, ranks=%s, rank=%d)" % (self.index, self.ranks, self.rank)


class TeamTrial:
    """An Optuna-style trial shared by a team (see the module docstring)."""

    def __init__(self, number, team, client):
        self.number = number
        self.team = team
        self._client = client
        self.params = {}
        self.user_attrs = {}

    def _leader_call(self, request, name):
        """The owner's reply to the leader's ``request``, on every rank."""
        reply = None
        if self.team.rank == 0:
            try:
                reply = ("ok", self._client.call(request))
            except Exception as e:  # the same error on every rank
                reply = ("err", e)
        reply = self.team.broadcast_object(reply, name)
        if reply[0] == "err":
            raise reply[1]
        return reply[1]

    def _suggest(self, kind, name, *args, **kwargs):
        value = self._leader_call(("suggest", self.number, kind, name, args, kwargs),
                                  "suggest")
        self.params[name] = value
        return value

    def suggest_float(self, name, low, high, *, step=None, log=False):
        return self._suggest("float", name, low, high, step=step, log=log)

    def suggest_int(self, name, low, high, step=1, log=False):
        return self._suggest("int", name, low, high, step=step, log=log)

    def suggest_categorical(self, name, choices):
        return self._suggest("categorical", name, list(choices))

    def report(self, value, step):
        """Records an intermediate value (the leader's) at ``step``."""
        if self.team.rank == 0:
            self._client.call(("report", self.number, float(value), int(step)))

    def should_prune(self):
        """The pruner's verdict on the values reported so far."""
        return bool(self._leader_call(("prune?", self.number), "prune"))

    def set_user_attr(self, key, value):
        self.user_attrs[key] = value
        if self.team.rank == 0:
            self._client.call(("attr", self.number, key, value))
