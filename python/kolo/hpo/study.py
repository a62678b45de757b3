"""kolo.hpo.Study: an Optuna study whose trials run as teams of ranks.

Under ``kolorun -np N`` every rank makes the same ``Study(...)`` and calls
``optimize(objective, ...)``. The N ranks split into N/k teams of
``team_size`` k consecutive ranks (kolo process sets); each team runs one
trial at a time, ``objective(trial, team)`` on each of its ranks, until
the budget is spent.

Rank 0 owns the Optuna study (owner.py): it alone opens the storage and
calls the sampler and pruner; the other ranks reach it over two-rank
process sets (channel.py, service.py). Under kolorun a rank that dies
inside ``optimize`` fails only its team's trial: each rank declares the
study to kolorun meanwhile (declaration.py), so kolorun goes on without
it (docs/hpo.md).

Errors: bad arguments raise ValueError on every rank (unknown sampler or
pruner, a team size that does not divide N, a storage that cannot be
opened or written, a study that exists without ``resume=True``).
"""

import time

import optuna

import kolo
from kolo import basics
from kolo.hpo import channel
from kolo.hpo import declaration
from kolo.hpo import report
from kolo.hpo.owner import StudyOwner, interrupt_running
from kolo.hpo.samplers import make_pruner, make_sampler
from kolo.hpo.service import Client, LocalClient, OwnerService
from kolo.hpo.trial import Team, TeamTrial
from kolo.process_sets import global_process_set

_FINISHED = (optuna.trial.TrialState.COMPLETE, optuna.trial.TrialState.PRUNED,
             optuna.trial.TrialState.FAIL)


def _log(line):
    print(line, flush=True)


def split_teams(size, team_size):
    """The teams' global ranks: ``size // team_size`` runs of consecutive
    ranks. ValueError when ``team_size`` does not divide ``size``."""
    if isinstance(team_size, bool) or not isinstance(team_size, int) or team_size < 1:
        raise ValueError("team_size=%r: expected an integer >= 1" % (team_size,))
    if size % team_size:
        raise ValueError("team_size=%d does not divide the job's %d ranks (kolorun -np %d): "
                         "every team must have the same size" % (team_size, size, size))
    return [list(range(i, i + team_size)) for i in range(0, size, team_size)]


def open_study(name, storage, sampler, pruner, direction, resume, log=_log):
    """Creates (or, with ``resume``, loads) the Optuna study. ValueError
    naming the storage when it cannot be opened or written."""
    optuna.logging.set_verbosity(optuna.logging.WARNING)  # kolo.hpo prints its own lines
    try:
        study = optuna.create_study(study_name=name, storage=storage, sampler=sampler,
                                    pruner=pruner, direction=direction,
                                    load_if_exists=bool(resume))
    except optuna.exceptions.DuplicatedStudyError:
        raise ValueError("study %r already exists in storage %r: pass resume=True to "
                         "continue it, or choose another name" % (name, storage))
    except Exception as e:
        raise ValueError("cannot open study %r in storage %r: %s: %s"
                         % (name, storage, type(e).__name__, e))
    if resume:
        interrupt_running(study, log)
    return study


