"""Console entry points; each is a Hydra app composed from the repository's ``conf/``."""
