"""``graphwm report``: the paper-shaped tables and figures rebuilt from a run's stored records
(:mod:`.build`), with the table model (:mod:`.table`), its builders (:mod:`.tables`), its
Markdown/LaTeX rendering (:mod:`.formatting`), seed statistics (:mod:`.seed_stats`), the
training curves (:mod:`.training_logs`) and the figures (:mod:`.figures`)."""
