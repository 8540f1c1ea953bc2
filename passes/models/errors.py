"""The errors a pass raises on input it cannot analyse, which the analyzer catches (one line, exit 2, or a
version it leaves out): models of the pipelines' answers, so the analyzer names them without reaching into
the passes that raise them."""


class HloParseError(ValueError):
    """The text is not an HLO module this parser understands (every reader of compiled HLO text raises it)."""


class MalformedReport(ValueError):
    """An XLA memory report (buffer assignment, live range) that cannot be read."""


class ShardyRejected(ValueError):
    """Shardy's passes refuse the module: the message is Shardy's first diagnostic, one line."""


class NoFeasibleSharding(Exception):
    """No assignment of candidates keeps the arguments and results within the budget."""
