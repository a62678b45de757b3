"""Population-based training (Jaderberg et al. 2017) with teams of ranks.

``PBT(population=P, interval_steps=I, quantile=0.25, perturb=(0.8, 1.2),
resample_probability=0.25, hyperparams={...})`` under ``kolorun -np N``:
the N ranks form P teams of N/P ranks (kolo process sets); each team
trains one member of the population, data-parallel. ``run(train)`` calls
``train(member, team)`` on every rank; the training loop calls
``member.exploit(score, model, optimizer)`` every I steps (``member.due``).

The exploit step (synchronous: every team calls it at the same interval):
1. every rank contributes its team's score (the leader's) to one
   allgather over the whole job, so every rank ranks the members alike;
2. the bottom ``quantile`` of the members (at least one when P >= 2)
   each pick a member of the top quantile (a random generator seeded with
   ``seed`` and the interval, the same on every rank);
3. each such pair of teams copies the winner's weights
   (``broadcast_parameters`` of ``model.state_dict()``) and optimizer state
   (``broadcast_optimizer_state``) to the loser, in memory, over a process
   set holding both teams (one per pair of teams, made in ``run``); every
   rank does its pairs in the same order, so transfers of disjoint pairs
   run at once and none waits on another in a cycle;
4. the loser explores: with probability ``resample_probability`` each
   hyper-parameter is drawn again from its range, else a number is
   multiplied by a factor drawn from ``perturb`` (clipped to its range;
   integers rounded) and a choice moves to a neighbouring choice.
Hyper-parameters that name a key of the optimizer's param groups (``lr``,
``momentum``, ``weight_decay``, ...) are written into them; the others the
training loop reads from ``member.hyperparams``.

``hyperparams`` maps names to ranges: ``(low, high)`` (uniform float),
``(low, high, "log")``, ``(low, high, "int")``, ``(low, high, "intlog")``,
or a list of choices.

Lineage: ``member.history`` (and, after ``run``, ``PBT.lineage`` on every
rank, written as JSON to ``lineage_path`` by rank 0) lists, per member,
every interval's ``{"step", "score", "hyperparams", "parent", "seconds",
"time"}``: ``parent`` is the member copied at that step (None: none),
``seconds`` the time the copy took, ``time`` the seconds since ``run``
began. A rank that dies ends a PBT run (the exploit step is a
collective of the whole job); resume is for ``Study``.
"""

import json
import math
import random
import time

import kolo
from kolo import basics
from kolo.hpo import channel
from kolo.hpo.study import split_teams
from kolo.hpo.trial import Team
from kolo.process_sets import global_process_set


def check_space(hyperparams):
    """ValueError naming the first bad range of ``hyperparams``."""
    if not isinstance(hyperparams, dict) or not hyperparams:
        raise ValueError("hyperparams: expected a non-empty dict of name -> range, got %r"
                         % (hyperparams,))
    for name, spec in hyperparams.items():
        if isinstance(spec, list):
            if not spec:
                raise ValueError("hyperparams[%r]: an empty list of choices" % name)
            continue
        ok = isinstance(spec, tuple) and len(spec) in (2, 3) and \
            all(isinstance(v, (int, float)) for v in spec[:2]) and spec[0] <= spec[1] and \
            (len(spec) == 2 or spec[2] in ("log", "int", "intlog"))
        if ok and "log" in str(spec[2:]) and spec[0] <= 0:
            ok = False
        if not ok:
            raise ValueError("hyperparams[%r]=%r: expected (low, high), (low, high, 'log'), "
                             "(low, high, 'int'), (low, high, 'intlog') with low <= high "
                             "(> 0 for log), or a list of choices" % (name, spec))


def sample(spec, rng):
    """A value drawn from ``spec``'s range."""
    if isinstance(spec, list):
        return rng.choice(spec)
    low, high = spec[0], spec[1]
    kind = spec[2] if len(spec) == 3 else ""
    if "log" in kind:
        value = math.exp(rng.uniform(math.log(low), math.log(high)))
    else:
        value = rng.uniform(low, high)
    return int(round(value)) if "int" in kind else value


