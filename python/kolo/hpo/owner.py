"""The study's owner: the one process (rank 0) that holds the Optuna study.

Every Optuna call of a job happens here, under one lock, so a study's
storage (SQLite included) has a single writer. The other ranks send
requests (``handle``); the owner's own team calls ``handle`` directly.

Requests (tuples; the reply is ``("ok", value)`` or ``("err", exception)``):

- ``("next", team)``: a new trial's number for the team, None when the
  budget is spent, or ``("broken", why)`` when a member is known dead
  (the team must re-form first).
- ``("suggest", number, kind, name, args, kwargs)``: Optuna's
  ``trial.suggest_<kind>(name, *args, **kwargs)``.
- ``("report", number, value, step)``, ``("prune?", number)``,
  ``("attr", number, key, value)``.
- ``("tell", number, outcome)``: the trial ended; outcome is
  ``("complete", value)``, ``("pruned",)`` or ``("fail", message)``.
- ``("reform", team, rank, message)``: a member of ``team`` saw a peer
  fail. The team's running trial fails, naming the lost ranks, and its
  parameters are queued again (Optuna's enqueue_trial); the reply waits
  until every member of the team has either asked the same or been found
  dead, then lists the survivors (the team's new ranks; empty: no team).
- ``("bye",)``: the rank leaves the study; the reply, once no trial runs
  any more, is the final snapshot of the trials (``snapshot()``).

Budget: the study's trials that ended (complete, pruned or failed by the
objective), from this job and earlier ones (resume), plus those running,
may not exceed ``n_trials``; trials failed by a lost rank or by the end of
an earlier job do not count (they were queued again). No new trial starts
after ``timeout`` seconds.
"""

import math
import threading
import time

import optuna
from optuna.trial import TrialState

PENDING = object()  # a reply that is not ready yet (reform)


class RequestOwner:
    """What the owners of a study and of a population share: one request
    from a rank at a time, under ``self.lock``, answered ("ok", value),
    ("err", exception), or PENDING when the reply must wait. Subclasses
    define ``_dispatch(rank, request)``."""

    def handle(self, rank, request):
        with self.lock:
            try:
                value = self._dispatch(rank, request)
            except Exception as e:  # handed back to the caller
                return ("err", e)
            return value if value is PENDING else ("ok", value)


# User attributes kolo sets on the study's trials.
ATTR_TEAM = "kolo_team"          # team index
ATTR_RANKS = "kolo_ranks"        # the team's global ranks
ATTR_FAILURE = "kolo_failure"    # why the trial failed
ATTR_REQUEUED = "kolo_requeued"  # failed by a lost rank / ended job; queued again
ATTR_LOST = "kolo_lost_ranks"    # the global ranks whose loss failed the trial


def _finished_states():
    return (TrialState.COMPLETE, TrialState.PRUNED, TrialState.FAIL)


