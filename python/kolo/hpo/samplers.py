"""Optuna samplers and pruners by name, for kolo.hpo.Study and kolo-hpo.

kolo runs Optuna's search algorithms as they are; this module only maps the
names a user may give (``sampler="tpe"``) to Optuna objects and refuses
names it does not know, naming the ones it does. An Optuna object passes
through unchanged.
"""

import optuna

SAMPLERS = ("tpe", "random")
PRUNERS = ("median", "halving", "hyperband", "percentile", "none")


def make_sampler(sampler, seed=None):
    """An Optuna sampler: ``sampler`` is one, None (TPE, Optuna's default)
    or a name in SAMPLERS. Grid search needs its grid: pass
    ``optuna.samplers.GridSampler(search_space)``."""
    if sampler is None:
        sampler = "tpe"
    if isinstance(sampler, optuna.samplers.BaseSampler):
        return sampler
    if not isinstance(sampler, str) or sampler.lower() not in SAMPLERS:
        hint = " (grid search: pass optuna.samplers.GridSampler(search_space))" \
            if sampler == "grid" else ""
        raise ValueError("unknown sampler %r (known: %s, or an optuna.samplers object)%s"
                         % (sampler, ", ".join(SAMPLERS), hint))
    name = sampler.lower()
    if name == "tpe":
        return optuna.samplers.TPESampler(seed=seed)
    return optuna.samplers.RandomSampler(seed=seed)


def make_pruner(pruner):
    """An Optuna pruner: ``pruner`` is one, None (median, Optuna's default)
    or a name in PRUNERS ("halving": successive halving)."""
    if pruner is None:
        pruner = "median"
    if isinstance(pruner, optuna.pruners.BasePruner):
        return pruner
    if not isinstance(pruner, str) or pruner.lower() not in PRUNERS:
        raise ValueError("unknown pruner %r (known: %s, or an optuna.pruners object)"
                         % (pruner, ", ".join(PRUNERS)))
    name = pruner.lower()
    if name == "median":
        return optuna.pruners.MedianPruner(n_startup_trials=2, n_warmup_steps=1)
    if name == "halving":
        return optuna.pruners.SuccessiveHalvingPruner()
    if name == "hyperband":
        return optuna.pruners.HyperbandPruner()
    if name == "percentile":
        return optuna.pruners.PercentilePruner(25.0, n_startup_trials=2, n_warmup_steps=1)
    return optuna.pruners.NopPruner()
