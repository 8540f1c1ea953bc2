"""The command line: arguments, the dispatch to each command, the one report emitter, the terminal."""