class StudyOwner(RequestOwner):
    """Serves the study to every team. Thread-safe (one lock)."""

    def __init__(self, study, teams, n_trials=None, timeout=None, log=print):
        self.study = study
        self.lock = threading.RLock()
        self.teams = {i: list(r) for i, r in enumerate(teams)}  # current members
        self.n_trials = n_trials
        self.deadline = None if timeout is None else time.monotonic() + timeout
        self.log = log
        self.t0 = time.time()
        self.running = {}   # number -> {"trial", "team", "start"}
        self.dead = {}      # rank -> message
        self.reforms = {}   # team -> {rank: message} (members that asked)
        self.byes = set()   # ranks waiting for the final snapshot
        self.finished = []  # (number, team, start, end, state, value) of this job

    # ---- budget ------------------------------------------------------------

    def _counted(self):
        n = 0
        for t in self.study.get_trials(deepcopy=False, states=_finished_states()):
            if not t.user_attrs.get(ATTR_REQUEUED):
                n += 1
        return n + len(self.running)

    def _budget_left(self):
        if self.deadline is not None and time.monotonic() >= self.deadline:
            return False
        return self.n_trials is None or self._counted() < self.n_trials

    # ---- requests ----------------------------------------------------------

    def _dispatch(self, rank, req):
        kind = req[0]
        if kind == "next":
            return self._next(req[1])
        if kind == "suggest":
            _, number, what, name, args, kwargs = req
            trial = self._trial(number)
            return getattr(trial, "suggest_" + what)(name, *args, **kwargs)
        if kind == "report":
            self._trial(req[1]).report(req[2], req[3])
            return None
        if kind == "prune?":
            return self._trial(req[1]).should_prune()
        if kind == "attr":
            self._trial(req[1]).set_user_attr(req[2], req[3])
            return None
        if kind == "tell":
            self._tell(req[1], req[2])
            return None
        if kind == "reform":
            self._reform(req[1], rank, req[3])
            return PENDING
        if kind == "bye":
            self.byes.add(rank)
            return PENDING
        raise ValueError("kolo.hpo: unknown request %r from rank %d" % (kind, rank))

    def _trial(self, number):
        entry = self.running.get(number)
        if entry is None:
            raise RuntimeError("kolo.hpo: trial %d is not running (it failed "
                               "on another rank of its team)" % number)
        return entry["trial"]

    def _next(self, team):
        if team not in self.teams or not self._budget_left():
            return None
        lost = [r for r in self.teams[team] if r in self.dead]
        if lost:  # the team must re-form first
            return ("broken", "rank %d of team %d was lost: %s"
                    % (lost[0], team, self.dead[lost[0]]))
        trial = self.study.ask()
        ranks = self.teams[team]
        trial.set_user_attr(ATTR_TEAM, team)
        trial.set_user_attr(ATTR_RANKS, ranks)
        self.running[trial.number] = {"trial": trial, "team": team,
                                      "start": time.time()}
        return trial.number

    def _tell(self, number, outcome):
        entry = self.running.pop(number, None)
        if entry is None:
            return  # already failed (a lost rank) by the owner
        trial = entry["trial"]
        kind = outcome[0]
        value = None
        if kind == "complete":
            value = outcome[1]
            try:
                value = float(value)
            except (TypeError, ValueError):
                kind, outcome = "fail", ("fail", "the objective returned %r, not a number"
                                         % (outcome[1],))
            else:
                if math.isnan(value):
                    kind, outcome = "fail", ("fail", "the objective returned nan")
        if kind == "complete":
            self.study.tell(trial, value)
            state = TrialState.COMPLETE
        elif kind == "pruned":
            self.study.tell(trial, state=TrialState.PRUNED)
            state = TrialState.PRUNED
        else:
            trial.set_user_attr(ATTR_FAILURE, outcome[1])
            self.study.tell(trial, state=TrialState.FAIL)
            state = TrialState.FAIL
            value = None
        self._finished(number, entry, state, value, outcome[1] if kind == "fail" else "")

    def _finished(self, number, entry, state, value, why):
        end = time.time()
        self.finished.append((number, entry["team"], entry["start"], end, state.name, value))
        params = entry["trial"].params
        text = " ".join("%s=%s" % (k, _short(v)) for k, v in sorted(params.items()))
        line = "kolo.hpo: trial %d team %d %s value=%s time=%.1fs %s" % (
            number, entry["team"], state.name, "-" if value is None else "%.6g" % value,
            end - entry["start"], text)
        if why:
            line += " (%s)" % why
        self.log(line)

    # ---- lost ranks --------------------------------------------------------

    def _team_of(self, rank):
        for team, ranks in self.teams.items():
            if rank in ranks:
                return team
        return None

    def _fail_team_trial(self, team, why, lost):
        for number, entry in list(self.running.items()):
            if entry["team"] != team:
                continue
            del self.running[number]
            trial = entry["trial"]
            trial.set_user_attr(ATTR_FAILURE, why)
            trial.set_user_attr(ATTR_REQUEUED, True)
            trial.set_user_attr(ATTR_LOST, list(lost))
            params = dict(trial.params)
            self.study.tell(trial, state=TrialState.FAIL)
            if params:
                self.study.enqueue_trial(params)
            self._finished(number, entry, TrialState.FAIL, None,
                           why + "; its parameters are queued again")

    def peer_lost(self, rank, message):
        """The owner's link to ``rank`` failed: the rank is gone."""
        with self.lock:
            if rank in self.dead:
                return
            self.dead[rank] = message
            team = self._team_of(rank)
            if team is not None:
                self._fail_team_trial(team, "rank %d was lost: %s" % (rank, message), [rank])

    def _reform(self, team, rank, message):
        self.reforms.setdefault(team, {})[rank] = message

    def resolve(self):
        """Replies now ready for waiting requests: ``{rank: ("ok", value)}``.
        A team asking to re-form is answered once each of its members asked
        or was found dead; a bye once no trial runs."""
        out = {}
        with self.lock:
            if self.byes and not self.running:
                snap = self.snapshot()
                out.update({r: ("ok", snap) for r in self.byes})
                self.byes.clear()
            for team, asked in list(self.reforms.items()):
                members = self.teams.get(team, [])
                if any(r not in asked and r not in self.dead for r in members):
                    continue
                survivors = sorted(r for r in members if r in asked and r not in self.dead)
                lost = [r for r in members if r not in survivors]
                why = next(iter(asked.values()), "")
                self._fail_team_trial(team, "team %d lost rank(s) %s: %s" % (
                    team, ", ".join(map(str, lost)) or "none", why), lost)
                del self.reforms[team]
                if survivors:
                    self.teams[team] = survivors
                else:
                    self.teams.pop(team, None)
                self.log("kolo.hpo: team %d re-formed from ranks %s (was %s)"
                         % (team, survivors, members))
                for r in asked:
                    out[r] = ("ok", survivors)
        return out

    # ---- results -----------------------------------------------------------

    def snapshot(self):
        """The study's trials (FrozenTrial list) and this job's timings."""
        with self.lock:
            return {"trials": self.study.get_trials(deepcopy=True),
                    "finished": list(self.finished), "t0": self.t0,
                    "teams": dict(self.teams)}


def _short(v):
    return "%.4g" % v if isinstance(v, float) else str(v)


def interrupt_running(study, log=print):
    """Resume: trials an earlier job left RUNNING (it was killed) fail,
    marked as such, and their parameters are queued again."""
    for t in study.get_trials(deepcopy=False, states=(TrialState.RUNNING,)):
        trial = optuna.trial.Trial(study, t._trial_id)
        trial.set_user_attr(ATTR_FAILURE, "the job ended while the trial ran")
        trial.set_user_attr(ATTR_REQUEUED, True)
        study.tell(t.number, state=TrialState.FAIL)
        if t.params:
            study.enqueue_trial(dict(t.params))
        log("kolo.hpo: trial %d was running when the earlier job ended: failed, "
            "queued again" % t.number)
