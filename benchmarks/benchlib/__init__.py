"""The benchmark runner's parts: plan (what), measure (run one), analyze (figures), report (tables), readme."""
