"""Console entry points; each is a Hydra app composed from the package's ``recsys_seq/conf``."""
