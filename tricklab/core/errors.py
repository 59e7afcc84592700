"""The one exception type for user mistakes (bad config, data, files)."""


class TrickLabError(Exception):
    """A user mistake: the CLI prints its message as one line on stderr and exits with code 2."""