def perturb_value(value, spec, factors, rng):
    """``value`` moved by one exploration step inside ``spec``'s range."""
    if isinstance(spec, list):
        i = spec.index(value) if value in spec else 0
        return spec[min(len(spec) - 1, max(0, i + rng.choice((-1, 1))))]
    low, high = spec[0], spec[1]
    moved = min(high, max(low, value * rng.choice(factors)))
    return int(round(moved)) if len(spec) == 3 and "int" in spec[2] else moved


def exploit_plan(scores, quantile, direction, seed, interval):
    """[(loser, winner)]: each member of the bottom ``quantile`` of
    ``scores`` ({member: score}; NaN ranks last) paired with a member of
    the top quantile, drawn by a generator seeded with ``seed`` and
    ``interval``. At least one pair when there are two members or more."""
    worst = -math.inf if direction == "maximize" else math.inf
    key = {i: (worst if math.isnan(v) else v) for i, v in scores.items()}
    order = sorted(key, key=lambda i: (key[i], -i), reverse=(direction == "maximize"))
    n = len(order)
    if n < 2:
        return []
    k = max(1, int(n * quantile))
    top, bottom = order[:k], order[n - k:]
    rng = random.Random("%s/exploit/%d" % (seed, interval))
    return [(loser, rng.choice(top)) for loser in bottom if loser not in top]


def explore(base, space, factors, resample_probability, seed, interval, index):
    """New hyper-parameters from ``base`` (the winner's): each resampled
    with probability ``resample_probability``, else perturbed."""
    rng = random.Random("%s/explore/%d/%d" % (seed, interval, index))
    out = {}
    for name, spec in sorted(space.items()):
        if rng.random() < resample_probability:
            out[name] = sample(spec, rng)
        else:
            out[name] = perturb_value(base[name], spec, factors, rng)
    return out


class Member:
    """One member of the population, as seen by the ranks of its team."""

    def __init__(self, pbt, index, team, hyperparams):
        self.pbt = pbt
        self.index = index
        self.team = team
        self.hyperparams = dict(hyperparams)
        self.history = []
        self.interval = 0

    def due(self, step):
        """Whether ``step`` (counted from 1) ends an interval."""
        return step > 0 and step % self.pbt.interval_steps == 0

    def exploit(self, score, model, optimizer, step=None):
        """The exploit-and-explore step (module docstring). Collective over
        the whole job. Returns True when this member copied another."""
        return self.pbt._exploit(self, score, model, optimizer, step)


