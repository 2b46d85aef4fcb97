"""The glue between the envs, the models and gdd-metric: the metric graph of a transition
(:mod:`.graph`), the GDD evaluation protocol (:mod:`.protocol`) and the factor-wise
distribution metrics (:mod:`.factor_metrics`)."""
