"""Downstream RL: does a lower GDD make a better world model to train agents in?

The paper leaves "the relationship between GDD and performance on downstream tasks, such as
reinforcement learning" open (section "Limitations"). This package measures it, all of it
here, one module a job: the record type and agent names (:mod:`.record`), agent training
(:mod:`.agents`; the real-env evaluation is ``graphwm_envs.agents.evaluate_agent``), records
from runs with the agent spec (:mod:`.runs`), the pipeline's typed jobs and their executor
entry point (:mod:`.jobs`), the GDD join with rank correlations (:mod:`.gdd`), and the stored
records with the report's table and figure (:mod:`.report`). Its preset section is the
preset's typed field ``downstream`` (:class:`graphwm.downstream.section.DownstreamConfig`).
"""
