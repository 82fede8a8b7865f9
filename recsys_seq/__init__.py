"""recsys-seq: sequential next-item recommendation on variable-length behaviour sequences.

The Python API (:mod:`recsys_seq.recommender`)::

    import recsys_seq

    model = recsys_seq.load("outputs/train/runs/<run>/checkpoints/best.ckpt")
    model.recommend(["470256549", "359518691"], k=10)

Importing the package imports no torch (the prep code finds the configs through it); the
API is loaded on first use.
"""

__version__ = "0.1.0"
__all__ = ["Recommendation", "Recommender", "load"]


def __getattr__(name: str):
    if name in __all__:
        from recsys_seq import recommender

        return getattr(recommender, name)
    raise AttributeError(f"module 'recsys_seq' has no attribute {name!r}")
