"""The prep's user error, in a module of its own because every layer raises it: the id policy
(:mod:`data_prep.ids`), the file sniffing below the readers (:mod:`data_prep.lines`), the
readers (:mod:`data_prep.formats`), the value and option checks and the job."""

from recsys_seq.core.errors import UserError


class PrepError(UserError):
    """A prep user error (bad path, column, option or empty result)."""
