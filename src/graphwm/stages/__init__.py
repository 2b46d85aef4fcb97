"""The pipeline's stages, in the order ``reproduce`` runs them: collect the data, fit the
bandwidths and the feature scaling, train the models, evaluate them with GDD (single-step,
multi-step, self-GDD), train agents in their dream envs (downstream), and the optional
hyperparameter search. Each stage turns a preset section into content-keyed jobs."""
