"""The error every reader of compiled HLO text raises for malformed input."""


class HloParseError(ValueError):
    """The text is not an HLO module this parser understands."""
