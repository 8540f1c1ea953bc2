"""The exit codes every command gives (the README's table)."""

EXIT_OK = 0  # no finding reaches --fail-on
EXIT_FINDINGS = 1  # one does; a gate's regression; fit or sweep found nothing that fits
EXIT_INPUT = 2  # bad input: one line naming the file and the problem
EXIT_INTERNAL = 3  # a bug in jax-shard-lint
# `run`: the script itself failed (a non-zero exit, a signal); its report is still written.
EXIT_SCRIPT_FAILED = 4
# The reader of stdout closed it (`jax-shard-lint ... | head`): 128 + SIGPIPE, as a shell reports it.
EXIT_BROKEN_PIPE = 141
