#!/bin/bash
# kolo-hpo on an unmodified script that prints FoM lines (hpo_fom_script.py):
#   hpo_cli.sh KOLO_HPO PYTHON TESTDIR
# grid (a failing configuration recorded as a failed trial), random with a
# median pruner on one team (deterministic: pruned jobs end early), TPE on
# two teams then resumed to 6 trials, PBT with @checkpoint (a loser resumes from the winner's file),
# and bad input (exit 2 naming the problem).
set -u
HPO=$1 PY=$2 HERE=$3
WORK=$(mktemp -d)
trap 'rm -rf "$WORK"' EXIT
cd "$WORK"
fail() { echo "hpo_cli.sh: $*"; exit 1; }
SCRIPT=("$PY" "$HERE/hpo_fom_script.py")
cat > params.yaml <<'YAML'
lr: {type: float, low: 0.01, high: 0.5, log: true, grid: [0.05, 0.1]}
width: {type: int, low: 8, high: 64, grid: [8, 32]}
act: {type: categorical, choices: [relu, tanh]}
YAML
db() {  # db DIR PYTHON-EXPRESSION-OVER-trials
  "$PY" -c "import optuna; optuna.logging.set_verbosity(optuna.logging.WARNING)
t = optuna.load_study(study_name='kolo-hpo', storage='sqlite:///$1/study.db').trials
$2"
}

"$HPO" --np 4 --team-size 2 --params params.yaml --trials 20 --sampler grid --pruner none --output-dir grid \
  -- "${SCRIPT[@]}" --lr @lr --width=@width --act @act --fail-if-width 8 > grid.log 2>&1 \
  || { rc=$?; cat grid.log; fail "grid search exited $rc"; }
cat grid.log
db grid "
assert len(t) == 8, len(t)  # the whole grid, once each
assert len({tuple(sorted(x.params.items())) for x in t}) == 8
for x in t:
    if x.params['width'] == 8:
        assert x.state.name == 'FAIL' and 'width 8 is not supported' in x.user_attrs['kolo_failure'], x
    else:
        assert x.state.name == 'COMPLETE' and x.value > 0, x
" || fail "grid search: wrong trials"

"$HPO" --np 2 --team-size 2 --params params.yaml --trials 6 --sampler random --seed 4 \
  --pruner median --output-dir random -- "${SCRIPT[@]}" --lr @lr --width @width --act @act \
  --epochs 6 --sleep 0.3 > random.log 2>&1 || { rc=$?; cat random.log; fail "random search exited $rc"; }
cat random.log
db random "
pruned = [x for x in t if x.state.name == 'PRUNED']
assert pruned and len(t) == 6, [x.state.name for x in t]
for x in pruned:
    assert len(x.intermediate_values) < 6, x.intermediate_values
# the jobs were ended early (kolo-hpo's SIGTERM lands 0.3 s before the next
# epoch at the latest; one such job at least, the machine may be loaded)
early = [x.number for x in pruned
         if open('random/trial-%d.log' % x.number).read().count('[0] FoM:') < 6]
assert early, [open('random/trial-%d.log' % x.number).read() for x in pruned]
assert all(x.state.name in ('COMPLETE', 'PRUNED') for x in t)
" || fail "random search: no trial pruned early"

"$HPO" --np 4 --team-size 2 --params params.yaml --trials 4 --sampler tpe --pruner none --seed 1 --plots \
  --output-dir tpe -- "${SCRIPT[@]}" --lr @lr --width @width --act @act > tpe.log 2>&1 \
  || { rc=$?; cat tpe.log; fail "TPE exited $rc"; }
cat tpe.log
db tpe "assert [x.state.name for x in t] == ['COMPLETE'] * 4" || fail "TPE: wrong trials"
[ -s tpe/objective_vs_trial.png ] && [ -s tpe/parallel_coordinates.png ] || fail "no plots"
grep -q 'team 1 busy' tpe.log || fail "TPE: no utilisation line"
db tpe "print({x.number: x.value for x in t})" > tpe.before
"$HPO" --np 4 --team-size 2 --params params.yaml --trials 6 --sampler tpe --pruner none --resume \
  --output-dir tpe -- "${SCRIPT[@]}" --lr @lr --width @width --act @act > tpe2.log 2>&1 \
  || { rc=$?; cat tpe2.log; fail "TPE --resume exited $rc"; }
db tpe "
before = $(cat tpe.before)
assert [x.state.name for x in t] == ['COMPLETE'] * 6, [x.state.name for x in t]
assert all(t[n].value == v for n, v in before.items()), before
" || fail "TPE --resume: the first 4 trials were not kept"

"$HPO" --np 4 --team-size 1 --params params.yaml --pbt --segments 3 --seed 2 --plots \
  --output-dir pbt -- "${SCRIPT[@]}" --lr @lr --width @width --act @act --epochs 1 \
  --checkpoint @checkpoint --member @member > pbt.log 2>&1 || { rc=$?; cat pbt.log; fail "PBT exited $rc"; }
cat pbt.log
"$PY" - <<'PY' || fail "PBT: a loser did not resume from the winner's checkpoint"
import json
lineage = json.load(open("pbt/lineage.json"))["members"]
copies = [(m["member"], h["parent"], i) for m in lineage for i, h in enumerate(lineage[m["member"]]["history"]) if h["parent"] is not None]
assert copies, lineage
for loser, winner, i in copies:
    log = open("pbt/member-%d-segment-%d.log" % (loser, i + 1)).read()
    line = [l for l in log.splitlines() if "resumed: writers=" in l][0]
    assert line.rstrip().endswith(", %d]" % winner) or line.rstrip().endswith("[%d]" % winner), (line, winner)
print("PBT copies:", copies)
PY
[ -s pbt/pbt_lineage.png ] || fail "no lineage plot"

expect() {  # expect FRAGMENT ARGS...: exit 2 and FRAGMENT in the message
  local fragment=$1; shift
  out=$("$HPO" "$@" 2>&1); rc=$?
  [ $rc -eq 2 ] && echo "$out" | grep -qF -- "$fragment" || fail "expected exit 2 and '$fragment', got $rc: $out"
}
expect "unknown placeholder(s) @momentum" --np 2 --params params.yaml -- "${SCRIPT[@]}" --lr @momentum
expect "--team-size 3 does not divide --np 4" --np 4 --team-size 3 --params params.yaml -- "${SCRIPT[@]}"
expect "unknown sampler 'anneal'" --np 2 --sampler anneal --params params.yaml --output-dir bad -- "${SCRIPT[@]}" --lr @lr
expect "--params nothere.yaml" --np 2 --params nothere.yaml -- "${SCRIPT[@]}"
echo "hpo_cli.sh: ok"
