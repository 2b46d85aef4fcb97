"""Downstream RL: does a lower GDD make a better world model to train agents in?

The paper leaves "the relationship between GDD and performance on downstream tasks, such as
reinforcement learning" open (section "Limitations"). This package measures it, one module a
job: the preset section and agent names (:mod:`.config`), the record type (:mod:`.record`),
agent training and real-env evaluation (:mod:`.agents`), records from runs (:mod:`.runs`), the
GDD join with rank correlations (:mod:`.gdd`), and the report's table and figure
(:mod:`.report`). The pipeline stage that keys, stores and reports these jobs is
:mod:`graphwm.stages.downstream`.
"""
