"""The search space of kolo-hpo: params.yaml and the @placeholders.

params.yaml maps each hyper-parameter to its range:

    lr:         {type: float, low: 0.001, high: 0.5, log: true}
    momentum:   {type: float, low: 0.0, high: 0.99}
    batch_size: {type: int, low: 16, high: 256, log: true}
    hidden:     {type: categorical, choices: [64, 128, 256]}
    dropout:    {type: float, low: 0.0, high: 0.5, grid: [0.0, 0.25, 0.5]}

``step`` is allowed for float and int. Grid search takes each parameter's
``choices`` or ``grid`` list. The command's ``@name`` tokens (whole
arguments or parts of one, ``--lr=@lr``) become the trial's values; besides
the parameters' names kolo-hpo knows ``@trial`` (trial number), ``@team``,
and for PBT ``@checkpoint`` (this member's checkpoint file), ``@member``
and ``@segment``. An unknown placeholder is an error naming it.
"""

import re

SPECIALS = ("trial", "team", "checkpoint", "member", "segment")
_PLACEHOLDER = re.compile(r"@([A-Za-z_][A-Za-z0-9_]*)")
_KEYS = {"float": {"type", "low", "high", "log", "step", "grid"},
         "int": {"type", "low", "high", "log", "step", "grid"},
         "categorical": {"type", "choices"}}


def load_params(path):
    """The validated space of the YAML file ``path`` ({name: spec})."""
    import yaml
    try:
        with open(path) as f:
            params = yaml.safe_load(f)
    except OSError as e:
        raise ValueError("--params %s: %s" % (path, e.strerror))
    except yaml.YAMLError as e:
        raise ValueError("--params %s: not YAML: %s" % (path, e))
    return check_params(params, path)


def check_params(params, where="params"):
    if not isinstance(params, dict) or not params:
        raise ValueError("%s: expected a mapping of parameter name -> range" % where)
    for name, spec in params.items():
        what = "%s: parameter %r" % (where, name)
        if not isinstance(spec, dict) or spec.get("type") not in _KEYS:
            raise ValueError("%s: expected {type: float|int|categorical, ...}, got %r"
                             % (what, spec))
        extra = set(spec) - _KEYS[spec["type"]]
        if extra:
            raise ValueError("%s: unknown key(s) %s for type %s"
                             % (what, ", ".join(sorted(extra)), spec["type"]))
        if spec["type"] == "categorical":
            if not isinstance(spec.get("choices"), list) or not spec["choices"]:
                raise ValueError("%s: categorical needs a non-empty list 'choices'" % what)
            continue
        low, high = spec.get("low"), spec.get("high")
        if not all(isinstance(v, (int, float)) and not isinstance(v, bool)
                   for v in (low, high)) or low > high:
            raise ValueError("%s: needs numbers low <= high, got low=%r high=%r"
                             % (what, low, high))
        if spec.get("log") and low <= 0:
            raise ValueError("%s: log scale needs low > 0, got %r" % (what, low))
    return params


def suggest_all(trial, params):
    """{name: value}: every parameter suggested through Optuna's ``trial``."""
    values = {}
    for name, spec in params.items():
        kind = spec["type"]
        if kind == "categorical":
            values[name] = trial.suggest_categorical(name, spec["choices"])
        elif kind == "int":
            values[name] = trial.suggest_int(name, int(spec["low"]), int(spec["high"]),
                                             step=int(spec.get("step", 1)),
                                             log=bool(spec.get("log", False)))
        else:
            values[name] = trial.suggest_float(name, float(spec["low"]), float(spec["high"]),
                                               step=spec.get("step"),
                                               log=bool(spec.get("log", False)))
    return values


def grid_space(params):
    """{name: [values]} for Optuna's GridSampler; ValueError naming a
    parameter without ``choices`` or ``grid``."""
    out = {}
    for name, spec in params.items():
        values = spec.get("choices", spec.get("grid"))
        if not isinstance(values, list) or not values:
            raise ValueError("grid search: parameter %r needs a list 'grid' (or 'choices')"
                             % name)
        out[name] = values
    return out


def pbt_space(params):
    """The space in kolo.hpo.PBT's form (pbt.py)."""
    out = {}
    for name, spec in params.items():
        if spec["type"] == "categorical":
            out[name] = list(spec["choices"])
        else:
            kind = ("int" if spec["type"] == "int" else "") + ("log" if spec.get("log") else "")
            out[name] = (spec["low"], spec["high"], kind) if kind else (spec["low"],
                                                                          spec["high"])
    return out


def check_command(command, params, pbt):
    """ValueError naming the command's unknown placeholders."""
    known = set(params) | {"trial", "team"} | ({"checkpoint", "member", "segment"}
                                               if pbt else set())
    unknown = sorted({m for arg in command for m in _PLACEHOLDER.findall(arg)} - known)
    if unknown:
        raise ValueError("the command has unknown placeholder(s) %s (known: %s)"
                         % (", ".join("@" + u for u in unknown),
                            ", ".join("@" + k for k in sorted(known))))


def substitute(command, values):
    """The command with each ``@name`` replaced by ``values[name]``."""
    def one(match):
        v = values[match.group(1)]
        return repr(v) if isinstance(v, float) else str(v)
    return [_PLACEHOLDER.sub(one, arg) for arg in command]
