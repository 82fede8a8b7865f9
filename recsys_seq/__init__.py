"""recsys-seq: sequential next-item recommendation on variable-length behaviour sequences."""

__version__ = "0.1.0"