class Study:
    """See the module docstring. ``direction``: "maximize" or "minimize".
    ``sampler``/``pruner``: Optuna objects or names (samplers.py)."""

    def __init__(self, name, storage=None, sampler=None, pruner=None,
                 direction="maximize", team_size=1, resume=False):
        if not kolo.is_initialized():
            basics.init()
        optuna.logging.set_verbosity(optuna.logging.WARNING)  # kolo.hpo prints its own lines
        self.name = name
        self.storage = storage
        self.direction = direction
        if direction not in ("maximize", "minimize"):
            raise ValueError("direction=%r: expected 'maximize' or 'minimize'" % (direction,))
        self.team_ranks = split_teams(kolo.size(), team_size)
        self.team_size = team_size
        sampler = make_sampler(sampler)
        pruner = make_pruner(pruner)
        self._owner_study = None
        reply = None
        if kolo.rank() == 0:
            try:
                self._owner_study = open_study(name, storage, sampler, pruner, direction,
                                               resume)
                reply = ("ok", self._owner_study.get_trials(deepcopy=True))
            except ValueError as e:
                reply = ("err", str(e))
        reply = channel.broadcast_object(reply, kolo.rank() == 0, global_process_set,
                                         "kolo.hpo.open")
        if reply[0] == "err":
            raise ValueError(reply[1])
        self._snapshot = {"trials": reply[1], "finished": [], "t0": time.time()}
        self._make_sets()

    def _make_sets(self):
        """Every rank adds the same sets in the same order: the teams, then
        one link per rank other than the owner."""
        me = kolo.rank()
        self._team_sets = [channel.process_set(ranks) for ranks in self.team_ranks]
        self._links = {}
        for r in range(1, kolo.size()):
            ps = channel.process_set([0, r])
            if me == 0:
                self._links[r] = channel.Link(ps, r, True)
            elif me == r:
                self._links[r] = channel.Link(ps, 0, False)
        for i, ranks in enumerate(self.team_ranks):
            if me in ranks:
                self._team = Team(i, self._team_sets[i], ranks, ranks.index(me))

    # ---- running -----------------------------------------------------------

    def enqueue_trial(self, params):
        """Queues a trial with fixed ``params`` (Optuna's enqueue_trial) for
        the next optimize; every rank calls it, rank 0 queues it."""
        if kolo.rank() == 0:
            self._owner_study.enqueue_trial(dict(params))

    def optimize(self, objective, n_trials=None, timeout=None):
        """Runs trials, one per team at a time, until the study holds
        ``n_trials`` ended trials (counting earlier jobs' when resumed) or
        ``timeout`` seconds have passed; every rank calls it. Meanwhile the
        rank has declared the study to kolorun (declaration.py)."""
        with declaration.declared():
            return self._optimize(objective, n_trials, timeout)

    def _optimize(self, objective, n_trials, timeout):
        me = kolo.rank()
        if me == 0:
            owner = StudyOwner(self._owner_study, self.team_ranks, n_trials, timeout, _log)
            client = LocalClient(owner)
            service = OwnerService(owner, self._links)
            service.start()
        else:
            client = Client(self._links[me])
        team = self._team
        while team is not None:
            team = self._run_team(objective, team, client)
            self._team = team or self._team  # a re-formed team serves the next optimize
        if me == 0:
            service.join()
            if service.error is not None:
                raise service.error
            self._snapshot = owner.snapshot()
            report.print_table(self._snapshot, _log)
        else:
            self._snapshot = client.call(("bye",))
            client.join()
        return self

    def _run_team(self, objective, team, client):
        """Runs the team's trials; returns the re-formed team after a lost
        peer (None when this rank is done)."""
        while True:
            try:
                got = client.call(("next", team.index)) if team.rank == 0 else None
                got = team.broadcast_object(got, "next")
                if got is None:
                    return None
                if isinstance(got, tuple):  # ("broken", why): a member is gone
                    raise kolo.PeerLostError(got[1])
                self._run_trial(objective, got, team, client)
            except (kolo.PeerLostError, kolo.KoloTimeoutError) as e:
                return self._reform(team, client, e)

    def _run_trial(self, objective, number, team, client):
        trial = TeamTrial(number, team, client)
        try:
            outcome = ("complete", objective(trial, team))
        except optuna.TrialPruned:
            outcome = ("pruned",)
        except (kolo.PeerLostError, kolo.KoloTimeoutError):
            raise
        except Exception as e:  # the trial fails; the team goes on
            outcome = ("fail", "rank %d raised %s: %s" % (kolo.rank(), type(e).__name__, e))
        if team.rank == 0:
            client.call(("tell", number, outcome))

    def _reform(self, team, client, err):
        survivors = client.call(("reform", team.index, kolo.rank(), str(err)))
        me = kolo.rank()
        if me not in survivors:
            return None
        ps = channel.process_set(survivors)
        return Team(team.index, ps, survivors, survivors.index(me))

    # ---- results -----------------------------------------------------------

    @property
    def trials(self):
        """The study's trials (optuna FrozenTrial), as of the last optimize."""
        return list(self._snapshot["trials"])

    def _view(self):
        view = optuna.create_study(direction=self.direction)
        view.add_trials([t for t in self._snapshot["trials"] if t.state in _FINISHED])
        return view

    @property
    def best_trial(self):
        """The best complete trial (optuna FrozenTrial); ValueError if none."""
        return self._view().best_trial

    @property
    def best_value(self):
        return self.best_trial.value

    @property
    def best_params(self):
        return self.best_trial.params

    def trials_dataframe(self, **kwargs):
        """Optuna's ``trials_dataframe`` (pandas) of the study's trials."""
        return self._view().trials_dataframe(**kwargs)

    def utilisation(self):
        """{team: fraction of this job's optimize time the team ran trials}."""
        return report.utilisation(self._snapshot)
