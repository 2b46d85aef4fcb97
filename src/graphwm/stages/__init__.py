"""The pipeline's stages, in the order ``reproduce`` runs them: collect the data, fit the
bandwidths and the feature scaling, train the models, evaluate them with GDD (single-step,
multi-step, self-GDD), train agents in their dream envs (downstream). Each stage turns a preset
section into content-keyed jobs; a stage imports only earlier ones. The hyperparameter search,
which runs stages, is :mod:`graphwm.search`."""
