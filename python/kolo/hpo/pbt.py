"""Population-based training (Jaderberg et al. 2017) with teams of ranks.

``PBT(population=P, interval_steps=I, quantile=0.25, perturb=(0.8, 1.2),
resample_probability=0.25, hyperparams={...})`` under ``kolorun -np N``:
the N ranks form P teams of N/P ranks (kolo process sets); each team
trains one member of the population, data-parallel. ``run(train)`` calls
``train(member, team)`` on every rank; the training loop calls
``member.exploit(score, model, optimizer)`` every I steps (``member.due``).

The exploit step (synchronous: every team calls it at the same interval):
1. each team's leader sends its score and hyper-parameters to rank 0
   (population.py, over the leader's link as a Study's requests go);
   once every member still alive has, rank 0 replies to each leader with
   all of them and the plan, which the leader broadcasts to its team;
2. the plan: the bottom ``quantile`` of the members (at least one when
   P >= 2) each pick a member of the top quantile (a random generator
   seeded with ``seed`` and the interval);
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
began.

Faults. ``run`` declares the study to kolorun (declaration.py), so a rank
that dies (other than rank 0) does not end the job; instead its member
fails and the population goes on with the others:
- its team's other ranks get kolo.PeerLostError from their next team
  collective; ``run`` catches it, tells rank 0, and they take no further
  part (``train`` is not called again);
- rank 0 sees the rank's link break, or hears from the team, and plans
  the later exploit steps over the members left;
- a copy whose other team loses a rank mid-transfer fails on the loser's
  ranks within KOLO_TIMEOUT; the loser's ranks agree (one allgather in
  their team) and all put back the weights and optimizer state they had
  before the copy (kept for that), record the failed copy
  (``copy_error``) and go on with their own hyper-parameters; the winner's
  ranks go on as they were;
- the lineage marks the member ``failed`` (why, naming the rank) with
  ``lost_ranks``; its history is the one its surviving ranks kept, or the
  steps rank 0 saw when none survived.
Rank 0's loss ends the job. A ``train`` that raises anything else ends
the run (and the job) as before.
"""

import copy
import json
import math
import random
import time

import kolo
from kolo import basics
from kolo.hpo import channel
from kolo.hpo import declaration
from kolo.hpo.population import PopulationOwner
from kolo.hpo.service import Client, LocalClient, OwnerService
from kolo.hpo.study import split_teams
from kolo.hpo.trial import Team

_LOST = (kolo.PeerLostError, kolo.KoloTimeoutError)


