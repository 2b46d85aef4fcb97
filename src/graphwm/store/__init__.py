"""The run store: content keys and atomic files (:mod:`.files`), the run directory's layout
(:mod:`.paths`), the typed result records (:mod:`.records`, read by :mod:`.fields`), a
training job's log (:mod:`.training_log`), the keyed result store with its run log
(:mod:`.results`) and the executors that run jobs into it (:mod:`.executors`)."""
