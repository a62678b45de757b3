"""kolo.hpo.Study on 4 ranks in teams of 2, under kolorun --hpo
(hpo_study.sh runs it and checks kolorun's exit and lines):

    kolorun --hpo -np 4 python3 hpo_study.py DIR

1. Bad input, on every rank alike (and a study stopped by its timeout): an unknown sampler or pruner, a team
   size that does not divide 4, a storage that cannot be written, an
   existing study without resume=True: ValueError naming the problem.
2. A study of 14 trials (random sampler, median pruner, SQLite in DIR):
   every rank of a team checks it got the same suggestions as its team
   mates (a difference fails the trial, which the checks below catch);
   trial 3 raises and must fail alone; a trial whose x is negative returns
   NaN and must fail as such; the first trial of team 1 past trial 4 loses
   rank 3 (SIGKILL): that trial must fail naming rank 3, be queued again,
   and every other trial must end normally; team 1 goes on as rank 2 alone.
3. Rank 0 checks the final trials, best_trial, trials_dataframe and the
   progress lines; the survivors check they got the same snapshot.
Exit 0 on success; rank 0's exit is the job's.
"""

import os
import signal
import sys
import time

import numpy as np
import optuna

import kolo
import kolo.hpo as hpo
import kolo.numpy as kn

DIR = sys.argv[1]
STORAGE = "sqlite:///" + os.path.join(DIR, "study.db")


def expect_error(fragment, **kwargs):
    args = dict(name="bad", storage=None, team_size=2)
    args.update(kwargs)
    try:
        hpo.Study(**args)
    except ValueError as e:
        assert fragment in str(e), "%r not in %r" % (fragment, str(e))
        return
    raise AssertionError("no error for %r" % (kwargs,))


kolo.init()
ME = kolo.rank()
expect_error("unknown sampler 'annealing'", sampler="annealing")
expect_error("unknown pruner 'sometimes'", pruner="sometimes")
expect_error("team_size=3 does not divide the job's 4 ranks", team_size=3)
expect_error("cannot open study 'bad' in storage 'sqlite:////proc/no/such/dir/x.db'",
             storage="sqlite:////proc/no/such/dir/x.db")
hpo.Study("exists", storage=STORAGE)
expect_error("study 'exists' already exists", name="exists", storage=STORAGE)

# timeout: no trial starts after 0.6 s; the running ones end.
timed = hpo.Study("timed", team_size=2, sampler="random")
timed.optimize(lambda trial, team: (time.sleep(0.25), trial.suggest_float("x", 0, 1))[1],
               timeout=0.6)
assert 2 <= len(timed.trials) <= 8, len(timed.trials)
assert all(t.state.name == "COMPLETE" for t in timed.trials), timed.trials

killed_marker = os.path.join(DIR, "killed")


def objective(trial, team):
    x = trial.suggest_float("x", -1.0, 4.0)
    width = trial.suggest_int("width", 8, 64, log=True)
    act = trial.suggest_categorical("act", ["relu", "tanh"])
    mine = np.array([x, width, 0.0 if act == "relu" else 1.0])
    everyone = kn.allgather(mine[None, :], process_set=team.process_set,
                            name="params").reshape(team.size, 3)
    if not (everyone == everyone[0]).all():
        raise AssertionError("different suggestions in team %d: %s" % (team.index, everyone))
    if trial.number == 3:
        raise RuntimeError("trial three always breaks")
    for step in range(3):
        if (team.index == 1 and trial.number > 4 and step == 1 and ME == 3
                and not os.path.exists(killed_marker)):
            open(killed_marker, "w").close()
            os.kill(os.getpid(), signal.SIGKILL)
        value = kn.allreduce(np.array([-(x - 2.0) ** 2 + step]), process_set=team.process_set,
                             name="value")[0]
        trial.report(value, step)
        if trial.should_prune():
            raise optuna.TrialPruned()
        time.sleep(0.05)
    return float("nan") if x < 0 else value


lines = []
if ME == 0:
    import kolo.hpo.study as study_module
    study_module._log = lambda line: (lines.append(line), print(line, flush=True))
study = hpo.Study("main", storage=STORAGE, sampler=optuna.samplers.RandomSampler(seed=3),
                  pruner="median", team_size=2)
study.optimize(objective, n_trials=14)

trials = study.trials
states = [t.state.name for t in trials]
if ME != 0:
    # The survivors got the owner's final snapshot.
    assert all(s != "RUNNING" for s in states), states
    sys.exit(0)

lost = [t for t in trials if t.user_attrs.get("kolo_lost_ranks")]
assert len(lost) == 1, [(t.number, t.state.name, t.user_attrs) for t in trials]
lost = lost[0]
assert lost.state.name == "FAIL" and lost.user_attrs["kolo_lost_ranks"] == [3], lost
assert "rank 3" in lost.user_attrs["kolo_failure"], lost.user_attrs
assert lost.user_attrs["kolo_team"] == 1, lost.user_attrs
# Queued again: a later trial has the lost one's parameters.
again = [t for t in trials if t.number > lost.number and t.params == lost.params]
assert again and again[0].state.name != "RUNNING", [t.params for t in trials]

raised = trials[3]
assert raised.state.name == "FAIL", raised
assert "raised RuntimeError: trial three always breaks" in raised.user_attrs["kolo_failure"]
for t in trials:
    if t.number in (3, lost.number):
        continue
    if t.state.name == "FAIL":  # only NaN may fail the others
        assert t.params["x"] < 0 and "returned nan" in t.user_attrs["kolo_failure"], t
    else:
        assert t.state.name in ("COMPLETE", "PRUNED"), t
        assert t.params["x"] >= 0 or t.state.name == "PRUNED", t
# The budget: 14 ended trials besides the one lost with rank 3.
assert len(trials) == 15, states
assert sorted({t.user_attrs["kolo_team"] for t in trials}) == [0, 1], states
# Rank 2 went on alone after the loss.
after = [t for t in trials if t.number > lost.number and t.user_attrs["kolo_team"] == 1]
assert after and all(t.user_attrs["kolo_ranks"] == [2] for t in after), after

complete = [t for t in trials if t.state.name == "COMPLETE"]
best = max(complete, key=lambda t: t.value)
assert study.best_trial.number == best.number and study.best_value == best.value
frame = study.trials_dataframe()
assert len(frame) == 15 and "params_x" in frame.columns and "state" in frame.columns, frame
assert any("trial %d team 1 FAIL" % lost.number in line for line in lines), lines
assert any(line.startswith("kolo.hpo: team 1 re-formed from ranks [2]") for line in lines)
assert any("busy" in line for line in lines), lines
# The storage holds the same trials: a later job can resume from it.
stored = optuna.load_study(study_name="main", storage=STORAGE).trials
assert [t.state for t in stored] == [t.state for t in trials]
print("hpo_study: ok (%d trials: %s)" % (len(trials), " ".join(states)), flush=True)
