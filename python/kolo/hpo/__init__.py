"""kolo.hpo: hyper-parameter search with trials run as teams of ranks.

- ``Study``: an Optuna study (its samplers, pruners and storage) whose
  trials run on teams of ``team_size`` ranks; rank 0 owns the study.
- ``Team``, ``TeamTrial``: what an objective gets on each rank.
- ``PBT``: population-based training, one member per team, weights and
  optimizer state copied between teams in memory.

See docs/hpo.md.
"""

from kolo.hpo.pbt import PBT, Member  # noqa: F401
from kolo.hpo.study import Study, split_teams  # noqa: F401
from kolo.hpo.trial import Team, TeamTrial  # noqa: F401

__all__ = ["PBT", "Member", "Study", "Team", "TeamTrial", "split_teams"]
