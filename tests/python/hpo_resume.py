"""A study killed with its job, then resumed (hpo_study.sh drives it):

    kolorun --hpo -np 2 python3 hpo_resume.py DIR first    # killed midway
    kolorun --hpo -np 2 python3 hpo_resume.py DIR resume

Two teams of one rank run trials of 0.6 s towards a budget of 10. The
resumed job must keep every trial the first job finished (same number,
value and parameters), fail the trials the kill interrupted (marked so,
their parameters queued again) and end with 10 counted trials.
"""

import sys
import time

import kolo
import kolo.hpo as hpo

DIR, MODE = sys.argv[1], sys.argv[2]
STORAGE = "sqlite:///%s/resume.db" % DIR


def objective(trial, team):
    x = trial.suggest_float("x", 0.0, 1.0)
    time.sleep(0.6)
    return x


study = hpo.Study("resume", storage=STORAGE, sampler="random", team_size=1,
                  resume=(MODE == "resume"))
before = {t.number: (t.value, t.params) for t in study.trials if t.state.name == "COMPLETE"}
interrupted = [t.number for t in study.trials
               if t.user_attrs.get("kolo_failure") == "the job ended while the trial ran"]
study.optimize(objective, n_trials=10)
if MODE == "resume" and kolo.rank() == 0:
    after = {t.number: t for t in study.trials}
    assert len(before) >= 3, before
    for number, (value, params) in before.items():
        assert after[number].state.name == "COMPLETE", after[number]
        assert (after[number].value, after[number].params) == (value, params)
    assert interrupted, [(t.number, t.state.name, t.user_attrs) for t in study.trials]
    for number in interrupted:
        assert after[number].state.name == "FAIL", after[number]
    counted = [t for t in study.trials if t.state.name == "COMPLETE"]
    assert len(counted) == 10, [(t.number, t.state.name) for t in study.trials]
    print("hpo_resume: ok (%d kept, %d interrupted)" % (len(before), len(interrupted)),
          flush=True)