def _log(line):
    print(line, flush=True)


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
        """The exploit-and-explore step (module docstring). Every rank of
        every member still alive calls it at the same steps (rank 0 waits
        for their scores). Returns True when this member copied another.
        Raises kolo.PeerLostError when this member has failed (``run``
        catches it)."""
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
        (list per member of its history) on every rank. Meanwhile the rank
        has declared the study to kolorun (declaration.py)."""
        with declaration.declared():
            return self._run(train)

    def _run(self, train):
        me = kolo.rank()
        sets = [channel.process_set(r) for r in self.team_ranks]
        self._pairs = {}
        for i in range(self.population):
            for j in range(i + 1, self.population):
                self._pairs[(i, j)] = channel.process_set(self.team_ranks[i] +
                                                          self.team_ranks[j])
        links = {}
        for r in range(1, kolo.size()):
            ps = channel.process_set([0, r])
            if me in (0, r):
                links[r] = channel.Link(ps, r if me == 0 else 0, me == 0)
        service = None
        if me == 0:
            owner = PopulationOwner(self.team_ranks, self.plan, self._explore, _log)
            self._client = LocalClient(owner)
            service = OwnerService(owner, links)
            service.start()
        else:
            self._client = Client(links[me])
        index = next(i for i, r in enumerate(self.team_ranks) if me in r)
        ranks = self.team_ranks[index]
        team = Team(index, sets[index], ranks, ranks.index(me))
        member = Member(self, index, team, self._initial(index))
        self._t0 = time.time()
        try:
            final = train(member, team)
        except _LOST as e:
            final = None
            self._client.call(("failed", index, "rank %d: %s: %s"
                               % (me, type(e).__name__, e)))
        record = {"member": index, "ranks": ranks, "history": member.history,
                  "final_score": final, "hyperparams": member.hyperparams}
        self.lineage = self._client.call(("bye", record))
        if service is not None:
            service.join()
            if service.error is not None:
                raise service.error
        else:
            self._client.join()
        if me == 0 and self.lineage_path:
            with open(self.lineage_path, "w") as f:
                json.dump({"direction": self.direction, "interval_steps": self.interval_steps,
                           "members": self.lineage}, f, indent=1)
        return self.lineage

    # ---- the exploit step --------------------------------------------------

    def _scores(self, member, score, step):
        """Rank 0's reply for this interval (population.py), on every rank
        of the team: the live members' scores and the plan. Raises
        kolo.PeerLostError when the member has failed."""
        team = member.team
        reply = None
        if team.rank == 0:
            try:
                reply = ("ok", self._client.call(
                    ("scores", member.interval, member.index, float(score),
                     dict(member.hyperparams), step)))
            except Exception as e:  # the same error on every rank of the team
                reply = ("err", e)
        reply = team.broadcast_object(reply, "pbt.plan")
        if reply[0] == "err":
            raise reply[1]
        if isinstance(reply[1], tuple):  # ("failed", why)
            raise kolo.PeerLostError("kolo.hpo: PBT member %d has failed: %s"
                                     % (member.index, reply[1][1]))
        return reply[1]

    def plan(self, scores, interval):
        """[(loser, winner)] for one exploit step: the same on every rank."""
        return exploit_plan(scores, self.quantile, self.direction, self.seed, interval)

    def _exploit(self, member, score, model, optimizer, step):
        member.interval += 1
        if step is None:
            step = member.interval * self.interval_steps
        got = self._scores(member, score, step)
        parent, copy_error = None, None
        t0 = time.perf_counter()
        for loser, winner in got["plan"]:
            if member.index not in (loser, winner):
                continue
            pair = self._pairs[(min(loser, winner), max(loser, winner))]
            root = self.team_ranks[winner][0]
            if member.index == loser:
                copy_error = self._copy_from(winner, model, optimizer, root, pair,
                                             member.team)
                if copy_error is None:
                    parent = winner
            else:
                try:
                    _copy(model, optimizer, root, pair)
                except _LOST:
                    pass  # the loser's team lost a rank: its member fails, not ours
        seconds = time.perf_counter() - t0
        if parent is not None:
            member.hyperparams = self._explore(got["scores"][parent][1], member.interval,
                                               member.index)
        self.exploit_seconds.append(seconds)
        entry = {"step": step, "score": float(score),
                 "hyperparams": dict(member.hyperparams), "parent": parent,
                 "seconds": seconds, "time": time.time() - self._t0}
        if copy_error is not None:
            entry["copy_error"] = copy_error
        member.history.append(entry)
        if optimizer is not None:
            for group in optimizer.param_groups:
                for name, value in member.hyperparams.items():
                    if name in group:
                        group[name] = value
        return parent is not None

    def _copy_from(self, winner, model, optimizer, root, pair, team):
        """The loser's side of a copy: None when every rank of the team
        got the winner's state, else why not (each then holds its own
        state again). Raises kolo.PeerLostError when the loser's own team
        has lost a rank (the member fails)."""
        weights = {k: v.detach().clone() for k, v in model.state_dict().items()}
        state = copy.deepcopy(optimizer.state_dict()) if optimizer is not None else None
        error = None
        try:
            _copy(model, optimizer, root, pair)
        except _LOST as e:
            error = "copy from member %d failed on rank %d: %s" % (winner, kolo.rank(), e)
        errors = [error]
        if team.size > 1:
            errors = channel.allgather_object(error, team.process_set,
                                              "kolo.hpo.pbt.copied")
        errors = [e for e in errors if e is not None]
        if not errors:
            return None
        model.load_state_dict(weights)
        if optimizer is not None:
            optimizer.load_state_dict(state)
        return errors[0]

    def _explore(self, base, interval, index):
        return explore(base, self.hyperparams, self.perturb, self.resample_probability,
                       self.seed, interval, index)


def _copy(model, optimizer, root, pair):
    """The winner's weights and optimizer state over ``pair``, from ``root``."""
    import kolo.torch as kt  # the weights are torch tensors
    kt.broadcast_parameters(model.state_dict(), root_rank=root, process_set=pair)
    if optimizer is not None:
        kt.broadcast_optimizer_state(optimizer, root_rank=root, process_set=pair)
