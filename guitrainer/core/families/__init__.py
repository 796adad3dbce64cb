"""The model families on paper: what each one's files look like, its numbers for the estimator, its precision
facts — what the window, the estimate and ``--check`` need before torch loads (the engine side of each family
is ``engine/families/<name>/``)."""