class PBT:
    """Population-based training over teams of ranks (module docstring)."""

    def __init__(self, population, interval_steps, quantile=0.25, perturb=(0.8, 1.2),
                 resample_probability=0.25, hyperparams=None, direction="maximize",
                 seed=0, lineage_path=None):
        if not kolo.is_initialized():
            basics.init()
        if isinstance(population, bool) or not isinstance(population, int) or population < 1:
            raise ValueError("population=%r: expected an integer >= 1" % (population,))
        if kolo.size() % population:
            raise ValueError("population=%d does not divide the job's %d ranks: each member "
                             "is trained by a team of N/population ranks"
                             % (population, kolo.size()))
        if not isinstance(interval_steps, int) or interval_steps < 1:
            raise ValueError("interval_steps=%r: expected an integer >= 1" % (interval_steps,))
        if not 0 < quantile <= 0.5:
            raise ValueError("quantile=%r: expected 0 < quantile <= 0.5" % (quantile,))
        if not 0 <= resample_probability <= 1:
            raise ValueError("resample_probability=%r: expected a probability"
                             % (resample_probability,))
        if direction not in ("maximize", "minimize"):
            raise ValueError("direction=%r: expected 'maximize' or 'minimize'" % (direction,))
        check_space(hyperparams)
        self.population = population
        self.interval_steps = interval_steps
        self.quantile = quantile
        self.perturb = tuple(perturb)
        self.resample_probability = resample_probability
        self.hyperparams = dict(hyperparams)
        self.direction = direction
        self.seed = seed
        self.lineage_path = lineage_path
        self.team_ranks = split_teams(kolo.size(), kolo.size() // population)
        self.lineage = None
        self.exploit_seconds = []  # per exploit step, on this rank

    def _initial(self, index):
        rng = random.Random("%s/init/%d" % (self.seed, index))
        return {n: sample(s, rng) for n, s in sorted(self.hyperparams.items())}

    def run(self, train):
        """Runs ``train(member, team)`` on every rank; returns the lineage
        (list per member of its history) on every rank."""
        me = kolo.rank()
        sets = [channel.process_set(r) for r in self.team_ranks]
        self._pairs = {}
        for i in range(self.population):
            for j in range(i + 1, self.population):
                self._pairs[(i, j)] = channel.process_set(self.team_ranks[i] +
                                                          self.team_ranks[j])
        index = next(i for i, r in enumerate(self.team_ranks) if me in r)
        ranks = self.team_ranks[index]
        team = Team(index, sets[index], ranks, ranks.index(me))
        member = Member(self, index, team, self._initial(index))
        self._t0 = time.time()
        final = train(member, team)
        self.lineage = self._gather_lineage(member, final)
        if me == 0 and self.lineage_path:
            with open(self.lineage_path, "w") as f:
                json.dump({"direction": self.direction, "interval_steps": self.interval_steps,
                           "members": self.lineage}, f, indent=1)
        return self.lineage

    # ---- the exploit step --------------------------------------------------

    def _gather(self, member, score):
        """{member: (score, hyperparams)} from every team's leader, on every
        rank (one allgather over the job)."""
        mine = (member.index, float(score), member.hyperparams)
        every = channel.allgather_object(mine, global_process_set, "kolo.hpo.pbt.scores")
        out = {}
        for index, value, hp in every:
            out.setdefault(index, (value, hp))  # the leader's comes first
        return out

    def plan(self, scores, interval):
        """[(loser, winner)] for one exploit step: the same on every rank."""
        return exploit_plan(scores, self.quantile, self.direction, self.seed, interval)

    def _exploit(self, member, score, model, optimizer, step):
        import kolo.torch as kt  # the weights are torch tensors
        member.interval += 1
        gathered = self._gather(member, score)
        plan = self.plan({i: v[0] for i, v in gathered.items()}, member.interval)
        parent = None
        t0 = time.perf_counter()
        for loser, winner in plan:
            if member.index not in (loser, winner):
                continue
            pair = self._pairs[(min(loser, winner), max(loser, winner))]
            root = self.team_ranks[winner][0]
            kt.broadcast_parameters(model.state_dict(), root_rank=root, process_set=pair)
            if optimizer is not None:
                kt.broadcast_optimizer_state(optimizer, root_rank=root, process_set=pair)
            if member.index == loser:
                parent = winner
        seconds = time.perf_counter() - t0
        if parent is not None:
            member.hyperparams = self._explore(gathered[parent][1], member.interval,
                                               member.index)
        self.exploit_seconds.append(seconds)
        member.history.append({
            "step": step if step is not None else member.interval * self.interval_steps,
            "score": float(score), "hyperparams": dict(member.hyperparams),
            "parent": parent, "seconds": seconds, "time": time.time() - self._t0})
        if optimizer is not None:
            for group in optimizer.param_groups:
                for name, value in member.hyperparams.items():
                    if name in group:
                        group[name] = value
        return parent is not None

    def _explore(self, base, interval, index):
        return explore(base, self.hyperparams, self.perturb, self.resample_probability,
                       self.seed, interval, index)

    def _gather_lineage(self, member, final):
        mine = {"member": member.index, "ranks": member.team.ranks,
                "history": member.history, "final_score": final,
                "hyperparams": member.hyperparams}
        every = channel.allgather_object(mine, global_process_set, "kolo.hpo.pbt.lineage")
        by_member = {}
        for m in every:
            by_member.setdefault(m["member"], m)
        return [by_member[i] for i in sorted(by_member)]
